//! Small platform devices for exitlab.
//!
//! A device knows nothing of KVM: it answers reads and writes of the port or MMIO range
//! it was registered for through [`BusDevice`]. The VMM's bus finds the device for an
//! exit and calls it on the vCPU thread that took the exit; devices that keep state use
//! their own interior mutability (atomics, or a lock private to the device).

/// What the VMM must do after a device handled a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAction {
    /// Nothing: re-enter the guest.
    Continue,
    /// The guest asked to end the run with this code (QEMU isa-debug-exit: the value written).
    Exit(u32),
    /// The guest asked for a reset (i8042 pulse, port 0xCF9).
    Reset,
}

/// A device on the port or MMIO bus.
///
/// `offset` is relative to the start of the range the device was registered at;
/// `data.len()` is the access width (1, 2, 4 or 8; for string port I/O the VMM calls
/// once per element). Implementations must not panic on any offset or width: a guest
/// controls both.
pub trait BusDevice: Send + Sync {
    /// Fill `data` with what a read at `offset` returns.
    fn read(&self, offset: u64, data: &mut [u8]);
    /// Take a write of `data` at `offset`.
    fn write(&self, offset: u64, data: &[u8]) -> IoAction;
}
