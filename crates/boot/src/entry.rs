//! The initial CPU state of the boot vCPU, described without KVM types.
//!
//! Every loader writes the same GDT at [`crate::layout::GDT_ADDR`]:
//!
//! | selector | descriptor                          |
//! |----------|-------------------------------------|
//! | 0x00     | null                                |
//! | 0x08     | flat 4 GiB 32-bit code (execute/read)|
//! | 0x10     | 64-bit code (Linux `__BOOT_CS`)     |
//! | 0x18     | flat 4 GiB data (Linux `__BOOT_DS`) |
//! | 0x20     | 32-bit TSS (busy), base 0, limit 0x67 |
//!
//! The VMM loads the segment registers from [`EntryState::code_segment`],
//! [`EntryState::data_segment`] and [`EntryState::tss_segment`], the control registers
//! from [`EntryState::cr0`], [`EntryState::cr3`], [`EntryState::cr4`] and
//! [`EntryState::efer`], the GDTR from [`EntryState::gdt`] and the general registers from
//! the fields.

use vm_memory::GuestMemoryBackend;

use crate::error::Result;
use crate::layout::{write_bytes, GDT_ADDR, PAGE_SIZE, PDPT_ADDR, PD_ADDR, PML4_ADDR};

/// The mode the boot vCPU starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMode {
    /// 32-bit protected mode, flat segments, paging off (multiboot, PVH, Linux 32-bit entry).
    Protected32,
    /// 64-bit long mode with the identity page tables at `page_table_root` (Linux 64-bit entry).
    Long64,
    /// 16-bit real mode with CS = `cs` (base `cs << 4`) and the other segments 0, as
    /// firmware leaves the CPU at an ACPI S3 waking vector.
    Real16 {
        /// The code segment's selector.
        cs: u16,
    },
}

/// Selector of the flat 32-bit code segment.
pub const CODE32_SELECTOR: u16 = 0x08;
/// Selector of the 64-bit code segment.
pub const CODE64_SELECTOR: u16 = 0x10;
/// Selector of the flat data segment.
pub const DATA_SELECTOR: u16 = 0x18;
/// Selector of the TSS.
pub const TSS_SELECTOR: u16 = 0x20;

/// The GDT every loader writes at `GDT_ADDR`, indexed by selector / 8.
pub const GDT_ENTRIES: [u64; 5] = [
    0,
    0x00cf_9b00_0000_ffff, // 32-bit code: base 0, limit 4 GiB, G, D, P, DPL 0, type 0xb
    0x00af_9b00_0000_ffff, // 64-bit code: L, G, P, DPL 0, type 0xb
    0x00cf_9300_0000_ffff, // data: base 0, limit 4 GiB, G, B, P, DPL 0, type 0x3
    0x0000_8b00_0000_0067, // TSS: base 0, limit 0x67, P, type 0xb (busy 32-bit TSS)
];

/// CR0.PE
pub const CR0_PE: u64 = 1 << 0;
/// CR0.ET
pub const CR0_ET: u64 = 1 << 4;
/// CR0.PG
pub const CR0_PG: u64 = 1 << 31;
/// CR4.PAE
pub const CR4_PAE: u64 = 1 << 5;
/// EFER.LME
pub const EFER_LME: u64 = 1 << 8;
/// EFER.LMA
pub const EFER_LMA: u64 = 1 << 10;

/// A segment register's hidden state, as decoded from a GDT descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Selector.
    pub selector: u16,
    /// Base address.
    pub base: u64,
    /// Limit in bytes (already scaled by the granularity bit).
    pub limit: u32,
    /// Type field (4 bits).
    pub type_: u8,
    /// Present.
    pub present: bool,
    /// Descriptor privilege level.
    pub dpl: u8,
    /// Default operation size (D/B).
    pub db: bool,
    /// Code/data (true) or system (false) descriptor.
    pub s: bool,
    /// 64-bit code segment.
    pub l: bool,
    /// Granularity (limit in 4 KiB units).
    pub g: bool,
    /// Available for software.
    pub avl: bool,
}

impl Segment {
    /// Decodes a legacy (8-byte) GDT descriptor.
    pub fn from_descriptor(selector: u16, desc: u64) -> Segment {
        let base = ((desc >> 16) & 0xff_ffff) | (((desc >> 56) & 0xff) << 24);
        let raw_limit = ((desc & 0xffff) | (((desc >> 48) & 0xf) << 16)) as u32;
        let g = (desc >> 55) & 1 == 1;
        let limit = if g {
            (raw_limit << 12) | 0xfff
        } else {
            raw_limit
        };
        Segment {
            selector,
            base,
            limit,
            type_: ((desc >> 40) & 0xf) as u8,
            s: (desc >> 44) & 1 == 1,
            dpl: ((desc >> 45) & 3) as u8,
            present: (desc >> 47) & 1 == 1,
            avl: (desc >> 52) & 1 == 1,
            l: (desc >> 53) & 1 == 1,
            db: (desc >> 54) & 1 == 1,
            g,
        }
    }

    /// A real-mode segment: base `selector << 4`, limit 64 KiB, present, 16-bit.
    pub fn real(selector: u16, type_: u8) -> Segment {
        Segment {
            selector,
            base: u64::from(selector) << 4,
            limit: 0xFFFF,
            type_,
            present: true,
            dpl: 0,
            db: false,
            s: true,
            l: false,
            g: false,
            avl: false,
        }
    }

    /// The segment for `selector` in [`GDT_ENTRIES`].
    fn from_gdt(selector: u16) -> Segment {
        Segment::from_descriptor(selector, GDT_ENTRIES[usize::from(selector >> 3)])
    }
}

/// Initial state of the boot vCPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryState {
    /// Protected or long mode.
    pub mode: CpuMode,
    /// Instruction pointer.
    pub rip: u64,
    /// Stack pointer.
    pub rsp: u64,
    /// RAX (the multiboot magic for multiboot entries).
    pub rax: u64,
    /// RBX (boot info address for multiboot and PVH).
    pub rbx: u64,
    /// RSI (zero page address for Linux).
    pub rsi: u64,
    /// RFLAGS (0x2: interrupts off).
    pub rflags: u64,
    /// `Long64`: the PML4 the loader built in guest memory (identity map of the first 4 GiB).
    pub page_table_root: Option<u64>,
    /// The GDT the loader wrote: (base, limit).
    pub gdt: Option<(u64, u16)>,
}

impl EntryState {
    /// A 32-bit protected-mode entry with flat segments and the boot GDT.
    pub fn protected32(rip: u64) -> EntryState {
        EntryState {
            mode: CpuMode::Protected32,
            rip,
            rsp: crate::layout::BOOT_STACK_TOP,
            rax: 0,
            rbx: 0,
            rsi: 0,
            rflags: 0x2,
            page_table_root: None,
            gdt: Some(gdt_location()),
        }
    }

    /// A real-mode entry at the 20-bit address `vector` (CS = vector >> 4, IP = vector
    /// & 0xF), as firmware jumps to the FACS waking vector on an S3 resume. The stack
    /// pointer is 0 and the GDT is left as it was.
    pub fn real16(vector: u32) -> EntryState {
        EntryState {
            mode: CpuMode::Real16 {
                cs: (vector >> 4) as u16,
            },
            rip: u64::from(vector & 0xF),
            rsp: 0,
            gdt: None,
            ..EntryState::protected32(0)
        }
    }

    /// A 64-bit entry with the identity page tables and the boot GDT.
    pub fn long64(rip: u64) -> EntryState {
        EntryState {
            mode: CpuMode::Long64,
            page_table_root: Some(PML4_ADDR),
            ..EntryState::protected32(rip)
        }
    }

    /// CS for this entry (selector 0x08 for 32-bit, 0x10 for 64-bit).
    pub fn code_segment(&self) -> Segment {
        match self.mode {
            CpuMode::Protected32 => Segment::from_gdt(CODE32_SELECTOR),
            CpuMode::Long64 => Segment::from_gdt(CODE64_SELECTOR),
            CpuMode::Real16 { cs } => Segment::real(cs, 0xB),
        }
    }

    /// DS, ES, FS, GS and SS for this entry (selector 0x18, flat; 0 in real mode).
    pub fn data_segment(&self) -> Segment {
        match self.mode {
            CpuMode::Real16 { .. } => Segment::real(0, 0x3),
            _ => Segment::from_gdt(DATA_SELECTOR),
        }
    }

    /// TR for this entry (selector 0x20, busy 32-bit TSS at 0, limit 0x67).
    pub fn tss_segment(&self) -> Segment {
        Segment::from_gdt(TSS_SELECTOR)
    }

    /// CR0: PE|ET, plus PG in long mode.
    pub fn cr0(&self) -> u64 {
        match self.mode {
            CpuMode::Protected32 => CR0_PE | CR0_ET,
            CpuMode::Long64 => CR0_PE | CR0_ET | CR0_PG,
            CpuMode::Real16 { .. } => CR0_ET,
        }
    }

    /// CR3: the PML4 in long mode, else 0.
    pub fn cr3(&self) -> u64 {
        self.page_table_root.unwrap_or(0)
    }

    /// CR4: PAE in long mode, else 0.
    pub fn cr4(&self) -> u64 {
        match self.mode {
            CpuMode::Protected32 | CpuMode::Real16 { .. } => 0,
            CpuMode::Long64 => CR4_PAE,
        }
    }

    /// EFER: LME|LMA in long mode, else 0.
    pub fn efer(&self) -> u64 {
        match self.mode {
            CpuMode::Protected32 | CpuMode::Real16 { .. } => 0,
            CpuMode::Long64 => EFER_LME | EFER_LMA,
        }
    }
}

/// (base, limit) of the boot GDT.
pub fn gdt_location() -> (u64, u16) {
    (GDT_ADDR, (GDT_ENTRIES.len() * 8 - 1) as u16)
}

/// Writes [`GDT_ENTRIES`] at `GDT_ADDR`.
pub(crate) fn write_gdt<M: GuestMemoryBackend>(mem: &M) -> Result<(u64, u16)> {
    write_gdt_at(mem, GDT_ADDR)
}

/// Writes [`GDT_ENTRIES`] at `addr`; returns (base, limit).
pub(crate) fn write_gdt_at<M: GuestMemoryBackend>(mem: &M, addr: u64) -> Result<(u64, u16)> {
    let mut bytes = Vec::with_capacity(GDT_ENTRIES.len() * 8);
    for d in GDT_ENTRIES {
        bytes.extend_from_slice(&d.to_le_bytes());
    }
    write_bytes(mem, addr, &bytes)?;
    Ok((addr, gdt_location().1))
}

/// Writes identity page tables for the first 4 GiB (2 MiB pages) and returns the PML4
/// address.
pub(crate) fn write_identity_page_tables<M: GuestMemoryBackend>(mem: &M) -> Result<u64> {
    const PRESENT_RW: u64 = 0x3;
    const PAGE_2M: u64 = 0x80;
    let mut pml4 = vec![0u8; PAGE_SIZE as usize];
    pml4[..8].copy_from_slice(&(PDPT_ADDR | PRESENT_RW).to_le_bytes());
    write_bytes(mem, PML4_ADDR, &pml4)?;

    let mut pdpt = vec![0u8; PAGE_SIZE as usize];
    for i in 0..4u64 {
        let pd = PD_ADDR + i * PAGE_SIZE;
        let at = (i * 8) as usize;
        pdpt[at..at + 8].copy_from_slice(&(pd | PRESENT_RW).to_le_bytes());
    }
    write_bytes(mem, PDPT_ADDR, &pdpt)?;

    let mut pds = vec![0u8; 4 * PAGE_SIZE as usize];
    for (j, chunk) in pds.chunks_exact_mut(8).enumerate() {
        let phys = (j as u64) << 21;
        chunk.copy_from_slice(&(phys | PRESENT_RW | PAGE_2M).to_le_bytes());
    }
    write_bytes(mem, PD_ADDR, &pds)?;
    Ok(PML4_ADDR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{ram_regions, read_bytes};
    use vm_memory::GuestMemoryMmap;

    #[test]
    fn segments_decode() {
        let e = EntryState::protected32(0x100000);
        let cs = e.code_segment();
        assert_eq!(
            (cs.selector, cs.base, cs.limit, cs.type_),
            (0x08, 0, 0xffff_ffff, 0xb)
        );
        assert!(cs.present && cs.s && cs.db && cs.g && !cs.l);
        let ds = e.data_segment();
        assert_eq!((ds.selector, ds.limit, ds.type_), (0x18, 0xffff_ffff, 0x3));
        let l = EntryState::long64(0x200).code_segment();
        assert!(l.l && !l.db);
        assert_eq!(l.selector, 0x10);
        let tr = e.tss_segment();
        assert_eq!(
            (tr.type_, tr.limit, tr.s, tr.present),
            (0xb, 0x67, false, true)
        );
        assert_eq!(e.cr0(), 0x11);
        assert_eq!(EntryState::long64(0).efer(), 0x500);
    }

    #[test]
    fn page_tables_identity() {
        let mem: GuestMemoryMmap<()> = GuestMemoryMmap::from_ranges(&ram_regions(4 << 20)).unwrap();
        assert_eq!(write_identity_page_tables(&mem).unwrap(), PML4_ADDR);
        let read = |a: u64| {
            let mut b = [0u8; 8];
            read_bytes(&mem, a, &mut b).unwrap();
            u64::from_le_bytes(b)
        };
        assert_eq!(read(PML4_ADDR), PDPT_ADDR | 3);
        assert_eq!(read(PDPT_ADDR + 24), (PD_ADDR + 3 * PAGE_SIZE) | 3);
        // Last 2 MiB page below 4 GiB.
        assert_eq!(read(PD_ADDR + 4 * PAGE_SIZE - 8), 0xFFE0_0000 | 0x83);
        write_gdt(&mem).unwrap();
        assert_eq!(read(GDT_ADDR + 0x10), GDT_ENTRIES[2]);
    }
}
