//! The CPU: identity from CPUID (vendor, brand, signature), microcode, online CPUs, and the
//! `/proc/cpuinfo` flags and bugs that matter for exit cost.

use std::collections::BTreeMap;

use core::arch::x86_64::__cpuid_count;
use serde::{Deserialize, Serialize};

use crate::read_trimmed;

/// CPU identity and exit-relevant features.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    /// CPUID vendor string (leaf 0), e.g. `GenuineIntel` or `AuthenticAMD`.
    pub vendor: String,
    /// CPUID brand string (leaves 0x80000002..4), or `/proc/cpuinfo` "model name", or `unknown`.
    pub model_name: String,
    /// Display family (base family plus extended family when the base is 0xF).
    pub family: u32,
    /// Display model (extended model folded in for families 0x6 and 0xF).
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
    /// Raw CPUID leaf 1 EAX (processor signature).
    pub signature: u32,
    /// Microcode revision, when the kernel exposes it.
    pub microcode: Option<String>,
    /// CPUs this process may run on (`std::thread::available_parallelism`).
    pub available_parallelism: Option<usize>,
    /// Online CPU list from `/sys/devices/system/cpu/online`, e.g. `0-1`.
    pub online: Option<String>,
    /// Number of CPUs in `online`.
    pub online_count: Option<usize>,
    /// Exit-relevant `/proc/cpuinfo` flags and whether each is present; `None` if unreadable.
    pub flags: Option<BTreeMap<String, bool>>,
    /// `/proc/cpuinfo` "bugs" list (hardware flaws whose mitigations add to exit cost).
    pub bugs: Option<Vec<String>>,
}

/// The `/proc/cpuinfo` flags reported in [`CpuInfo::flags`].
const RELEVANT_FLAGS: &[&str] = &[
    "vmx",
    "svm",
    "hypervisor",
    "x2apic",
    "tsc_deadline_timer",
    "constant_tsc",
    "nonstop_tsc",
    "tsc_known_freq",
    "tsc_adjust",
    "rdtscp",
    "rdpid",
    "arat",
    "monitor",
    "mwaitx",
    "waitpkg",
    "pcid",
    "invpcid",
    "xsave",
    "xsaves",
    "ibrs",
    "ibpb",
    "stibp",
    "ssbd",
    "md_clear",
    "flush_l1d",
    "arch_capabilities",
    "ept",
    "vpid",
    "flexpriority",
    "vnmi",
    "npt",
    "nrip_save",
    "tsc_scale",
    "pausefilter",
    "pfthreshold",
    "avic",
    "x2avic",
    "v_vmsave_vmload",
    "vgif",
];

/// Family, model and stepping decoded from CPUID leaf 1 EAX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSignature {
    /// Display family.
    pub family: u32,
    /// Display model.
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
}

/// Decodes CPUID leaf 1 EAX into display family/model/stepping: the extended family is added
/// when the base family is 0xF, and the extended model is prepended for families 0x6 and 0xF.
pub fn decode_signature(eax: u32) -> CpuSignature {
    let stepping = eax & 0xf;
    let base_model = (eax >> 4) & 0xf;
    let base_family = (eax >> 8) & 0xf;
    let ext_model = (eax >> 16) & 0xf;
    let ext_family = (eax >> 20) & 0xff;
    let family = if base_family == 0xf {
        base_family + ext_family
    } else {
        base_family
    };
    let model = if base_family == 0x6 || base_family == 0xf {
        (ext_model << 4) | base_model
    } else {
        base_model
    };
    CpuSignature {
        family,
        model,
        stepping,
    }
}

/// Concatenates CPUID register bytes into a string, dropping NULs and trimming spaces.
fn regs_to_string(regs: &[u32]) -> String {
    let bytes: Vec<u8> = regs
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .filter(|b| *b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Renders a 12-byte hypervisor signature: trailing NULs dropped, other unprintable bytes as '.'.
pub(crate) fn signature_string(regs: &[u32; 3]) -> String {
    let bytes: Vec<u8> = regs.iter().flat_map(|r| r.to_le_bytes()).collect();
    let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
    bytes[..end]
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect()
}

/// Well-known names for hypervisor CPUID signatures.
pub(crate) fn hypervisor_name(signature: &str) -> Option<&'static str> {
    Some(match signature.trim() {
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Microsoft Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU TCG",
        "VBoxVBoxVBox" => "VirtualBox",
        "ACRNACRNACRN" => "ACRN",
        "bhyve bhyve" => "bhyve",
        "lrpepyh  vr" | "prl hyperv" => "Parallels",
        "Jailhouse" => "Jailhouse",
        "QNXQVMBSQG" => "QNX",
        "EVMMEVMMEVMM" => "Intel KGT",
        _ => return None,
    })
}

/// First block (first processor) of `/proc/cpuinfo`, key -> value.
pub fn parse_cpuinfo(text: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if fields.is_empty() {
                continue;
            }
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            fields
                .entry(k.trim().to_string())
                .or_insert_with(|| v.trim().to_string());
        }
    }
    fields
}

/// The relevant flags from a `/proc/cpuinfo` "flags" value, each marked present or absent.
pub fn relevant_flags(flags_line: &str) -> BTreeMap<String, bool> {
    let present: std::collections::BTreeSet<&str> = flags_line.split_whitespace().collect();
    RELEVANT_FLAGS
        .iter()
        .map(|f| (f.to_string(), present.contains(f)))
        .collect()
}

/// Counts the CPUs in a sysfs CPU list such as `0-3,6,8-9`; `None` if malformed.
pub fn count_cpu_list(list: &str) -> Option<usize> {
    let list = list.trim();
    if list.is_empty() {
        return Some(0);
    }
    let mut count = 0usize;
    for part in list.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().ok()?;
                let b: usize = b.trim().parse().ok()?;
                if b < a {
                    return None;
                }
                count = count.checked_add(b - a + 1)?;
            }
            None => {
                part.parse::<usize>().ok()?;
                count = count.checked_add(1)?;
            }
        }
    }
    Some(count)
}

pub(crate) fn probe(cpuinfo: Option<&BTreeMap<String, String>>) -> CpuInfo {
    let leaf0 = __cpuid_count(0, 0);
    let vendor = regs_to_string(&[leaf0.ebx, leaf0.edx, leaf0.ecx]);
    let leaf1 = __cpuid_count(1, 0);
    let sig = decode_signature(leaf1.eax);

    let max_ext = __cpuid_count(0x8000_0000, 0).eax;
    let brand = if max_ext >= 0x8000_0004 {
        let regs: Vec<u32> = (0x8000_0002u32..=0x8000_0004)
            .flat_map(|leaf| {
                let r = __cpuid_count(leaf, 0);
                [r.eax, r.ebx, r.ecx, r.edx]
            })
            .collect();
        Some(regs_to_string(&regs)).filter(|s| !s.is_empty())
    } else {
        None
    };
    let model_name = brand
        .or_else(|| cpuinfo.and_then(|c| c.get("model name").cloned()))
        .unwrap_or_else(|| "unknown".to_string());

    let microcode = cpuinfo
        .and_then(|c| c.get("microcode").cloned())
        .or_else(|| read_trimmed("/sys/devices/system/cpu/cpu0/microcode/version"));

    let online = read_trimmed("/sys/devices/system/cpu/online");
    let online_count = online.as_deref().and_then(count_cpu_list);

    CpuInfo {
        vendor: if vendor.is_empty() {
            "unknown".into()
        } else {
            vendor
        },
        model_name,
        family: sig.family,
        model: sig.model,
        stepping: sig.stepping,
        signature: leaf1.eax,
        microcode,
        available_parallelism: std::thread::available_parallelism().ok().map(|n| n.get()),
        online,
        online_count,
        flags: cpuinfo
            .and_then(|c| c.get("flags"))
            .map(|f| relevant_flags(f)),
        bugs: cpuinfo
            .and_then(|c| c.get("bugs"))
            .map(|b| b.split_whitespace().map(str::to_string).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\n\
vendor_id\t: AuthenticAMD\n\
cpu family\t: 25\n\
model\t\t: 1\n\
model name\t: AMD EPYC 7B13\n\
microcode\t: 0x1000065\n\
cpu MHz\t\t: 2249.998\n\
flags\t\t: fpu vme constant_tsc nonstop_tsc x2apic tsc_deadline_timer hypervisor\n\
bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2\n\
\n\
processor\t: 1\n\
vendor_id\t: AuthenticAMD\n\
microcode\t: 0xdeadbeef\n\
flags\t\t: fpu svm\n";

    #[test]
    fn cpuinfo_first_block_only() {
        let c = parse_cpuinfo(CPUINFO);
        assert_eq!(c.get("processor").map(String::as_str), Some("0"));
        assert_eq!(
            c.get("model name").map(String::as_str),
            Some("AMD EPYC 7B13")
        );
        assert_eq!(c.get("microcode").map(String::as_str), Some("0x1000065"));
        assert_eq!(c.get("cpu MHz").map(String::as_str), Some("2249.998"));
        let flags = relevant_flags(&c["flags"]);
        assert_eq!(flags.get("hypervisor"), Some(&true));
        assert_eq!(flags.get("x2apic"), Some(&true));
        assert_eq!(flags.get("constant_tsc"), Some(&true));
        assert_eq!(flags.get("svm"), Some(&false), "second block must not leak");
        assert_eq!(flags.get("vmx"), Some(&false));
        assert!(!flags.contains_key("fpu"), "only relevant flags are kept");
        assert_eq!(flags.len(), RELEVANT_FLAGS.len());
    }

    #[test]
    fn cpuinfo_leading_blank_lines_and_empty() {
        let c = parse_cpuinfo("\n\nprocessor : 3\nflags : vmx\n");
        assert_eq!(c.get("processor").map(String::as_str), Some("3"));
        assert!(parse_cpuinfo("").is_empty());
    }

    #[test]
    fn cpu_list_counting() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-3,6,8-9\n"), Some(7));
        assert_eq!(count_cpu_list(""), Some(0));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("a-b"), None);
    }

    #[test]
    fn signature_decoding_known_vectors() {
        // AMD Zen 3 (EPYC Milan): family 0x19, model 0x01, stepping 1.
        assert_eq!(
            decode_signature(0x00a0_0f11),
            CpuSignature {
                family: 0x19,
                model: 0x01,
                stepping: 1
            }
        );
        // AMD Zen 2 (EPYC Rome): family 0x17, model 0x31, stepping 0.
        assert_eq!(
            decode_signature(0x0083_0f10),
            CpuSignature {
                family: 0x17,
                model: 0x31,
                stepping: 0
            }
        );
        // Intel Skylake-SP: family 6, model 0x55, stepping 4.
        assert_eq!(
            decode_signature(0x0005_0654),
            CpuSignature {
                family: 6,
                model: 0x55,
                stepping: 4
            }
        );
        // Intel Pentium 4: family 0xF with zero extended family.
        assert_eq!(
            decode_signature(0x0000_0f29),
            CpuSignature {
                family: 0xf,
                model: 2,
                stepping: 9
            }
        );
        // Family 4: extended model bits are ignored.
        assert_eq!(
            decode_signature(0x0001_0435),
            CpuSignature {
                family: 4,
                model: 3,
                stepping: 5
            }
        );
    }

    #[test]
    fn register_strings() {
        // "KVMKVMKVM\0\0\0"
        let sig = signature_string(&[0x4b4d_564b, 0x564b_4d56, 0x0000_004d]);
        assert_eq!(sig, "KVMKVMKVM");
        assert_eq!(hypervisor_name(&sig), Some("KVM"));
        // "AuthenticAMD" as EBX, EDX, ECX.
        assert_eq!(
            regs_to_string(&[0x6874_7541, 0x6974_6e65, 0x444d_4163]),
            "AuthenticAMD"
        );
        assert_eq!(signature_string(&[0, 0, 0]), "");
        assert_eq!(hypervisor_name("nothing"), None);
    }
}
