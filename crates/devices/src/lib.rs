//! Small platform devices for exitlab.
//!
//! A device knows nothing of KVM: it answers reads and writes of the port or MMIO range
//! it was registered for through [`BusDevice`]. The VMM's bus finds the device for an
//! exit and calls it on the vCPU thread that took the exit; devices that keep state use
//! their own interior mutability (atomics, or a lock private to the device).
//!
//! Where a device needs something only the VMM can do, this crate names it with a small
//! type the VMM implements or consumes: [`IrqLine`] to drive an interrupt line,
//! [`IoEventSpec`] for a doorbell the VMM hands to KVM as an ioeventfd, and an
//! `EventFd` the VMM registers as an irqfd (the serial port's interrupt).
//!
//! [`pc`] lists where each device sits on a standard PC. [`ioapic`] and [`pic`] are the
//! interrupt controllers of a split irqchip, which KVM emulates itself otherwise; the
//! I/O APIC delivers through an [`ioapic::MsiSink`] the VMM implements.
#![deny(unsafe_code)]

use std::sync::Arc;

use vmm_sys_util::eventfd::EventFd;

pub mod cmos;
pub mod debug_exit;
pub mod fw_cfg;
pub mod hpet;
pub mod i8042;
pub mod ioapic;
pub mod pc;
pub mod pci;
pub mod pci_testdev;
pub mod pic;
pub mod pm;
pub mod pm_timer;
pub mod port92;
pub mod serial;
pub mod sink;
pub mod testdev;

/// What the VMM must do after a device handled a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAction {
    /// Nothing: re-enter the guest.
    Continue,
    /// The guest asked to end the run with this code (QEMU isa-debug-exit: the value written).
    Exit(u32),
    /// The guest asked for a reset (i8042 pulse, port 0xCF9, port 0x92) or a power-off
    /// (ACPI S5).
    Reset,
    /// The guest asked for ACPI S3 (suspend to RAM): stop the vCPUs until a wake-up
    /// event, then resume at the FACS waking vector.
    Suspend,
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

/// An interrupt line the VMM drives for a device (KVM_IRQ_LINE on the in-kernel
/// irqchip, for example).
///
/// `gsi` is the global system interrupt number; on a PC, ISA IRQ `n` is GSI `n`.
pub trait IrqLine: Send + Sync {
    /// Set the level of line `gsi`: `true` asserts it, `false` deasserts it.
    fn set_level(&self, gsi: u32, level: bool);
}

/// The address space an access or a doorbell lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoSpace {
    /// x86 port I/O (IN/OUT).
    Pio,
    /// Memory-mapped I/O.
    Mmio,
}

/// A doorbell a device wants absorbed in the kernel: the VMM registers `eventfd` with
/// KVM_IOEVENTFD for this address, so a matching guest write signals the eventfd
/// instead of exiting to user space.
///
/// A write that does not match (other width, other data) still reaches the device's
/// [`BusDevice::write`], which must then do what the eventfd would have stood for.
#[derive(Debug, Clone)]
pub struct IoEventSpec {
    /// Port or memory space.
    pub space: IoSpace,
    /// Guest address (port number for [`IoSpace::Pio`]).
    pub addr: u64,
    /// Access width that matches, in bytes; 0 means any width (KVM accepts 0 only for
    /// MMIO, and only where KVM_CAP_IOEVENTFD_ANY_LENGTH is present).
    pub len: u32,
    /// `Some(v)`: only a write of exactly `v` (at width `len`) matches;
    /// `None`: any value matches.
    pub datamatch: Option<u64>,
    /// The eventfd to signal; the device keeps a reference and reads it back.
    pub eventfd: Arc<EventFd>,
}

/// A view of another device with a fixed offset added to every access.
///
/// A device that answers at two separate ports (the i8042 at 0x60 and 0x64) is
/// registered once at its base and once more through an `OffsetDevice` at the second
/// port, so that both registrations see the offsets the device expects.
pub struct OffsetDevice {
    inner: Arc<dyn BusDevice>,
    bias: u64,
}

impl OffsetDevice {
    /// Forward every access to `inner` at `offset + bias`.
    pub fn new(inner: Arc<dyn BusDevice>, bias: u64) -> Self {
        Self { inner, bias }
    }
}

impl BusDevice for OffsetDevice {
    fn read(&self, offset: u64, data: &mut [u8]) {
        self.inner.read(offset.wrapping_add(self.bias), data)
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        self.inner.write(offset.wrapping_add(self.bias), data)
    }
}

/// The little-endian value of up to the first 8 bytes of `data`.
pub(crate) fn le_value(data: &[u8]) -> u64 {
    data.iter()
        .take(8)
        .enumerate()
        .fold(0u64, |acc, (i, b)| acc | (u64::from(*b) << (8 * i)))
}

/// Test helpers shared by the device modules.
#[cfg(test)]
pub(crate) mod test_util {
    /// Records every level an [`crate::IrqLine`] is driven to, as (GSI, level).
    #[derive(Default)]
    pub struct Lines(pub std::sync::Mutex<Vec<(u32, bool)>>);

    impl crate::IrqLine for Lines {
        fn set_level(&self, gsi: u32, level: bool) {
            crate::lock(&self.0).push((gsi, level));
        }
    }

    use super::BusDevice;

    /// Read and write every offset in `0..span` at widths 1, 2, 3, 4 and 8 (and a few
    /// far-away offsets), with all-ones and zero data. Only checks that nothing panics.
    pub fn hammer(dev: &dyn BusDevice, span: u64) {
        let offsets = (0..span).chain([span, span + 1, u64::MAX - 8, u64::MAX]);
        for offset in offsets {
            for width in [1usize, 2, 3, 4, 8] {
                let mut buf = vec![0u8; width];
                dev.read(offset, &mut buf);
                let _ = dev.write(offset, &vec![0xFF; width]);
                let _ = dev.write(offset, &vec![0x00; width]);
                dev.read(offset, &mut buf);
            }
        }
        let mut empty: [u8; 0] = [];
        dev.read(0, &mut empty);
        let _ = dev.write(0, &empty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Recorder(std::sync::Mutex<Vec<u64>>);

    impl BusDevice for Recorder {
        fn read(&self, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&self, offset: u64, _data: &[u8]) -> IoAction {
            if let Ok(mut v) = self.0.lock() {
                v.push(offset);
            }
            IoAction::Continue
        }
    }

    #[test]
    fn le_value_reads_little_endian() {
        assert_eq!(le_value(&[0x44, 0x33, 0x22, 0x11]), 0x1122_3344);
        assert_eq!(le_value(&[0xFF; 10]), u64::MAX);
        assert_eq!(le_value(&[]), 0);
    }

    #[test]
    fn offset_device_adds_bias() {
        let rec = Arc::new(Recorder(std::sync::Mutex::new(Vec::new())));
        let view = OffsetDevice::new(rec.clone(), 4);
        let mut b = [0u8; 1];
        view.read(0, &mut b);
        assert_eq!(b[0], 4);
        assert_eq!(view.write(1, &[0]), IoAction::Continue);
        assert_eq!(*rec.0.lock().unwrap(), vec![5]);
        // Wrapping, not panicking, at the top of the range.
        view.read(u64::MAX, &mut b);
    }
}

/// Locks `m`, taking a poisoned lock as it is. exitlab's locked state (device registers,
/// buffers, bus bookkeeping) is left consistent after every access, so a panic on another
/// thread while it held the lock leaves nothing half-done to refuse; a VMM that stopped
/// serving a device for that would only turn one failure into two. The one place this
/// policy is written.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
