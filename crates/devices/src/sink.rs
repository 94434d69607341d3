//! A device that ignores writes and reads a constant: the POST diagnostic port 0x80
//! and any other port a guest pokes that exitlab does not model.

use crate::{BusDevice, IoAction};

/// Ignores every write; every read byte is `fill`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sink {
    fill: u8,
}

impl Sink {
    /// A sink whose reads return zeros (what exitlab uses for port 0x80).
    pub fn new() -> Self {
        Self { fill: 0 }
    }

    /// A sink whose reads return `fill` in every byte (0xFF imitates an empty ISA port).
    pub fn with_fill(fill: u8) -> Self {
        Self { fill }
    }
}

impl BusDevice for Sink {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        data.fill(self.fill);
    }

    fn write(&self, _offset: u64, _data: &[u8]) -> IoAction {
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;

    #[test]
    fn reads_fill_and_ignores_writes() {
        let s = Sink::new();
        assert_eq!(s.write(0, &[0x55]), IoAction::Continue);
        let mut b = [0xAAu8; 2];
        s.read(0, &mut b);
        assert_eq!(b, [0, 0]);
        let f = Sink::with_fill(0xFF);
        f.read(3, &mut b);
        assert_eq!(b, [0xFF, 0xFF]);
        hammer(&s, 4);
    }
}
