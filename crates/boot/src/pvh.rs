//! PVH loader: an ELF (32- or 64-bit) with a XEN_ELFNOTE_PHYS32_ENTRY note, entered in
//! 32-bit protected mode with EBX pointing at an `hvm_start_info`.
//!
//! Boot structures: the start info (56 bytes, version 1) at [`BOOT_INFO_ADDR`] (0x9000);
//! the memory map, module list and command lines in the boot data area from 0xA000; the
//! initrd (module 0) high in RAM below the PCI hole, page-aligned, outside the image.

use vm_memory::GuestMemoryBackend;

use crate::elf::{self, Elf};
use crate::entry::{write_gdt, EntryState};
use crate::error::{BootError, Result};
use crate::layout::{
    e820_map, place_high, write_bytes, BootData, LowMemory, BOOT_INFO_ADDR, PCI_HOLE_START,
};
use crate::{BootOptions, ImageFormat, Loaded};

/// Note type of the 32-bit physical entry point.
pub const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// `hvm_start_info.magic`.
pub const START_INFO_MAGIC: u32 = 0x336e_c578;
/// `hvm_start_info.version` this loader writes (with the memory map fields).
pub const START_INFO_VERSION: u32 = 1;
/// Size of `hvm_start_info`.
pub const START_INFO_SIZE: usize = 56;
/// Size of one `hvm_modlist_entry`.
pub const MODLIST_ENTRY_SIZE: usize = 32;
/// Size of one `hvm_memmap_table_entry`.
pub const MEMMAP_ENTRY_SIZE: usize = 24;

/// Byte offsets of the `hvm_start_info` fields.
pub mod start_info {
    /// magic (u32)
    pub const MAGIC: usize = 0;
    /// version (u32)
    pub const VERSION: usize = 4;
    /// flags (u32)
    pub const FLAGS: usize = 8;
    /// nr_modules (u32)
    pub const NR_MODULES: usize = 12;
    /// modlist_paddr (u64)
    pub const MODLIST_PADDR: usize = 16;
    /// cmdline_paddr (u64)
    pub const CMDLINE_PADDR: usize = 24;
    /// rsdp_paddr (u64)
    pub const RSDP_PADDR: usize = 32;
    /// memmap_paddr (u64)
    pub const MEMMAP_PADDR: usize = 40;
    /// memmap_entries (u32)
    pub const MEMMAP_ENTRIES: usize = 48;
}

/// The PVH entry point of a parsed ELF, if it has the note.
pub(crate) fn entry_point(image: &[u8], parsed: &Elf) -> Result<Option<u64>> {
    let Some(note) = parsed
        .notes
        .iter()
        .find(|n| n.name == b"Xen" && n.kind == XEN_ELFNOTE_PHYS32_ENTRY)
    else {
        return Ok(None);
    };
    let desc = &image[note.desc.clone()];
    let entry = match desc.len() {
        4 => u64::from(u32::from_le_bytes([desc[0], desc[1], desc[2], desc[3]])),
        8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(desc);
            u64::from_le_bytes(b)
        }
        n => {
            return Err(BootError::PvhNote(format!(
                "descriptor is {n} bytes; expected a 4- or 8-byte address"
            )))
        }
    };
    if entry >= 1 << 32 {
        return Err(BootError::PvhNote(format!(
            "entry point {entry:#x} is above 4 GiB"
        )));
    }
    Ok(Some(entry))
}

/// Whether `image` is an ELF with a PVH entry note (false for anything unparsable).
pub fn has_pvh_note(image: &[u8]) -> bool {
    elf::is_elf(image)
        && elf::parse(image)
            .ok()
            .and_then(|p| entry_point(image, &p).ok().flatten())
            .is_some()
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Loads a PVH ELF and builds its start info; `rsdp` goes into `rsdp_paddr`.
pub fn load<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    opts: &BootOptions,
    rsdp: Option<u64>,
) -> Result<Loaded> {
    let parsed = elf::parse(image)?;
    let entry = entry_point(image, &parsed)?.ok_or(BootError::PvhNoteNotFound)?;
    for s in &parsed.segments {
        if s.paddr.saturating_add(s.memsz) > 1 << 32 {
            return Err(BootError::Elf(format!(
                "segment {:#x}..{:#x} lies above 4 GiB, where a 32-bit entry with paging off \
                 cannot reach it",
                s.paddr,
                s.paddr.saturating_add(s.memsz)
            )));
        }
    }
    let ram = opts.ram_bytes;
    let image_range = elf::load_segments(mem, image, &parsed, ram, LowMemory::Refuse)?;
    elf::check_entry(&parsed, entry, image_range)?;

    let mut data = BootData::new();
    let cmdline = data.put_cstr(mem, &opts.cmdline)?;

    let map = e820_map(ram);
    let mut memmap = vec![0u8; map.len() * MEMMAP_ENTRY_SIZE];
    for (e, out) in map.iter().zip(memmap.chunks_exact_mut(MEMMAP_ENTRY_SIZE)) {
        put64(out, 0, e.addr);
        put64(out, 8, e.size);
        put32(out, 16, e.kind.code());
    }
    let memmap_addr = data.put(mem, &memmap, 8)?;

    let (nr_modules, modlist) = match &opts.initrd {
        Some(initrd) => {
            let size = initrd.len() as u64;
            let start = place_high(ram, size, PCI_HOLE_START, image_range, "initrd")?;
            write_bytes(mem, start, initrd)?;
            let mut m = [0u8; MODLIST_ENTRY_SIZE];
            put64(&mut m, 0, start);
            put64(&mut m, 8, size);
            (1, data.put(mem, &m, 8)?)
        }
        None => (0, 0),
    };

    let mut si = [0u8; START_INFO_SIZE];
    put32(&mut si, start_info::MAGIC, START_INFO_MAGIC);
    put32(&mut si, start_info::VERSION, START_INFO_VERSION);
    put32(&mut si, start_info::NR_MODULES, nr_modules);
    put64(&mut si, start_info::MODLIST_PADDR, modlist);
    put64(&mut si, start_info::CMDLINE_PADDR, cmdline);
    put64(&mut si, start_info::RSDP_PADDR, rsdp.unwrap_or(0));
    put64(&mut si, start_info::MEMMAP_PADDR, memmap_addr);
    put32(&mut si, start_info::MEMMAP_ENTRIES, map.len() as u32);
    write_bytes(mem, BOOT_INFO_ADDR, &si)?;
    let gdt = write_gdt(mem)?;

    let mut state = EntryState::protected32(entry);
    state.rbx = BOOT_INFO_ADDR;
    state.gdt = Some(gdt);
    Ok(Loaded {
        format: ImageFormat::Pvh,
        entry: state,
        e820: map,
        image_range,
        rsdp,
        facs: None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::elf::build::{elf, Ph};
    use crate::entry::CpuMode;
    use crate::layout::read_bytes;
    use crate::multiboot::tests::{mem, opts};
    use vm_memory::GuestMemoryMmap;

    const MIB: u64 = 1 << 20;

    /// An ELF64 with a PVH note (8-byte descriptor like Linux) entering at 0x100040.
    pub(crate) fn pvh_image(is64: bool) -> Vec<u8> {
        let desc: Vec<u8> = if is64 {
            0x10_0040u64.to_le_bytes().to_vec()
        } else {
            0x10_0040u32.to_le_bytes().to_vec()
        };
        elf(
            is64,
            0x10_0000,
            &[
                Ph::load(0x10_0000, vec![0xAB; 0x200], 0x3000),
                Ph::note("Xen", XEN_ELFNOTE_PHYS32_ENTRY, &desc),
            ],
        )
    }

    fn rd(m: &GuestMemoryMmap<()>, a: u64, n: usize) -> u64 {
        let mut b = [0u8; 8];
        read_bytes(m, a, &mut b[..n]).unwrap();
        u64::from_le_bytes(b)
    }

    #[test]
    fn loads_and_builds_start_info() {
        let ram = 64 * MIB;
        let m = mem(ram);
        let mut o = opts(ram);
        let initrd = vec![0x5Au8; 12345];
        o.initrd = Some(initrd.clone());
        let l = load(&m, &pvh_image(true), &o, Some(0xE0000)).unwrap();
        assert_eq!(l.format, ImageFormat::Pvh);
        assert_eq!(l.entry.mode, CpuMode::Protected32);
        assert_eq!(l.entry.rip, 0x10_0040);
        assert_eq!(l.entry.rbx, BOOT_INFO_ADDR);
        assert_eq!(l.image_range, (0x10_0000, 0x10_3000));

        let si = l.entry.rbx;
        assert_eq!(rd(&m, si, 4), u64::from(START_INFO_MAGIC));
        assert_eq!(rd(&m, si + 4, 4), 1);
        assert_eq!(rd(&m, si + 8, 4), 0);
        assert_eq!(rd(&m, si + 12, 4), 1);
        assert_eq!(rd(&m, si + 32, 8), 0xE0000);

        let mut cmd = vec![0u8; o.cmdline.len() + 1];
        read_bytes(&m, rd(&m, si + 24, 8), &mut cmd).unwrap();
        assert_eq!(&cmd[..o.cmdline.len()], o.cmdline.as_bytes());
        assert_eq!(cmd[o.cmdline.len()], 0);

        let map = e820_map(ram);
        assert_eq!(rd(&m, si + 48, 4), map.len() as u64);
        let mm = rd(&m, si + 40, 8);
        for (i, e) in map.iter().enumerate() {
            let at = mm + (i * MEMMAP_ENTRY_SIZE) as u64;
            assert_eq!(rd(&m, at, 8), e.addr);
            assert_eq!(rd(&m, at + 8, 8), e.size);
            assert_eq!(rd(&m, at + 16, 4), u64::from(e.kind.code()));
            assert_eq!(rd(&m, at + 20, 4), 0);
        }
        assert_eq!(l.e820, map);

        let ml = rd(&m, si + 16, 8);
        let start = rd(&m, ml, 8);
        assert_eq!(rd(&m, ml + 8, 8), initrd.len() as u64);
        assert_eq!(start % 4096, 0);
        assert!(start >= l.image_range.1);
        let mut got = vec![0u8; initrd.len()];
        read_bytes(&m, start, &mut got).unwrap();
        assert_eq!(got, initrd);

        // Loaded bytes and zeroed tail.
        let mut img = vec![0u8; 0x400];
        read_bytes(&m, 0x10_0000, &mut img).unwrap();
        assert!(img[..0x200].iter().all(|&b| b == 0xAB));
        assert!(img[0x200..].iter().all(|&b| b == 0));
    }

    #[test]
    fn elf32_with_4_byte_note() {
        let ram = 16 * MIB;
        let m = mem(ram);
        let l = load(&m, &pvh_image(false), &opts(ram), None).unwrap();
        assert_eq!(l.entry.rip, 0x10_0040);
        assert_eq!(rd(&m, BOOT_INFO_ADDR + 32, 8), 0);
        assert_eq!(rd(&m, BOOT_INFO_ADDR + 12, 4), 0);
    }

    #[test]
    fn missing_and_bad_notes() {
        let ram = 16 * MIB;
        let m = mem(ram);
        let plain = elf(true, 0x10_0000, &[Ph::load(0x10_0000, vec![1; 16], 16)]);
        assert!(!has_pvh_note(&plain));
        assert!(matches!(
            load(&m, &plain, &opts(ram), None),
            Err(BootError::PvhNoteNotFound)
        ));
        let bad = elf(
            true,
            0x10_0000,
            &[
                Ph::load(0x10_0000, vec![1; 16], 16),
                Ph::note("Xen", XEN_ELFNOTE_PHYS32_ENTRY, &[1, 2]),
            ],
        );
        assert!(matches!(
            load(&m, &bad, &opts(ram), None),
            Err(BootError::PvhNote(_))
        ));
        // Entry outside the loaded segments.
        let outside = elf(
            true,
            0x10_0000,
            &[
                Ph::load(0x10_0000, vec![1; 16], 16),
                Ph::note("Xen", XEN_ELFNOTE_PHYS32_ENTRY, &0x20_0000u32.to_le_bytes()),
            ],
        );
        assert!(matches!(
            load(&m, &outside, &opts(ram), None),
            Err(BootError::EntryOutsideImage { .. })
        ));
    }
}
