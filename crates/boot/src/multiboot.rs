//! Multiboot v1 loader: a.out-kludge flat binaries and ELF32/ELF64 images.
//!
//! Boot structures (all below 1 MiB, outside the image):
//! - the GDT, the boot stack, the multiboot info block (116 bytes), then the command
//!   line (`"<kernel path> <cmdline>"`), the boot loader name, the memory map and the
//!   module list: for an image at or above 1 MiB at the fixed places of
//!   [`crate::layout::BootArea::STANDARD`] (GDT 0x1000, stack below 0x9000, info at
//!   0x9000, data from 0xA000 up); for an image linked below 1 MiB (real-mode test
//!   kernels at 0x8000, say) in a gap of low RAM after the image, else before it, as
//!   QEMU puts the multiboot info after the kernel. Only a segment that overlaps what
//!   the platform cannot move ([`crate::layout::FIXED_LOW_AREAS`]: IVT/BDA, EBDA, VGA
//!   hole, BIOS area) is refused, with a message naming it;
//! - the initrd (module 0) is placed as high as possible in RAM below the PCI hole,
//!   page-aligned, outside the image.
//!
//! Entry: 32-bit protected mode, paging off, EAX = 0x2BADB002, EBX = info address.
//!
//! Why hand-written: no maintained crate loads multiboot v1 kernels (linux-loader does
//! Linux and PVH only).

use vm_memory::GuestMemoryBackend;

use crate::elf;
use crate::entry::{write_gdt_at, EntryState};
use crate::error::{BootError, Result};
use crate::layout::{
    check_segment, e820_map, low_ram_end, place_high, write_bytes, zero_bytes, BootArea, BootData,
    LowMemory, EBDA_START, HIGH_MEMORY_START, PCI_HOLE_START,
};
use crate::{BootOptions, ImageFormat, Loaded};

/// Magic in the image's multiboot header.
pub const HEADER_MAGIC: u32 = 0x1BAD_B002;
/// Magic the loader leaves in EAX.
pub const BOOTLOADER_MAGIC: u32 = 0x2BAD_B002;
/// The header must lie within this many bytes from the start of the image.
pub const SEARCH_BYTES: usize = 8192;
/// Size of the multiboot info block.
pub const INFO_SIZE: usize = 116;
/// Boot loader name passed in the info block.
pub const BOOT_LOADER_NAME: &str = "exitlab";
/// Command line string of the initrd module.
pub const INITRD_MODULE_STRING: &str = "initrd";

/// Header flag: align modules on page boundaries.
pub const HEADER_PAGE_ALIGN: u32 = 1 << 0;
/// Header flag: memory information required.
pub const HEADER_MEMORY_INFO: u32 = 1 << 1;
/// Header flag: video mode table requested (not provided; ignored).
pub const HEADER_VIDEO_MODE: u32 = 1 << 2;
/// Header flag: the a.out kludge address fields are valid.
pub const HEADER_AOUT_KLUDGE: u32 = 1 << 16;

/// Info flag: `mem_lower`/`mem_upper` valid.
pub const INFO_MEMORY: u32 = 1 << 0;
/// Info flag: `cmdline` valid.
pub const INFO_CMDLINE: u32 = 1 << 2;
/// Info flag: `mods_count`/`mods_addr` valid.
pub const INFO_MODS: u32 = 1 << 3;
/// Info flag: `mmap_length`/`mmap_addr` valid.
pub const INFO_MEM_MAP: u32 = 1 << 6;
/// Info flag: `boot_loader_name` valid.
pub const INFO_BOOT_LOADER_NAME: u32 = 1 << 9;

/// Offsets of the info block fields this loader fills.
pub mod info {
    /// flags
    pub const FLAGS: usize = 0;
    /// mem_lower (KiB below 1 MiB)
    pub const MEM_LOWER: usize = 4;
    /// mem_upper (KiB from 1 MiB to the first hole)
    pub const MEM_UPPER: usize = 8;
    /// cmdline
    pub const CMDLINE: usize = 16;
    /// mods_count
    pub const MODS_COUNT: usize = 20;
    /// mods_addr
    pub const MODS_ADDR: usize = 24;
    /// mmap_length
    pub const MMAP_LENGTH: usize = 44;
    /// mmap_addr
    pub const MMAP_ADDR: usize = 48;
    /// boot_loader_name
    pub const BOOT_LOADER_NAME: usize = 64;
}

/// The a.out kludge address fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AoutKludge {
    /// Address the header itself is loaded at.
    pub header_addr: u32,
    /// Address of the first byte loaded.
    pub load_addr: u32,
    /// End of the loaded data (0: to the end of the file).
    pub load_end_addr: u32,
    /// End of the bss (0: no bss).
    pub bss_end_addr: u32,
    /// Entry point.
    pub entry_addr: u32,
}

/// A multiboot header found in an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Offset of the header in the image.
    pub offset: usize,
    /// Header flags.
    pub flags: u32,
    /// The address fields, when flag bit 16 is set.
    pub aout: Option<AoutKludge>,
}

fn rd(image: &[u8], off: usize) -> Result<u32> {
    elf::u32_at(image, off as u64, "the multiboot header")
}

/// Finds the first multiboot header with a valid checksum in the first 8 KiB.
/// `Ok(None)` when there is no magic at all; [`BootError::MultibootChecksum`] when magics
/// were found but none has a valid checksum.
pub fn find_header(image: &[u8]) -> Result<Option<Header>> {
    let limit = image.len().min(SEARCH_BYTES);
    let mut bad = None;
    let mut off = 0;
    while off + 12 <= limit {
        if rd(image, off)? == HEADER_MAGIC {
            let flags = rd(image, off + 4)?;
            let checksum = rd(image, off + 8)?;
            if HEADER_MAGIC.wrapping_add(flags).wrapping_add(checksum) == 0 {
                let aout = if flags & HEADER_AOUT_KLUDGE != 0 {
                    Some(AoutKludge {
                        header_addr: rd(image, off + 12)?,
                        load_addr: rd(image, off + 16)?,
                        load_end_addr: rd(image, off + 20)?,
                        bss_end_addr: rd(image, off + 24)?,
                        entry_addr: rd(image, off + 28)?,
                    })
                } else {
                    None
                };
                return Ok(Some(Header {
                    offset: off,
                    flags,
                    aout,
                }));
            }
            bad.get_or_insert(BootError::MultibootChecksum {
                offset: off,
                magic: HEADER_MAGIC,
                flags,
                checksum,
            });
        }
        off += 4;
    }
    match bad {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// Loads a multiboot v1 image and builds its info block. Returns the entry state, the
/// loaded range and the e820 map (no ACPI; `rsdp` is `None`).
pub fn load<M: GuestMemoryBackend>(mem: &M, image: &[u8], opts: &BootOptions) -> Result<Loaded> {
    let header = find_header(image)?.ok_or(BootError::MultibootHeaderNotFound)?;
    let known = HEADER_PAGE_ALIGN | HEADER_MEMORY_INFO | HEADER_VIDEO_MODE;
    let unknown = header.flags & 0xffff & !known;
    if unknown != 0 {
        return Err(BootError::MultibootUnsupportedFlags {
            flags: header.flags,
            unknown,
        });
    }
    let ram = opts.ram_bytes;
    let (entry, image_range) = match header.aout {
        Some(k) => load_aout(mem, image, header.offset, &k, ram)?,
        None => load_elf(mem, image, ram)?,
    };
    let area = BootArea::for_image(image_range)?;
    let info_addr = write_info(mem, opts, image_range, &area)?;
    let gdt = write_gdt_at(mem, area.gdt)?;

    let mut state = EntryState::protected32(entry);
    state.rsp = area.stack_top;
    state.rax = u64::from(BOOTLOADER_MAGIC);
    state.rbx = info_addr;
    state.gdt = Some(gdt);
    Ok(Loaded {
        format: ImageFormat::Multiboot,
        entry: state,
        e820: e820_map(ram),
        image_range,
        rsdp: None,
        facs: None,
    })
}

fn load_aout<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    header_off: usize,
    k: &AoutKludge,
    ram: u64,
) -> Result<(u64, (u64, u64))> {
    let bad = |m: String| Err(BootError::AoutKludge(m));
    let load_addr = u64::from(k.load_addr);
    let header_addr = u64::from(k.header_addr);
    let header_off = header_off as u64;
    let len = image.len() as u64;
    if header_addr < load_addr {
        return bad(format!(
            "header_addr {header_addr:#x} is below load_addr {load_addr:#x}"
        ));
    }
    let delta = header_addr - load_addr;
    if delta > header_off {
        return bad(format!(
            "header_addr - load_addr = {delta:#x} exceeds the header's file offset {header_off:#x}, \
             so load_addr would precede the start of the file"
        ));
    }
    let file_off = header_off - delta;
    let load_end = if k.load_end_addr == 0 {
        load_addr + (len - file_off)
    } else {
        let end = u64::from(k.load_end_addr);
        if end < load_addr {
            return bad(format!(
                "load_end_addr {end:#x} is below load_addr {load_addr:#x}"
            ));
        }
        end
    };
    let load_len = load_end - load_addr;
    if load_len == 0 {
        return bad("load_addr == load_end_addr: nothing to load".into());
    }
    if file_off + load_len > len {
        return Err(BootError::Truncated {
            what: "the a.out kludge load range (load_addr..load_end_addr)",
            needed: file_off + load_len,
            have: len,
        });
    }
    let bss_end = if k.bss_end_addr == 0 {
        load_end
    } else {
        let end = u64::from(k.bss_end_addr);
        if end < load_end {
            return bad(format!(
                "bss_end_addr {end:#x} is below load_end_addr {load_end:#x}"
            ));
        }
        end
    };
    check_segment(
        ram,
        load_addr,
        bss_end - load_addr,
        LowMemory::AroundFixedAreas,
    )?;
    let entry = u64::from(k.entry_addr);
    if !(load_addr..load_end).contains(&entry) {
        return Err(BootError::EntryOutsideImage {
            entry,
            start: load_addr,
            end: load_end,
        });
    }
    let data = &image[file_off as usize..(file_off + load_len) as usize];
    write_bytes(mem, load_addr, data)?;
    zero_bytes(mem, load_end, bss_end - load_end)?;
    Ok((entry, (load_addr, bss_end)))
}

fn load_elf<M: GuestMemoryBackend>(mem: &M, image: &[u8], ram: u64) -> Result<(u64, (u64, u64))> {
    let parsed = elf::parse(image)?;
    let entry = elf::physical_entry(&parsed);
    if entry >= 1 << 32 {
        return Err(BootError::EntryAbove4G { entry });
    }
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
    let range = elf::load_segments(mem, image, &parsed, ram, LowMemory::AroundFixedAreas)?;
    elf::check_entry(&parsed, entry, range)?;
    Ok((entry, range))
}

/// The command line a multiboot kernel sees: `"<kernel path> <cmdline>"`.
pub fn full_cmdline(opts: &BootOptions) -> String {
    if opts.cmdline.is_empty() {
        opts.kernel_path.clone()
    } else if opts.kernel_path.is_empty() {
        opts.cmdline.clone()
    } else {
        format!("{} {}", opts.kernel_path, opts.cmdline)
    }
}

fn put32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn write_info<M: GuestMemoryBackend>(
    mem: &M,
    opts: &BootOptions,
    image_range: (u64, u64),
    area: &BootArea,
) -> Result<u64> {
    let ram = opts.ram_bytes;
    let mut data = BootData::within(area);

    let cmdline = data.put_cstr(mem, &full_cmdline(opts))?;
    let name = data.put_cstr(mem, BOOT_LOADER_NAME)?;

    let mut mmap = Vec::new();
    for e in e820_map(ram) {
        mmap.extend_from_slice(&20u32.to_le_bytes());
        mmap.extend_from_slice(&e.addr.to_le_bytes());
        mmap.extend_from_slice(&e.size.to_le_bytes());
        mmap.extend_from_slice(&e.kind.code().to_le_bytes());
    }
    let mmap_addr = data.put(mem, &mmap, 8)?;

    let mut mods_count = 0u32;
    let mut mods_addr = 0u64;
    if let Some(initrd) = &opts.initrd {
        let size = initrd.len() as u64;
        let start = place_high(ram, size, PCI_HOLE_START, image_range, "initrd")?;
        write_bytes(mem, start, initrd)?;
        let string = data.put_cstr(mem, INITRD_MODULE_STRING)?;
        let mut entry = [0u8; 16];
        put32(&mut entry, 0, start as u32);
        put32(&mut entry, 4, (start + size) as u32);
        put32(&mut entry, 8, string as u32);
        mods_addr = data.put(mem, &entry, 4)?;
        mods_count = 1;
    }

    let mut block = [0u8; INFO_SIZE];
    put32(
        &mut block,
        info::FLAGS,
        INFO_MEMORY | INFO_CMDLINE | INFO_MODS | INFO_MEM_MAP | INFO_BOOT_LOADER_NAME,
    );
    put32(&mut block, info::MEM_LOWER, (EBDA_START / 1024) as u32);
    let upper = (low_ram_end(ram).saturating_sub(HIGH_MEMORY_START)) / 1024;
    put32(&mut block, info::MEM_UPPER, upper as u32);
    put32(&mut block, info::CMDLINE, cmdline as u32);
    put32(&mut block, info::MODS_COUNT, mods_count);
    put32(&mut block, info::MODS_ADDR, mods_addr as u32);
    put32(&mut block, info::MMAP_LENGTH, mmap.len() as u32);
    put32(&mut block, info::MMAP_ADDR, mmap_addr as u32);
    put32(&mut block, info::BOOT_LOADER_NAME, name as u32);
    write_bytes(mem, area.info, &block)?;
    Ok(area.info)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::elf::build::{elf, Ph};
    use crate::entry::CpuMode;
    use crate::layout::{ram_regions, read_bytes, E820Kind, BOOT_DATA_START, BOOT_INFO_ADDR};
    use vm_memory::GuestMemoryMmap;

    const MIB: u64 = 1 << 20;

    pub(crate) fn mem(ram: u64) -> GuestMemoryMmap<()> {
        GuestMemoryMmap::from_ranges(&ram_regions(ram)).unwrap()
    }

    pub(crate) fn opts(ram: u64) -> BootOptions {
        BootOptions {
            kernel_path: "/k/kernel.bin".into(),
            cmdline: "console=ttyS0 test=1".into(),
            ram_bytes: ram,
            ..BootOptions::default()
        }
    }

    fn header(flags: u32, k: Option<AoutKludge>) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&HEADER_MAGIC.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&(0u32.wrapping_sub(HEADER_MAGIC).wrapping_sub(flags)).to_le_bytes());
        if let Some(k) = k {
            for v in [
                k.header_addr,
                k.load_addr,
                k.load_end_addr,
                k.bss_end_addr,
                k.entry_addr,
            ] {
                h.extend_from_slice(&v.to_le_bytes());
            }
        }
        h
    }

    /// A flat a.out-kludge image: 16 bytes of code, the header at offset 16, then a
    /// pattern up to `len` bytes, loaded at 1 MiB with `bss` bytes of bss.
    pub(crate) fn aout_image(len: usize, bss: u32) -> Vec<u8> {
        let load = 0x10_0000u32;
        let k = AoutKludge {
            header_addr: load + 16,
            load_addr: load,
            load_end_addr: load + len as u32,
            bss_end_addr: if bss == 0 { 0 } else { load + len as u32 + bss },
            entry_addr: load + 4,
        };
        let mut img = vec![0x90u8; 16];
        img.extend_from_slice(&header(
            HEADER_AOUT_KLUDGE | HEADER_PAGE_ALIGN | HEADER_MEMORY_INFO,
            Some(k),
        ));
        let mut i = 0u8;
        while img.len() < len {
            img.push(i);
            i = i.wrapping_add(1);
        }
        img
    }

    fn rd32(m: &GuestMemoryMmap<()>, a: u64) -> u32 {
        let mut b = [0u8; 4];
        read_bytes(m, a, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    fn rd64(m: &GuestMemoryMmap<()>, a: u64) -> u64 {
        let mut b = [0u8; 8];
        read_bytes(m, a, &mut b).unwrap();
        u64::from_le_bytes(b)
    }

    fn cstr(m: &GuestMemoryMmap<()>, a: u64) -> String {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        for i in 0..4096 {
            read_bytes(m, a + i, &mut b).unwrap();
            if b[0] == 0 {
                break;
            }
            out.push(b[0]);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn aout_loads_and_zeroes_bss() {
        let ram = 64 * MIB;
        let m = mem(ram);
        // Dirty the bss range first to see it zeroed.
        write_bytes(&m, 0x10_0000 + 0x3000, &[0xAA; 0x2000]).unwrap();
        let img = aout_image(0x3000, 0x2000);
        let o = opts(ram);
        let l = load(&m, &img, &o).unwrap();
        assert_eq!(l.format, ImageFormat::Multiboot);
        assert_eq!(l.image_range, (0x10_0000, 0x10_5000));
        let mut got = vec![0u8; img.len()];
        read_bytes(&m, 0x10_0000, &mut got).unwrap();
        assert_eq!(got, img);
        let mut bss = vec![1u8; 0x2000];
        read_bytes(&m, 0x10_3000, &mut bss).unwrap();
        assert!(bss.iter().all(|&b| b == 0));

        let e = &l.entry;
        assert_eq!(e.mode, CpuMode::Protected32);
        assert_eq!(e.rip, 0x10_0004);
        assert_eq!(e.rax, 0x2BAD_B002);
        assert_eq!(e.rbx, BOOT_INFO_ADDR);
        assert_eq!(e.rflags, 2);
        assert_eq!(l.e820, e820_map(ram));
    }

    #[test]
    fn aout_load_end_zero_loads_whole_file() {
        let ram = 16 * MIB;
        let m = mem(ram);
        let mut img = aout_image(0x1800, 0);
        // Patch load_end_addr (header at 16, field at +20) to 0 and fix nothing else:
        // the checksum covers only magic and flags.
        img[36..40].copy_from_slice(&0u32.to_le_bytes());
        let l = load(&m, &img, &opts(ram)).unwrap();
        assert_eq!(l.image_range, (0x10_0000, 0x10_1800));
    }

    #[test]
    fn aout_with_offset_header() {
        // Header at file offset 0x40; the loaded part starts at file offset 0x20.
        let ram = 16 * MIB;
        let m = mem(ram);
        let k = AoutKludge {
            header_addr: 0x20_0020,
            load_addr: 0x20_0000,
            load_end_addr: 0x20_0100,
            bss_end_addr: 0,
            entry_addr: 0x20_0000,
        };
        let mut img = vec![0xEEu8; 0x40];
        img.extend_from_slice(&header(HEADER_AOUT_KLUDGE, Some(k)));
        img.resize(0x200, 0x55);
        load(&m, &img, &opts(ram)).unwrap();
        let mut got = vec![0u8; 0x100];
        read_bytes(&m, 0x20_0000, &mut got).unwrap();
        assert_eq!(&got[..], &img[0x20..0x120]);
    }

    #[test]
    fn info_block_fields() {
        let ram = 64 * MIB;
        let m = mem(ram);
        let mut o = opts(ram);
        let initrd: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        o.initrd = Some(initrd.clone());
        let l = load(&m, &aout_image(0x2000, 0x1000), &o).unwrap();
        let info = l.entry.rbx;
        let flags = rd32(&m, info);
        assert_eq!(
            flags,
            INFO_MEMORY | INFO_CMDLINE | INFO_MODS | INFO_MEM_MAP | INFO_BOOT_LOADER_NAME
        );
        assert_eq!(rd32(&m, info + 4), 639);
        assert_eq!(rd32(&m, info + 8), 63 * 1024);
        assert_eq!(
            cstr(&m, rd32(&m, info + 16) as u64),
            "/k/kernel.bin console=ttyS0 test=1"
        );
        assert_eq!(cstr(&m, rd32(&m, info + 64) as u64), "exitlab");

        // Memory map equals e820_map.
        let len = rd32(&m, info + 44) as u64;
        let addr = rd32(&m, info + 48) as u64;
        let map = e820_map(ram);
        assert_eq!(len, 24 * map.len() as u64);
        for (i, e) in map.iter().enumerate() {
            let at = addr + 24 * i as u64;
            assert_eq!(rd32(&m, at), 20);
            assert_eq!(rd64(&m, at + 4), e.addr);
            assert_eq!(rd64(&m, at + 12), e.size);
            assert_eq!(rd32(&m, at + 20), e.kind.code());
        }
        assert_eq!(map[0].kind, E820Kind::Ram);

        // Module 0 is the initrd, page aligned, outside the image and low memory.
        assert_eq!(rd32(&m, info + 20), 1);
        let mods = rd32(&m, info + 24) as u64;
        let start = rd32(&m, mods) as u64;
        let end = rd32(&m, mods + 4) as u64;
        assert_eq!(start % 4096, 0);
        assert_eq!(end - start, initrd.len() as u64);
        assert!(start >= l.image_range.1 && end <= ram);
        assert_eq!(cstr(&m, rd32(&m, mods + 8) as u64), "initrd");
        assert_eq!(rd32(&m, mods + 12), 0);
        let mut got = vec![0u8; initrd.len()];
        read_bytes(&m, start, &mut got).unwrap();
        assert_eq!(got, initrd);

        // Everything the info points to is in the boot data area.
        for a in [
            rd32(&m, info + 16),
            rd32(&m, info + 64),
            rd32(&m, info + 48),
            mods as u32,
        ] {
            assert!((BOOT_DATA_START..EBDA_START).contains(&(a as u64)));
        }
    }

    #[test]
    fn cmdline_without_args() {
        let ram = 16 * MIB;
        let m = mem(ram);
        let mut o = opts(ram);
        o.cmdline.clear();
        let l = load(&m, &aout_image(0x1000, 0), &o).unwrap();
        assert_eq!(cstr(&m, rd32(&m, l.entry.rbx + 16) as u64), "/k/kernel.bin");
        assert_eq!(rd32(&m, l.entry.rbx + 20), 0);
    }

    #[test]
    fn elf32_multiboot() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let code = vec![0xF4u8; 0x100];
        let mut img = elf(
            false,
            0x10_0010,
            &[
                Ph::load(0x10_0000, code.clone(), 0x4000),
                Ph::load(0x20_0000, vec![0x11; 64], 64),
            ],
        );
        // The multiboot header goes right after the ELF's data (still within 8 KiB).
        let hoff = img.len().div_ceil(4) * 4;
        img.resize(hoff, 0);
        img.extend_from_slice(&header(HEADER_PAGE_ALIGN | HEADER_MEMORY_INFO, None));
        write_bytes(&m, 0x10_0100, &[0xCC; 0x100]).unwrap();
        let l = load(&m, &img, &opts(ram)).unwrap();
        assert_eq!(l.entry.rip, 0x10_0010);
        assert_eq!(l.image_range, (0x10_0000, 0x20_0040));
        let mut got = vec![0u8; 0x200];
        read_bytes(&m, 0x10_0000, &mut got).unwrap();
        assert_eq!(&got[..0x100], &code[..]);
        assert!(got[0x100..].iter().all(|&b| b == 0));
    }

    #[test]
    fn elf64_multiboot_entry_above_4g_rejected() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let mut img = elf(true, 0x1_0000_0000, &[Ph::load(0x10_0000, vec![0; 16], 16)]);
        img.extend_from_slice(&header(0, None));
        assert!(matches!(
            load(&m, &img, &opts(ram)),
            Err(BootError::EntryAbove4G { .. })
        ));
    }

    #[test]
    fn bad_checksum() {
        let mut img = aout_image(0x1000, 0);
        img[24] ^= 1;
        let err = load(&mem(16 * MIB), &img, &opts(16 * MIB)).unwrap_err();
        assert!(
            matches!(err, BootError::MultibootChecksum { offset: 16, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("checksum"));
    }

    #[test]
    fn no_header() {
        assert!(matches!(
            load(&mem(16 * MIB), &[0u8; 4096], &opts(16 * MIB)),
            Err(BootError::MultibootHeaderNotFound)
        ));
        // A header beyond 8 KiB is not found.
        let mut img = vec![0u8; 8192];
        img.extend_from_slice(&header(0, None));
        assert_eq!(find_header(&img).unwrap(), None);
    }

    #[test]
    fn unsupported_flags() {
        let mut img = vec![0u8; 16];
        img.extend_from_slice(&header(1 << 5, None));
        assert!(matches!(
            load(&mem(16 * MIB), &img, &opts(16 * MIB)),
            Err(BootError::MultibootUnsupportedFlags { unknown: 0x20, .. })
        ));
    }

    #[test]
    fn aout_truncated() {
        let mut img = aout_image(0x1000, 0);
        img.truncate(0x800);
        assert!(matches!(
            load(&mem(16 * MIB), &img, &opts(16 * MIB)),
            Err(BootError::Truncated { .. })
        ));
        // Header itself cut short.
        let img = aout_image(0x1000, 0);
        assert!(matches!(
            find_header(&img[..40]),
            Err(BootError::Truncated { .. })
        ));
    }

    fn patched(field: usize, v: u32) -> Vec<u8> {
        let mut img = aout_image(0x1000, 0x1000);
        img[16 + field..16 + field + 4].copy_from_slice(&v.to_le_bytes());
        img
    }

    #[test]
    fn aout_inconsistent_fields() {
        let ram = 16 * MIB;
        let m = mem(ram);
        let o = opts(ram);
        // load_end < load_addr
        let e = load(&m, &patched(20, 0x0F_0000), &o).unwrap_err();
        assert!(
            matches!(&e, BootError::AoutKludge(s) if s.contains("load_end_addr")),
            "{e}"
        );
        // bss_end < load_end
        let e = load(&m, &patched(24, 0x10_0800), &o).unwrap_err();
        assert!(
            matches!(&e, BootError::AoutKludge(s) if s.contains("bss_end_addr")),
            "{e}"
        );
        // header_addr < load_addr
        let e = load(&m, &patched(12, 0x0F_0000), &o).unwrap_err();
        assert!(
            matches!(&e, BootError::AoutKludge(s) if s.contains("header_addr")),
            "{e}"
        );
        // header_addr - load_addr beyond the file offset
        let e = load(&m, &patched(12, 0x10_0100), &o).unwrap_err();
        assert!(matches!(e, BootError::AoutKludge(_)), "{e}");
        // entry outside the image
        let e = load(&m, &patched(28, 0x50_0000), &o).unwrap_err();
        assert!(matches!(e, BootError::EntryOutsideImage { .. }), "{e}");
    }

    #[test]
    fn segment_outside_memory() {
        let ram = 4 * MIB;
        let m = mem(ram);
        let mut img = elf(false, 0x80_0000, &[Ph::load(0x80_0000, vec![1; 16], 16)]);
        img.extend_from_slice(&header(0, None));
        assert!(matches!(
            load(&m, &img, &opts(ram)),
            Err(BootError::SegmentOutsideRam { .. })
        ));
        // Below 1 MiB in the VGA hole: refused, naming it.
        let mut img = elf(false, 0xB8000, &[Ph::load(0xB8000, vec![1; 16], 16)]);
        img.extend_from_slice(&header(0, None));
        let e = load(&m, &img, &opts(ram)).unwrap_err();
        assert!(
            matches!(e, BootError::SegmentOverlapsFixedArea { .. })
                && e.to_string().contains("the VGA hole"),
            "{e}"
        );
    }

    #[test]
    fn elf_linked_at_0x8000_gets_its_boot_data_after_the_image() {
        let ram = 4 * MIB;
        let m = mem(ram);
        let mut img = elf(
            false,
            0x8000,
            &[Ph::load(0x8000, vec![0xAB; 0x800], 0x286C)],
        );
        img.extend_from_slice(&header(0, None));
        let mut o = opts(ram);
        o.initrd = Some(vec![7; 100]);
        let l = load(&m, &img, &o).unwrap();
        assert_eq!(l.image_range, (0x8000, 0xA86C));
        let info = l.entry.rbx;
        assert_eq!(info, 0xD000);
        assert_eq!(l.entry.rsp, 0xD000);
        assert_eq!(l.entry.gdt.map(|g| g.0), Some(0xB000));
        // The image is intact and every pointer in the info block avoids it.
        let mut b = [0u8; 0x800];
        read_bytes(&m, 0x8000, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0xAB));
        for field in [16u64, 24, 48, 64] {
            let a = u64::from(rd32(&m, info + field));
            assert!((0xE000..EBDA_START).contains(&a), "field {field}: {a:#x}");
        }
        assert!(cstr(&m, u64::from(rd32(&m, info + 16))).starts_with("/k/kernel.bin"));
    }

    #[test]
    fn truncated_elf() {
        let mut img = elf(false, 0x10_0000, &[Ph::load(0x10_0000, vec![1; 256], 256)]);
        let hdr = header(0, None);
        img.splice(52 + 32..52 + 32, hdr.iter().copied());
        // The header moved the segment data; the segment now points past a shorter file.
        img.truncate(200);
        assert!(matches!(
            load(&mem(16 * MIB), &img, &opts(16 * MIB)),
            Err(BootError::Truncated { .. })
        ));
    }
}
