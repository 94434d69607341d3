//! What PC firmware leaves in low memory when it hands over to a kernel, for the images
//! that expect it (multiboot kernels, which QEMU boots through SeaBIOS):
//!
//! - the real-mode interrupt vector table at 0: every vector points at a handler in the
//!   BIOS segment (F000): IRQ 0 (vector 8) counts the tick in the BDA and acknowledges the
//!   master PIC; the other master IRQs (vectors 9-0xF) and the slave's (0x70-0x77)
//!   acknowledge their PIC(s); every other vector returns at once;
//! - the BIOS data area at 0x400: COM1's port, the equipment word (one serial port), the
//!   conventional memory size (639 KiB), the EBDA segment, the tick count;
//! - the EBDA's first byte: its size in KiB.
//!
//! The PIT and the PICs are programmed by the VMM to match (channel 0 in mode 3 at
//! 18.2 Hz, master at vector 8 and slave at 0x70, IRQ 0 and the cascade unmasked).

use vm_memory::GuestMemoryBackend;

use crate::error::Result;
use crate::layout::{write_bytes, BIOS_STUBS_ADDR, EBDA_START};

/// The BIOS segment the handlers live in.
const BIOS_SEGMENT: u16 = 0xF000;
/// The master PIC's vector base as firmware leaves it.
pub const PIC_MASTER_BASE: u8 = 0x08;
/// The slave PIC's vector base as firmware leaves it.
pub const PIC_SLAVE_BASE: u8 = 0x70;
/// The master PIC's mask as left here: IRQ 0 (timer) and IRQ 2 (cascade) unmasked.
pub const PIC_MASTER_IMR: u8 = 0xFA;
/// The slave PIC's mask as left here: all masked.
pub const PIC_SLAVE_IMR: u8 = 0xFF;
/// Guest-physical address of the BDA's tick count (u32, IRQ 0 ticks since boot).
pub const BDA_TICKS: u64 = 0x46C;
/// COM1's I/O port.
const COM1: u16 = 0x3F8;

/// `iret`.
const IRET: &[u8] = &[0xCF];
/// IRQ 0: `push ds; push ax; xor ax,ax; mov ds,ax; inc dword [0x46c]; mov al,0x20;
/// out 0x20,al; pop ax; pop ds; iret`.
const IRQ0: &[u8] = &[
    0x1E, 0x50, 0x31, 0xC0, 0x8E, 0xD8, 0x66, 0xFF, 0x06, 0x6C, 0x04, 0xB0, 0x20, 0xE6, 0x20, 0x58,
    0x1F, 0xCF,
];
/// A master IRQ: `push ax; mov al,0x20; out 0x20,al; pop ax; iret`.
const IRQ_MASTER: &[u8] = &[0x50, 0xB0, 0x20, 0xE6, 0x20, 0x58, 0xCF];
/// A slave IRQ: `push ax; mov al,0x20; out 0xa0,al; out 0x20,al; pop ax; iret`.
const IRQ_SLAVE: &[u8] = &[0x50, 0xB0, 0x20, 0xE6, 0xA0, 0xE6, 0x20, 0x58, 0xCF];

/// The handler stubs, in order, and each one's offset in the BIOS segment.
fn stubs() -> (Vec<u8>, [u16; 4]) {
    let base = (BIOS_STUBS_ADDR - (u64::from(BIOS_SEGMENT) << 4)) as u16;
    let mut code = Vec::new();
    let mut offs = [0u16; 4];
    for (i, s) in [IRET, IRQ0, IRQ_MASTER, IRQ_SLAVE].iter().enumerate() {
        offs[i] = base + code.len() as u16;
        code.extend_from_slice(s);
    }
    (code, offs)
}

/// The real-mode vector `v`'s handler, as (segment, offset).
pub fn vector_handler(v: u8) -> (u16, u16) {
    let (_, [iret, irq0, master, slave]) = stubs();
    let off = match v {
        0x08 => irq0,
        0x09..=0x0F => master,
        0x70..=0x77 => slave,
        _ => iret,
    };
    (BIOS_SEGMENT, off)
}

/// Writes the IVT, the BDA, the EBDA's size byte and the handlers.
pub fn write_bios_state<M: GuestMemoryBackend>(mem: &M) -> Result<()> {
    let (code, _) = stubs();
    write_bytes(mem, BIOS_STUBS_ADDR, &code)?;
    let mut ivt = Vec::with_capacity(1024);
    for v in 0..=255u8 {
        let (seg, off) = vector_handler(v);
        ivt.extend_from_slice(&off.to_le_bytes());
        ivt.extend_from_slice(&seg.to_le_bytes());
    }
    write_bytes(mem, 0, &ivt)?;
    let mut bda = [0u8; 0x100];
    bda[0..2].copy_from_slice(&COM1.to_le_bytes());
    // equipment word: one serial port (bits 9-11), an x87 (bit 1)
    bda[0x10..0x12].copy_from_slice(&(1u16 << 9 | 1 << 1).to_le_bytes());
    // conventional memory in KiB (below the EBDA)
    bda[0x13..0x15].copy_from_slice(&((EBDA_START / 1024) as u16).to_le_bytes());
    bda[0x0E..0x10].copy_from_slice(&((EBDA_START >> 4) as u16).to_le_bytes());
    write_bytes(mem, 0x400, &bda)?;
    // the EBDA's size in KiB
    write_bytes(mem, EBDA_START, &[1])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    fn mem() -> GuestMemoryMmap<()> {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 2 << 20)]).unwrap()
    }

    fn rd<const N: usize>(m: &GuestMemoryMmap<()>, a: u64) -> [u8; N] {
        let mut b = [0u8; N];
        m.read_slice(&mut b, GuestAddress(a)).unwrap();
        b
    }

    #[test]
    fn ivt_points_every_vector_at_its_handler_in_the_bios_segment() {
        let m = mem();
        write_bios_state(&m).unwrap();
        for v in 0..=255u8 {
            let e = rd::<4>(&m, u64::from(v) * 4);
            let (off, seg) = (
                u16::from_le_bytes([e[0], e[1]]),
                u16::from_le_bytes([e[2], e[3]]),
            );
            assert_eq!(seg, 0xF000);
            let at = (u64::from(seg) << 4) + u64::from(off);
            let code = rd::<18>(&m, at);
            match v {
                8 => assert_eq!(&code[..], IRQ0, "IRQ 0 counts the tick and sends EOI"),
                9..=0xF => assert_eq!(&code[..7], IRQ_MASTER),
                0x70..=0x77 => assert_eq!(&code[..9], IRQ_SLAVE),
                _ => assert_eq!(code[0], 0xCF, "vector {v:#x}: iret"),
            }
        }
        // the IRQ 0 handler increments the BDA's tick count
        assert_eq!(&IRQ0[6..11], &[0x66, 0xFF, 0x06, 0x6C, 0x04]);
        assert_eq!(BDA_TICKS, 0x46C);
    }

    #[test]
    fn bda_fields() {
        let m = mem();
        write_bios_state(&m).unwrap();
        assert_eq!(u16::from_le_bytes(rd(&m, 0x400)), 0x3F8);
        assert_eq!(u16::from_le_bytes(rd(&m, 0x410)) >> 9 & 7, 1);
        assert_eq!(u16::from_le_bytes(rd(&m, 0x413)), 639);
        assert_eq!(u16::from_le_bytes(rd(&m, 0x40E)), 0x9FC0);
        assert_eq!(u32::from_le_bytes(rd(&m, BDA_TICKS)), 0);
        assert_eq!(rd::<1>(&m, EBDA_START)[0], 1);
    }
}
