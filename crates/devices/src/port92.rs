//! System Control Port A (port 0x92), as on QEMU's pc machine (its `port92` device).
//!
//! - Bit 0, fast reset: a write that sets it while it was clear requests a reset
//!   ([`IoAction::Reset`]); writing it again while it is still set does nothing. The
//!   bit reads back as written.
//! - Bit 1, A20 gate: kept and read back. Under KVM the A20 line is always enabled (KVM
//!   has no A20 mask, and QEMU with KVM does not gate it either), so the bit changes
//!   nothing else.
//! - The other bits are kept and read back, like QEMU's latch.
//!
//! Accesses wider than a byte reach the port's byte only; other offsets read 0xFF.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::{BusDevice, IoAction};

/// Fast reset.
pub const PORT92_RESET: u8 = 0x01;
/// A20 gate.
pub const PORT92_A20: u8 = 0x02;

/// The latch behind port 0x92.
#[derive(Debug, Default)]
pub struct Port92 {
    latch: AtomicU8,
}

impl Port92 {
    /// A port with every bit clear.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the guest has set the A20 gate bit.
    pub fn a20(&self) -> bool {
        self.latch.load(Ordering::Relaxed) & PORT92_A20 != 0
    }
}

impl BusDevice for Port92 {
    fn read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0xFF);
        if offset == 0 {
            if let Some(b) = data.first_mut() {
                *b = self.latch.load(Ordering::Relaxed);
            }
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        let (0, Some(&v)) = (offset, data.first()) else {
            return IoAction::Continue;
        };
        let old = self.latch.swap(v, Ordering::Relaxed);
        if v & PORT92_RESET != 0 && old & PORT92_RESET == 0 {
            IoAction::Reset
        } else {
            IoAction::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;

    fn read(p: &Port92) -> u8 {
        let mut b = [0u8];
        p.read(0, &mut b);
        b[0]
    }

    #[test]
    fn bit0_resets_on_its_rising_edge() {
        let p = Port92::new();
        assert_eq!(p.write(0, &[PORT92_A20]), IoAction::Continue);
        assert!(p.a20());
        assert_eq!(read(&p), PORT92_A20);
        assert_eq!(p.write(0, &[PORT92_A20 | PORT92_RESET]), IoAction::Reset);
        assert_eq!(read(&p), PORT92_A20 | PORT92_RESET);
        // Still set: no second reset.
        assert_eq!(p.write(0, &[PORT92_RESET]), IoAction::Continue);
        assert!(!p.a20());
        assert_eq!(p.write(0, &[0]), IoAction::Continue);
        assert_eq!(p.write(0, &[0xFF]), IoAction::Reset);
    }

    #[test]
    fn wide_and_odd_accesses() {
        let p = Port92::new();
        assert_eq!(p.write(1, &[PORT92_RESET]), IoAction::Continue);
        assert_eq!(p.write(0, &[PORT92_A20, 0xFF]), IoAction::Continue);
        let mut w = [0u8; 2];
        p.read(0, &mut w);
        assert_eq!(w, [PORT92_A20, 0xFF]);
        hammer(&p, 2);
    }
}
