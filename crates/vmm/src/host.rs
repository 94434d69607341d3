//! Host probe: what this machine looks like from the point of view of VM-exit cost.
//!
//! [`probe`] gathers the CPU identity (CPUID and `/proc/cpuinfo`), the running kernel, what KVM
//! offers (device access, API version, capabilities checked on a throwaway VM), the TSC frequency,
//! every KVM module parameter, and whether this host is itself a guest or runs a paravirtual KVM.
//! The result is serialisable (it is the `host` block of every results file) and renders as the
//! human-readable `exitlab host` report through [`HostInfo::render_text`].
//!
//! Nothing here panics: whatever cannot be read becomes `None` or an explanatory string.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use core::arch::x86_64::__cpuid_count;
use serde::{Deserialize, Serialize};

/// Path of the KVM device node.
const KVM_DEVICE: &str = "/dev/kvm";
/// Root of the sysfs module tree.
const SYS_MODULE: &str = "/sys/module";

/// Everything the probe found out about this host.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct HostInfo {
    /// CPU identity, microcode, CPU count and exit-relevant feature flags.
    pub cpu: CpuInfo,
    /// Running kernel.
    pub kernel: KernelInfo,
    /// What `/dev/kvm` offers.
    pub kvm: KvmInfo,
    /// Whether this host is itself a guest, and what kind of KVM it runs.
    pub virtualization: Virtualization,
    /// TSC frequency and the source it was taken from.
    pub tsc: TscInfo,
    /// Notable KVM module parameters, pulled out of `module_params` by name.
    pub kvm_params: KvmParams,
    /// Every parameter of every loaded KVM module: module name -> parameter name -> value.
    pub module_params: BTreeMap<String, BTreeMap<String, String>>,
}

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

/// The running kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// `uname -s`.
    pub sysname: String,
    /// `uname -r`.
    pub release: String,
    /// `uname -v`.
    pub version: String,
    /// `uname -m`.
    pub machine: String,
    /// Kernel command-line parameters that change exit cost (mitigations, idle, kvm module options, ...).
    pub relevant_cmdline: Vec<String>,
    /// `/sys/devices/system/cpu/vulnerabilities/*`: vulnerability -> kernel status.
    pub vulnerabilities: BTreeMap<String, String>,
}

/// What `/dev/kvm` offers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct KvmInfo {
    /// The device node probed.
    pub device: String,
    /// Whether the device node exists.
    pub device_exists: bool,
    /// Whether the device opened and a VM could be created on it.
    pub available: bool,
    /// Why KVM is not usable, when it is not.
    pub error: Option<String>,
    /// What to do about `error`.
    pub advice: Option<String>,
    /// `KVM_GET_API_VERSION` (12 on every kernel since 2.6.22).
    pub api_version: Option<i32>,
    /// `KVM_CAP_NR_VCPUS`: recommended maximum vCPUs per VM.
    pub nr_vcpus: Option<i32>,
    /// `KVM_CAP_MAX_VCPUS`: hard maximum vCPUs per VM.
    pub max_vcpus: Option<i32>,
    /// Which fd the capabilities were checked on (`VM` or `system`).
    pub capabilities_from: Option<String>,
    /// Capability name (without `KVM_CAP_`) -> `KVM_CHECK_EXTENSION` result.
    pub capabilities: BTreeMap<String, i32>,
    /// `KVM_CAP_X86_DISABLE_EXITS` decoded: which exits may be disabled on this host.
    pub disable_exits: Option<DisableExits>,
}

/// Decoded `KVM_CAP_X86_DISABLE_EXITS` value.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisableExits {
    /// The raw bit mask.
    pub raw: u32,
    /// MWAIT exits may be disabled.
    pub mwait: bool,
    /// HLT exits may be disabled.
    pub hlt: bool,
    /// PAUSE exits may be disabled.
    pub pause: bool,
    /// C-state (MWAIT/HLT idle) exits may be disabled.
    pub cstate: bool,
}

impl DisableExits {
    /// Decodes a `KVM_CAP_X86_DISABLE_EXITS` bit mask.
    pub fn from_bits(raw: u32) -> Self {
        Self {
            raw,
            mwait: raw & kvm_bindings::KVM_X86_DISABLE_EXITS_MWAIT != 0,
            hlt: raw & kvm_bindings::KVM_X86_DISABLE_EXITS_HLT != 0,
            pause: raw & kvm_bindings::KVM_X86_DISABLE_EXITS_PAUSE != 0,
            cstate: raw & kvm_bindings::KVM_X86_DISABLE_EXITS_CSTATE != 0,
        }
    }

    /// Names of the set bits, e.g. `["HLT", "PAUSE", "CSTATE"]`.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.mwait, "MWAIT"),
            (self.hlt, "HLT"),
            (self.pause, "PAUSE"),
            (self.cstate, "CSTATE"),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, name)| *name)
        .collect()
    }
}

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

/// TSC frequency.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TscInfo {
    /// TSC frequency in kHz from the most trustworthy source that answered.
    pub khz: Option<u64>,
    /// Where `khz` came from (`KVM_GET_TSC_KHZ`, sysfs, CPUID, `/proc/cpuinfo`), or `unavailable`.
    pub source: String,
    /// Every source that answered, with its value in kHz (for cross-checking).
    pub sources: BTreeMap<String, u64>,
    /// Invariant TSC (`constant_tsc` and `nonstop_tsc`, or CPUID 0x80000007 EDX bit 8).
    pub invariant: Option<bool>,
    /// Current kernel clocksource (`tsc`, `kvm-clock`, `hpet`, ...).
    pub clocksource: Option<String>,
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

/// Kernel command-line parameter names (or prefixes ending in '.') that change exit cost.
const RELEVANT_CMDLINE: &[&str] = &[
    "mitigations",
    "idle",
    "isolcpus",
    "nohz_full",
    "rcu_nocbs",
    "clocksource",
    "tsc",
    "nested_pvm",
    "spectre_v2",
    "spec_rstack_overflow",
    "retbleed",
    "l1tf",
    "mds",
    "pti",
    "nopti",
    "nospectre_v2",
    "processor.max_cstate",
    "intel_idle.max_cstate",
    "intel_pstate",
    "kvm.",
    "kvm_intel.",
    "kvm_amd.",
    "kvm_pvm.",
];

/// Runs the whole probe. Never panics; every part that cannot be read becomes `None` or an
/// explanatory string.
pub fn probe() -> HostInfo {
    let cpuinfo_text = fs::read_to_string("/proc/cpuinfo").ok();
    let cpuinfo = cpuinfo_text.as_deref().map(parse_cpuinfo);
    let module_params = read_module_params(Path::new(SYS_MODULE));
    let cpu = probe_cpu(cpuinfo.as_ref());
    let kernel = probe_kernel();
    let (kvm, vcpu_tsc_khz) = probe_kvm(&cpu);
    let virtualization = probe_virtualization(&cpu, Path::new(SYS_MODULE));
    let tsc = probe_tsc(&cpu, vcpu_tsc_khz, cpuinfo.as_ref(), &virtualization);
    let kvm_params = KvmParams::from_module_params(&module_params);
    HostInfo {
        cpu,
        kernel,
        kvm,
        virtualization,
        tsc,
        kvm_params,
        module_params,
    }
}

impl HostInfo {
    /// True when exit costs measured here are not hardware figures: this host is itself a guest
    /// (hypervisor CPUID bit) or its KVM is paravirtual (`kvm_pvm`).
    pub fn is_nested_or_paravirtual(&self) -> bool {
        self.virtualization.hypervisor_bit || self.virtualization.kvm_pvm_loaded
    }

    /// The `exitlab host` report: grouped, aligned, human readable.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        if self.is_nested_or_paravirtual() {
            let _ = writeln!(
                out,
                "NOTE: exit costs measured on this host are not hardware figures."
            );
            let _ = writeln!(out);
        }

        let c = &self.cpu;
        let mut rows: Vec<(String, String)> = vec![
            ("vendor".into(), c.vendor.clone()),
            ("model name".into(), c.model_name.clone()),
            (
                "family/model/stepping".into(),
                format!(
                    "{:#x}/{:#x}/{} ({}/{}/{}), signature {:#010x}",
                    c.family, c.model, c.stepping, c.family, c.model, c.stepping, c.signature
                ),
            ),
            ("microcode".into(), opt_str(c.microcode.as_deref())),
            (
                "logical CPUs".into(),
                format!(
                    "{} available to this process; online {} ({})",
                    opt_display(c.available_parallelism),
                    opt_str(c.online.as_deref()),
                    opt_display(c.online_count)
                ),
            ),
        ];
        match &c.flags {
            Some(flags) => {
                let present: Vec<&str> = flags
                    .iter()
                    .filter(|(_, v)| **v)
                    .map(|(k, _)| k.as_str())
                    .collect();
                let absent: Vec<&str> = flags
                    .iter()
                    .filter(|(_, v)| !**v)
                    .map(|(k, _)| k.as_str())
                    .collect();
                rows.push(("flags present".into(), join_or_none(&present)));
                rows.push(("flags absent".into(), join_or_none(&absent)));
            }
            None => rows.push(("flags".into(), "unknown (/proc/cpuinfo unreadable)".into())),
        }
        if let Some(bugs) = &c.bugs {
            let bugs: Vec<&str> = bugs.iter().map(String::as_str).collect();
            rows.push(("bugs".into(), join_or_none(&bugs)));
        }
        section(&mut out, "CPU", &rows);

        let k = &self.kernel;
        let mut rows: Vec<(String, String)> = vec![
            ("release".into(), k.release.clone()),
            ("version".into(), k.version.clone()),
            ("machine".into(), format!("{} {}", k.sysname, k.machine)),
            (
                "cmdline (relevant)".into(),
                if k.relevant_cmdline.is_empty() {
                    "none".into()
                } else {
                    k.relevant_cmdline.join(" ")
                },
            ),
        ];
        let mitigated: Vec<(String, String)> = k
            .vulnerabilities
            .iter()
            .filter(|(_, v)| v.as_str() != "Not affected")
            .map(|(name, v)| (format!("  {name}"), v.clone()))
            .collect();
        if !k.vulnerabilities.is_empty() {
            rows.push((
                "vulnerabilities".into(),
                format!(
                    "{} listed, {} not 'Not affected':",
                    k.vulnerabilities.len(),
                    mitigated.len()
                ),
            ));
            rows.extend(mitigated);
        }
        section(&mut out, "Kernel", &rows);

        let v = &self.virtualization;
        let rows: Vec<(String, String)> = vec![
            ("summary".into(), v.summary.clone()),
            ("kind".into(), v.kind.as_str().into()),
            ("hypervisor bit".into(), yes_no(v.hypervisor_bit).into()),
            (
                "hypervisor signature".into(),
                match (&v.hypervisor_signature, &v.hypervisor_name) {
                    (Some(sig), Some(name)) => format!(
                        "'{sig}' ({name}), max leaf {}",
                        opt_hex(v.hypervisor_max_leaf)
                    ),
                    (Some(sig), None) => {
                        format!("'{sig}', max leaf {}", opt_hex(v.hypervisor_max_leaf))
                    }
                    _ => "none".into(),
                },
            ),
            (
                "hardware virt".into(),
                match (v.vmx, v.svm) {
                    (true, true) => "VT-x and AMD-V".into(),
                    (true, false) => "VT-x (vmx)".into(),
                    (false, true) => "AMD-V (svm)".into(),
                    (false, false) => "none (no vmx/svm flag)".into(),
                },
            ),
            (
                "KVM modules".into(),
                if v.kvm_modules.is_empty() {
                    "none loaded".into()
                } else {
                    v.kvm_modules.join(", ")
                },
            ),
        ];
        section(&mut out, "Virtualization", &rows);

        let kv = &self.kvm;
        let mut rows: Vec<(String, String)> = vec![(
            kv.device.clone(),
            if kv.available {
                "available".into()
            } else if kv.device_exists {
                "present but not usable".into()
            } else {
                "missing".into()
            },
        )];
        if let Some(e) = &kv.error {
            rows.push(("error".into(), e.clone()));
        }
        if let Some(a) = &kv.advice {
            rows.push(("advice".into(), a.clone()));
        }
        rows.push(("API version".into(), opt_display(kv.api_version)));
        rows.push((
            "vCPUs per VM".into(),
            format!(
                "{} recommended (NR_VCPUS), {} max (MAX_VCPUS)",
                opt_display(kv.nr_vcpus),
                opt_display(kv.max_vcpus)
            ),
        ));
        if let Some(from) = &kv.capabilities_from {
            rows.push(("capabilities".into(), format!("checked on the {from} fd")));
            for (name, value) in &kv.capabilities {
                let shown = match decode_cap_bits(name, *value) {
                    Some(bits) => format!("{value} ({bits})"),
                    None if *value == 0 => "0 (not supported)".into(),
                    None => value.to_string(),
                };
                rows.push((format!("  {name}"), shown));
            }
        }
        section(&mut out, "KVM", &rows);

        let t = &self.tsc;
        let mut rows: Vec<(String, String)> = vec![(
            "frequency".into(),
            match t.khz {
                Some(khz) => format!("{khz} kHz ({}) from {}", mhz(khz), t.source),
                None => format!("unknown ({})", t.source),
            },
        )];
        if !t.sources.is_empty() {
            let all: Vec<String> = t
                .sources
                .iter()
                .map(|(src, khz)| format!("{khz} kHz from {src}"))
                .collect();
            rows.push(("all sources".into(), all.join("; ")));
        }
        rows.push((
            "invariant".into(),
            t.invariant.map_or("unknown".into(), |b| yes_no(b).into()),
        ));
        rows.push(("clocksource".into(), opt_str(t.clocksource.as_deref())));
        section(&mut out, "TSC", &rows);

        let rows: Vec<(String, String)> = self
            .kvm_params
            .entries()
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| (name.to_string(), v.to_string())))
            .collect();
        if rows.is_empty() {
            section(
                &mut out,
                "Notable KVM parameters",
                &[("none".into(), "no KVM module parameters found".into())],
            );
        } else {
            section(&mut out, "Notable KVM parameters", &rows);
        }

        for (module, params) in &self.module_params {
            let rows: Vec<(String, String)> =
                params.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            section(&mut out, &format!("/sys/module/{module}/parameters"), &rows);
        }
        while out.ends_with("\n\n") {
            out.pop();
        }
        out
    }
}

/// Appends a titled block of aligned `key  value` rows.
fn section(out: &mut String, title: &str, rows: &[(String, String)]) {
    let _ = writeln!(out, "{title}");
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (k, v) in rows {
        let _ = writeln!(out, "  {k:<width$}  {v}");
    }
    let _ = writeln!(out);
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn opt_str(v: Option<&str>) -> String {
    v.unwrap_or("unknown").to_string()
}

fn opt_display<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| v.to_string())
}

fn opt_hex(v: Option<u32>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| format!("{v:#x}"))
}

fn join_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(" ")
    }
}

fn mhz(khz: u64) -> String {
    format!("{}.{:03} MHz", khz / 1000, khz % 1000)
}

// ---------------------------------------------------------------------------------------------
// CPU

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
fn signature_string(regs: &[u32; 3]) -> String {
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
fn hypervisor_name(signature: &str) -> Option<&'static str> {
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

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn probe_cpu(cpuinfo: Option<&BTreeMap<String, String>>) -> CpuInfo {
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

// ---------------------------------------------------------------------------------------------
// Kernel

fn c_chars_to_string(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn uname() -> Result<[String; 4], std::io::Error> {
    let mut buf = std::mem::MaybeUninit::<libc::utsname>::zeroed();
    // SAFETY: `buf` is a properly aligned, writable `utsname` that outlives the call; uname(2)
    // only writes NUL-terminated strings into its fields. A zeroed `utsname` (arrays of c_char)
    // is already a valid value, so `assume_init` is sound whether or not uname wrote to it.
    let (rc, u) = unsafe {
        let rc = libc::uname(buf.as_mut_ptr());
        (rc, buf.assume_init())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok([
        c_chars_to_string(&u.sysname),
        c_chars_to_string(&u.release),
        c_chars_to_string(&u.version),
        c_chars_to_string(&u.machine),
    ])
}

/// Kernel command-line parameters (before any `--`) that change exit cost.
pub fn relevant_cmdline(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .take_while(|t| *t != "--")
        .filter(|t| {
            let key = t.split_once('=').map_or(*t, |(k, _)| k);
            RELEVANT_CMDLINE.iter().any(|r| {
                if r.ends_with('.') {
                    key.starts_with(r)
                } else {
                    key == *r
                }
            })
        })
        .map(str::to_string)
        .collect()
}

/// Reads every regular file in `dir` as `name -> trimmed content`. Unreadable files get an
/// explanatory value; a missing directory gives an empty map.
pub fn read_param_dir(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let value = match fs::read_to_string(&path) {
            Ok(s) => s.trim_end_matches('\n').to_string(),
            Err(e) => format!("<unreadable: {e}>"),
        };
        out.insert(name, value);
    }
    out
}

fn probe_kernel() -> KernelInfo {
    let [sysname, release, version, machine] = match uname() {
        Ok(fields) => fields,
        Err(e) => {
            let fallback = |file: &str| {
                read_trimmed(format!("/proc/sys/kernel/{file}"))
                    .unwrap_or_else(|| format!("unknown (uname failed: {e})"))
            };
            [
                fallback("ostype"),
                fallback("osrelease"),
                fallback("version"),
                format!("unknown (uname failed: {e})"),
            ]
        }
    };
    KernelInfo {
        sysname,
        release,
        version,
        machine,
        relevant_cmdline: fs::read_to_string("/proc/cmdline")
            .map(|c| relevant_cmdline(&c))
            .unwrap_or_default(),
        vulnerabilities: read_param_dir(Path::new("/sys/devices/system/cpu/vulnerabilities")),
    }
}

// ---------------------------------------------------------------------------------------------
// KVM module parameters and virtualization

/// Whether a `/sys/module` entry is a KVM module (`kvm` or `kvm_*`).
fn is_kvm_module(name: &str) -> bool {
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

fn probe_virtualization(cpu: &CpuInfo, sys_module: &Path) -> Virtualization {
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
    let pvm = modules.iter().any(|m| m == "kvm_pvm");
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

// ---------------------------------------------------------------------------------------------
// KVM

/// Capabilities reported in [`KvmInfo::capabilities`], by name without the `KVM_CAP_` prefix.
const CAPABILITIES: &[(&str, u32)] = &[
    ("IRQCHIP", kvm_bindings::KVM_CAP_IRQCHIP),
    ("SPLIT_IRQCHIP", kvm_bindings::KVM_CAP_SPLIT_IRQCHIP),
    ("X2APIC_API", kvm_bindings::KVM_CAP_X2APIC_API),
    ("IOEVENTFD", kvm_bindings::KVM_CAP_IOEVENTFD),
    (
        "IOEVENTFD_ANY_LENGTH",
        kvm_bindings::KVM_CAP_IOEVENTFD_ANY_LENGTH,
    ),
    ("IRQFD", kvm_bindings::KVM_CAP_IRQFD),
    ("SYNC_REGS", kvm_bindings::KVM_CAP_SYNC_REGS),
    (
        "X86_USER_SPACE_MSR",
        kvm_bindings::KVM_CAP_X86_USER_SPACE_MSR,
    ),
    ("X86_MSR_FILTER", kvm_bindings::KVM_CAP_X86_MSR_FILTER),
    ("X86_DISABLE_EXITS", kvm_bindings::KVM_CAP_X86_DISABLE_EXITS),
    ("HALT_POLL", kvm_bindings::KVM_CAP_HALT_POLL),
    ("BINARY_STATS_FD", kvm_bindings::KVM_CAP_BINARY_STATS_FD),
    ("COALESCED_MMIO", kvm_bindings::KVM_CAP_COALESCED_MMIO),
    ("COALESCED_PIO", kvm_bindings::KVM_CAP_COALESCED_PIO),
    ("PIT2", kvm_bindings::KVM_CAP_PIT2),
    ("GET_TSC_KHZ", kvm_bindings::KVM_CAP_GET_TSC_KHZ),
    ("TSC_CONTROL", kvm_bindings::KVM_CAP_TSC_CONTROL),
    ("VM_TSC_CONTROL", kvm_bindings::KVM_CAP_VM_TSC_CONTROL),
    (
        "TSC_DEADLINE_TIMER",
        kvm_bindings::KVM_CAP_TSC_DEADLINE_TIMER,
    ),
    ("IMMEDIATE_EXIT", kvm_bindings::KVM_CAP_IMMEDIATE_EXIT),
    ("VCPU_ATTRIBUTES", kvm_bindings::KVM_CAP_VCPU_ATTRIBUTES),
    ("X86_NOTIFY_VMEXIT", kvm_bindings::KVM_CAP_X86_NOTIFY_VMEXIT),
    ("X86_BUS_LOCK_EXIT", kvm_bindings::KVM_CAP_X86_BUS_LOCK_EXIT),
    ("PMU_CAPABILITY", kvm_bindings::KVM_CAP_PMU_CAPABILITY),
    ("ADJUST_CLOCK", kvm_bindings::KVM_CAP_ADJUST_CLOCK),
    (
        "X86_APIC_BUS_CYCLES_NS",
        kvm_bindings::KVM_CAP_X86_APIC_BUS_CYCLES_NS,
    ),
    ("EXIT_HYPERCALL", kvm_bindings::KVM_CAP_EXIT_HYPERCALL),
    (
        "EXIT_ON_EMULATION_FAILURE",
        kvm_bindings::KVM_CAP_EXIT_ON_EMULATION_FAILURE,
    ),
    ("READONLY_MEM", kvm_bindings::KVM_CAP_READONLY_MEM),
    ("NR_MEMSLOTS", kvm_bindings::KVM_CAP_NR_MEMSLOTS),
    ("MAX_VCPU_ID", kvm_bindings::KVM_CAP_MAX_VCPU_ID),
    ("XSAVE2", kvm_bindings::KVM_CAP_XSAVE2),
    ("SET_GUEST_DEBUG", kvm_bindings::KVM_CAP_SET_GUEST_DEBUG),
];

/// Hypercall number of `KVM_HC_MAP_GPA_RANGE` (bit index in the `KVM_CAP_EXIT_HYPERCALL` mask).
const KVM_HC_MAP_GPA_RANGE: u32 = 12;

/// Names of the bits set in a capability value, for capabilities whose value is a bit mask.
/// `None` for capabilities that are plain counts or booleans, and for a zero value.
pub fn decode_cap_bits(cap: &str, value: i32) -> Option<String> {
    if value <= 0 {
        return None;
    }
    let bits = value as u32;
    let table: &[(u32, &str)] = match cap {
        "X86_DISABLE_EXITS" => {
            return Some(DisableExits::from_bits(bits).names().join("|")).filter(|s| !s.is_empty());
        }
        "X2APIC_API" => &[
            (kvm_bindings::KVM_X2APIC_API_USE_32BIT_IDS, "USE_32BIT_IDS"),
            (
                kvm_bindings::KVM_X2APIC_API_DISABLE_BROADCAST_QUIRK,
                "DISABLE_BROADCAST_QUIRK",
            ),
        ],
        "SYNC_REGS" => &[
            (kvm_bindings::KVM_SYNC_X86_REGS, "REGS"),
            (kvm_bindings::KVM_SYNC_X86_SREGS, "SREGS"),
            (kvm_bindings::KVM_SYNC_X86_EVENTS, "EVENTS"),
        ],
        "ADJUST_CLOCK" => &[
            (kvm_bindings::KVM_CLOCK_TSC_STABLE, "TSC_STABLE"),
            (kvm_bindings::KVM_CLOCK_REALTIME, "REALTIME"),
            (kvm_bindings::KVM_CLOCK_HOST_TSC, "HOST_TSC"),
        ],
        "EXIT_HYPERCALL" => &[(1 << KVM_HC_MAP_GPA_RANGE, "MAP_GPA_RANGE")],
        "PMU_CAPABILITY" => &[(kvm_bindings::KVM_PMU_CAP_DISABLE, "DISABLE")],
        "X86_NOTIFY_VMEXIT" => &[
            (kvm_bindings::KVM_X86_NOTIFY_VMEXIT_ENABLED, "ENABLED"),
            (kvm_bindings::KVM_X86_NOTIFY_VMEXIT_USER, "USER"),
        ],
        _ => return None,
    };
    let mut names: Vec<String> = table
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    let known = table.iter().fold(0u32, |acc, (bit, _)| acc | bit);
    if bits & !known != 0 {
        names.push(format!("{:#x}", bits & !known));
    }
    Some(names.join("|"))
}

/// Why `/dev/kvm` could not be opened, and what to do about it.
fn open_error_advice(errno: i32, cpu_flags: Option<&BTreeMap<String, bool>>) -> (String, String) {
    let has = |f: &str| cpu_flags.and_then(|m| m.get(f)).copied().unwrap_or(false);
    let load_module = if has("vmx") {
        "load kvm_intel (modprobe kvm_intel)".to_string()
    } else if has("svm") {
        "load kvm_amd (modprobe kvm_amd)".to_string()
    } else {
        "this CPU shows no vmx/svm flag: enable VT-x/AMD-V in the firmware, or enable nested \
         virtualization on the outer hypervisor, then load kvm_intel/kvm_amd (or a paravirtual \
         KVM such as kvm_pvm if this kernel has one)"
            .to_string()
    };
    match errno {
        libc::ENOENT => (
            format!("{KVM_DEVICE} does not exist"),
            load_module,
        ),
        libc::EACCES | libc::EPERM => (
            format!("permission denied opening {KVM_DEVICE}"),
            "run as root or add your user to the kvm group (sudo usermod -aG kvm $USER, then log in again)"
                .to_string(),
        ),
        libc::ENXIO | libc::ENODEV => (
            format!("{KVM_DEVICE} exists but no KVM driver is bound to it"),
            load_module,
        ),
        other => (
            format!(
                "opening {KVM_DEVICE} failed: {}",
                std::io::Error::from_raw_os_error(other)
            ),
            "check dmesg for KVM errors and that no other hypervisor holds VT-x/AMD-V".to_string(),
        ),
    }
}

/// Probes KVM; also returns `KVM_GET_TSC_KHZ` from a throwaway vCPU when it answered.
fn probe_kvm(cpu: &CpuInfo) -> (KvmInfo, Option<u64>) {
    let mut info = KvmInfo {
        device: KVM_DEVICE.to_string(),
        device_exists: Path::new(KVM_DEVICE).exists(),
        available: false,
        error: None,
        advice: None,
        api_version: None,
        nr_vcpus: None,
        max_vcpus: None,
        capabilities_from: None,
        capabilities: BTreeMap::new(),
        disable_exits: None,
    };
    let kvm = match kvm_ioctls::Kvm::new() {
        Ok(kvm) => kvm,
        Err(e) => {
            let (error, advice) = open_error_advice(e.errno(), cpu.flags.as_ref());
            info.error = Some(error);
            info.advice = Some(advice);
            return (info, None);
        }
    };
    info.api_version = Some(kvm.get_api_version());

    let vm = match kvm.create_vm() {
        Ok(vm) => Some(vm),
        Err(e) => {
            let reason = std::io::Error::from_raw_os_error(e.errno());
            info.error = Some(format!("KVM_CREATE_VM failed: {reason}"));
            info.advice = Some(match e.errno() {
                libc::EBUSY => "another hypervisor holds VT-x/AMD-V, or KVM could not enable it: \
                                stop other hypervisors and check dmesg"
                    .to_string(),
                libc::ENOMEM => "not enough memory to create a VM".to_string(),
                _ => "check dmesg for KVM errors".to_string(),
            });
            None
        }
    };
    let check = |cap: u32| -> i32 {
        let cap = libc::c_ulong::from(cap);
        match &vm {
            Some(vm) => vm.check_extension_raw(cap),
            None => kvm.check_extension_raw(cap),
        }
    };
    info.capabilities_from = Some(if vm.is_some() { "VM" } else { "system" }.to_string());
    info.nr_vcpus = Some(check(kvm_bindings::KVM_CAP_NR_VCPUS));
    info.max_vcpus = Some(check(kvm_bindings::KVM_CAP_MAX_VCPUS));
    for (name, cap) in CAPABILITIES {
        info.capabilities.insert(name.to_string(), check(*cap));
    }
    info.disable_exits = info
        .capabilities
        .get("X86_DISABLE_EXITS")
        .filter(|v| **v >= 0)
        .map(|v| DisableExits::from_bits(*v as u32));

    let mut tsc_khz = None;
    if let Some(vm) = &vm {
        info.available = true;
        if let Ok(vcpu) = vm.create_vcpu(0) {
            tsc_khz = vcpu.get_tsc_khz().ok().map(u64::from).filter(|k| *k > 0);
        }
    }
    (info, tsc_khz)
}

// ---------------------------------------------------------------------------------------------
// TSC

/// Parses `/proc/cpuinfo` "cpu MHz" (e.g. `2249.998`) into kHz.
pub fn cpu_mhz_to_khz(value: &str) -> Option<u64> {
    let mhz: f64 = value.trim().parse().ok()?;
    (mhz.is_finite() && mhz > 0.0).then(|| (mhz * 1000.0).round() as u64)
}

/// Source names, in order of preference.
const TSC_KVM: &str = "KVM_GET_TSC_KHZ";
const TSC_SYSFS: &str = "sysfs cpu0/tsc_freq_khz";
const TSC_CPUID_HV: &str = "CPUID 0x40000010";
const TSC_CPUID_15: &str = "CPUID 0x15";
const TSC_CPU_MHZ: &str = "/proc/cpuinfo cpu MHz (core clock, approximate)";

fn probe_tsc(
    cpu: &CpuInfo,
    kvm_khz: Option<u64>,
    cpuinfo: Option<&BTreeMap<String, String>>,
    virt: &Virtualization,
) -> TscInfo {
    let mut sources = BTreeMap::new();
    if let Some(khz) = kvm_khz {
        sources.insert(TSC_KVM.to_string(), khz);
    }
    if let Some(khz) = read_trimmed("/sys/devices/system/cpu/cpu0/tsc_freq_khz")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|k| *k > 0)
    {
        sources.insert(TSC_SYSFS.to_string(), khz);
    }
    if virt.hypervisor_max_leaf.is_some_and(|m| m >= 0x4000_0010) {
        let khz = u64::from(__cpuid_count(0x4000_0010, 0).eax);
        if khz > 0 {
            sources.insert(TSC_CPUID_HV.to_string(), khz);
        }
    }
    if __cpuid_count(0, 0).eax >= 0x15 {
        let r = __cpuid_count(0x15, 0);
        if r.eax != 0 && r.ebx != 0 && r.ecx != 0 {
            let hz = u64::from(r.ecx) * u64::from(r.ebx) / u64::from(r.eax);
            sources.insert(TSC_CPUID_15.to_string(), hz / 1000);
        }
    }
    if let Some(khz) = cpuinfo
        .and_then(|c| c.get("cpu MHz"))
        .and_then(|v| cpu_mhz_to_khz(v))
    {
        sources.insert(TSC_CPU_MHZ.to_string(), khz);
    }
    let (khz, source) = [TSC_KVM, TSC_SYSFS, TSC_CPUID_HV, TSC_CPUID_15, TSC_CPU_MHZ]
        .iter()
        .find_map(|s| sources.get(*s).map(|k| (Some(*k), s.to_string())))
        .unwrap_or((None, "unavailable".to_string()));

    let invariant = match &cpu.flags {
        Some(flags) => Some(
            flags.get("constant_tsc").copied().unwrap_or(false)
                && flags.get("nonstop_tsc").copied().unwrap_or(false),
        ),
        None if __cpuid_count(0x8000_0000, 0).eax >= 0x8000_0007 => {
            Some(__cpuid_count(0x8000_0007, 0).edx & (1 << 8) != 0)
        }
        None => None,
    };
    TscInfo {
        khz,
        source,
        sources,
        invariant,
        clocksource: read_trimmed(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "exitlab-host-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).expect("create temp dir");
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

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
    fn cpu_mhz_parsing() {
        assert_eq!(cpu_mhz_to_khz("2249.998"), Some(2_249_998));
        assert_eq!(cpu_mhz_to_khz(" 3000 "), Some(3_000_000));
        assert_eq!(cpu_mhz_to_khz("fast"), None);
        assert_eq!(cpu_mhz_to_khz("-1"), None);
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

    #[test]
    fn disable_exits_decoding() {
        let d = DisableExits::from_bits(14);
        assert!(!d.mwait && d.hlt && d.pause && d.cstate);
        assert_eq!(d.names(), vec!["HLT", "PAUSE", "CSTATE"]);
        let all = DisableExits::from_bits(15);
        assert_eq!(all.names(), vec!["MWAIT", "HLT", "PAUSE", "CSTATE"]);
        assert!(DisableExits::from_bits(0).names().is_empty());
        assert_eq!(
            decode_cap_bits("X86_DISABLE_EXITS", 14).as_deref(),
            Some("HLT|PAUSE|CSTATE")
        );
        assert_eq!(decode_cap_bits("X86_DISABLE_EXITS", 0), None);
    }

    #[test]
    fn other_bit_decoders() {
        assert_eq!(
            decode_cap_bits("SYNC_REGS", 7).as_deref(),
            Some("REGS|SREGS|EVENTS")
        );
        assert_eq!(
            decode_cap_bits("X2APIC_API", 3).as_deref(),
            Some("USE_32BIT_IDS|DISABLE_BROADCAST_QUIRK")
        );
        assert_eq!(
            decode_cap_bits("X2APIC_API", 0x0b).as_deref(),
            Some("USE_32BIT_IDS|DISABLE_BROADCAST_QUIRK|0x8")
        );
        assert_eq!(
            decode_cap_bits("ADJUST_CLOCK", 14).as_deref(),
            Some("TSC_STABLE|REALTIME|HOST_TSC")
        );
        assert_eq!(
            decode_cap_bits("EXIT_HYPERCALL", 4096).as_deref(),
            Some("MAP_GPA_RANGE")
        );
        assert_eq!(decode_cap_bits("X86_USER_SPACE_MSR", 1), None);
        assert_eq!(decode_cap_bits("IRQCHIP", 1), None);
    }

    #[test]
    fn module_param_dirs() {
        let root = TempDir::new("modules");
        let write = |rel: &str, content: &str| {
            let p = root.0.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        };
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
    fn cmdline_filter() {
        let c = "mitigations=auto console=ttyS0 kvm.halt_poll_ns=0 idle=poll nested_pvm=1 \
                 kvmfoo=1 -- --secret kvm.x=1";
        assert_eq!(
            relevant_cmdline(c),
            vec![
                "mitigations=auto",
                "kvm.halt_poll_ns=0",
                "idle=poll",
                "nested_pvm=1"
            ]
        );
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

    #[test]
    fn json_keys_and_round_trip() {
        let info = probe();
        let v = serde_json::to_value(&info).expect("serialize");
        assert!(v["cpu"]["model_name"].is_string());
        assert!(v["kernel"]["release"].is_string());
        assert!(v["virtualization"]["summary"].is_string());
        assert!(v["tsc"].get("khz").is_some());
        assert!(v["tsc"]["source"].is_string());
        let back: HostInfo = serde_json::from_value(v).expect("deserialize");
        assert_eq!(back.cpu, info.cpu);
        assert_eq!(back.kvm, info.kvm);
        assert_eq!(back.virtualization, info.virtualization);
    }

    #[test]
    fn probe_this_machine() {
        let info = probe();
        let text = info.render_text();
        eprintln!("{text}");
        assert!(text.contains("CPU\n") && text.contains("KVM\n") && text.contains("TSC\n"));
        assert!(!info.kernel.release.is_empty());

        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if !info.kvm.available {
            assert!(
                !in_ci,
                "KVM must be available in CI: {:?} ({:?})",
                info.kvm.error, info.kvm.advice
            );
            eprintln!(
                "skipping KVM checks: {:?} ({:?})",
                info.kvm.error, info.kvm.advice
            );
            return;
        }
        assert_eq!(info.kvm.api_version, Some(12));
        assert!(info.kvm.nr_vcpus.unwrap_or(0) > 0);
        assert_eq!(info.kvm.capabilities.get("IRQCHIP"), Some(&1));
        assert!(info.tsc.khz.is_some(), "{:?}", info.tsc);
        assert_eq!(info.tsc.source, TSC_KVM);

        // Independent evidence of a nested / paravirtual host.
        let hv_flag = fs::read_to_string("/proc/cpuinfo")
            .map(|t| relevant_flags(parse_cpuinfo(&t).get("flags").map_or("", |s| s)))
            .ok()
            .and_then(|f| f.get("hypervisor").copied())
            .unwrap_or(false);
        let pvm = Path::new("/sys/module/kvm_pvm").exists();
        assert_eq!(info.virtualization.kvm_pvm_loaded, pvm);
        assert_eq!(info.virtualization.hypervisor_bit, hv_flag);
        assert_eq!(info.is_nested_or_paravirtual(), hv_flag || pvm);
        if pvm {
            assert!(info.virtualization.summary.contains("paravirtual"));
            assert!(info.module_params.contains_key("kvm_pvm"));
        }
        if hv_flag {
            assert!(info.virtualization.summary.starts_with("nested"));
        }
    }
}
