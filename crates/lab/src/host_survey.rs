//! The host survey of `exitlab-host` completed with what KVM itself reports (the VMM's
//! [`Capabilities`]); [`exitlab_results::host_report`] renders it.

use exitlab_host::{HostReport, KvmFacts};
use exitlab_vmm::{Capabilities, Kvm};

/// Surveys the host and asks the VMM what KVM offers: through `kvm` when the caller holds
/// /dev/kvm open, else by opening it (a failure is recorded in the report, not returned).
pub fn survey(kvm: Option<&Kvm>) -> HostReport {
    let mut report = exitlab_host::survey();
    let caps = match kvm {
        Some(kvm) => Ok(Capabilities::get(kvm)),
        None if report.kvm.diagnosis.is_some() => return report,
        None => Capabilities::open(),
    };
    match caps {
        Ok(c) => report.record_kvm(facts_of(c)),
        Err(e) => report.record_kvm_error(e.to_string()),
    }
    report
}

/// The VMM's capabilities as the host report records them.
fn facts_of(c: &Capabilities) -> KvmFacts {
    KvmFacts {
        api_version: c.api_version,
        nr_vcpus: c.nr_vcpus,
        max_vcpus: c.max_vcpus,
        capabilities_from: c.checked_on.as_str().to_string(),
        capabilities: c.values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        capability_bits: c
            .bit_names()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        vm_error: c.vm_error.clone(),
        tsc_khz: c.tsc_khz.map(u64::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survey_with_kvm_records_its_capabilities() {
        let kvm = exitlab_vmm::open_kvm().expect("these tests need a usable /dev/kvm");
        let r = survey(Some(&kvm));
        assert!(r.kvm.available, "{:?}", r.kvm);
        assert_eq!(r.kvm.api_version, Some(12));
        assert_eq!(r.kvm.capabilities.get("IRQCHIP"), Some(&1));
        assert_eq!(r.tsc.source, "KVM_GET_TSC_KHZ");
        assert_eq!(
            r.tsc.khz,
            Capabilities::get(&kvm).tsc_khz.map(u64::from),
            "{:?}",
            r.tsc
        );
    }
}
