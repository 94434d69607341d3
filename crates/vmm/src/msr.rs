//! MSR policy, in one place: which MSRs the VMM answers in userspace (routed there with
//! an MSR filter, everything else stays in the kernel) and what a guest access to them
//! does.

use kvm_bindings::kvm_enable_cap;
use kvm_ioctls::{
    Cap, MsrExitReason, MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags, VmFd,
};

use crate::VmmError;

/// An MSR the VMM answers in userspace (routed there with an MSR filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserMsr {
    /// MSR index.
    pub index: u32,
    /// What a guest `rdmsr` returns. Writes are accepted and dropped.
    pub read_value: u64,
}

/// What a guest RDMSR that reached userspace gets: the value, or `None` for a #GP.
pub fn read(msrs: &[UserMsr], index: u32) -> Option<u64> {
    msrs.iter().find(|m| m.index == index).map(|m| m.read_value)
}

/// Whether a guest WRMSR that reached userspace is accepted (dropped) rather than
/// answered with a #GP.
pub fn write_accepted(msrs: &[UserMsr], index: u32) -> bool {
    msrs.iter().any(|m| m.index == index)
}

/// Routes exactly `msrs` to userspace.
pub(crate) fn route_to_userspace(fd: &VmFd, msrs: &[UserMsr]) -> Result<(), VmmError> {
    if !fd.check_extension(Cap::X86UserSpaceMsr) || !fd.check_extension(Cap::X86MsrFilter) {
        return Err(VmmError::MissingCap(
            "KVM_CAP_X86_USER_SPACE_MSR and KVM_CAP_X86_MSR_FILTER",
            "MSRs cannot be routed to userspace on this host",
        ));
    }
    let mut cap = kvm_enable_cap {
        cap: kvm_bindings::KVM_CAP_X86_USER_SPACE_MSR,
        ..Default::default()
    };
    cap.args[0] = MsrExitReason::Filter.bits().into();
    fd.enable_cap(&cap)
        .map_err(|e| VmmError::Kvm("KVM_ENABLE_CAP(X86_USER_SPACE_MSR)", e))?;
    if msrs.len() > kvm_bindings::KVM_MSR_FILTER_MAX_RANGES as usize {
        return Err(VmmError::TooManyUserMsrs {
            max: kvm_bindings::KVM_MSR_FILTER_MAX_RANGES,
            asked: msrs.len(),
        });
    }
    // One range per MSR, each denying that single MSR: a denied access exits to
    // userspace with KVM_MSR_EXIT_REASON_FILTER; everything else stays in the kernel.
    let deny = [0u8; 1];
    let ranges: Vec<MsrFilterRange<'_>> = msrs
        .iter()
        .map(|m| MsrFilterRange {
            flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
            base: m.index,
            msr_count: 1,
            bitmap: &deny,
        })
        .collect();
    fd.set_msr_filter(MsrFilterDefaultAction::ALLOW, &ranges)
        .map_err(|e| VmmError::Kvm("KVM_X86_SET_MSR_FILTER", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_msrs_are_answered() {
        let msrs = [UserMsr {
            index: 0x4b56_4d00,
            read_value: 42,
        }];
        assert_eq!(read(&msrs, 0x4b56_4d00), Some(42));
        assert_eq!(read(&msrs, 0x10), None);
        assert!(write_accepted(&msrs, 0x4b56_4d00));
        assert!(!write_accepted(&msrs, 0x10));
    }
}
