//! 16550A UART (COM1 on a PC: port 0x3F8, 8 ports, ISA IRQ 4), built on vm-superio's
//! `Serial`.
//!
//! Output bytes go to any `Write + Send` sink: stdout, a file, [`std::io::sink`] to
//! discard, or a [`SharedBuffer`] a test reads back byte for byte. Input bytes for the
//! guest are queued with [`Serial::enqueue_input`].
//!
//! Interrupts are edge-triggered: through an `EventFd` that the VMM registers with KVM
//! as an irqfd for GSI 4 (each time the UART raises an interrupt it writes the
//! eventfd), or, where the I/O APIC is in userspace (a split irqchip), as a pulse on an
//! [`IrqLine`] ([`Serial::with_line`]). The transmitter is always ready: LSR bit 5 (THR empty) and bit 6 (idle)
//! read as set, so a guest polling LSR before each byte never waits.
//!
//! Accesses wider than a byte are split into byte accesses at consecutive registers,
//! as the ISA bus does for an 8-bit device.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use vm_superio::serial::NoEvents;
use vm_superio::Trigger;
use vmm_sys_util::eventfd::EventFd;

use crate::{BusDevice, IoAction, IrqLine};

/// Number of ports the UART decodes.
pub const SERIAL_PORT_LEN: u64 = 8;

/// Errors of the serial device.
#[derive(Debug, thiserror::Error)]
pub enum SerialError {
    /// Signalling the interrupt eventfd failed.
    #[error(
        "failed to signal the serial interrupt eventfd: {0}; check that the eventfd is still open"
    )]
    Interrupt(#[source] io::Error),
    /// Duplicating the interrupt eventfd failed.
    #[error("failed to duplicate the serial interrupt eventfd: {0}; the process may be out of file descriptors")]
    CloneEventFd(#[source] io::Error),
    /// The UART drives an interrupt line, not an eventfd.
    #[error("the serial port drives an interrupt line directly (split irqchip): there is no eventfd to register as irqfd")]
    NoEventFd,
}

/// The interrupt trigger handed to vm-superio.
pub enum SerialTrigger {
    /// Writes 1 to an eventfd (an irqfd of the in-kernel irqchip).
    EventFd(EventFd),
    /// Pulses line `gsi` (raise, lower): an edge for the userspace I/O APIC.
    Line(Arc<dyn IrqLine>, u32),
}

impl std::fmt::Debug for SerialTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SerialTrigger::EventFd(e) => f.debug_tuple("EventFd").field(e).finish(),
            SerialTrigger::Line(_, gsi) => f.debug_tuple("Line").field(gsi).finish(),
        }
    }
}

impl Trigger for SerialTrigger {
    type E = io::Error;

    fn trigger(&self) -> io::Result<()> {
        match self {
            SerialTrigger::EventFd(e) => e.write(1),
            SerialTrigger::Line(line, gsi) => {
                line.set_level(*gsi, true);
                line.set_level(*gsi, false);
                Ok(())
            }
        }
    }
}

/// A cloneable in-memory output sink; every clone appends to the same buffer.
#[derive(Debug, Clone, Default)]
pub struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of everything written so far.
    pub fn contents(&self) -> Vec<u8> {
        crate::lock(&self.0).clone()
    }

    /// Take everything written so far, leaving the buffer empty.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *crate::lock(&self.0))
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        crate::lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type Uart = vm_superio::Serial<SerialTrigger, NoEvents, Box<dyn Write + Send>>;

/// The 16550A UART.
pub struct Serial {
    uart: Mutex<Uart>,
}

impl std::fmt::Debug for Serial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serial").finish_non_exhaustive()
    }
}

impl Serial {
    /// A UART that signals `interrupt` when it raises its interrupt line and writes
    /// the guest's output to `out`.
    ///
    /// The VMM keeps a duplicate of `interrupt` (see [`Serial::interrupt_eventfd`] or
    /// `EventFd::try_clone` before the call) to register as irqfd for GSI 4.
    pub fn new(interrupt: EventFd, out: Box<dyn Write + Send>) -> Self {
        Self {
            uart: Mutex::new(vm_superio::Serial::new(
                SerialTrigger::EventFd(interrupt),
                out,
            )),
        }
    }

    /// A UART whose interrupt is an edge (a pulse) on line `gsi` of `line`.
    pub fn with_line(line: Arc<dyn IrqLine>, gsi: u32, out: Box<dyn Write + Send>) -> Self {
        Self {
            uart: Mutex::new(vm_superio::Serial::new(SerialTrigger::Line(line, gsi), out)),
        }
    }

    /// A duplicate of the interrupt eventfd, for the VMM to register as irqfd.
    pub fn interrupt_eventfd(&self) -> Result<EventFd, SerialError> {
        let uart = self.lock();
        match uart.interrupt_evt() {
            SerialTrigger::EventFd(e) => e.try_clone().map_err(SerialError::CloneEventFd),
            SerialTrigger::Line(..) => Err(SerialError::NoEventFd),
        }
    }

    /// Queue bytes for the guest to read. Returns how many fit in the 64-byte receive
    /// FIFO (possibly 0 when it is full); the caller retries the rest later.
    pub fn enqueue_input(&self, input: &[u8]) -> Result<usize, SerialError> {
        let mut uart = self.lock();
        if uart.fifo_capacity() == 0 || input.is_empty() {
            return Ok(0);
        }
        match uart.enqueue_raw_bytes(input) {
            Ok(n) => Ok(n),
            Err(vm_superio::serial::Error::Trigger(e)) => Err(SerialError::Interrupt(e)),
            Err(_) => Ok(0),
        }
    }

    /// Free space in the receive FIFO, in bytes.
    pub fn input_capacity(&self) -> usize {
        self.lock().fifo_capacity()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Uart> {
        // A panic while holding the lock cannot leave the UART's registers in a state
        // worse than a guest could, so keep going with the inner value.
        crate::lock(&self.uart)
    }
}

impl BusDevice for Serial {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let mut uart = self.lock();
        for (i, b) in data.iter_mut().enumerate() {
            *b = match offset.checked_add(i as u64) {
                Some(reg) if reg < SERIAL_PORT_LEN => uart.read(reg as u8),
                _ => 0xFF,
            };
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        let mut uart = self.lock();
        for (i, b) in data.iter().enumerate() {
            if let Some(reg) = offset.checked_add(i as u64) {
                if reg < SERIAL_PORT_LEN {
                    // A failing sink (closed pipe, full disk) loses the byte; the guest
                    // cannot be told, exactly as with a disconnected cable.
                    let _ = uart.write(reg as u8, *b);
                }
            }
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;
    use vmm_sys_util::eventfd::EFD_NONBLOCK;

    const THR: u64 = 0;
    const IER: u64 = 1;
    const LSR: u64 = 5;

    fn new_serial() -> (Serial, SharedBuffer, EventFd) {
        let evt = EventFd::new(EFD_NONBLOCK).unwrap();
        let irq = evt.try_clone().unwrap();
        let buf = SharedBuffer::new();
        (Serial::new(evt, Box::new(buf.clone())), buf, irq)
    }

    fn read_byte(s: &Serial, off: u64) -> u8 {
        let mut b = [0u8];
        s.read(off, &mut b);
        b[0]
    }

    #[test]
    fn output_is_byte_exact() {
        let (s, buf, _) = new_serial();
        let msg: Vec<u8> = (0..=255u8).chain(b"hello\r\n".iter().copied()).collect();
        for b in &msg {
            assert_ne!(read_byte(&s, LSR) & 0x20, 0);
            assert_eq!(s.write(THR, &[*b]), IoAction::Continue);
        }
        assert_eq!(buf.contents(), msg);
        assert_eq!(buf.take(), msg);
        assert!(buf.contents().is_empty());
    }

    #[test]
    fn lsr_reports_thr_empty_and_idle() {
        let (s, _, _) = new_serial();
        assert_eq!(read_byte(&s, LSR) & 0x60, 0x60);
        s.write(THR, b"x");
        assert_eq!(read_byte(&s, LSR) & 0x60, 0x60);
    }

    #[test]
    fn input_is_readable_and_raises_interrupt() {
        let (s, _, irq) = new_serial();
        s.write(IER, &[0x01]); // received-data interrupt
        assert_eq!(s.enqueue_input(b"ok").unwrap(), 2);
        assert_eq!(irq.read().unwrap(), 1);
        assert_eq!(read_byte(&s, LSR) & 0x01, 0x01);
        assert_eq!(read_byte(&s, THR), b'o');
        assert_eq!(read_byte(&s, THR), b'k');
        assert_eq!(read_byte(&s, LSR) & 0x01, 0);
    }

    #[test]
    fn input_fifo_fills_without_error() {
        let (s, _, _) = new_serial();
        assert_eq!(s.enqueue_input(&[b'a'; 100]).unwrap(), 64);
        assert_eq!(s.input_capacity(), 0);
        assert_eq!(s.enqueue_input(b"b").unwrap(), 0);
        assert_eq!(s.enqueue_input(b"").unwrap(), 0);
    }

    #[test]
    fn thr_empty_interrupt_on_write() {
        let (s, buf, irq) = new_serial();
        s.write(IER, &[0x02]);
        // Enabling the THR-empty interrupt raises it at once.
        assert_eq!(irq.read().unwrap(), 1);
        let mut iir = [0u8];
        s.read(2, &mut iir);
        s.write(THR, b"z");
        assert_eq!(irq.read().unwrap(), 1);
        assert_eq!(buf.contents(), b"z");
        assert!(s.interrupt_eventfd().is_ok());
    }

    #[test]
    fn a_line_trigger_pulses_the_line() {
        let lines = Arc::new(crate::test_util::Lines::default());
        let s = Serial::with_line(lines.clone(), 4, Box::new(std::io::sink()));
        s.write(IER, &[0x02]);
        assert_eq!(*crate::lock(&lines.0), vec![(4, true), (4, false)]);
        assert!(matches!(s.interrupt_eventfd(), Err(SerialError::NoEventFd)));
    }

    #[test]
    fn wide_access_splits_into_bytes() {
        let (s, buf, _) = new_serial();
        // A 16-bit write at 0x3F8 writes THR and IER.
        s.write(THR, &[b'A', 0x00]);
        assert_eq!(buf.contents(), b"A");
        let mut w = [0u8; 2];
        s.read(7, &mut w);
        assert_eq!(w[1], 0xFF);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        let (s, _, _) = new_serial();
        hammer(&s, 16);
    }
}
