//! KVM modules and what they say about the host: every parameter of every loaded KVM
//! module, the notable ones by name, and the classification of the host (bare metal,
//! nested, paravirtual KVM) that decides whether exit costs here are hardware figures.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use core::arch::x86_64::__cpuid_count;
use serde::{Deserialize, Serialize};

use crate::cpu::{hypervisor_name, signature_string, CpuInfo};
use crate::kernel::read_param_dir;

/// Root of the sysfs module tree.
pub const SYS_MODULE: &str = "/sys/module";

/// How this host is virtualised.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum HostKind {
    /// No hypervisor below, KVM on hardware virtualization.
    BareMetal,
    /// This host is a guest; its KVM uses (nested) hardware virtualization.
    Nested,
    /// Not a guest, but KVM is paravirtual (no hardware virtualization).
    Paravirtual,
    /// This host is a guest and its KVM is paravirtual.
    NestedParavirtual,
}

impl HostKind {
    /// The serialized name, e.g. `nested_paravirtual`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::BareMetal => "bare_metal",
            HostKind::Nested => "nested",
            HostKind::Paravirtual => "paravirtual",
            HostKind::NestedParavirtual => "nested_paravirtual",
        }
    }
}

/// Whether this host is itself a guest and what kind of KVM it runs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Virtualization {
    /// CPUID leaf 1 ECX bit 31: set when running under a hypervisor.
    pub hypervisor_bit: bool,
    /// Hypervisor vendor signature (CPUID leaf 0x40000000 EBX/ECX/EDX), e.g. `KVMKVMKVM`.
    pub hypervisor_signature: Option<String>,
    /// Well-known name for the signature, e.g. `KVM` or `Microsoft Hyper-V`.
    pub hypervisor_name: Option<String>,
    /// Highest hypervisor CPUID leaf (leaf 0x40000000 EAX).
    pub hypervisor_max_leaf: Option<u32>,
    /// Intel VT-x usable by this kernel (`vmx` flag; CPUID when `/proc/cpuinfo` is unreadable).
    pub vmx: bool,
    /// AMD-V usable by this kernel (`svm` flag; CPUID when `/proc/cpuinfo` is unreadable).
    pub svm: bool,
    /// Loaded KVM modules (`kvm`, `kvm_intel`, `kvm_amd`, `kvm_pvm`, ...).
    pub kvm_modules: Vec<String>,
    /// Whether `kvm_pvm` (paravirtual KVM without hardware virtualization) is loaded.
    pub kvm_pvm_loaded: bool,
    /// Classification of the host.
    pub kind: HostKind,
    /// One line saying what the classification means for measured exit costs.
    pub summary: String,
}

macro_rules! kvm_params {
    ($( $(#[$doc:meta])* $field:ident in [$($module:literal),+ $(,)?] ),* $(,)?) => {
        /// KVM module parameters that change exit cost, by name; `None` when the parameter is
        /// absent (module not loaded, or this kernel does not have it).
        #[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
        pub struct KvmParams {
            $( $(#[$doc])* pub $field: Option<String>, )*
        }

        impl KvmParams {
            /// Pulls the notable parameters out of a module -> parameter -> value map.
            pub fn from_module_params(params: &BTreeMap<String, BTreeMap<String, String>>) -> Self {
                Self {
                    $( $field: lookup_param(params, &[$($module),+], stringify!($field)), )*
                }
            }

            /// `(name, value)` for every notable parameter, in declaration order.
            pub fn entries(&self) -> Vec<(&'static str, Option<&str>)> {
                vec![ $( (stringify!($field), self.$field.as_deref()), )* ]
            }
        }
    };
}

kvm_params! {
    /// Maximum time (ns) a halted vCPU polls before sleeping.
    halt_poll_ns in ["kvm"],
    /// Factor by which the halt-poll window grows.
    halt_poll_ns_grow in ["kvm"],
    /// Initial halt-poll window when growing from zero.
    halt_poll_ns_grow_start in ["kvm"],
    /// Divisor by which the halt-poll window shrinks.
    halt_poll_ns_shrink in ["kvm"],
    /// TDP MMU in use (two-dimensional paging MMU).
    tdp_mmu in ["kvm"],
    /// vPMU enabled.
    enable_pmu in ["kvm", "kvm_intel", "kvm_amd"],
    /// RSB stuffing on SMT hosts at each exit.
    mitigate_smt_rsb in ["kvm"],
    /// iTLB-multihit mitigation (no executable huge pages).
    nx_huge_pages in ["kvm"],
    /// LAPIC timer advance (early expiry to hide injection latency).
    lapic_timer_advance in ["kvm"],
    /// Minimum LAPIC timer period (µs).
    min_timer_period_us in ["kvm"],
    /// Unknown MSR accesses are ignored rather than raising #GP.
    ignore_msrs in ["kvm"],
    /// MMIO SPTE caching (fast MMIO exits).
    mmio_caching in ["kvm"],
    /// Forced-emulation prefix accepted.
    force_emulation_prefix in ["kvm"],
    /// APIC virtualization (Intel APICv).
    enable_apicv in ["kvm_intel"],
    /// IPI virtualization (Intel IPIv).
    enable_ipiv in ["kvm_intel"],
    /// Extended page tables.
    ept in ["kvm_intel"],
    /// Virtual processor IDs (no TLB flush on entry/exit).
    vpid in ["kvm_intel"],
    /// Unrestricted guest (real mode runs natively).
    unrestricted_guest in ["kvm_intel"],
    /// Page-modification logging.
    pml in ["kvm_intel"],
    /// PAUSE-loop exiting gap.
    ple_gap in ["kvm_intel"],
    /// PAUSE-loop exiting window.
    ple_window in ["kvm_intel"],
    /// VMX preemption timer used for the guest LAPIC timer.
    preemption_timer in ["kvm_intel"],
    /// L1D flush on VM entry (L1TF mitigation).
    vmentry_l1d_flush in ["kvm_intel"],
    /// Shadow VMCS for nested guests.
    enable_shadow_vmcs in ["kvm_intel"],
    /// AMD AVIC (APIC virtualization).
    avic in ["kvm_amd"],
    /// AVIC forced on.
    force_avic in ["kvm_amd"],
    /// Nested page tables.
    npt in ["kvm_amd"],
    /// PAUSE filter count.
    pause_filter_count in ["kvm_amd"],
    /// PAUSE filter threshold.
    pause_filter_thresh in ["kvm_amd"],
    /// Virtual GIF.
    vgif in ["kvm_amd"],
    /// Virtual NMI.
    vnmi in ["kvm_amd"],
    /// Virtual VMLOAD/VMSAVE.
    vls in ["kvm_amd"],
    /// Next-RIP save (no instruction decode on exits).
    nrips in ["kvm_amd"],
    /// Nested virtualization enabled.
    nested in ["kvm_intel", "kvm_amd"],
}

/// Looks a parameter up in the first module of `modules` that has it.
fn lookup_param(
    params: &BTreeMap<String, BTreeMap<String, String>>,
    modules: &[&str],
    name: &str,
) -> Option<String> {
    modules
        .iter()
        .find_map(|m| params.get(*m).and_then(|p| p.get(name)).cloned())
}

/// Whether a `/sys/module` entry is a KVM module (`kvm` or `kvm_*`).
pub(crate) fn is_kvm_module(name: &str) -> bool {
    name == "kvm" || name.starts_with("kvm_")
}

/// Loaded KVM modules under a `/sys/module`-like root, sorted.
pub fn kvm_modules(sys_module: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(sys_module)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_kvm_module(n))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether the paravirtual `kvm_pvm` is among `modules` (as [`kvm_modules`] lists them).
pub fn has_kvm_pvm(modules: &[String]) -> bool {
    modules.iter().any(|m| m == "kvm_pvm")
}

/// Every parameter of every KVM module under a `/sys/module`-like root:
/// module -> parameter -> value. Modules without a `parameters` directory are omitted.
pub fn read_module_params(sys_module: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    kvm_modules(sys_module)
        .into_iter()
        .filter_map(|m| {
            let params = read_param_dir(&sys_module.join(&m).join("parameters"));
            (!params.is_empty()).then_some((m, params))
        })
        .collect()
}

/// Builds the one-line virtualization summary and the host classification.
fn classify(
    hypervisor_bit: bool,
    signature: Option<&str>,
    name: Option<&str>,
    vmx: bool,
    svm: bool,
    pvm: bool,
) -> (HostKind, String) {
    let kind = match (hypervisor_bit, pvm) {
        (false, false) => HostKind::BareMetal,
        (true, false) => HostKind::Nested,
        (false, true) => HostKind::Paravirtual,
        (true, true) => HostKind::NestedParavirtual,
    };
    let hw = match (vmx, svm) {
        (true, true) => "VT-x and AMD-V",
        (true, false) => "VT-x",
        (false, true) => "AMD-V",
        (false, false) => "",
    };
    let guest = if hypervisor_bit {
        let what = name.unwrap_or("hypervisor");
        match signature {
            Some(sig) => format!(
                "nested: this host is a {what} guest (hypervisor bit set, signature '{sig}')"
            ),
            None => format!("nested: this host is a {what} guest (hypervisor bit set)"),
        }
    } else {
        "bare metal (no hypervisor bit)".to_string()
    };
    let kvm = if pvm {
        let hw_note = if hw.is_empty() {
            "no vmx/svm".to_string()
        } else {
            format!("{hw} also present")
        };
        format!(
            "KVM here is paravirtual (kvm_pvm, {hw_note}): guest ring-0 code is emulated and exit costs are not hardware figures"
        )
    } else if hw.is_empty() {
        "no VT-x/AMD-V: KVM cannot use hardware virtualization here".to_string()
    } else if hypervisor_bit {
        format!(
            "{hw} present (nested: exits also pass through the outer hypervisor, exit costs are not hardware figures)"
        )
    } else {
        format!("{hw} present")
    };
    let sep = if hypervisor_bit || pvm { "; " } else { ", " };
    (kind, format!("{guest}{sep}{kvm}"))
}

pub(crate) fn probe_virtualization(cpu: &CpuInfo, sys_module: &Path) -> Virtualization {
    let leaf1 = __cpuid_count(1, 0);
    let hypervisor_bit = leaf1.ecx & (1 << 31) != 0;
    let (signature, max_leaf) = if hypervisor_bit {
        let r = __cpuid_count(0x4000_0000, 0);
        let sig = signature_string(&[r.ebx, r.ecx, r.edx]);
        ((!sig.is_empty()).then_some(sig), Some(r.eax))
    } else {
        (None, None)
    };
    let name = signature.as_deref().and_then(hypervisor_name);
    let (vmx, svm) = match &cpu.flags {
        Some(flags) => (
            flags.get("vmx").copied().unwrap_or(false),
            flags.get("svm").copied().unwrap_or(false),
        ),
        None => {
            let ext = __cpuid_count(0x8000_0001, 0);
            (leaf1.ecx & (1 << 5) != 0, ext.ecx & (1 << 2) != 0)
        }
    };
    let modules = kvm_modules(sys_module);
    let pvm = has_kvm_pvm(&modules);
    let (kind, summary) = classify(hypervisor_bit, signature.as_deref(), name, vmx, svm, pvm);
    Virtualization {
        hypervisor_bit,
        hypervisor_signature: signature,
        hypervisor_name: name.map(str::to_string),
        hypervisor_max_leaf: max_leaf,
        vmx,
        svm,
        kvm_modules: modules,
        kvm_pvm_loaded: pvm,
        kind,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn module_param_dirs() {
        let root = TempDir::new("modules");
        let write = |rel: &str, content: &str| root.write(rel, content);
        write("kvm/parameters/halt_poll_ns", "200000\n");
        write("kvm/parameters/tdp_mmu", "N\n");
        write("kvm_amd/parameters/npt", "1\n");
        write("kvm_amd/parameters/nested", "0\n");
        write("kvm_pvm/parameters/pvm_native", "Y\n");
        write("kvmfoo/parameters/x", "1\n");
        write("virtio_net/parameters/napi_tx", "Y\n");
        fs::create_dir_all(root.0.join("kvm_empty")).unwrap();
        fs::create_dir_all(root.0.join("kvm/parameters/subdir")).unwrap();

        let params = read_module_params(&root.0);
        assert_eq!(
            params.keys().collect::<Vec<_>>(),
            vec!["kvm", "kvm_amd", "kvm_pvm"]
        );
        assert_eq!(params["kvm"]["halt_poll_ns"], "200000");
        assert_eq!(params["kvm"].len(), 2, "subdirectories are skipped");
        assert_eq!(params["kvm_pvm"]["pvm_native"], "Y");
        assert_eq!(
            kvm_modules(&root.0),
            vec!["kvm", "kvm_amd", "kvm_empty", "kvm_pvm"]
        );

        let notable = KvmParams::from_module_params(&params);
        assert_eq!(notable.halt_poll_ns.as_deref(), Some("200000"));
        assert_eq!(notable.tdp_mmu.as_deref(), Some("N"));
        assert_eq!(notable.npt.as_deref(), Some("1"));
        assert_eq!(notable.nested.as_deref(), Some("0"));
        assert_eq!(notable.ept, None);
        assert_eq!(notable.enable_apicv, None);

        assert!(read_module_params(&root.0.join("missing")).is_empty());
    }

    #[test]
    fn classification_summaries() {
        let (kind, s) = classify(true, Some("KVMKVMKVM"), Some("KVM"), false, false, true);
        assert_eq!(kind, HostKind::NestedParavirtual);
        assert_eq!(
            s,
            "nested: this host is a KVM guest (hypervisor bit set, signature 'KVMKVMKVM'); \
             KVM here is paravirtual (kvm_pvm, no vmx/svm): guest ring-0 code is emulated and \
             exit costs are not hardware figures"
        );
        let (kind, s) = classify(false, None, None, true, false, false);
        assert_eq!(kind, HostKind::BareMetal);
        assert_eq!(s, "bare metal (no hypervisor bit), VT-x present");
        let (kind, s) = classify(
            true,
            Some("Microsoft Hv"),
            Some("Microsoft Hyper-V"),
            false,
            true,
            false,
        );
        assert_eq!(kind, HostKind::Nested);
        assert!(s.contains("AMD-V present (nested"), "{s}");
    }
}
