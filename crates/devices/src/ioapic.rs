//! The I/O APIC of a split irqchip (`--irqchip split`): an 82093AA-style I/O APIC in
//! userspace, with 24 inputs, whose interrupts go to the in-kernel local APICs as MSIs.
//!
//! Registers (MMIO at [`crate::pc::IOAPIC`], 0xFEC00000): IOREGSEL at offset 0x00 (the
//! index of the register IOWIN shows, 8 bits), IOWIN at 0x10 (32-bit accesses only) and,
//! as version 0x20 has it, the EOI register at 0x40 (a write of a vector ends the
//! level-triggered interrupts of that vector, as a local APIC's EOI broadcast does).
//! Indirect registers: 0x00 ID (bits 24..27), 0x01 version (0x20, 23 = highest
//! redirection entry in bits 16..23), 0x02 arbitration (= ID), 0x10..0x3F the 24
//! redirection entries, low dword first. Other indices read 0 and ignore writes, as do
//! accesses of other widths to IOWIN and the EOI register, and every other offset.
//!
//! Version 0x20 (QEMU's default) rather than KVM's in-kernel 0x11: both model the same
//! redirection table; 0x20 adds the EOI register, which guests with directed EOI use.
//!
//! Delivery: a redirection entry is turned into an MSI (address 0xFEE00000 with the
//! destination in bits 12..19 and the destination mode in bit 2; data with the vector,
//! the delivery mode, the trigger mode in bit 15 and, for level, assert in bit 14) and
//! handed to the [`MsiSink`] (the VMM: KVM_SIGNAL_MSI). Every change of the 24 messages
//! is also handed to the sink (KVM_SET_GSI_ROUTING), because KVM sends an EOI of a
//! vector back to userspace (KVM_EXIT_IOAPIC_EOI) only for the level-triggered vectors
//! of those routes.
//!
//! - Edge-triggered input: a rising edge on an unmasked entry delivers one interrupt;
//!   an edge while the entry is masked is lost (as on the 82093AA and KVM's in-kernel
//!   I/O APIC).
//! - Level-triggered input: while the line is asserted and the entry unmasked, one
//!   interrupt is delivered and remote IRR (bit 14) set; no other until the EOI of its
//!   vector ([`Ioapic::end_of_interrupt`]) clears remote IRR, and then, if the line is
//!   still asserted, it is delivered again. Unmasking an entry whose line is asserted
//!   delivers it. Switching an entry to edge clears remote IRR.
//! - Polarity (bit 13) is kept but not applied: devices drive their lines active-high,
//!   as KVM's and QEMU's I/O APICs also assume.
//! - Delivery status (bit 12) always reads 0: an MSI is delivered at once.
//!
//! The I/O APIC counts the guest's register accesses ([`Ioapic::accesses`]), so that a
//! test can check that every access the guest made reached userspace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{BusDevice, IoAction};

/// Inputs (and redirection entries) of the I/O APIC.
pub const IOAPIC_PINS: usize = 24;
/// The version register's version field.
pub const IOAPIC_VERSION: u32 = 0x20;
/// Bytes of MMIO the I/O APIC decodes.
pub const IOAPIC_MMIO_LEN: u64 = 0x1000;

/// Offset of IOREGSEL.
pub const IOREGSEL: u64 = 0x00;
/// Offset of IOWIN.
pub const IOWIN: u64 = 0x10;
/// Offset of the EOI register (version 0x20).
pub const IOEOI: u64 = 0x40;

/// Indirect register: ID.
pub const REG_ID: u8 = 0x00;
/// Indirect register: version.
pub const REG_VERSION: u8 = 0x01;
/// Indirect register: arbitration ID.
pub const REG_ARB: u8 = 0x02;
/// Indirect register: low dword of redirection entry 0.
pub const REG_REDIR_BASE: u8 = 0x10;

/// Redirection entry: masked.
pub const RTE_MASKED: u64 = 1 << 16;
/// Redirection entry: level-triggered.
pub const RTE_LEVEL: u64 = 1 << 15;
/// Redirection entry: remote IRR (read-only).
pub const RTE_REMOTE_IRR: u64 = 1 << 14;
/// Redirection entry: delivery status (read-only).
const RTE_DELIVERY_STATUS: u64 = 1 << 12;
/// Bits of a redirection entry the guest cannot write.
const RTE_READ_ONLY: u64 = RTE_REMOTE_IRR | RTE_DELIVERY_STATUS;

/// One MSI: what a redirection entry sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MsiMessage {
    /// The address (0xFEE00000 | destination | destination mode).
    pub address: u64,
    /// The data (vector, delivery mode, trigger mode, assert).
    pub data: u32,
}

impl MsiMessage {
    /// The message redirection entry `rte` sends.
    pub fn from_redirection(rte: u64) -> MsiMessage {
        let vector = (rte & 0xff) as u32;
        let delivery_mode = ((rte >> 8) & 0x7) as u32;
        let dest_mode = (rte >> 11) & 1;
        let level = rte & RTE_LEVEL != 0;
        let dest = (rte >> 56) & 0xff;
        MsiMessage {
            address: 0xfee0_0000 | (dest << 12) | (dest_mode << 2),
            data: vector | (delivery_mode << 8) | if level { (1 << 15) | (1 << 14) } else { 0 },
        }
    }
}

/// What the I/O APIC needs from the VMM.
pub trait MsiSink: Send + Sync {
    /// Deliver one MSI (KVM_SIGNAL_MSI). `false` when it could not be delivered.
    fn signal_msi(&self, msg: MsiMessage) -> bool;
    /// The message of every input, after any change (KVM_SET_GSI_ROUTING: GSI `i` routes
    /// to `routes[i]`, so that KVM reports the EOIs of level-triggered vectors).
    fn routes_changed(&self, routes: &[MsiMessage; IOAPIC_PINS]);
}

/// Register accesses the guest made, by kind, and the interrupt messages the I/O APIC
/// sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoapicAccesses {
    /// MMIO reads of any I/O APIC register.
    pub reads: u64,
    /// MMIO writes of any I/O APIC register.
    pub writes: u64,
    /// Interrupt messages handed to KVM and accepted (edges, and level deliveries
    /// including each one again after an EOI): what the guest can have been sent from
    /// here, whatever the host's local APIC then did with them.
    pub delivered: u64,
}

impl IoapicAccesses {
    /// Reads and writes.
    pub fn total(&self) -> u64 {
        self.reads + self.writes
    }
}

struct State {
    regsel: u8,
    id: u32,
    redir: [u64; IOAPIC_PINS],
    /// Input levels, one bit per pin.
    lines: u32,
    /// The messages last handed to the sink's `routes_changed`.
    routes: Option<[MsiMessage; IOAPIC_PINS]>,
}

/// The userspace I/O APIC.
pub struct Ioapic {
    state: Mutex<State>,
    sink: Arc<dyn MsiSink>,
    reads: AtomicU64,
    writes: AtomicU64,
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for Ioapic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ioapic")
            .field("accesses", &self.accesses())
            .finish_non_exhaustive()
    }
}

impl Ioapic {
    /// An I/O APIC in its reset state (every entry masked, ID 0) delivering through
    /// `sink`.
    pub fn new(sink: Arc<dyn MsiSink>) -> Ioapic {
        Ioapic {
            state: Mutex::new(State {
                regsel: 0,
                id: 0,
                redir: [RTE_MASKED; IOAPIC_PINS],
                lines: 0,
                routes: None,
            }),
            sink,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// The guest's register accesses so far, and the messages delivered.
    pub fn accesses(&self) -> IoapicAccesses {
        IoapicAccesses {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
        }
    }

    /// Interrupts delivered, and deliveries the sink refused.
    pub fn deliveries(&self) -> (u64, u64) {
        (
            self.delivered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Redirection entry `pin` (`None` past the last).
    pub fn redirection(&self, pin: usize) -> Option<u64> {
        crate::lock(&self.state).redir.get(pin).copied()
    }

    /// Sets the level of input `pin`; inputs past the last are ignored.
    pub fn set_level(&self, pin: u32, level: bool) {
        let Some(bit) = pin_bit(pin) else { return };
        let mut s = crate::lock(&self.state);
        let was = s.lines & bit != 0;
        if level {
            s.lines |= bit;
        } else {
            s.lines &= !bit;
        }
        let rte = s.redir[pin as usize];
        if rte & RTE_LEVEL != 0 {
            if level {
                self.service(&mut s, pin as usize);
            }
        } else if level && !was && rte & RTE_MASKED == 0 {
            self.deliver(rte);
        }
    }

    /// The end of the interrupts of `vector` (a local APIC's EOI that KVM reported with
    /// KVM_EXIT_IOAPIC_EOI, or a write to the EOI register): clears remote IRR of every
    /// level-triggered entry with that vector and delivers again those whose line is
    /// still asserted.
    pub fn end_of_interrupt(&self, vector: u8) {
        let mut s = crate::lock(&self.state);
        for pin in 0..IOAPIC_PINS {
            let rte = s.redir[pin];
            if rte & RTE_REMOTE_IRR != 0 && (rte & 0xff) as u8 == vector {
                s.redir[pin] &= !RTE_REMOTE_IRR;
                self.service(&mut s, pin);
            }
        }
    }

    /// Delivers a level-triggered entry whose line is asserted, if it is unmasked and no
    /// earlier delivery awaits its EOI.
    fn service(&self, s: &mut State, pin: usize) {
        let rte = s.redir[pin];
        if rte & RTE_LEVEL != 0
            && s.lines & (1 << pin) != 0
            && rte & (RTE_MASKED | RTE_REMOTE_IRR) == 0
        {
            s.redir[pin] |= RTE_REMOTE_IRR;
            self.deliver(rte);
        }
    }

    fn deliver(&self, rte: u64) {
        if self.sink.signal_msi(MsiMessage::from_redirection(rte)) {
            self.delivered.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands the routes to the sink when they differ from the last ones it saw.
    fn publish_routes(&self, s: &mut State) {
        let routes = s.redir.map(MsiMessage::from_redirection);
        if s.routes != Some(routes) {
            s.routes = Some(routes);
            self.sink.routes_changed(&routes);
        }
    }

    fn read_register(s: &State) -> u32 {
        match s.regsel {
            REG_ID | REG_ARB => s.id << 24,
            REG_VERSION => ((IOAPIC_PINS as u32 - 1) << 16) | IOAPIC_VERSION,
            r => match redir_index(r) {
                Some((pin, false)) => s.redir[pin] as u32,
                Some((pin, true)) => (s.redir[pin] >> 32) as u32,
                None => 0,
            },
        }
    }

    fn write_register(&self, s: &mut State, v: u32) {
        match s.regsel {
            REG_ID => s.id = (v >> 24) & 0xf,
            r => {
                let Some((pin, high)) = redir_index(r) else {
                    return;
                };
                let old = s.redir[pin];
                let new = if high {
                    (old & 0xffff_ffff) | (u64::from(v) << 32)
                } else {
                    (old & !0xffff_ffff) | u64::from(v)
                };
                let mut rte = (new & !RTE_READ_ONLY) | (old & RTE_READ_ONLY);
                if rte & RTE_LEVEL == 0 {
                    rte &= !RTE_REMOTE_IRR;
                }
                s.redir[pin] = rte;
                self.publish_routes(s);
                self.service(s, pin);
            }
        }
    }
}

/// The bit of input `pin`, if there is such an input.
fn pin_bit(pin: u32) -> Option<u32> {
    (pin < IOAPIC_PINS as u32).then(|| 1 << pin)
}

/// The redirection entry (and whether the high dword) of indirect register `r`.
fn redir_index(r: u8) -> Option<(usize, bool)> {
    let i = usize::from(r.checked_sub(REG_REDIR_BASE)?);
    (i < 2 * IOAPIC_PINS).then_some((i / 2, i % 2 == 1))
}

impl BusDevice for Ioapic {
    fn read(&self, offset: u64, data: &mut [u8]) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let s = crate::lock(&self.state);
        let v = match (offset, data.len()) {
            (IOREGSEL, 1..=4) => u32::from(s.regsel),
            (IOWIN, 4) => Self::read_register(&s),
            _ => 0,
        };
        let bytes = v.to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = bytes.get(i).copied().unwrap_or(0);
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut s = crate::lock(&self.state);
        match (offset, data.len()) {
            (IOREGSEL, 1..=4) => s.regsel = data[0],
            (IOWIN, 4) => {
                let v = crate::le_value(data) as u32;
                self.write_register(&mut s, v);
            }
            (IOEOI, 4) => {
                drop(s);
                self.end_of_interrupt(data[0]);
            }
            _ => {}
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every MSI and every routing table.
    #[derive(Default)]
    struct Rec {
        msis: Mutex<Vec<MsiMessage>>,
        routes: Mutex<Vec<[MsiMessage; IOAPIC_PINS]>>,
    }

    impl MsiSink for Rec {
        fn signal_msi(&self, msg: MsiMessage) -> bool {
            crate::lock(&self.msis).push(msg);
            true
        }
        fn routes_changed(&self, routes: &[MsiMessage; IOAPIC_PINS]) {
            crate::lock(&self.routes).push(*routes);
        }
    }

    impl Rec {
        fn vectors(&self) -> Vec<u32> {
            crate::lock(&self.msis)
                .iter()
                .map(|m| m.data & 0xff)
                .collect()
        }
    }

    fn ioapic() -> (Ioapic, Arc<Rec>) {
        let rec = Arc::new(Rec::default());
        (Ioapic::new(rec.clone()), rec)
    }

    fn reg_write(io: &Ioapic, reg: u8, v: u32) {
        io.write(IOREGSEL, &[reg, 0, 0, 0]);
        io.write(IOWIN, &v.to_le_bytes());
    }

    fn reg_read(io: &Ioapic, reg: u8) -> u32 {
        io.write(IOREGSEL, &[reg, 0, 0, 0]);
        let mut d = [0u8; 4];
        io.read(IOWIN, &mut d);
        u32::from_le_bytes(d)
    }

    fn route(io: &Ioapic, pin: u8, low: u32, dest: u8) {
        reg_write(io, REG_REDIR_BASE + 2 * pin + 1, u32::from(dest) << 24);
        reg_write(io, REG_REDIR_BASE + 2 * pin, low);
    }

    #[test]
    fn identification_registers() {
        let (io, _) = ioapic();
        assert_eq!(reg_read(&io, REG_VERSION), 0x0017_0020);
        assert_eq!(reg_read(&io, REG_ID), 0);
        reg_write(&io, REG_ID, 0x0f00_0000 | 0xabcd);
        assert_eq!(reg_read(&io, REG_ID), 0x0f00_0000);
        assert_eq!(reg_read(&io, REG_ARB), 0x0f00_0000);
        reg_write(&io, REG_VERSION, 0);
        assert_eq!(reg_read(&io, REG_VERSION), 0x0017_0020, "read-only");
        // IOREGSEL reads back; unknown indices read 0 and ignore writes.
        io.write(IOREGSEL, &[0x05]);
        let mut b = [0u8; 1];
        io.read(IOREGSEL, &mut b);
        assert_eq!(b[0], 5);
        for r in [0x03u8, 0x0f, 0x40, 0xff] {
            reg_write(&io, r, 0xffff_ffff);
            assert_eq!(reg_read(&io, r), 0, "{r:#x}");
        }
    }

    #[test]
    fn redirection_entries_reset_masked_and_keep_what_is_written() {
        let (io, _) = ioapic();
        for pin in 0..IOAPIC_PINS as u8 {
            assert_eq!(
                reg_read(&io, REG_REDIR_BASE + 2 * pin),
                1 << 16,
                "pin {pin}"
            );
            assert_eq!(reg_read(&io, REG_REDIR_BASE + 2 * pin + 1), 0);
        }
        // Remote IRR and delivery status are read-only.
        reg_write(&io, REG_REDIR_BASE + 6, 0xffff_ffff);
        reg_write(&io, REG_REDIR_BASE + 7, 0x1200_0000);
        assert_eq!(reg_read(&io, REG_REDIR_BASE + 6), !(RTE_READ_ONLY as u32));
        assert_eq!(io.redirection(3), Some(0x1200_0000_ffff_afff));
        assert_eq!(io.redirection(IOAPIC_PINS), None);
    }

    #[test]
    fn edges_deliver_once_and_are_lost_while_masked() {
        let (io, rec) = ioapic();
        io.set_level(4, true);
        io.set_level(4, false);
        assert!(rec.vectors().is_empty(), "masked at reset");
        route(&io, 4, 0x31, 1);
        io.set_level(4, true);
        io.set_level(4, true);
        io.set_level(4, false);
        io.set_level(4, true);
        io.set_level(4, false);
        assert_eq!(rec.vectors(), vec![0x31, 0x31], "one per rising edge");
        let m = crate::lock(&rec.msis)[0];
        assert_eq!(m.address, 0xfee0_1000);
        assert_eq!(m.data, 0x31);
        // Logical destination mode, lowest priority.
        route(&io, 5, 0x32 | (1 << 8) | (1 << 11), 0x3);
        io.set_level(5, true);
        let m = *crate::lock(&rec.msis).last().unwrap();
        assert_eq!((m.address, m.data), (0xfee0_3004, 0x132));
        assert_eq!(io.deliveries(), (3, 0));
    }

    #[test]
    fn level_interrupts_wait_for_eoi_and_refire_while_asserted() {
        let (io, rec) = ioapic();
        let level = 0x41 | RTE_LEVEL as u32;
        route(&io, 10, level, 0);
        io.set_level(10, true);
        assert_eq!(rec.vectors(), vec![0x41]);
        assert_eq!(crate::lock(&rec.msis)[0].data, 0x41 | 0xc000);
        assert!(io.redirection(10).unwrap() & RTE_REMOTE_IRR != 0);
        // Still asserted, remote IRR set: nothing more.
        io.set_level(10, true);
        assert_eq!(rec.vectors().len(), 1);
        // The EOI of another vector changes nothing.
        io.end_of_interrupt(0x42);
        assert_eq!(rec.vectors().len(), 1);
        // EOI while the line is still high: delivered again.
        io.end_of_interrupt(0x41);
        assert_eq!(rec.vectors(), vec![0x41, 0x41]);
        // Line lowered, then EOI: remote IRR clear, nothing delivered.
        io.set_level(10, false);
        io.end_of_interrupt(0x41);
        assert_eq!(rec.vectors().len(), 2);
        assert_eq!(io.redirection(10).unwrap() & RTE_REMOTE_IRR, 0);
        // The EOI register does the same as a local APIC EOI.
        io.set_level(10, true);
        assert_eq!(rec.vectors().len(), 3);
        io.write(IOEOI, &[0x41, 0, 0, 0]);
        assert_eq!(rec.vectors().len(), 4, "re-fired: the line is still high");
    }

    #[test]
    fn unmasking_an_asserted_level_line_delivers_and_edge_mode_clears_remote_irr() {
        let (io, rec) = ioapic();
        io.set_level(11, true);
        let level = 0x50 | RTE_LEVEL as u32;
        route(&io, 11, level | RTE_MASKED as u32, 0);
        assert!(rec.vectors().is_empty());
        reg_write(&io, REG_REDIR_BASE + 22, level);
        assert_eq!(rec.vectors(), vec![0x50]);
        assert!(io.redirection(11).unwrap() & RTE_REMOTE_IRR != 0);
        // Masked with remote IRR set: the EOI still clears it, and nothing is sent.
        reg_write(&io, REG_REDIR_BASE + 22, level | RTE_MASKED as u32);
        io.end_of_interrupt(0x50);
        assert_eq!(io.redirection(11).unwrap() & RTE_REMOTE_IRR, 0);
        assert_eq!(rec.vectors().len(), 1);
        reg_write(&io, REG_REDIR_BASE + 22, level);
        assert_eq!(rec.vectors().len(), 2);
        reg_write(&io, REG_REDIR_BASE + 22, 0x50);
        assert_eq!(io.redirection(11).unwrap() & RTE_REMOTE_IRR, 0);
    }

    #[test]
    fn routes_are_published_when_they_change() {
        let (io, rec) = ioapic();
        route(&io, 2, 0x60 | RTE_LEVEL as u32, 7);
        let n = crate::lock(&rec.routes).len();
        assert!(n >= 1);
        let last = *crate::lock(&rec.routes).last().unwrap();
        assert_eq!(last[2].address, 0xfee0_7000);
        assert_eq!(last[2].data, 0xc060);
        // Writing the same value again publishes nothing new.
        reg_write(&io, REG_REDIR_BASE + 4, 0x60 | RTE_LEVEL as u32);
        assert_eq!(crate::lock(&rec.routes).len(), n);
    }

    #[test]
    fn odd_widths_offsets_and_pins_are_ignored() {
        let (io, rec) = ioapic();
        io.write(IOREGSEL, &[REG_VERSION]);
        let mut two = [0xaau8; 2];
        io.read(IOWIN, &mut two);
        assert_eq!(two, [0, 0], "IOWIN is 32-bit only");
        let mut eight = [0xaau8; 8];
        io.read(IOREGSEL, &mut eight);
        assert_eq!(eight, [0; 8]);
        io.write(IOREGSEL, &[REG_REDIR_BASE, 0, 0, 0]);
        io.write(IOWIN, &[0x20, 0]);
        assert_eq!(io.redirection(0), Some(RTE_MASKED));
        io.set_level(24, true);
        io.set_level(u32::MAX, true);
        io.end_of_interrupt(0);
        assert!(rec.vectors().is_empty());
        crate::test_util::hammer(&io, 0x50);
        assert!(io.accesses().total() > 0);
    }

    #[test]
    fn accesses_are_counted() {
        let (io, _) = ioapic();
        reg_read(&io, REG_VERSION);
        route(&io, 1, 0x30, 0);
        assert_eq!(
            io.accesses(),
            IoapicAccesses {
                reads: 1,
                writes: 1 + 4,
                delivered: 0
            },
            "a register read is an IOREGSEL write and an IOWIN read"
        );
    }
}
