//! VM knobs that change how interrupts and idle vCPUs behave: exits disabled with
//! KVM_CAP_X86_DISABLE_EXITS, the per-VM halt-polling window (KVM_CAP_HALT_POLL), and
//! the guest CPUID bits that go with them (KVM's PV send-IPI feature, MONITOR/MWAIT).
//! Each is probed before use; a missing one is named in the error.

use kvm_bindings::{kvm_enable_cap, CpuId};
use kvm_ioctls::{Kvm, VmFd};

use crate::VmmError;

/// KVM_X86_DISABLE_EXITS_MWAIT.
pub const DISABLE_MWAIT: u32 = 1 << 0;
/// KVM_X86_DISABLE_EXITS_HLT.
pub const DISABLE_HLT: u32 = 1 << 1;
/// KVM_X86_DISABLE_EXITS_PAUSE.
pub const DISABLE_PAUSE: u32 = 1 << 2;
/// KVM_X86_DISABLE_EXITS_CSTATE.
pub const DISABLE_CSTATE: u32 = 1 << 3;

/// Names of the KVM_CAP_X86_DISABLE_EXITS bits, in bit order.
pub const DISABLE_EXIT_NAMES: [(&str, u32); 4] = [
    ("mwait", DISABLE_MWAIT),
    ("hlt", DISABLE_HLT),
    ("pause", DISABLE_PAUSE),
    ("cstate", DISABLE_CSTATE),
];

use kvm_bindings::{
    KVM_CAP_HALT_POLL as CAP_HALT_POLL, KVM_CAP_TSC_DEADLINE_TIMER as CAP_TSC_DEADLINE_TIMER,
};
/// KVM_FEATURE_PV_SEND_IPI in CPUID 0x40000001 EAX.
const KVM_FEATURE_PV_SEND_IPI: u32 = 1 << 11;
/// MONITOR/MWAIT in CPUID 1 ECX.
const CPUID_1_ECX_MONITOR: u32 = 1 << 3;

/// The knobs of one VM. `Default` changes nothing KVM would do by itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmKnobs {
    /// Per-VM halt-polling window in ns (KVM_CAP_HALT_POLL); `None` keeps the module's.
    pub halt_poll_ns: Option<u32>,
    /// Offer (`Some(true)`) or hide (`Some(false)`) KVM's PV send-IPI feature in the
    /// guest CPUID; `None` keeps what KVM_GET_SUPPORTED_CPUID says.
    pub pv_send_ipi: Option<bool>,
}

/// The disable-exits bits named in `list` (comma-separated `hlt`, `mwait`, `pause`,
/// `cstate`).
pub fn parse_disable_exits(list: &str) -> Result<u32, String> {
    let mut bits = 0;
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match DISABLE_EXIT_NAMES.iter().find(|(n, _)| *n == name) {
            Some((_, b)) => bits |= b,
            None => {
                return Err(format!(
                    "unknown exit '{name}' to disable: use hlt, mwait, pause or cstate"
                ))
            }
        }
    }
    Ok(bits)
}

/// The names of the disable-exits bits in `bits`, comma-separated ("none" for 0).
pub fn disable_exits_names(bits: u32) -> String {
    let v: Vec<&str> = DISABLE_EXIT_NAMES
        .iter()
        .filter(|(_, b)| bits & b != 0)
        .map(|(n, _)| *n)
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// The KVM_CAP_X86_DISABLE_EXITS bits this host offers (0 when it has none).
pub fn offered_disable_exits(kvm: &Kvm) -> u32 {
    let v = kvm.check_extension_raw(kvm_bindings::KVM_CAP_X86_DISABLE_EXITS.into());
    u32::try_from(v).unwrap_or(0)
}

/// Checks the host offers every knob asked for; the error names the missing capability.
pub fn probe(kvm: &Kvm, disable_exits: u32, knobs: &VmKnobs) -> Result<(), String> {
    if disable_exits != 0 {
        let offered = offered_disable_exits(kvm);
        let missing = disable_exits & !offered;
        if missing != 0 {
            return Err(format!(
                "this host's KVM_CAP_X86_DISABLE_EXITS lacks {} (it offers: {})",
                disable_exits_names(missing),
                disable_exits_names(offered)
            ));
        }
    }
    if knobs.halt_poll_ns.is_some() && kvm.check_extension_raw(CAP_HALT_POLL.into()) <= 0 {
        return Err("this host's KVM lacks KVM_CAP_HALT_POLL (per-VM halt polling)".into());
    }
    if knobs.pv_send_ipi == Some(true) {
        let offered = crate::cpuid::supported(kvm)
            .ok()
            .and_then(|c| crate::cpuid::lookup(c, 0x4000_0001, 0))
            .is_some_and(|(eax, _, _, _)| eax & KVM_FEATURE_PV_SEND_IPI != 0);
        if !offered {
            return Err(
                "this host's KVM does not offer KVM_FEATURE_PV_SEND_IPI in its supported CPUID"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Whether KVM's supported CPUID offers MONITOR/MWAIT to guests by default.
pub fn cpuid_offers_mwait(kvm: &Kvm) -> bool {
    crate::cpuid::supported(kvm)
        .ok()
        .and_then(|c| crate::cpuid::lookup(c, 1, 0))
        .is_some_and(|(_, _, ecx, _)| ecx & CPUID_1_ECX_MONITOR != 0)
}

/// Applies the per-VM knobs (before any vCPU is created).
pub fn apply_vm(fd: &VmFd, knobs: &VmKnobs) -> Result<(), VmmError> {
    if let Some(ns) = knobs.halt_poll_ns {
        if fd.check_extension_raw(CAP_HALT_POLL.into()) <= 0 {
            return Err(VmmError::MissingCap(
                "KVM_CAP_HALT_POLL",
                "run without --halt-poll-ns",
            ));
        }
        let mut cap = kvm_enable_cap {
            cap: CAP_HALT_POLL,
            ..Default::default()
        };
        cap.args[0] = ns.into();
        fd.enable_cap(&cap)
            .map_err(|e| VmmError::Kvm("KVM_ENABLE_CAP(HALT_POLL)", e))?;
    }
    Ok(())
}

/// Whether the LAPIC timer's TSC-deadline mode can be offered to guests
/// (KVM_CAP_TSC_DEADLINE_TIMER: KVM_GET_SUPPORTED_CPUID need not report it, the VMM sets
/// the CPUID bit itself, as QEMU does).
pub fn tsc_deadline_offered(fd: &VmFd) -> bool {
    fd.check_extension_raw(CAP_TSC_DEADLINE_TIMER.into()) > 0
}

/// Patches a vCPU's CPUID for the knobs: the PV send-IPI bit as asked, MONITOR/MWAIT
/// offered when MWAIT exits are disabled (the guest may then idle in MWAIT). (The
/// TSC-deadline timer is offered by [`crate::cpuid::apply`], so that `-cpu` can hide it.)
pub fn patch_cpuid(c: &mut CpuId, disable_exits: u32, knobs: &VmKnobs) {
    for e in c.as_mut_slice() {
        match e.function {
            1 if disable_exits & DISABLE_MWAIT != 0 => e.ecx |= CPUID_1_ECX_MONITOR,
            0x4000_0001 => match knobs.pv_send_ipi {
                Some(true) => e.eax |= KVM_FEATURE_PV_SEND_IPI,
                Some(false) => e.eax &= !KVM_FEATURE_PV_SEND_IPI,
                None => {}
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    #[test]
    fn disable_exit_names_round_trip() {
        assert_eq!(parse_disable_exits("hlt,mwait").unwrap(), 3);
        assert_eq!(parse_disable_exits(" pause , cstate ").unwrap(), 12);
        assert_eq!(parse_disable_exits("").unwrap(), 0);
        let e = parse_disable_exits("hlt,nap").unwrap_err();
        assert!(e.contains("unknown exit 'nap'"), "{e}");
        assert_eq!(
            disable_exits_names(DISABLE_HLT | DISABLE_CSTATE),
            "hlt,cstate"
        );
        assert_eq!(disable_exits_names(0), "none");
    }

    #[test]
    fn cpuid_patch_sets_and_clears_bits() {
        let base = CpuId::from_entries(&[
            kvm_cpuid_entry2 {
                function: 1,
                ..Default::default()
            },
            kvm_cpuid_entry2 {
                function: 0x4000_0001,
                eax: KVM_FEATURE_PV_SEND_IPI | 1,
                ..Default::default()
            },
        ])
        .unwrap();
        let mut c = base.clone();
        patch_cpuid(
            &mut c,
            DISABLE_MWAIT,
            &VmKnobs {
                pv_send_ipi: Some(false),
                ..Default::default()
            },
        );
        assert_eq!(c.as_slice()[0].ecx, CPUID_1_ECX_MONITOR);
        assert_eq!(c.as_slice()[1].eax, 1);
        let mut c = base.clone();
        patch_cpuid(&mut c, 0, &VmKnobs::default());
        assert_eq!(c.as_slice(), base.as_slice());
    }

    #[test]
    fn probe_names_what_the_host_lacks() {
        let kvm = crate::open_kvm().expect("these tests need a usable /dev/kvm");
        let offered = offered_disable_exits(&kvm);
        for (name, bit) in DISABLE_EXIT_NAMES {
            let r = probe(&kvm, bit, &VmKnobs::default());
            if offered & bit != 0 {
                assert!(r.is_ok(), "{name}: {r:?}");
            } else {
                let e = r.unwrap_err();
                assert!(e.contains("KVM_CAP_X86_DISABLE_EXITS lacks"), "{e}");
                assert!(e.contains(name), "{e}");
            }
        }
        let halt = probe(
            &kvm,
            0,
            &VmKnobs {
                halt_poll_ns: Some(0),
                ..Default::default()
            },
        );
        if kvm.check_extension_raw(CAP_HALT_POLL.into()) > 0 {
            assert!(halt.is_ok());
        } else {
            assert!(halt.unwrap_err().contains("KVM_CAP_HALT_POLL"));
        }
    }
}
