//! The 8259A PIC pair of a split irqchip (`--irqchip split`): master at ports
//! 0x20/0x21, slave at 0xA0/0xA1 (cascaded on the master's input 2), and the ELCR
//! (edge/level control) at 0x4D0/0x4D1.
//!
//! It is a register model: what a guest that initialises and masks the PICs (as every
//! PC kernel does before it switches to the I/O APIC) reads and writes behaves as on the
//! 8259A — the ICW1..ICW4 initialisation sequence, the interrupt mask (OCW1), EOI
//! commands (OCW2), the IRR/ISR read select and poll command (OCW3), the ELCR with the
//! bits the PIIX reserves. Input lines set IRR (on a rising edge, or while high for a
//! level-triggered input per the ELCR).
//!
//! Its output is not connected: in split mode exitlab delivers every interrupt through
//! the userspace I/O APIC, and no interrupt is ever acknowledged from the PIC (no
//! ExtINT to the local APICs), so ISR only changes through the poll command. A guest
//! that relies on PIC-delivered (ExtINT) interrupts must run with `--irqchip kernel`.

use std::sync::Mutex;

use crate::{BusDevice, IoAction};

/// ELCR bits the PIIX does not implement: IRQ 0, 1, 2 (master) and 8, 13 (slave) are
/// always edge-triggered.
const ELCR_MASK: [u8; 2] = [0xf8, 0xde];

/// Init sequence state of one 8259A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Init {
    /// Initialised: data port writes are OCW1.
    Ready,
    /// Waiting for ICW2 (then ICW3 unless single, then ICW4 if asked for).
    Icw2,
    /// Waiting for ICW3.
    Icw3,
    /// Waiting for ICW4.
    Icw4,
}

/// One 8259A.
#[derive(Debug, Clone, Copy)]
struct Chip {
    init: Init,
    /// ICW1: ICW4 needed.
    need_icw4: bool,
    /// ICW1: single (no cascade, no ICW3).
    single: bool,
    /// ICW1: level-triggered mode (LTIM).
    ltim: bool,
    /// ICW2: vector base (bits 7..3).
    vector_base: u8,
    /// ICW3.
    cascade: u8,
    /// ICW4.
    icw4: u8,
    imr: u8,
    irr: u8,
    isr: u8,
    /// OCW3: a read of the command port returns ISR (else IRR).
    read_isr: bool,
    /// OCW3: the next command-port read is a poll.
    poll: bool,
    /// OCW3: special mask mode.
    special_mask: bool,
    /// Input levels.
    lines: u8,
    elcr: u8,
}

impl Chip {
    fn new() -> Chip {
        Chip {
            init: Init::Ready,
            need_icw4: false,
            single: false,
            ltim: false,
            vector_base: 0,
            cascade: 0,
            icw4: 0,
            imr: 0,
            irr: 0,
            isr: 0,
            read_isr: false,
            poll: false,
            special_mask: false,
            lines: 0,
            elcr: 0,
        }
    }

    fn write_command(&mut self, v: u8) {
        if v & 0x10 != 0 {
            // ICW1: reset and start the sequence.
            self.need_icw4 = v & 0x01 != 0;
            self.single = v & 0x02 != 0;
            self.ltim = v & 0x08 != 0;
            self.imr = 0;
            self.isr = 0;
            self.irr = 0;
            self.read_isr = false;
            self.poll = false;
            self.special_mask = false;
            self.icw4 = 0;
            self.init = Init::Icw2;
        } else if v & 0x08 != 0 {
            // OCW3.
            if v & 0x02 != 0 {
                self.read_isr = v & 0x01 != 0;
            }
            self.poll = v & 0x04 != 0;
            if v & 0x40 != 0 {
                self.special_mask = v & 0x20 != 0;
            }
        } else {
            // OCW2: EOI commands (rotation is accepted, priorities stay fixed).
            match v >> 5 {
                // Non-specific EOI (and rotate on non-specific EOI).
                0b001 | 0b101 => self.isr &= self.isr.wrapping_sub(1),
                // Specific EOI (and rotate on specific EOI).
                0b011 | 0b111 => self.isr &= !(1 << (v & 7)),
                _ => {}
            }
        }
    }

    fn write_data(&mut self, v: u8) {
        match self.init {
            Init::Ready => self.imr = v,
            Init::Icw2 => {
                self.vector_base = v & 0xf8;
                self.init = if !self.single {
                    Init::Icw3
                } else if self.need_icw4 {
                    Init::Icw4
                } else {
                    Init::Ready
                };
            }
            Init::Icw3 => {
                self.cascade = v;
                self.init = if self.need_icw4 {
                    Init::Icw4
                } else {
                    Init::Ready
                };
            }
            Init::Icw4 => {
                self.icw4 = v & 0x1f;
                self.init = Init::Ready;
            }
        }
    }

    fn read_command(&mut self) -> u8 {
        if self.poll {
            self.poll = false;
            return self.poll_ack();
        }
        if self.read_isr {
            self.isr
        } else {
            self.irr
        }
    }

    /// The poll command: bit 7 set and the highest-priority requested input, which
    /// becomes in service; 0 when nothing is requested.
    fn poll_ack(&mut self) -> u8 {
        let pending = self.irr & !self.imr;
        if pending == 0 {
            return 0;
        }
        let irq = pending.trailing_zeros() as u8;
        let bit = 1 << irq;
        if self.level_triggered(irq) {
            // A level input stays requested while its line is high.
            self.irr = (self.irr & !bit) | (self.lines & bit);
        } else {
            self.irr &= !bit;
        }
        self.isr |= bit;
        0x80 | irq
    }

    fn level_triggered(&self, irq: u8) -> bool {
        self.ltim || self.elcr & (1 << irq) != 0
    }

    fn set_level(&mut self, irq: u8, level: bool) {
        let bit = 1 << irq;
        let was = self.lines & bit != 0;
        if level {
            self.lines |= bit;
            if !was || self.level_triggered(irq) {
                self.irr |= bit;
            }
        } else {
            self.lines &= !bit;
            if self.level_triggered(irq) {
                self.irr &= !bit;
            }
        }
    }
}

/// The PIC pair and the ELCR. Register it at the master's ports (offsets 0, 1), the
/// slave's (through [`crate::OffsetDevice`] with [`PIC_SLAVE_BIAS`]) and the ELCR's
/// (with [`PIC_ELCR_BIAS`]).
#[derive(Debug)]
pub struct Pic {
    chips: Mutex<[Chip; 2]>,
}

/// Offset the PIC expects for the slave's ports.
pub const PIC_SLAVE_BIAS: u64 = 0x10;
/// Offset the PIC expects for the ELCR's ports.
pub const PIC_ELCR_BIAS: u64 = 0x20;

impl Default for Pic {
    fn default() -> Self {
        Self::new()
    }
}

impl Pic {
    /// A PIC pair after power-on: not initialised, nothing masked, every input
    /// edge-triggered.
    pub fn new() -> Pic {
        Pic {
            chips: Mutex::new([Chip::new(), Chip::new()]),
        }
    }

    /// Leaves the pair as PC firmware does before it starts a kernel: both chips
    /// initialised (cascaded on the master's input 2, ICW4 8086 mode, edge-triggered,
    /// normal EOI) with vector bases `bases` and masks `imrs` (master, slave), nothing
    /// pending or in service.
    pub fn firmware_init(&self, bases: (u8, u8), imrs: (u8, u8)) {
        let mut c = crate::lock(&self.chips);
        for (i, (base, imr)) in [(bases.0, imrs.0), (bases.1, imrs.1)]
            .into_iter()
            .enumerate()
        {
            let chip = &mut c[i];
            *chip = Chip {
                init: Init::Ready,
                need_icw4: true,
                vector_base: base & 0xf8,
                // The master has the slave on input 2; the slave's identity is 2.
                cascade: if i == 0 { 0x04 } else { 0x02 },
                icw4: 0x01,
                imr,
                lines: chip.lines,
                elcr: chip.elcr,
                ..Chip::new()
            };
        }
    }

    /// Sets the level of ISA IRQ `irq` (0..=15; others are ignored).
    pub fn set_level(&self, irq: u32, level: bool) {
        if irq < 16 {
            crate::lock(&self.chips)[(irq / 8) as usize].set_level((irq % 8) as u8, level);
        }
    }

    /// The interrupt masks (master, slave).
    pub fn masks(&self) -> (u8, u8) {
        let c = crate::lock(&self.chips);
        (c[0].imr, c[1].imr)
    }

    /// The vector bases ICW2 set (master, slave).
    pub fn vector_bases(&self) -> (u8, u8) {
        let c = crate::lock(&self.chips);
        (c[0].vector_base, c[1].vector_base)
    }

    fn port_read(&self, offset: u64) -> u8 {
        let mut c = crate::lock(&self.chips);
        match offset {
            0 => c[0].read_command(),
            1 => c[0].imr,
            PIC_SLAVE_BIAS => c[1].read_command(),
            0x11 => c[1].imr,
            PIC_ELCR_BIAS => c[0].elcr,
            0x21 => c[1].elcr,
            _ => 0xff,
        }
    }

    fn port_write(&self, offset: u64, v: u8) {
        let mut c = crate::lock(&self.chips);
        match offset {
            0 => c[0].write_command(v),
            1 => c[0].write_data(v),
            PIC_SLAVE_BIAS => c[1].write_command(v),
            0x11 => c[1].write_data(v),
            PIC_ELCR_BIAS => c[0].elcr = v & ELCR_MASK[0],
            0x21 => c[1].elcr = v & ELCR_MASK[1],
            _ => {}
        }
    }
}

impl BusDevice for Pic {
    /// Byte registers; a wider access reaches consecutive ports, as on the ISA bus.
    fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = self.port_read(offset.wrapping_add(i as u64));
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        for (i, b) in data.iter().enumerate() {
            self.port_write(offset.wrapping_add(i as u64), *b);
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_init_leaves_both_chips_initialised_with_its_bases_and_masks() {
        let p = Pic::new();
        p.firmware_init((0x08, 0x70), (0xfa, 0xff));
        assert_eq!(p.vector_bases(), (0x08, 0x70));
        assert_eq!(p.masks(), (0xfa, 0xff));
        assert_eq!((rd(&p, 1), rd(&p, 0x11)), (0xfa, 0xff));
        // Initialised: a data-port write is a mask (OCW1), not an ICW.
        p.write(1, &[0xfe]);
        assert_eq!((p.masks(), p.vector_bases()), ((0xfe, 0xff), (0x08, 0x70)));
        // Nothing pending or in service: the IRR and ISR reads give 0.
        p.write(0, &[0x0a]);
        assert_eq!(rd(&p, 0), 0);
        p.write(0, &[0x0b]);
        assert_eq!(rd(&p, 0), 0);
    }

    fn rd(p: &Pic, off: u64) -> u8 {
        let mut b = [0u8; 1];
        p.read(off, &mut b);
        b[0]
    }

    fn wr(p: &Pic, off: u64, v: u8) {
        p.write(off, &[v]);
    }

    /// What Linux's init_8259A does: ICW1..ICW4 on both, then mask everything.
    fn linux_init(p: &Pic) {
        wr(p, 1, 0xff);
        wr(p, 0x11, 0xff);
        wr(p, 0, 0x11); // ICW1: edge, cascade, ICW4
        wr(p, 1, 0x30); // ICW2: vectors 0x30..0x37
        wr(p, 1, 0x04); // ICW3: slave on IR2
        wr(p, 1, 0x01); // ICW4: 8086 mode
        wr(p, 0x10, 0x11);
        wr(p, 0x11, 0x38);
        wr(p, 0x11, 0x02);
        wr(p, 0x11, 0x01);
        wr(p, 1, 0xfb);
        wr(p, 0x11, 0xff);
    }

    #[test]
    fn initialisation_sets_vectors_and_masks() {
        let p = Pic::new();
        linux_init(&p);
        assert_eq!(p.vector_bases(), (0x30, 0x38));
        assert_eq!(p.masks(), (0xfb, 0xff));
        assert_eq!(rd(&p, 1), 0xfb, "OCW1 reads back");
        assert_eq!(rd(&p, 0x11), 0xff);
        let c = crate::lock(&p.chips);
        assert_eq!((c[0].cascade, c[1].cascade), (0x04, 0x02));
        assert_eq!((c[0].icw4, c[1].icw4), (1, 1));
        assert_eq!((c[0].init, c[1].init), (Init::Ready, Init::Ready));
    }

    #[test]
    fn icw1_resets_and_single_mode_skips_icw3() {
        let p = Pic::new();
        wr(&p, 1, 0x55);
        assert_eq!(rd(&p, 1), 0x55);
        wr(&p, 0, 0x13); // single, ICW4
        assert_eq!(rd(&p, 1), 0, "ICW1 clears the mask");
        wr(&p, 1, 0x20); // ICW2
        wr(&p, 1, 0x03); // ICW4 (no ICW3 in single mode)
        wr(&p, 1, 0x0f); // OCW1
        assert_eq!(p.vector_bases().0, 0x20);
        assert_eq!(rd(&p, 1), 0x0f);
        // Without ICW4: ICW2, ICW3 and done.
        wr(&p, 0, 0x10);
        wr(&p, 1, 0x48);
        wr(&p, 1, 0x04);
        wr(&p, 1, 0xaa);
        assert_eq!((p.vector_bases().0, rd(&p, 1)), (0x48, 0xaa));
    }

    #[test]
    fn ocw3_selects_irr_or_isr_and_poll_acknowledges() {
        let p = Pic::new();
        linux_init(&p);
        p.set_level(1, true);
        p.set_level(3, true);
        wr(&p, 0, 0x0a); // OCW3: read IRR
        assert_eq!(rd(&p, 0), 0x0a);
        wr(&p, 0, 0x0b); // OCW3: read ISR
        assert_eq!(rd(&p, 0), 0);
        wr(&p, 1, 0x00); // unmask all
        wr(&p, 0, 0x0c); // OCW3: poll
        assert_eq!(rd(&p, 0), 0x81, "IRQ 1 first");
        assert_eq!(rd(&p, 0), 0x02, "ISR selected again after the poll");
        wr(&p, 0, 0x0a);
        assert_eq!(rd(&p, 0), 0x08, "IRQ 1's edge was taken");
        // Specific EOI of IRQ 1, then a non-specific EOI with nothing in service.
        wr(&p, 0, 0x61);
        wr(&p, 0, 0x0b);
        assert_eq!(rd(&p, 0), 0);
        wr(&p, 0, 0x20);
        assert_eq!(rd(&p, 0), 0);
        // Poll with nothing unmasked requested.
        wr(&p, 1, 0xff);
        wr(&p, 0, 0x0c);
        assert_eq!(rd(&p, 0), 0);
    }

    #[test]
    fn non_specific_eoi_clears_the_highest_priority_in_service() {
        let p = Pic::new();
        linux_init(&p);
        wr(&p, 1, 0);
        p.set_level(5, true);
        p.set_level(6, true);
        for _ in 0..2 {
            wr(&p, 0, 0x0c);
            rd(&p, 0);
        }
        wr(&p, 0, 0x0b);
        assert_eq!(rd(&p, 0), 0x60);
        wr(&p, 0, 0x20);
        assert_eq!(rd(&p, 0), 0x40);
    }

    #[test]
    fn edge_and_level_inputs_follow_the_elcr() {
        let p = Pic::new();
        linux_init(&p);
        wr(&p, PIC_ELCR_BIAS, 0xff);
        wr(&p, 0x21, 0xff);
        assert_eq!(rd(&p, PIC_ELCR_BIAS), 0xf8, "IRQ 0-2 are edge only");
        assert_eq!(rd(&p, 0x21), 0xde, "IRQ 8 and 13 are edge only");
        // IRQ 10 is level now: IRR follows the line.
        p.set_level(10, true);
        wr(&p, 0x10, 0x0a);
        assert_eq!(rd(&p, 0x10), 0x04);
        p.set_level(10, false);
        assert_eq!(rd(&p, 0x10), 0);
        // IRQ 0 is edge: IRR stays after the line drops.
        p.set_level(0, true);
        p.set_level(0, false);
        wr(&p, 0, 0x0a);
        assert_eq!(rd(&p, 0), 0x01);
        p.set_level(16, true);
        p.set_level(u32::MAX, true);
    }

    #[test]
    fn word_accesses_reach_both_ports_and_nothing_panics() {
        let p = Pic::new();
        p.write(PIC_ELCR_BIAS, &[0x20, 0x04]);
        let mut w = [0u8; 2];
        p.read(PIC_ELCR_BIAS, &mut w);
        assert_eq!(w, [0x20, 0x04]);
        crate::test_util::hammer(&p, 0x30);
    }
}
