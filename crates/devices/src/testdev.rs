//! QEMU's `pc-testdev`, the ISA device kvm-unit-tests' x86 tests talk to.
//!
//! It occupies three places, each a separate bus device here:
//!
//! - [`TestDevPorts`], ports 0xE0..=0xEB (12 ports, [`crate::pc::TESTDEV_PORTS`]):
//!   - 0xE0..=0xE3: a 32-bit latch; an access of any width at any of the four ports
//!     reads or replaces the bytes it covers (little-endian, starting at the byte the
//!     port selects), so a write followed by a read of the same width and port returns
//!     what was written;
//!   - 0xE4..=0xE7: page flush; QEMU unmaps and remaps the guest page whose address is
//!     written (to test TLB/EPT handling); here writes are accepted and counted, reads
//!     return 0;
//!   - 0xE8..=0xEB: the same latch as 0xE0, reached byte by byte.
//! - [`TestDevIrqLines`], ports 0x2000..=0x2017 ([`crate::pc::TESTDEV_IRQ`]): a 1-byte
//!   write of `v` to port 0x2000 + n sets ISA IRQ line n to level `v != 0` through
//!   [`IrqLine`]; wider accesses are ignored, as on QEMU; reads return 0.
//! - [`TestDevMem`], 64 KiB of MMIO at 0xFF000000 ([`crate::pc::TESTDEV_MEM`]) that
//!   behaves like RAM: reads return what was written, at any width and alignment;
//!   bytes past the end of the region read 0 and are not stored.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{BusDevice, IoAction, IrqLine};

/// Length of the [`TestDevMem`] region.
pub const TESTDEV_MEM_LEN: usize = 0x10000;
/// Number of IRQ lines [`TestDevIrqLines`] drives.
pub const TESTDEV_IRQ_LINES: u64 = 24;

const LATCH: u64 = 0;
const FLUSH: u64 = 4;
const LATCH_BYTES: u64 = 8;
const PORTS_LEN: u64 = 12;

/// Ports 0xE0..=0xEB: the 32-bit latch, the page-flush port, and the byte-wide view
/// of the latch.
#[derive(Debug, Default)]
pub struct TestDevPorts {
    latch: AtomicU32,
    flushes: AtomicU64,
}

impl TestDevPorts {
    /// Latch 0, no flushes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The latch's value.
    pub fn latch(&self) -> u32 {
        self.latch.load(Ordering::Relaxed)
    }

    /// How many writes the page-flush port took.
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// The latch byte an access starting at `offset` reaches first, if any; the
    /// access's bytes past the fourth latch byte are dropped.
    fn latch_byte(offset: u64) -> Option<u32> {
        match offset {
            0..=3 => Some((offset - LATCH) as u32),
            8..=11 => Some((offset - LATCH_BYTES) as u32),
            _ => None,
        }
    }
}

impl BusDevice for TestDevPorts {
    fn read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if let Some(first) = Self::latch_byte(offset) {
            let bytes = self.latch().to_le_bytes();
            for (i, b) in data.iter_mut().enumerate() {
                if let Some(v) = bytes.get(first as usize + i) {
                    *b = *v;
                }
            }
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        if offset < PORTS_LEN && offset & !3 == FLUSH {
            self.flushes.fetch_add(1, Ordering::Relaxed);
            return IoAction::Continue;
        }
        if let Some(first) = Self::latch_byte(offset) {
            let _ = self
                .latch
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    let mut bytes = old.to_le_bytes();
                    for (i, v) in data.iter().enumerate() {
                        if let Some(b) = bytes.get_mut(first as usize + i) {
                            *b = *v;
                        }
                    }
                    Some(u32::from_le_bytes(bytes))
                });
        }
        IoAction::Continue
    }
}

/// Ports 0x2000..=0x2017: one port per ISA IRQ line.
pub struct TestDevIrqLines {
    irq: Arc<dyn IrqLine>,
}

impl std::fmt::Debug for TestDevIrqLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDevIrqLines").finish_non_exhaustive()
    }
}

impl TestDevIrqLines {
    /// Drive lines through `irq` (ISA IRQ n = GSI n).
    pub fn new(irq: Arc<dyn IrqLine>) -> Self {
        Self { irq }
    }
}

impl BusDevice for TestDevIrqLines {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        if let [v] = data {
            if offset < TESTDEV_IRQ_LINES {
                self.irq.set_level(offset as u32, *v != 0);
            }
        }
        IoAction::Continue
    }
}

/// 64 KiB of RAM-like MMIO.
#[derive(Debug)]
pub struct TestDevMem {
    mem: Mutex<Box<[u8]>>,
}

impl Default for TestDevMem {
    fn default() -> Self {
        Self::new()
    }
}

impl TestDevMem {
    /// A zero-filled region.
    pub fn new() -> Self {
        Self {
            mem: Mutex::new(vec![0u8; TESTDEV_MEM_LEN].into_boxed_slice()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<[u8]>> {
        crate::lock(&self.mem)
    }

    /// The in-region byte range an access at `offset` of `len` bytes covers, and how
    /// many bytes of it fit.
    fn span(offset: u64, len: usize) -> Option<(usize, usize)> {
        let start = usize::try_from(offset).ok()?;
        if start >= TESTDEV_MEM_LEN {
            return None;
        }
        Some((start, len.min(TESTDEV_MEM_LEN - start)))
    }
}

impl BusDevice for TestDevMem {
    fn read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if let Some((start, n)) = Self::span(offset, data.len()) {
            let mem = self.lock();
            data[..n].copy_from_slice(&mem[start..start + n]);
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        if let Some((start, n)) = Self::span(offset, data.len()) {
            let mut mem = self.lock();
            mem[start..start + n].copy_from_slice(&data[..n]);
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{hammer, Lines};

    fn rd(d: &dyn BusDevice, off: u64, width: usize) -> Vec<u8> {
        let mut b = vec![0xEEu8; width];
        d.read(off, &mut b);
        b
    }

    #[test]
    fn latch_round_trip_at_every_width() {
        let p = TestDevPorts::new();
        p.write(0, &[0x78, 0x56, 0x34, 0x12]);
        assert_eq!(rd(&p, 0, 4), [0x78, 0x56, 0x34, 0x12]);
        assert_eq!(p.latch(), 0x1234_5678);
        p.write(0, &[0xCD, 0xAB]);
        assert_eq!(rd(&p, 0, 2), [0xCD, 0xAB]);
        assert_eq!(p.latch(), 0x1234_ABCD);
        p.write(2, &[0x01]);
        assert_eq!(rd(&p, 2, 1), [0x01]);
        assert_eq!(p.latch(), 0x1201_ABCD);
        p.write(1, &[0xAA, 0xBB, 0xCC]);
        assert_eq!(rd(&p, 1, 3), [0xAA, 0xBB, 0xCC]);
        // A 4-byte access at port 0xE2 reaches the two high bytes only.
        p.write(2, &[1, 2, 3, 4]);
        assert_eq!(rd(&p, 2, 4), [1, 2, 0, 0]);
        // The byte-wide view at 0xE8 is the same latch.
        p.write(8, &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(rd(&p, 0, 4), [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(rd(&p, 9, 1), [0x22]);
    }

    #[test]
    fn flush_port_accepts_writes() {
        let p = TestDevPorts::new();
        p.write(0, &[1, 2, 3, 4]);
        assert_eq!(p.write(FLUSH, &0x1000u32.to_le_bytes()), IoAction::Continue);
        assert_eq!(p.flush_count(), 1);
        assert_eq!(rd(&p, FLUSH, 4), [0; 4]);
        assert_eq!(p.latch(), 0x0403_0201);
    }

    #[test]
    fn irq_lines_follow_writes() {
        let lines = Arc::new(Lines::default());
        let d = TestDevIrqLines::new(lines.clone());
        d.write(4, &[1]);
        d.write(4, &[0]);
        d.write(23, &[0x80]);
        d.write(24, &[1]); // past the last line
        d.write(5, &[1, 0]); // not a byte access
        assert_eq!(
            *lines.0.lock().unwrap(),
            vec![(4, true), (4, false), (23, true)]
        );
        assert_eq!(rd(&d, 0, 1), [0]);
    }

    #[test]
    fn mem_behaves_like_ram() {
        let m = TestDevMem::new();
        m.write(0x10, &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(rd(&m, 0x10, 8), 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(rd(&m, 0x13, 2), [0x55, 0x44]);
        m.write(0x101, &[9, 8, 7]);
        assert_eq!(rd(&m, 0x100, 4), [0, 9, 8, 7]);
        let last = (TESTDEV_MEM_LEN - 2) as u64;
        m.write(last, &[1, 2, 3, 4]);
        assert_eq!(rd(&m, last, 4), [1, 2, 0, 0]);
        assert_eq!(rd(&m, TESTDEV_MEM_LEN as u64, 4), [0; 4]);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        hammer(&TestDevPorts::new(), 16);
        hammer(&TestDevIrqLines::new(Arc::new(Lines::default())), 32);
        let m = TestDevMem::new();
        hammer(&m, 16);
        for off in (TESTDEV_MEM_LEN as u64 - 8)..(TESTDEV_MEM_LEN as u64 + 2) {
            for w in [1usize, 2, 3, 4, 8] {
                m.write(off, &vec![0xFF; w]);
                rd(&m, off, w);
            }
        }
    }
}
