//! QEMU's `pci-testdev` (vendor 0x1B36, device 0x0005, class 0xFF/0x00), the PCI
//! device kvm-unit-tests uses to time MMIO and port I/O exits with and without
//! ioeventfds.
//!
//! # BARs
//!
//! - BAR0: 4 KiB of 32-bit MMIO, not prefetchable;
//! - BAR1: 256 ports of I/O.
//!
//! Both are assigned at construction and the command register has I/O and memory
//! decode enabled, as firmware would leave them. A guest can size and move them.
//!
//! # Register layout (QEMU docs/specs/pci-testdev.rst and hw/misc/pci-testdev.c)
//!
//! Each BAR starts with the header of the selected test; all fields little-endian:
//!
//! | offset | size | field  | meaning |
//! |--------|------|--------|---------|
//! | 0      | 1    | test   | write: select test n of this BAR; read: the selected test's global index |
//! | 1      | 1    | width  | access width the test's doorbell expects (1) |
//! | 2      | 2    | —      | padding |
//! | 4      | 4    | offset | offset of the doorbell in the BAR |
//! | 8      | 1    | data   | value to write to the doorbell (3 bytes padding follow) |
//! | 12     | 4    | count  | doorbell writes detected since the test was selected |
//! | 16     | —    | name   | NUL-terminated ASCII name |
//!
//! Past the name's end, and while no test is selected, the BAR reads 0. Every access
//! is handled as a run of single-byte accesses, as QEMU declares the regions 1 byte
//! wide; a wider write to the doorbell therefore counts if its first byte matches.
//!
//! Writing n to `test` through a BAR stops the running test and selects test n of
//! that BAR's kind (tests 0..3 of the MMIO BAR are global indexes 0..3, those of the
//! I/O BAR are 3..6), resetting its count; n of 3 or more leaves no test selected.
//! A guest scans tests from 0 until `width` reads back as neither 1, 2 nor 4.
//!
//! | index | BAR  | name                      | doorbell offset | data | ioeventfd |
//! |-------|------|---------------------------|-----------------|------|-----------|
//! | 0     | MMIO | mmio-no-eventfd           | 2048            | 0xFA | none: handled here |
//! | 1     | MMIO | mmio-wildcard-eventfd     | 2049            | 0xCE | any value |
//! | 2     | MMIO | mmio-datamatch-eventfd    | 2050            | 0xFA | value 0xFA |
//! | 3     | I/O  | portio-no-eventfd         | 131             | 0xFA | none: handled here |
//! | 4     | I/O  | portio-wildcard-eventfd   | 132             | 0xCE | any value |
//! | 5     | I/O  | portio-datamatch-eventfd  | 133             | 0xFA | value 0xFA |
//!
//! A doorbell write that reaches [`BusDevice::write`] counts when it hits the selected
//! test's offset and, except for the wildcard tests, carries the test's data byte.
//! (As on QEMU, the selected test's offset is compared whatever BAR the write came
//! through.)
//!
//! # ioeventfds
//!
//! The device owns one eventfd per eventfd-backed test and lists them with
//! [`PciDevice::ioeventfds`] for the VMM to register with KVM_IOEVENTFD (1-byte
//! width; the MMIO wildcard test uses width 0, "any length", when the device was built
//! with `any_length_mmio`, which the VMM passes when KVM has
//! KVM_CAP_IOEVENTFD_ANY_LENGTH, as QEMU does). QEMU arms only the selected test's
//! eventfd; here all four stay registered, which a guest cannot tell apart since their
//! doorbells are distinct. `count` is "writes detected", so a read of the BAR adds
//! whatever the selected test's eventfd counted to that test's count (QEMU reads and
//! discards it, and its guests accept either a zero or an exact count).

use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::{EventFd, EFD_CLOEXEC, EFD_NONBLOCK};

use crate::pci::{
    PciBarKind, PciBarRange, PciConfigSpace, PciDevice, PciError, PciIds, COMMAND_IO,
    COMMAND_MEMORY, SUBSYSTEM_ID_QEMU, SUBSYSTEM_VENDOR_QEMU,
};
use crate::{BusDevice, IoAction, IoEventSpec, IoSpace};

/// Red Hat's PCI vendor ID.
pub const PCI_TESTDEV_VENDOR_ID: u16 = 0x1B36;
/// pci-testdev's device ID.
pub const PCI_TESTDEV_DEVICE_ID: u16 = 0x0005;
/// Size of BAR0 (MMIO).
pub const PCI_TESTDEV_MMIO_SIZE: u64 = 4096;
/// Size of BAR1 (I/O).
pub const PCI_TESTDEV_PIO_SIZE: u64 = 256;
/// Number of tests per BAR.
pub const TESTS_PER_BAR: usize = 3;
/// Number of tests in all.
pub const NUM_TESTS: usize = 2 * TESTS_PER_BAR;
/// Data byte of the no-eventfd and datamatch tests.
pub const DATAMATCH: u8 = 0xFA;
/// Data byte of the wildcard tests.
pub const NOMATCH: u8 = 0xCE;

const MMIO_BAR: u8 = 0;
const PIO_BAR: u8 = 1;
const HEADER_LEN: usize = 16;
const TEST_OFFSET: u64 = 0;

/// What a test's doorbell is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestKind {
    /// Every doorbell write exits to user space.
    NoEventfd,
    /// An ioeventfd takes writes of any value.
    WildcardEventfd,
    /// An ioeventfd takes writes of the data byte only.
    DatamatchEventfd,
}

/// Description of one of the six tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestInfo {
    /// Global index, 0..6.
    pub index: usize,
    /// The BAR kind the test lives in.
    pub space: IoSpace,
    /// Doorbell kind.
    pub kind: TestKind,
    /// Doorbell offset in its BAR.
    pub offset: u32,
    /// Value to write.
    pub data: u8,
    /// Doorbell width.
    pub width: u8,
}

impl TestInfo {
    /// Test `index` (0..6).
    pub fn get(index: usize) -> Option<Self> {
        if index >= NUM_TESTS {
            return None;
        }
        let space = if index < TESTS_PER_BAR {
            IoSpace::Mmio
        } else {
            IoSpace::Pio
        };
        let kind = match index % TESTS_PER_BAR {
            0 => TestKind::NoEventfd,
            1 => TestKind::WildcardEventfd,
            _ => TestKind::DatamatchEventfd,
        };
        let base = match space {
            IoSpace::Mmio => PCI_TESTDEV_MMIO_SIZE / 2,
            IoSpace::Pio => PCI_TESTDEV_PIO_SIZE / 2,
        };
        Some(Self {
            index,
            space,
            kind,
            offset: (base + index as u64) as u32,
            data: if kind == TestKind::WildcardEventfd {
                NOMATCH
            } else {
                DATAMATCH
            },
            width: 1,
        })
    }

    /// The test's name, e.g. `portio-datamatch-eventfd`.
    pub fn name(&self) -> &'static str {
        match (self.space, self.kind) {
            (IoSpace::Mmio, TestKind::NoEventfd) => "mmio-no-eventfd",
            (IoSpace::Mmio, TestKind::WildcardEventfd) => "mmio-wildcard-eventfd",
            (IoSpace::Mmio, TestKind::DatamatchEventfd) => "mmio-datamatch-eventfd",
            (IoSpace::Pio, TestKind::NoEventfd) => "portio-no-eventfd",
            (IoSpace::Pio, TestKind::WildcardEventfd) => "portio-wildcard-eventfd",
            (IoSpace::Pio, TestKind::DatamatchEventfd) => "portio-datamatch-eventfd",
        }
    }

    fn matches_data(&self) -> bool {
        self.kind != TestKind::WildcardEventfd
    }

    /// Header byte `i` with `count` in the count field; 0 past the name.
    fn header_byte(&self, i: usize, count: u32) -> u8 {
        let name = self.name().as_bytes();
        let offset = self.offset.to_le_bytes();
        let count = count.to_le_bytes();
        match i {
            0 => self.index as u8,
            1 => self.width,
            4..=7 => offset[i - 4],
            8 => self.data,
            12..=15 => count[i - 12],
            _ if i >= HEADER_LEN => name.get(i - HEADER_LEN).copied().unwrap_or(0),
            _ => 0,
        }
    }
}

#[derive(Debug)]
struct State {
    current: Option<usize>,
    counts: [u32; NUM_TESTS],
}

#[derive(Debug)]
struct Core {
    state: Mutex<State>,
    eventfds: [Option<Arc<EventFd>>; NUM_TESTS],
}

impl Core {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    /// Take what eventfd `t` counted (0 if it has none or counted nothing).
    fn drain(&self, t: usize) -> u32 {
        match self.eventfds.get(t) {
            Some(Some(evt)) => evt.read().map_or(0, |n| n.min(u64::from(u32::MAX)) as u32),
            _ => 0,
        }
    }

    fn write_byte(&self, st: &mut State, space: IoSpace, addr: u64, value: u8) {
        if addr == TEST_OFFSET {
            st.current = None;
            let n = usize::from(value);
            if n >= TESTS_PER_BAR {
                return;
            }
            let t = match space {
                IoSpace::Mmio => n,
                IoSpace::Pio => TESTS_PER_BAR + n,
            };
            st.counts[t] = 0;
            self.drain(t);
            st.current = Some(t);
            return;
        }
        let Some(info) = st.current.and_then(TestInfo::get) else {
            return;
        };
        if addr != u64::from(info.offset) {
            return;
        }
        if info.matches_data() && value != info.data {
            return;
        }
        st.counts[info.index] = st.counts[info.index].wrapping_add(1);
    }
}

/// The bus device serving one of the test device's BARs.
#[derive(Debug)]
pub struct PciTestDevBar {
    core: Arc<Core>,
    space: IoSpace,
    len: u64,
}

impl BusDevice for PciTestDevBar {
    fn read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let mut st = self.core.lock();
        let Some(info) = st.current.and_then(TestInfo::get) else {
            return;
        };
        let drained = self.core.drain(info.index);
        st.counts[info.index] = st.counts[info.index].wrapping_add(drained);
        let count = st.counts[info.index];
        for (i, b) in data.iter_mut().enumerate() {
            let Some(addr) = offset.checked_add(i as u64) else {
                break;
            };
            if addr >= self.len {
                break;
            }
            *b = info.header_byte(addr as usize, count);
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        let mut st = self.core.lock();
        for (i, v) in data.iter().enumerate() {
            let Some(addr) = offset.checked_add(i as u64) else {
                break;
            };
            if addr >= self.len {
                break;
            }
            self.core.write_byte(&mut st, self.space, addr, *v);
        }
        IoAction::Continue
    }
}

/// QEMU's pci-testdev.
#[derive(Debug)]
pub struct PciTestDev {
    config: Mutex<PciConfigSpace>,
    mmio: Arc<PciTestDevBar>,
    pio: Arc<PciTestDevBar>,
    any_length_mmio: bool,
}

impl PciTestDev {
    /// A test device with BAR0 at `mmio_base` (4 KiB aligned, below 4 GiB) and BAR1 at
    /// `pio_base` (256-port aligned), decoding both.
    ///
    /// `any_length_mmio`: register the MMIO wildcard doorbell with width 0 (KVM's
    /// fast MMIO path); pass whether KVM_CAP_IOEVENTFD_ANY_LENGTH is present.
    pub fn new(mmio_base: u32, pio_base: u16, any_length_mmio: bool) -> Result<Self, PciError> {
        let mut config = PciConfigSpace::new(PciIds {
            vendor_id: PCI_TESTDEV_VENDOR_ID,
            device_id: PCI_TESTDEV_DEVICE_ID,
            revision: 0,
            class: 0xFF,
            subclass: 0x00,
            prog_if: 0x00,
            subsystem_vendor_id: SUBSYSTEM_VENDOR_QEMU,
            subsystem_id: SUBSYSTEM_ID_QEMU,
            interrupt_pin: 0,
        });
        config.add_bar(
            MMIO_BAR,
            PciBarKind::Memory32 {
                prefetchable: false,
            },
            PCI_TESTDEV_MMIO_SIZE,
            u64::from(mmio_base),
        )?;
        config.add_bar(
            PIO_BAR,
            PciBarKind::Io,
            PCI_TESTDEV_PIO_SIZE,
            u64::from(pio_base),
        )?;
        config.set_command(COMMAND_IO | COMMAND_MEMORY);

        let mut eventfds: [Option<Arc<EventFd>>; NUM_TESTS] = Default::default();
        for (i, slot) in eventfds.iter_mut().enumerate() {
            if TestInfo::get(i).is_some_and(|t| t.kind != TestKind::NoEventfd) {
                let evt = EventFd::new(EFD_NONBLOCK | EFD_CLOEXEC)
                    .map_err(|e| PciError::EventFd(e.to_string()))?;
                *slot = Some(Arc::new(evt));
            }
        }
        let core = Arc::new(Core {
            state: Mutex::new(State {
                current: None,
                counts: [0; NUM_TESTS],
            }),
            eventfds,
        });
        Ok(Self {
            config: Mutex::new(config),
            mmio: Arc::new(PciTestDevBar {
                core: core.clone(),
                space: IoSpace::Mmio,
                len: PCI_TESTDEV_MMIO_SIZE,
            }),
            pio: Arc::new(PciTestDevBar {
                core,
                space: IoSpace::Pio,
                len: PCI_TESTDEV_PIO_SIZE,
            }),
            any_length_mmio,
        })
    }

    /// The bus device for BAR0 (MMIO).
    pub fn mmio_bar(&self) -> Arc<PciTestDevBar> {
        self.mmio.clone()
    }

    /// The bus device for BAR1 (I/O).
    pub fn pio_bar(&self) -> Arc<PciTestDevBar> {
        self.pio.clone()
    }

    /// The selected test's global index, if any.
    pub fn current_test(&self) -> Option<usize> {
        self.mmio.core.lock().current
    }
}

impl PciDevice for PciTestDev {
    fn read_config(&self, reg: usize) -> u32 {
        crate::lock(&self.config).read(reg)
    }

    fn write_config(&self, reg: usize, byte_enables: u8, value: u32) {
        crate::lock(&self.config).write(reg, byte_enables, value)
    }

    fn bars(&self) -> Vec<PciBarRange> {
        crate::lock(&self.config).bar_ranges()
    }

    fn bar_device(&self, index: u8) -> Option<Arc<dyn BusDevice>> {
        match index {
            MMIO_BAR => Some(self.mmio.clone()),
            PIO_BAR => Some(self.pio.clone()),
            _ => None,
        }
    }

    /// One spec per eventfd-backed test whose BAR decodes now.
    fn ioeventfds(&self) -> Vec<IoEventSpec> {
        let (mmio, pio) = {
            let cs = crate::lock(&self.config);
            (cs.bar_range(MMIO_BAR), cs.bar_range(PIO_BAR))
        };
        let core = &self.mmio.core;
        (0..NUM_TESTS)
            .filter_map(|i| {
                let info = TestInfo::get(i)?;
                let eventfd = core.eventfds.get(i)?.clone()?;
                let bar = match info.space {
                    IoSpace::Mmio => mmio?,
                    IoSpace::Pio => pio?,
                };
                let len = match (info.space, info.kind) {
                    (IoSpace::Mmio, TestKind::WildcardEventfd) if self.any_length_mmio => 0,
                    _ => u32::from(info.width),
                };
                Some(IoEventSpec {
                    space: info.space,
                    addr: bar.addr + u64::from(info.offset),
                    len,
                    datamatch: info.matches_data().then_some(u64::from(info.data)),
                    eventfd,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::tests::{read32, write32};
    use crate::pci::{PciAddress, PciBarChange, PciBarObserver, PciConfigIo};
    use crate::test_util::hammer;

    const MMIO_BASE: u32 = 0xFEBF_F000;
    const PIO_BASE: u16 = 0xC000;

    fn dev() -> PciTestDev {
        PciTestDev::new(MMIO_BASE, PIO_BASE, false).unwrap()
    }

    fn rd(bar: &dyn BusDevice, off: u64, w: usize) -> u64 {
        let mut b = vec![0u8; w];
        bar.read(off, &mut b);
        crate::le_value(&b)
    }

    fn name(bar: &dyn BusDevice) -> String {
        let mut s = String::new();
        for i in 16.. {
            let c = rd(bar, i, 1) as u8;
            if c == 0 {
                break;
            }
            s.push(c as char);
        }
        s
    }

    /// The kvm-unit-tests procedure: select, check count 0 and width, write the
    /// doorbell 16 times, then count must be 0 or 16.
    fn run_one(bar: &dyn BusDevice, n: u8, ioeventfd: Option<&IoEventSpec>) -> Option<u32> {
        bar.write(0, &[n]);
        if rd(bar, 12, 4) != 0 {
            return None;
        }
        let width = rd(bar, 1, 1);
        if ![1, 2, 4].contains(&width) {
            return None;
        }
        let data = rd(bar, 8, 4);
        let off = rd(bar, 4, 4);
        for _ in 0..16 {
            match ioeventfd {
                // What KVM does for a matching write.
                Some(spec) if spec.addr % 0x1000 == off % 0x1000 => spec.eventfd.write(1).unwrap(),
                _ => {
                    bar.write(off, &data.to_le_bytes()[..width as usize]);
                }
            }
        }
        Some(rd(bar, 12, 4) as u32)
    }

    #[test]
    fn identity_and_bars_in_config_space() {
        let mut pci = PciConfigIo::new();
        let d = Arc::new(dev());
        pci.add_device(PciAddress::new(0, 3, 0).unwrap(), d.clone())
            .unwrap();
        assert_eq!(read32(&pci, 3, 0x00), 0x0005_1B36);
        assert_eq!(read32(&pci, 3, 0x08), 0xFF00_0000);
        assert_eq!(read32(&pci, 3, 0x04) & 0xFFFF, 0x0003);
        assert_eq!(read32(&pci, 3, 0x10), MMIO_BASE);
        assert_eq!(read32(&pci, 3, 0x14), u32::from(PIO_BASE) | 1);
        assert_eq!(read32(&pci, 3, 0x18), 0);
        assert_eq!(read32(&pci, 3, 0x2C), 0x1100_1AF4);
        assert_eq!((read32(&pci, 3, 0x3C) >> 8) & 0xFF, 0);
        assert_eq!(d.bars().len(), 2);
    }

    #[test]
    fn bar_sizing() {
        let mut pci = PciConfigIo::new();
        pci.add_device(PciAddress::new(0, 3, 0).unwrap(), Arc::new(dev()))
            .unwrap();
        for (reg, expect) in [(0x10u8, 0xFFFF_F000u32), (0x14, 0xFFFF_FF01)] {
            let orig = read32(&pci, 3, reg);
            write32(&pci, 3, reg, u32::MAX);
            assert_eq!(read32(&pci, 3, reg), expect);
            write32(&pci, 3, reg, orig);
            assert_eq!(read32(&pci, 3, reg), orig);
        }
        // Unimplemented BARs size to 0.
        for reg in [0x18u8, 0x1C, 0x20, 0x24, 0x30] {
            write32(&pci, 3, reg, u32::MAX);
            assert_eq!(read32(&pci, 3, reg), 0);
        }
    }

    #[derive(Default)]
    struct Changes(Mutex<Vec<PciBarChange>>);

    impl PciBarObserver for Changes {
        fn bar_changed(&self, change: &PciBarChange) {
            self.0.lock().unwrap().push(*change);
        }
    }

    #[test]
    fn bar_moves_are_reported() {
        let mut pci = PciConfigIo::new();
        let d = Arc::new(dev());
        let seen = Arc::new(Changes::default());
        pci.set_bar_observer(seen.clone());
        let addr = PciAddress::new(0, 3, 0).unwrap();
        pci.add_device(addr, d.clone()).unwrap();
        // Linux-style sizing: decode off, size, restore, decode on.
        write32(&pci, 3, 0x04, 0);
        write32(&pci, 3, 0x10, u32::MAX);
        write32(&pci, 3, 0x10, 0xE000_0000);
        write32(&pci, 3, 0x04, 0x3);
        let changes = seen.0.lock().unwrap().clone();
        let mmio_old = PciBarRange {
            index: 0,
            space: IoSpace::Mmio,
            addr: u64::from(MMIO_BASE),
            size: 4096,
        };
        let pio = PciBarRange {
            index: 1,
            space: IoSpace::Pio,
            addr: u64::from(PIO_BASE),
            size: 256,
        };
        let mmio_new = PciBarRange {
            addr: 0xE000_0000,
            ..mmio_old
        };
        assert_eq!(
            changes,
            vec![
                PciBarChange {
                    device: addr,
                    index: 0,
                    old: Some(mmio_old),
                    new: None
                },
                PciBarChange {
                    device: addr,
                    index: 1,
                    old: Some(pio),
                    new: None
                },
                PciBarChange {
                    device: addr,
                    index: 0,
                    old: None,
                    new: Some(mmio_new)
                },
                PciBarChange {
                    device: addr,
                    index: 1,
                    old: None,
                    new: Some(pio)
                },
            ]
        );
        let specs = d.ioeventfds();
        assert!(specs
            .iter()
            .any(|s| s.space == IoSpace::Mmio && s.addr == 0xE000_0000 + 2049));
    }

    #[test]
    fn header_layout_of_every_test() {
        let d = dev();
        let mmio = d.mmio_bar();
        let pio = d.pio_bar();
        let names = [
            "mmio-no-eventfd",
            "mmio-wildcard-eventfd",
            "mmio-datamatch-eventfd",
            "portio-no-eventfd",
            "portio-wildcard-eventfd",
            "portio-datamatch-eventfd",
        ];
        for (i, expected) in names.iter().enumerate() {
            let bar: &dyn BusDevice = if i < 3 { &*mmio } else { &*pio };
            bar.write(0, &[(i % 3) as u8]);
            assert_eq!(d.current_test(), Some(i));
            assert_eq!(rd(bar, 0, 1), i as u64);
            assert_eq!(rd(bar, 1, 1), 1);
            let base = if i < 3 { 2048 } else { 128 };
            assert_eq!(rd(bar, 4, 4), base + i as u64);
            let data = if i % 3 == 1 { 0xCE } else { 0xFA };
            assert_eq!(rd(bar, 8, 4), data);
            assert_eq!(rd(bar, 12, 4), 0);
            assert_eq!(name(bar), *expected);
            // Past the name: zeros.
            assert_eq!(rd(bar, 16 + expected.len() as u64, 4), 0);
        }
        // Selecting 3 or more leaves no test: everything reads 0.
        mmio.write(0, &[3]);
        assert_eq!(d.current_test(), None);
        assert_eq!(rd(&*mmio, 1, 1), 0);
        assert_eq!(rd(&*mmio, 4, 4), 0);
    }

    #[test]
    fn userspace_doorbells_count() {
        let d = dev();
        for bar in [d.mmio_bar(), d.pio_bar()] {
            for n in 0..3u8 {
                assert_eq!(run_one(&*bar, n, None), Some(16), "test {n}");
            }
            // Wrong data does not count for the matching tests.
            bar.write(0, &[2]);
            let off = rd(&*bar, 4, 4);
            bar.write(off, &[0x00]);
            assert_eq!(rd(&*bar, 12, 4), 0);
            // A wider write counts once when its first byte matches.
            bar.write(off, &[0xFA, 0, 0, 0]);
            assert_eq!(rd(&*bar, 12, 4), 1);
            // The scan ends at test 3.
            assert_eq!(run_one(&*bar, 3, None), None);
        }
    }

    #[test]
    fn ioeventfd_specs_and_counts() {
        let d = dev();
        let specs = d.ioeventfds();
        assert_eq!(specs.len(), 4);
        let find = |space, off: u64| {
            specs
                .iter()
                .find(|s| {
                    s.space == space
                        && s.addr
                            == off
                                + match space {
                                    IoSpace::Mmio => u64::from(MMIO_BASE),
                                    IoSpace::Pio => u64::from(PIO_BASE),
                                }
                })
                .unwrap()
        };
        let mw = find(IoSpace::Mmio, 2049);
        assert_eq!((mw.len, mw.datamatch), (1, None));
        let md = find(IoSpace::Mmio, 2050);
        assert_eq!((md.len, md.datamatch), (1, Some(0xFA)));
        let pw = find(IoSpace::Pio, 132);
        assert_eq!((pw.len, pw.datamatch), (1, None));
        let pd = find(IoSpace::Pio, 133);
        assert_eq!((pd.len, pd.datamatch), (1, Some(0xFA)));

        // Writes absorbed by the eventfd show up in count.
        assert_eq!(run_one(&*d.mmio_bar(), 1, Some(mw)), Some(16));
        assert_eq!(run_one(&*d.mmio_bar(), 2, Some(md)), Some(16));
        assert_eq!(run_one(&*d.pio_bar(), 1, Some(pw)), Some(16));
        assert_eq!(run_one(&*d.pio_bar(), 2, Some(pd)), Some(16));
        // Stale eventfd counts are dropped when a test is selected again.
        pd.eventfd.write(5).unwrap();
        assert_eq!(run_one(&*d.pio_bar(), 2, Some(pd)), Some(16));

        let fast = PciTestDev::new(MMIO_BASE, PIO_BASE, true).unwrap();
        let specs = fast.ioeventfds();
        let wild: Vec<_> = specs
            .iter()
            .filter(|s| s.space == IoSpace::Mmio && s.datamatch.is_none())
            .collect();
        assert_eq!(wild.len(), 1);
        assert_eq!(wild[0].len, 0);
        assert!(specs
            .iter()
            .filter(|s| s.space == IoSpace::Pio)
            .all(|s| s.len == 1));
    }

    #[test]
    fn no_ioeventfds_while_decode_is_off() {
        let d = dev();
        d.write_config(1, 0x3, 0);
        assert!(d.ioeventfds().is_empty());
        assert!(d.bars().is_empty());
        assert!(d.bar_device(0).is_some());
        assert!(d.bar_device(2).is_none());
    }

    #[test]
    fn constructor_checks_addresses() {
        assert!(PciTestDev::new(0xFEBF_F800, PIO_BASE, false).is_err());
        assert!(PciTestDev::new(MMIO_BASE, 0xC080, false).is_err());
        assert!(PciTestDev::new(0, PIO_BASE, false).is_err());
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        let d = dev();
        for n in 0..3u8 {
            d.mmio_bar().write(0, &[n]);
            hammer(&*d.mmio_bar(), 64);
            d.pio_bar().write(0, &[n]);
            hammer(&*d.pio_bar(), 64);
        }
        for off in [127u64, 128, 131, 255, 256, 2047, 2048, 2050, 4095, 4096] {
            for w in [1usize, 2, 3, 4, 8] {
                let mut b = vec![0u8; w];
                d.mmio_bar().read(off, &mut b);
                d.pio_bar().read(off, &mut b);
                d.mmio_bar().write(off, &b);
                d.pio_bar().write(off, &b);
            }
        }
    }
}
