//! Where the standard devices sit on exitlab's PC, in one place for the VMM's wiring.
//!
//! Deliberately left unclaimed, so that KVM or nobody answers them: port 0x1234
//! (nothing there: kvm-unit-tests' `inl_from_qemu` measures a user-space exit that
//! finds no device) and the ELCR at 0x4D0/0x4D1 (the in-kernel PIC emulates it,
//! `inl_from_kernel`/`outl_to_kernel`).
//!
//! The interrupt controllers of a split irqchip ([`SPLIT_IRQCHIP_RANGES`]) are claimed
//! only in that mode: with the full in-kernel irqchip KVM answers the same addresses.

use crate::IoSpace;

/// A range of ports or MMIO addresses a device is registered at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRange {
    /// Port or memory space.
    pub space: IoSpace,
    /// First port or address.
    pub base: u64,
    /// Number of ports or bytes.
    pub len: u64,
}

impl IoRange {
    const fn pio(base: u64, len: u64) -> Self {
        Self {
            space: IoSpace::Pio,
            base,
            len,
        }
    }

    const fn mmio(base: u64, len: u64) -> Self {
        Self {
            space: IoSpace::Mmio,
            base,
            len,
        }
    }

    /// One past the last port or address.
    pub const fn end(&self) -> u64 {
        self.base + self.len
    }

    /// Whether `addr` in `space` falls in the range.
    pub const fn contains(&self, space: IoSpace, addr: u64) -> bool {
        matches!(
            (self.space, space),
            (IoSpace::Pio, IoSpace::Pio) | (IoSpace::Mmio, IoSpace::Mmio)
        ) && addr >= self.base
            && addr < self.end()
    }

    /// Whether two ranges share an address.
    pub const fn overlaps(&self, other: &IoRange) -> bool {
        matches!(
            (self.space, other.space),
            (IoSpace::Pio, IoSpace::Pio) | (IoSpace::Mmio, IoSpace::Mmio)
        ) && self.base < other.end()
            && other.base < self.end()
    }
}

/// COM1, the 16550A UART ([`crate::serial::Serial`]).
pub const COM1: IoRange = IoRange::pio(0x3F8, 8);
/// ISA IRQ (= GSI) of COM1; its eventfd is registered as irqfd for this GSI.
pub const COM1_IRQ: u32 = 4;
/// isa-debug-exit ([`crate::debug_exit::DebugExit`]), 1 to 4 bytes wide.
pub const DEBUG_EXIT: IoRange = IoRange::pio(0xF4, 4);
/// i8042 data port ([`crate::i8042::I8042`] at offset 0).
pub const I8042_DATA: IoRange = IoRange::pio(0x60, 1);
/// i8042 status/command port: register the same device through
/// [`crate::OffsetDevice`] with bias [`I8042_COMMAND_BIAS`].
pub const I8042_COMMAND: IoRange = IoRange::pio(0x64, 1);
/// Offset the i8042 expects for its command port.
pub const I8042_COMMAND_BIAS: u64 = crate::i8042::COMMAND_OFFSET;
/// POST diagnostic port ([`crate::sink::Sink`]).
pub const PORT80: IoRange = IoRange::pio(0x80, 1);
/// CMOS/RTC index and data ports ([`crate::cmos::Cmos`]).
pub const CMOS: IoRange = IoRange::pio(0x70, 2);
/// pc-testdev latch, page-flush and byte-latch ports
/// ([`crate::testdev::TestDevPorts`]).
pub const TESTDEV_PORTS: IoRange = IoRange::pio(0xE0, 12);
/// pc-testdev IRQ line ports ([`crate::testdev::TestDevIrqLines`]).
pub const TESTDEV_IRQ: IoRange = IoRange::pio(0x2000, crate::testdev::TESTDEV_IRQ_LINES);
/// pc-testdev RAM-like MMIO ([`crate::testdev::TestDevMem`]).
pub const TESTDEV_MEM: IoRange = IoRange::mmio(0xFF00_0000, crate::testdev::TESTDEV_MEM_LEN as u64);
/// fw_cfg selector and data ports ([`crate::fw_cfg::FwCfg`]).
pub const FW_CFG: IoRange = IoRange::pio(0x510, 2);
/// ACPI PM timer ([`crate::pm_timer::PmTimer`]); the FADT's PM_TMR_BLK.
pub const PM_TIMER: IoRange = IoRange::pio(0xB008, 4);
/// The HPET's registers ([`crate::hpet::Hpet`]); the ACPI HPET table names this base.
pub const HPET: IoRange = IoRange::mmio(0xFED0_0000, crate::hpet::HPET_LEN);
/// ACPI PM1a control block ([`crate::pm::PmControl`]); the FADT's PM1a_CNT_BLK.
pub const PM1A_CONTROL: IoRange = IoRange::pio(0xB004, 2);
/// System Control Port A ([`crate::port92::Port92`]): fast reset and the A20 gate.
pub const PORT92: IoRange = IoRange::pio(0x92, 1);
/// PCI configuration mechanism #1 and the reset control register
/// ([`crate::pci::PciConfigIo`]).
pub const PCI_CONFIG: IoRange = IoRange::pio(0xCF8, 8);

/// The userspace I/O APIC of a split irqchip ([`crate::ioapic::Ioapic`]); the MADT
/// names this base.
pub const IOAPIC: IoRange = IoRange::mmio(0xFEC0_0000, crate::ioapic::IOAPIC_MMIO_LEN);
/// The master 8259A of a split irqchip ([`crate::pic::Pic`] at offset 0).
pub const PIC_MASTER: IoRange = IoRange::pio(0x20, 2);
/// The slave 8259A ([`crate::pic::Pic`] through [`crate::OffsetDevice`] with
/// [`crate::pic::PIC_SLAVE_BIAS`]).
pub const PIC_SLAVE: IoRange = IoRange::pio(0xA0, 2);
/// The ELCR ([`crate::pic::Pic`] with [`crate::pic::PIC_ELCR_BIAS`]).
pub const PIC_ELCR: IoRange = IoRange::pio(0x4D0, 2);

/// The ranges of the split irqchip's userspace interrupt controllers, with the bias
/// each registration of the PIC takes (0 for the I/O APIC).
pub const SPLIT_IRQCHIP_RANGES: &[(&str, IoRange, u64)] = &[
    ("ioapic", IOAPIC, 0),
    ("pic-master", PIC_MASTER, 0),
    ("pic-slave", PIC_SLAVE, crate::pic::PIC_SLAVE_BIAS),
    ("elcr", PIC_ELCR, crate::pic::PIC_ELCR_BIAS),
];

/// Slot of the pci-testdev on bus 0 (function 0).
pub const PCI_TESTDEV_SLOT: u8 = 3;
/// Where firmware-style setup puts pci-testdev's BAR0 (4 KiB of MMIO, in the PCI
/// hole below the IOAPIC).
pub const PCI_TESTDEV_MMIO_BASE: u32 = 0xFEBF_F000;
/// Where firmware-style setup puts pci-testdev's BAR1 (256 ports).
pub const PCI_TESTDEV_PIO_BASE: u16 = 0xC000;

/// Every fixed range above, named, for wiring loops and overlap checks.
pub const STANDARD_RANGES: &[(&str, IoRange)] = &[
    ("com1", COM1),
    ("debug-exit", DEBUG_EXIT),
    ("i8042-data", I8042_DATA),
    ("i8042-command", I8042_COMMAND),
    ("port80", PORT80),
    ("cmos", CMOS),
    ("testdev-ports", TESTDEV_PORTS),
    ("testdev-irq", TESTDEV_IRQ),
    ("testdev-mem", TESTDEV_MEM),
    ("fw-cfg", FW_CFG),
    ("pm-timer", PM_TIMER),
    ("pci-config", PCI_CONFIG),
    ("port92", PORT92),
    ("hpet", HPET),
    ("pm1a-control", PM1A_CONTROL),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_do_not_overlap() {
        for (i, (a, ra)) in STANDARD_RANGES.iter().enumerate() {
            for (b, rb) in &STANDARD_RANGES[i + 1..] {
                assert!(!ra.overlaps(rb), "{a} overlaps {b}");
            }
        }
    }

    #[test]
    fn split_irqchip_ranges_overlap_nothing_else() {
        for (a, ra, _) in SPLIT_IRQCHIP_RANGES {
            for (b, rb) in STANDARD_RANGES {
                assert!(!ra.overlaps(rb), "{a} overlaps {b}");
            }
        }
        assert!(!IOAPIC.overlaps(&IoRange::mmio(
            u64::from(PCI_TESTDEV_MMIO_BASE),
            crate::pci_testdev::PCI_TESTDEV_MMIO_SIZE
        )));
    }

    #[test]
    fn unclaimed_ports_stay_unclaimed() {
        for port in [0x1234u64, 0x4D0, 0x4D1, 0x40, 0x43, 0x61, 0x20, 0xA0] {
            assert!(
                STANDARD_RANGES
                    .iter()
                    .all(|(_, r)| !r.contains(IoSpace::Pio, port)),
                "{port:#x} is claimed"
            );
        }
    }

    #[test]
    fn pci_testdev_bars_avoid_fixed_ranges() {
        let mmio = IoRange::mmio(
            u64::from(PCI_TESTDEV_MMIO_BASE),
            crate::pci_testdev::PCI_TESTDEV_MMIO_SIZE,
        );
        let pio = IoRange::pio(
            u64::from(PCI_TESTDEV_PIO_BASE),
            crate::pci_testdev::PCI_TESTDEV_PIO_SIZE,
        );
        for (name, r) in STANDARD_RANGES {
            assert!(!r.overlaps(&mmio) && !r.overlaps(&pio), "{name}");
        }
        assert!(crate::pci_testdev::PciTestDev::new(
            PCI_TESTDEV_MMIO_BASE,
            PCI_TESTDEV_PIO_BASE,
            false
        )
        .is_ok());
    }

    #[test]
    fn range_helpers() {
        assert!(COM1.contains(IoSpace::Pio, 0x3FF));
        assert!(!COM1.contains(IoSpace::Pio, 0x400));
        assert!(!COM1.contains(IoSpace::Mmio, 0x3F8));
        assert_eq!(CMOS.end(), 0x72);
        assert!(!TESTDEV_MEM.overlaps(&IoRange::pio(0xFF00_0000, 1)));
    }
}
