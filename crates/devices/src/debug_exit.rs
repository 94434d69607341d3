//! QEMU's `isa-debug-exit` device: a guest write ends the run.
//!
//! QEMU places it at a port chosen on its command line (exitlab uses 0xF4, see
//! [`crate::pc::DEBUG_EXIT`]) with a width of 1 to 4 bytes. Any write of value `V`
//! asks the VMM to stop; the VMM turns `V` into the process exit status
//! `(V << 1) | 1`, as QEMU does, so a guest can never produce status 0 by accident.
//! Reads return 0.

use crate::{le_value, BusDevice, IoAction};

/// The debug-exit port. It has no state.
#[derive(Debug, Default, Clone, Copy)]
pub struct DebugExit;

impl DebugExit {
    /// A debug-exit device.
    pub fn new() -> Self {
        Self
    }

    /// The process exit status QEMU reports for a guest write of `value`:
    /// `(value << 1) | 1`, with bits shifted past bit 31 dropped (the operating
    /// system keeps only the low 8 bits of an exit status anyway).
    pub fn exit_status(value: u32) -> i32 {
        ((value << 1) | 1) as i32
    }
}

impl BusDevice for DebugExit {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    /// Every write, at any offset and width, is an exit request carrying the written
    /// value (little-endian, truncated to 32 bits).
    fn write(&self, _offset: u64, data: &[u8]) -> IoAction {
        IoAction::Exit(le_value(data) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;

    #[test]
    fn writes_exit_with_value_at_each_width() {
        let dev = DebugExit::new();
        assert_eq!(dev.write(0, &[0x2A]), IoAction::Exit(0x2A));
        assert_eq!(dev.write(0, &[0x34, 0x12]), IoAction::Exit(0x1234));
        assert_eq!(
            dev.write(0, &[0x78, 0x56, 0x34, 0x12]),
            IoAction::Exit(0x1234_5678)
        );
        assert_eq!(dev.write(0, &[0; 4]), IoAction::Exit(0));
    }

    #[test]
    fn reads_are_zero() {
        let dev = DebugExit::new();
        let mut b = [0xFFu8; 4];
        dev.read(0, &mut b);
        assert_eq!(b, [0; 4]);
    }

    #[test]
    fn exit_status_matches_qemu() {
        assert_eq!(DebugExit::exit_status(0), 1);
        assert_eq!(DebugExit::exit_status(1), 3);
        assert_eq!(DebugExit::exit_status(0x10), 0x21);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        hammer(&DebugExit::new(), 8);
    }
}
