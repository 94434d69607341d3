//! exitlab's host survey: what this machine looks like from the point of view of VM-exit
//! cost, as one plain, serialisable [`HostReport`].
//!
//! [`survey`] reads the CPU identity (CPUID and `/proc/cpuinfo`), the running kernel
//! (`/proc/sys/kernel`), every KVM module parameter (`/sys/module`), whether this host is
//! itself a guest or runs a paravirtual KVM, the TSC (frequency, invariance, clocksource,
//! and whether it can be trusted for cross-context timing), and whether `/dev/kvm` can be
//! opened, with the reason and what to do when it cannot.
//!
//! This crate knows nothing of VMs and issues no ioctl: what KVM itself reports (API
//! version, capabilities, the vCPU TSC frequency) is asked of the VMM by whoever wants it
//! and recorded here with [`HostReport::record_kvm`]. Rendering lives with the other
//! reports, in the lab.
//!
//! It also records the GNU build IDs of the kernel and the KVM modules ([`buildid`]), and
//! switches KVM module parameters as A/B knobs ([`ParamSession`], the `param_*` modules):
//! parse `MODULE.PARAM` ([`param_spec`]), look before changing anything and refuse with a
//! reason ([`param_inspect`]), write or reload ([`param_apply`] through a
//! [`ModuleLoader`]), keep the originals in a state file and restore them, also after a
//! `kill -9` ([`param_state`]).
//!
//! Nothing here panics: whatever cannot be read becomes `None` or an explanatory string.
#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub mod access;
pub mod buildid;
pub mod cpu;
pub mod kernel;
pub mod modules;
pub mod param_apply;
pub mod param_error;
pub mod param_host;
pub mod param_inspect;
pub mod param_loader;
pub mod param_session;
pub mod param_spec;
pub mod param_state;
pub mod tsc;

pub use access::{Diagnosis, Problem};
pub use buildid::BuildIds;
pub use cpu::CpuInfo;
pub use kernel::KernelInfo;
pub use modules::{HostKind, KvmParams, Virtualization};
pub use param_error::KnobError;
pub use param_host::{Host, DEFAULT_STATE_PATH};
pub use param_loader::{Modprobe, ModuleLoader};
pub use param_session::{params_in_force, Applied, InForce, ParamSession};
pub use param_spec::ParamSpec;
pub use param_state::{pending_status, restore_pending, Pending};
pub use tsc::TscInfo;

/// Version of the [`HostReport`] JSON layout; raise it when a field changes meaning or
/// goes away (adding a field does not).
pub const SCHEMA_VERSION: u32 = 2;

/// Everything the survey found out about this host.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct HostReport {
    /// [`SCHEMA_VERSION`] of the program that wrote this report.
    pub schema_version: u32,
    /// CPU identity, microcode, CPU count and exit-relevant feature flags.
    pub cpu: CpuInfo,
    /// Running kernel.
    pub kernel: KernelInfo,
    /// `/dev/kvm`: whether it opens, why not, and what KVM reported when it did.
    pub kvm: KvmInfo,
    /// Whether this host is itself a guest, and what kind of KVM it runs.
    pub virtualization: Virtualization,
    /// TSC frequency, its sources, and whether it is stable.
    pub tsc: TscInfo,
    /// Notable KVM module parameters, pulled out of `module_params` by name.
    pub kvm_params: KvmParams,
    /// Every parameter of every loaded KVM module: module name -> parameter name -> value.
    pub module_params: BTreeMap<String, BTreeMap<String, String>>,
    /// GNU build IDs of the running kernel and of each loaded KVM module that has its own.
    #[serde(default)]
    pub build_ids: BuildIds,
    /// A restore of KVM module parameters an exitlab process left pending (it was killed
    /// while it had one switched), or one switched by an exitlab running now, in one line.
    #[serde(default)]
    pub pending_restore: Option<String>,
}

/// `/dev/kvm` and what KVM reported through it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct KvmInfo {
    /// The device node probed.
    pub device: String,
    /// Whether the device node exists.
    pub device_exists: bool,
    /// Whether KVM answered: the device opened and its capabilities were read.
    pub available: bool,
    /// Why KVM is not usable, when it is not.
    pub error: Option<String>,
    /// What to do about `error`.
    pub advice: Option<String>,
    /// Why `/dev/kvm` cannot be opened, with the evidence, when it cannot.
    pub diagnosis: Option<Diagnosis>,
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
    /// For capabilities whose value is a bit mask: the names of the set bits, e.g.
    /// `X86_DISABLE_EXITS` -> `HLT|PAUSE|CSTATE`.
    pub capability_bits: BTreeMap<String, String>,
}

/// What KVM itself reported, as the VMM read it; recorded with [`HostReport::record_kvm`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvmFacts {
    /// `KVM_GET_API_VERSION`.
    pub api_version: i32,
    /// `KVM_CAP_NR_VCPUS`.
    pub nr_vcpus: i32,
    /// `KVM_CAP_MAX_VCPUS`.
    pub max_vcpus: i32,
    /// `VM` or `system`: the fd the capabilities were checked on.
    pub capabilities_from: String,
    /// Capability name -> value.
    pub capabilities: BTreeMap<String, i32>,
    /// Capability name -> names of the set bits (bit-mask capabilities only).
    pub capability_bits: BTreeMap<String, String>,
    /// Why no VM could be created, and what to do, when none could.
    pub vm_error: Option<(String, String)>,
    /// `KVM_GET_TSC_KHZ` of a vCPU, when it answered.
    pub tsc_khz: Option<u64>,
}

/// Runs the whole survey. Never panics; every part that cannot be read becomes `None` or
/// an explanatory string. KVM's own answers are not part of it: see
/// [`HostReport::record_kvm`].
pub fn survey() -> HostReport {
    let sys_module = Path::new(modules::SYS_MODULE);
    let cpuinfo_text = fs::read_to_string("/proc/cpuinfo").ok();
    let cpuinfo = cpuinfo_text.as_deref().map(cpu::parse_cpuinfo);
    let module_params = modules::read_module_params(sys_module);
    let cpu = cpu::probe(cpuinfo.as_ref());
    let kernel = kernel::probe();
    let kernel_log = access::read_kernel_log();
    let virtualization = modules::probe_virtualization(&cpu, sys_module);
    let tsc = tsc::probe(
        &cpu,
        cpuinfo.as_ref(),
        &virtualization,
        &kernel,
        &kernel_log,
    );
    let kvm = access::probe(&cpu, &virtualization, &kernel_log);
    let kvm_params = KvmParams::from_module_params(&module_params);
    let build_ids = buildid::build_ids(Path::new("/sys"), &virtualization.kvm_modules);
    let pending_restore =
        param_state::pending_status(&Host::real(), &param_state::default_state_path());
    HostReport {
        schema_version: SCHEMA_VERSION,
        cpu,
        kernel,
        kvm,
        virtualization,
        tsc,
        kvm_params,
        module_params,
        build_ids,
        pending_restore,
    }
}

/// Why `/dev/kvm` cannot be used here and what to do: the diagnosis `exitlab host` leads
/// with, from the same facts, for the commands that need KVM and found it unusable;
/// `None` when it opens.
pub fn kvm_diagnosis() -> Option<Diagnosis> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .map(|t| cpu::parse_cpuinfo(&t));
    let cpu = cpu::probe(cpuinfo.as_ref());
    let virtualization = modules::probe_virtualization(&cpu, Path::new(modules::SYS_MODULE));
    access::probe(&cpu, &virtualization, &access::read_kernel_log()).diagnosis
}

/// Whether this host's KVM is the paravirtual `kvm_pvm`, which has no VT-x/AMD-V and
/// emulates guest ring-0 code instruction by instruction (so Linux, whose kernel uses
/// instructions that emulator lacks, cannot boot to userspace there): for a command about
/// to boot a guest, without the whole survey.
pub fn kvm_is_pvm() -> bool {
    modules::has_kvm_pvm(&modules::kvm_modules(Path::new(modules::SYS_MODULE)))
}

impl HostReport {
    /// True when exit costs measured here are not hardware figures: this host is itself a
    /// guest (hypervisor CPUID bit) or its KVM is paravirtual (`kvm_pvm`).
    pub fn is_nested_or_paravirtual(&self) -> bool {
        self.virtualization.hypervisor_bit || self.virtualization.kvm_pvm_loaded
    }

    /// Records what KVM reported: capabilities, API version, and `KVM_GET_TSC_KHZ` as the
    /// preferred TSC frequency source.
    pub fn record_kvm(&mut self, facts: KvmFacts) {
        let k = &mut self.kvm;
        k.available = true;
        k.api_version = Some(facts.api_version);
        k.nr_vcpus = Some(facts.nr_vcpus);
        k.max_vcpus = Some(facts.max_vcpus);
        k.capabilities_from = Some(facts.capabilities_from);
        k.capabilities = facts.capabilities;
        k.capability_bits = facts.capability_bits;
        if let Some((error, advice)) = facts.vm_error {
            k.error = Some(error);
            k.advice = Some(advice);
        }
        if let Some(khz) = facts.tsc_khz {
            self.tsc.add_source(tsc::TSC_KVM, khz);
        }
    }

    /// Records that the VMM could not open KVM even though the survey found nothing wrong
    /// with the device node (or found something it already explained).
    pub fn record_kvm_error(&mut self, error: String) {
        let k = &mut self.kvm;
        k.available = false;
        if k.error.is_none() {
            k.error = Some(error);
            k.advice = Some("check dmesg for KVM errors".to_string());
        }
    }
}

/// Reads a small sysfs/procfs file, trimmed; `None` when missing, unreadable or empty.
pub(crate) fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::fs;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch directory removed on drop.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> Self {
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

        /// Writes `content` to `rel` under the directory, creating parents.
        pub(crate) fn write(&self, rel: &str, content: &str) {
            let p = self.0.join(rel);
            fs::create_dir_all(p.parent().expect("a relative path has a parent"))
                .expect("create parent");
            fs::write(p, content).expect("write file");
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keys_and_round_trip() {
        let info = survey();
        let v = serde_json::to_value(&info).expect("serialize");
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert!(v["cpu"]["model_name"].is_string());
        assert!(v["kernel"]["release"].is_string());
        assert!(v["virtualization"]["summary"].is_string());
        assert!(v["tsc"].get("khz").is_some());
        assert!(v["tsc"]["stable"].is_boolean());
        assert!(v["kvm"]["device_exists"].is_boolean());
        let back: HostReport = serde_json::from_value(v).expect("deserialize");
        assert_eq!(back.cpu, info.cpu);
        assert_eq!(back.kvm, info.kvm);
        assert_eq!(back.virtualization, info.virtualization);
        assert_eq!(back.tsc, info.tsc);
    }

    #[test]
    fn record_kvm_fills_the_kvm_block_and_prefers_its_tsc_frequency() {
        let mut r = survey();
        let mut caps = BTreeMap::new();
        caps.insert("IRQCHIP".to_string(), 1);
        r.record_kvm(KvmFacts {
            api_version: 12,
            nr_vcpus: 2,
            max_vcpus: 1024,
            capabilities_from: "VM".into(),
            capabilities: caps,
            capability_bits: BTreeMap::new(),
            vm_error: None,
            tsc_khz: Some(1_234_567),
        });
        assert!(r.kvm.available);
        assert_eq!(r.kvm.api_version, Some(12));
        assert_eq!(r.kvm.capabilities.get("IRQCHIP"), Some(&1));
        assert_eq!(r.tsc.khz, Some(1_234_567));
        assert_eq!(r.tsc.source, tsc::TSC_KVM);
    }

    #[test]
    fn survey_matches_independent_evidence() {
        let info = survey();
        assert!(!info.kernel.release.is_empty());
        assert_eq!(
            info.kernel.release,
            fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap()
                .trim()
        );
        assert_eq!(info.kvm.device_exists, Path::new("/dev/kvm").exists());
        let pvm = Path::new("/sys/module/kvm_pvm").exists();
        assert_eq!(info.virtualization.kvm_pvm_loaded, pvm);
        let hv_flag = fs::read_to_string("/proc/cpuinfo")
            .map(|t| {
                cpu::parse_cpuinfo(&t)
                    .get("flags")
                    .is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor"))
            })
            .unwrap_or(false);
        assert_eq!(info.virtualization.hypervisor_bit, hv_flag);
        assert_eq!(info.is_nested_or_paravirtual(), hv_flag || pvm);
        if pvm {
            assert!(info.virtualization.summary.contains("paravirtual"));
            assert!(info.module_params.contains_key("kvm_pvm"));
        }
    }
}
