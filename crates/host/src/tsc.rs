//! The TSC: its frequency from every source that answers, and whether it can be trusted
//! to compare stamps taken in different contexts (host and guest, one CPU and another).
//! A TSC that is not invariant, that the kernel was told or found to be unstable, or that
//! the kernel does not use as its clocksource makes cross-context figures (the phases of
//! an exit) meaningless; [`TscInfo::stable`] says so and [`TscInfo::unstable_reasons`]
//! says why.

use std::collections::BTreeMap;

use core::arch::x86_64::__cpuid_count;
use serde::{Deserialize, Serialize};

use crate::cpu::CpuInfo;
use crate::kernel::{cmdline_value, KernelInfo};
use crate::modules::Virtualization;
use crate::read_trimmed;

/// TSC frequency and stability.
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
    /// Whether stamps taken in different contexts (host and guest, different CPUs) can be
    /// compared: nothing in `unstable_reasons`.
    #[serde(default)]
    pub stable: bool,
    /// Why the TSC cannot be trusted across contexts, one finding each; empty when stable.
    #[serde(default)]
    pub unstable_reasons: Vec<String>,
}

/// Source names, in order of preference.
pub const TSC_KVM: &str = "KVM_GET_TSC_KHZ";
const TSC_SYSFS: &str = "sysfs cpu0/tsc_freq_khz";
const TSC_CPUID_HV: &str = "CPUID 0x40000010";
const TSC_CPUID_15: &str = "CPUID 0x15";
const TSC_CPU_MHZ: &str = "/proc/cpuinfo cpu MHz (core clock, approximate)";
const PREFERENCE: [&str; 5] = [TSC_KVM, TSC_SYSFS, TSC_CPUID_HV, TSC_CPUID_15, TSC_CPU_MHZ];

impl TscInfo {
    /// Adds a frequency source and picks the most trustworthy one again.
    pub fn add_source(&mut self, name: &str, khz: u64) {
        if khz == 0 {
            return;
        }
        self.sources.insert(name.to_string(), khz);
        let (khz, source) = PREFERENCE
            .iter()
            .find_map(|s| self.sources.get(*s).map(|k| (Some(*k), s.to_string())))
            .unwrap_or((None, "unavailable".to_string()));
        self.khz = khz;
        self.source = source;
    }
}

/// Parses `/proc/cpuinfo` "cpu MHz" (e.g. `2249.998`) into kHz.
pub fn cpu_mhz_to_khz(value: &str) -> Option<u64> {
    let mhz: f64 = value.trim().parse().ok()?;
    (mhz.is_finite() && mhz > 0.0).then(|| (mhz * 1000.0).round() as u64)
}

/// Why a TSC with these properties cannot be trusted across contexts; empty when it can.
/// `tsc_param` is the kernel's `tsc=` parameter, `log_unstable` a kernel log line saying
/// the kernel marked the TSC unstable.
pub fn unstable_reasons(
    invariant: Option<bool>,
    clocksource: Option<&str>,
    tsc_param: Option<&str>,
    log_unstable: Option<&str>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    if invariant == Some(false) {
        reasons.push(
            "the TSC is not invariant (no constant_tsc/nonstop_tsc): its rate follows \
             power states"
                .to_string(),
        );
    }
    if tsc_param.is_some_and(|v| v.split(',').any(|o| o == "unstable")) {
        reasons.push("the kernel was booted with tsc=unstable".to_string());
    }
    if let Some(line) = log_unstable {
        reasons.push(format!("the kernel marked the TSC unstable: {line}"));
    }
    match clocksource {
        Some("tsc") | None => {}
        Some(cs) => reasons.push(format!(
            "the kernel's clocksource is {cs}, not tsc: the kernel does not rely on the TSC \
             being synchronised"
        )),
    }
    reasons
}

/// Every frequency source that answers without asking KVM.
fn frequency_sources(
    cpuinfo: Option<&BTreeMap<String, String>>,
    virt: &Virtualization,
) -> BTreeMap<String, u64> {
    let mut sources = BTreeMap::new();
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
    sources
}

fn invariance(cpu: &CpuInfo) -> Option<bool> {
    match &cpu.flags {
        Some(flags) => Some(
            flags.get("constant_tsc").copied().unwrap_or(false)
                && flags.get("nonstop_tsc").copied().unwrap_or(false),
        ),
        None if __cpuid_count(0x8000_0000, 0).eax >= 0x8000_0007 => {
            Some(__cpuid_count(0x8000_0007, 0).edx & (1 << 8) != 0)
        }
        None => None,
    }
}

pub(crate) fn probe(
    cpu: &CpuInfo,
    cpuinfo: Option<&BTreeMap<String, String>>,
    virt: &Virtualization,
    kernel: &KernelInfo,
    kernel_log: &Option<Vec<String>>,
) -> TscInfo {
    let invariant = invariance(cpu);
    let clocksource =
        read_trimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    let log_unstable = kernel_log.as_ref().and_then(|lines| {
        lines
            .iter()
            .rev()
            .find(|l| l.contains("Marking TSC unstable"))
            .cloned()
    });
    let reasons = unstable_reasons(
        invariant,
        clocksource.as_deref(),
        cmdline_value(&kernel.relevant_cmdline, "tsc"),
        log_unstable.as_deref(),
    );
    let mut t = TscInfo {
        khz: None,
        source: "unavailable".to_string(),
        sources: BTreeMap::new(),
        invariant,
        clocksource,
        stable: reasons.is_empty(),
        unstable_reasons: reasons,
    };
    for (name, khz) in frequency_sources(cpuinfo, virt) {
        t.add_source(&name, khz);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_mhz_parsing() {
        assert_eq!(cpu_mhz_to_khz("2249.998"), Some(2_249_998));
        assert_eq!(cpu_mhz_to_khz(" 3000 "), Some(3_000_000));
        assert_eq!(cpu_mhz_to_khz("fast"), None);
        assert_eq!(cpu_mhz_to_khz("-1"), None);
    }

    #[test]
    fn stability_findings() {
        assert!(unstable_reasons(Some(true), Some("tsc"), None, None).is_empty());
        assert!(unstable_reasons(None, None, Some("reliable"), None).is_empty());
        let r = unstable_reasons(Some(false), Some("tsc"), None, None);
        assert_eq!(r.len(), 1);
        assert!(r[0].contains("not invariant"), "{r:?}");
        let r = unstable_reasons(Some(true), Some("tsc"), Some("unstable"), None);
        assert_eq!(r, vec!["the kernel was booted with tsc=unstable"]);
        let r = unstable_reasons(Some(true), Some("kvm-clock"), None, None);
        assert_eq!(r.len(), 1);
        assert!(r[0].contains("clocksource is kvm-clock"), "{r:?}");
        let r = unstable_reasons(
            Some(false),
            Some("hpet"),
            Some("unstable"),
            Some("tsc: Marking TSC unstable due to check_tsc_sync_source failed"),
        );
        assert_eq!(r.len(), 4, "{r:?}");
        assert!(r[2].ends_with("check_tsc_sync_source failed"), "{r:?}");
    }

    #[test]
    fn sources_are_picked_by_preference() {
        let mut t = TscInfo {
            khz: None,
            source: "unavailable".into(),
            sources: BTreeMap::new(),
            invariant: Some(true),
            clocksource: Some("tsc".into()),
            stable: true,
            unstable_reasons: Vec::new(),
        };
        t.add_source(TSC_CPU_MHZ, 2_000_000);
        assert_eq!((t.khz, t.source.as_str()), (Some(2_000_000), TSC_CPU_MHZ));
        t.add_source(TSC_SYSFS, 2_100_000);
        assert_eq!((t.khz, t.source.as_str()), (Some(2_100_000), TSC_SYSFS));
        t.add_source(TSC_KVM, 2_200_000);
        t.add_source(TSC_CPUID_15, 2_300_000);
        assert_eq!((t.khz, t.source.as_str()), (Some(2_200_000), TSC_KVM));
        t.add_source(TSC_SYSFS, 0);
        assert_eq!(t.sources.len(), 4, "a zero frequency is no source");
    }
}
