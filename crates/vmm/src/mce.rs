//! Machine-check banks: how many a vCPU has, chosen rather than inherited.
//!
//! Without KVM_X86_SETUP_MCE, KVM gives a vCPU its maximum, 32 banks (MCG_CAP = 32),
//! more than any real CPU of the families guests expect and more than QEMU's pc
//! machine, which exposes 10. Test kernels that walk the banks (kvm-unit-tests, Linux's
//! mce code) then see a different machine under exitlab than under QEMU. exitlab sets
//! [`MCE_BANKS`] = 10 banks, as QEMU does, with MCG_CTL_P (the global MCG_CTL register
//! exists) and, where KVM offers it, MCG_SER_P: QEMU's MCE_CAP_DEF (no CMCI, no LMCE).
//! Every exposed bank's four MSRs (MCi_CTL, MCi_STATUS, MCi_ADDR, MCi_MISC at
//! 0x400 + 4 i) are then KVM's: MCi_CTL takes 0 or all ones, MCi_STATUS takes 0, and
//! each reads back what was written; an access to a bank past the last raises #GP.
//! The conformance kernel's `mce` test checks exactly that from inside the guest.

use std::sync::OnceLock;

use crate::{sys, VmmError};

/// Number of MCE banks each vCPU has (QEMU's pc machine: 10).
pub const MCE_BANKS: u64 = 10;
/// MCG_CAP: the MCG_CTL register is present.
pub const MCG_CTL_P: u64 = 1 << 8;
/// MCG_CAP: software error recovery is supported.
pub const MCG_SER_P: u64 = 1 << 24;

/// MCG_CAP for a vCPU, given the most banks KVM allows (KVM_CAP_MCE) and the MCG_CAP
/// flags it supports (KVM_X86_GET_MCE_CAP_SUPPORTED): [`MCE_BANKS`] banks (fewer if
/// KVM allows fewer), MCG_CTL_P and MCG_SER_P where supported.
pub fn mcg_cap(max_banks: u64, supported: u64) -> u64 {
    MCE_BANKS.min(max_banks) | (supported & (MCG_CTL_P | MCG_SER_P))
}

/// Gives a new vCPU its MCE banks. KVM's limits are probed once per process. A KVM
/// without the MCE interface (x86 has had it since Linux 2.6.32) is reported as an
/// error naming the capability.
pub(crate) fn setup(kvm: &kvm_ioctls::Kvm, vcpu: &kvm_ioctls::VcpuFd) -> Result<(), VmmError> {
    /// What probing KVM found: the MCG_CAP to give, or why there is none.
    enum Probe {
        Cap(u64),
        IoctlFailed(i32),
        NoMce,
    }
    static PROBE: OnceLock<Probe> = OnceLock::new();
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EINVAL);
    let probe = PROBE.get_or_init(|| {
        let max_banks = kvm.check_extension_raw(kvm_bindings::KVM_CAP_MCE.into());
        if max_banks <= 0 {
            return Probe::NoMce;
        }
        match sys::mce_cap_supported(kvm) {
            Ok(supported) => Probe::Cap(mcg_cap(max_banks as u64, supported)),
            Err(e) => Probe::IoctlFailed(errno(e)),
        }
    });
    match probe {
        Probe::Cap(cap) => sys::setup_mce(vcpu, *cap)
            .map_err(|e| VmmError::Kvm("KVM_X86_SETUP_MCE", kvm_ioctls::Error::new(errno(e)))),
        Probe::IoctlFailed(e) => Err(VmmError::Kvm(
            "KVM_X86_GET_MCE_CAP_SUPPORTED",
            kvm_ioctls::Error::new(*e),
        )),
        Probe::NoMce => Err(VmmError::MissingCap(
            "KVM_CAP_MCE",
            "the vCPUs' machine-check banks cannot be set",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_banks_and_only_supported_flags() {
        // What KVM reports on this host: 32 banks; CTL_P and SER_P (0x1000100). Newer
        // kernels add CMCI_P and LMCE_P, which QEMU does not ask for either.
        assert_eq!(mcg_cap(32, 0x100_0100), 10 | MCG_CTL_P | MCG_SER_P);
        let more = MCG_CTL_P | (1 << 10) | MCG_SER_P | (1 << 27);
        assert_eq!(mcg_cap(32, more), 10 | MCG_CTL_P | MCG_SER_P);
        // A KVM with fewer banks than 10 gives what it has.
        assert_eq!(mcg_cap(6, 0), 6);
    }
}
