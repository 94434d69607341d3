//! The i8042 PS/2 controller, reduced to what a guest without keyboard or mouse needs:
//! the reset line, the controller command byte, self tests, and a status register that
//! never reports a busy input buffer.
//!
//! The device decodes two ports: offset 0 is the data port (0x60) and offset 4 the
//! status/command port (0x64). Register it at 0x60 for 1 port and once more at 0x64
//! through [`crate::OffsetDevice`] with bias 4 (see [`crate::pc::I8042_DATA`] and
//! [`crate::pc::I8042_COMMAND`]), or at 0x60 for 5 ports.
//!
//! Commands written to port 0x64:
//! - 0x20: read the command byte (next data-port read returns it);
//! - 0x60: write the command byte (the next data-port write is it);
//! - 0xAA: controller self test, answers 0x55;
//! - 0xAB: keyboard interface test, answers 0x00;
//! - 0xAD / 0xAE: disable / enable the keyboard (command byte bit 4);
//! - 0xA7 / 0xA8: disable / enable the auxiliary port (command byte bit 5);
//! - 0xD0: read the output port (reset line high, A20 enabled: 0x03);
//! - 0xD1: write the output port; a value with bit 0 clear pulls the reset line;
//! - 0xD2: write the keyboard output buffer (the next data byte is echoed back);
//! - 0xF0..=0xFF: pulse output lines; an even value (bit 0 clear, e.g. 0xFE) pulses
//!   the reset line, which the VMM takes as [`IoAction::Reset`], as QEMU does.
//!
//! Other commands are ignored. No keyboard or mouse is attached: data written to the
//! devices is dropped and nothing answers, and no interrupt is raised (polling only).
//!
//! Why hand-written: vm-superio's i8042 answers only the reset command; test kernels
//! also read the command byte and run the self tests.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::{BusDevice, IoAction};

/// Offset of the data port (0x60) from the device's base.
pub const DATA_OFFSET: u64 = 0;
/// Offset of the status/command port (0x64) from the device's base.
pub const COMMAND_OFFSET: u64 = 4;

/// Status: output buffer full (data waiting at port 0x60).
pub const STATUS_OBF: u8 = 0x01;
/// Status: input buffer full (never set here: the controller takes bytes at once).
pub const STATUS_IBF: u8 = 0x02;
/// Status: system flag (set after a successful self test; set from the start, as
/// firmware would have run the test).
pub const STATUS_SYS: u8 = 0x04;
/// Status: the last byte written went to the command port.
pub const STATUS_CMD: u8 = 0x08;
/// Status: keyboard not inhibited.
pub const STATUS_UNLOCKED: u8 = 0x10;

const CTR_SYS: u8 = 0x04;
const CTR_KBD_DISABLED: u8 = 0x10;
const CTR_AUX_DISABLED: u8 = 0x20;
/// Command byte after reset: keyboard and aux interrupts enabled, system flag set.
const CTR_DEFAULT: u8 = 0x01 | 0x02 | CTR_SYS;
const OUTPUT_QUEUE_MAX: usize = 16;

#[derive(Debug)]
struct State {
    ctr: u8,
    last_was_command: bool,
    pending: Option<u8>,
    out: VecDeque<u8>,
    last_read: u8,
}

/// The i8042 controller.
#[derive(Debug)]
pub struct I8042 {
    state: Mutex<State>,
}

impl Default for I8042 {
    fn default() -> Self {
        Self::new()
    }
}

impl I8042 {
    /// A controller in its after-firmware state: empty buffers, default command byte.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                ctr: CTR_DEFAULT,
                last_was_command: false,
                pending: None,
                out: VecDeque::new(),
                last_read: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    fn read_byte(st: &mut State, offset: u64) -> u8 {
        match offset {
            DATA_OFFSET => {
                if let Some(b) = st.out.pop_front() {
                    st.last_read = b;
                }
                st.last_read
            }
            COMMAND_OFFSET => {
                let mut s = STATUS_UNLOCKED;
                if st.ctr & CTR_SYS != 0 {
                    s |= STATUS_SYS;
                }
                if st.last_was_command {
                    s |= STATUS_CMD;
                }
                if !st.out.is_empty() {
                    s |= STATUS_OBF;
                }
                s
            }
            _ => 0xFF,
        }
    }

    fn push(st: &mut State, b: u8) {
        if st.out.len() < OUTPUT_QUEUE_MAX {
            st.out.push_back(b);
        }
    }

    fn write_byte(st: &mut State, offset: u64, value: u8) -> IoAction {
        match offset {
            DATA_OFFSET => {
                st.last_was_command = false;
                match st.pending.take() {
                    Some(0x60) => st.ctr = value,
                    Some(0xD1) if value & 0x01 == 0 => return IoAction::Reset,
                    Some(0xD2) => Self::push(st, value),
                    // Other parameters (internal RAM writes, output port with the
                    // reset line high) and bytes for the absent keyboard are dropped.
                    _ => {}
                }
                IoAction::Continue
            }
            COMMAND_OFFSET => {
                st.last_was_command = true;
                st.pending = None;
                match value {
                    0x20 => {
                        let ctr = st.ctr;
                        Self::push(st, ctr);
                    }
                    0x21..=0x3F => Self::push(st, 0),
                    0x60..=0x7F | 0xD1 | 0xD2 => st.pending = Some(value),
                    0xA7 => st.ctr |= CTR_AUX_DISABLED,
                    0xA8 => st.ctr &= !CTR_AUX_DISABLED,
                    0xAA => {
                        st.ctr |= CTR_SYS;
                        Self::push(st, 0x55);
                    }
                    0xAB => Self::push(st, 0x00),
                    0xAD => st.ctr |= CTR_KBD_DISABLED,
                    0xAE => st.ctr &= !CTR_KBD_DISABLED,
                    0xD0 => Self::push(st, 0x03),
                    0xF0..=0xFF if value & 0x01 == 0 => return IoAction::Reset,
                    _ => {}
                }
                IoAction::Continue
            }
            _ => IoAction::Continue,
        }
    }
}

impl BusDevice for I8042 {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let mut st = self.lock();
        for (i, b) in data.iter_mut().enumerate() {
            *b = match offset.checked_add(i as u64) {
                Some(o) => Self::read_byte(&mut st, o),
                None => 0xFF,
            };
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        let mut st = self.lock();
        let mut action = IoAction::Continue;
        for (i, b) in data.iter().enumerate() {
            if let Some(o) = offset.checked_add(i as u64) {
                if Self::write_byte(&mut st, o, *b) == IoAction::Reset {
                    action = IoAction::Reset;
                }
            }
        }
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;
    use crate::OffsetDevice;
    use std::sync::Arc;

    fn rd(d: &dyn BusDevice, off: u64) -> u8 {
        let mut b = [0u8];
        d.read(off, &mut b);
        b[0]
    }

    #[test]
    fn fe_resets() {
        let d = I8042::new();
        assert_eq!(d.write(COMMAND_OFFSET, &[0xFE]), IoAction::Reset);
        assert_eq!(d.write(COMMAND_OFFSET, &[0xFF]), IoAction::Continue);
    }

    #[test]
    fn output_port_write_resets_when_bit0_clear() {
        let d = I8042::new();
        assert_eq!(d.write(COMMAND_OFFSET, &[0xD1]), IoAction::Continue);
        assert_eq!(d.write(DATA_OFFSET, &[0x03]), IoAction::Continue);
        d.write(COMMAND_OFFSET, &[0xD1]);
        assert_eq!(d.write(DATA_OFFSET, &[0x02]), IoAction::Reset);
    }

    #[test]
    fn status_is_idle() {
        let d = I8042::new();
        let s = rd(&d, COMMAND_OFFSET);
        assert_eq!(s & (STATUS_OBF | STATUS_IBF), 0);
        assert_eq!(s & STATUS_SYS, STATUS_SYS);
    }

    #[test]
    fn command_byte_round_trip_and_self_test() {
        let d = I8042::new();
        d.write(COMMAND_OFFSET, &[0x60]);
        d.write(DATA_OFFSET, &[0x45]);
        d.write(COMMAND_OFFSET, &[0x20]);
        assert_eq!(rd(&d, COMMAND_OFFSET) & STATUS_OBF, STATUS_OBF);
        assert_eq!(rd(&d, DATA_OFFSET), 0x45);
        assert_eq!(rd(&d, COMMAND_OFFSET) & STATUS_OBF, 0);
        d.write(COMMAND_OFFSET, &[0xAA]);
        assert_eq!(rd(&d, DATA_OFFSET), 0x55);
        d.write(COMMAND_OFFSET, &[0xD2]);
        d.write(DATA_OFFSET, &[0x9C]);
        assert_eq!(rd(&d, DATA_OFFSET), 0x9C);
        // Empty buffer: the last byte read stays on the bus.
        assert_eq!(rd(&d, DATA_OFFSET), 0x9C);
    }

    #[test]
    fn works_through_offset_view() {
        let d: Arc<dyn BusDevice> = Arc::new(I8042::new());
        let cmd = OffsetDevice::new(d.clone(), COMMAND_OFFSET);
        assert_eq!(cmd.write(0, &[0xFE]), IoAction::Reset);
        assert_eq!(rd(&cmd, 0) & STATUS_IBF, 0);
    }

    #[test]
    fn output_queue_is_bounded() {
        let d = I8042::new();
        for _ in 0..100 {
            d.write(COMMAND_OFFSET, &[0x20]);
        }
        let mut n = 0;
        while rd(&d, COMMAND_OFFSET) & STATUS_OBF != 0 {
            rd(&d, DATA_OFFSET);
            n += 1;
        }
        assert_eq!(n, OUTPUT_QUEUE_MAX);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        hammer(&I8042::new(), 8);
    }
}
