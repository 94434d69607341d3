//! Linux loaders: bzImage (boot protocol 2.06 or newer) and ELF64 vmlinux.
//!
//! Boot structures: the zero page (`boot_params`) at [`ZERO_PAGE_ADDR`] (0x9000), the
//! command line at [`LINUX_CMDLINE_ADDR`] (0x20000), the initrd as high as possible below
//! both the PCI hole and the kernel's `initrd_addr_max`, page-aligned, clear of the
//! kernel and of the memory it decompresses into. The bzImage's protected-mode code is
//! loaded at `code32_start` (normally 1 MiB) by linux-loader.
//!
//! Entry: bzImage with `XLF_KERNEL_64` (protocol 2.12+) in long mode at
//! `code32_start + 0x200` with identity page tables for 4 GiB, otherwise in 32-bit
//! protected mode at `code32_start`; vmlinux in long mode at its ELF entry. RSI always
//! points at the zero page.

use std::io::Cursor;

use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{
    boot_e820_entry, boot_params, setup_header, CAN_USE_HEAP, E820_MAX_ENTRIES_ZEROPAGE,
    LOADED_HIGH, XLF_KERNEL_64,
};
use linux_loader::loader::bzimage::BzImage;
use linux_loader::loader::KernelLoader;
use vm_memory::{ByteValued, GuestAddress, GuestMemoryBackend};

use crate::elf;
use crate::entry::{write_gdt, write_identity_page_tables, EntryState};
use crate::error::{BootError, Result};
use crate::layout::{
    check_segment, e820_map, place_high, write_bytes, LowMemory, BOOT_DATA_END, BOOT_INFO_ADDR,
    HIGH_MEMORY_START, LINUX_CMDLINE_ADDR, PCI_HOLE_START,
};
use crate::{BootOptions, ImageFormat, Loaded};

/// Guest-physical address of the zero page.
pub const ZERO_PAGE_ADDR: u64 = BOOT_INFO_ADDR;
/// Offset of the setup header in a bzImage.
pub const SETUP_HEADER_OFFSET: usize = 0x1F1;
/// Offset of the boot flag.
pub const BOOT_FLAG_OFFSET: usize = 0x1FE;
/// Offset of the "HdrS" magic.
pub const HDR_MAGIC_OFFSET: usize = 0x202;
/// "HdrS".
pub const HDR_MAGIC: u32 = 0x5372_6448;
/// The 0xAA55 boot flag.
pub const BOOT_FLAG: u16 = 0xAA55;
/// Oldest boot protocol accepted.
pub const MIN_PROTOCOL: u16 = 0x0206;
/// `type_of_loader` for an unregistered loader.
pub const LOADER_TYPE_UNDEFINED: u8 = 0xFF;
/// Offset of the 64-bit entry from the protected-mode kernel's start.
pub const ENTRY64_OFFSET: u64 = 0x200;
/// Command-line limit assumed for a vmlinux (x86 COMMAND_LINE_SIZE minus the NUL).
pub const VMLINUX_CMDLINE_MAX: usize = 2047;
/// `initrd_addr_max` assumed when the header gives none (boot protocol default).
pub const DEFAULT_INITRD_ADDR_MAX: u32 = 0x37FF_FFFF;

fn u16_at(image: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*image.get(off)?, *image.get(off + 1)?]))
}

fn u32_at(image: &[u8], off: usize) -> Option<u32> {
    let b = image.get(off..off + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether the image has the bzImage "HdrS" magic.
pub fn is_bzimage(image: &[u8]) -> bool {
    u32_at(image, HDR_MAGIC_OFFSET) == Some(HDR_MAGIC)
}

/// Xen's XEN_ELFNOTE_GUEST_OS note: the guest's OS name (`linux` in a vmlinux).
const XEN_ELFNOTE_GUEST_OS: u32 = 6;

/// Whether `image` is a Linux kernel: a bzImage, or an ELF whose notes say so (the notes
/// named `Linux` every vmlinux carries, or Xen's GUEST_OS note `linux`, which a vmlinux
/// with a PVH entry also has). What the loader chooses to enter it by does not matter.
pub fn is_linux(image: &[u8]) -> bool {
    if is_bzimage(image) {
        return true;
    }
    let Ok(parsed) = elf::is_elf(image).then(|| elf::parse(image)).transpose() else {
        return false;
    };
    parsed.is_some_and(|p| {
        p.notes.iter().any(|n| {
            n.name == b"Linux"
                || (n.name == b"Xen"
                    && n.kind == XEN_ELFNOTE_GUEST_OS
                    && image[n.desc.clone()].starts_with(b"linux"))
        })
    })
}

/// Whether the image carries the 0xAA55 boot-sector flag at 0x1FE.
pub fn has_boot_flag(image: &[u8]) -> bool {
    u16_at(image, BOOT_FLAG_OFFSET) == Some(BOOT_FLAG)
}

/// Reads and validates the setup header of a bzImage.
pub fn read_setup_header(image: &[u8]) -> Result<setup_header> {
    let mut hdr = setup_header::default();
    let len = hdr.as_slice().len();
    let end = SETUP_HEADER_OFFSET + len;
    if image.len() < end {
        // Name the most specific problem the short file already shows.
        if let Some(found) = u32_at(image, HDR_MAGIC_OFFSET) {
            if found != HDR_MAGIC {
                return Err(BootError::BzImageBadMagic { found });
            }
        }
        return Err(BootError::Truncated {
            what: "the bzImage setup header",
            needed: end as u64,
            have: image.len() as u64,
        });
    }
    hdr.as_mut_slice()
        .copy_from_slice(&image[SETUP_HEADER_OFFSET..end]);
    let magic = hdr.header;
    if magic != HDR_MAGIC {
        return Err(BootError::BzImageBadMagic { found: magic });
    }
    let flag = hdr.boot_flag;
    if flag != BOOT_FLAG {
        return Err(BootError::BzImageBadBootFlag { found: flag });
    }
    let version = hdr.version;
    if version < MIN_PROTOCOL {
        return Err(BootError::BzImageProtocolTooOld {
            major: (version >> 8) as u8,
            minor: version as u8,
        });
    }
    if hdr.loadflags & LOADED_HIGH == 0 {
        return Err(BootError::BzImageNotLoadedHigh);
    }
    Ok(hdr)
}

/// Where the signatures of a signed bzImage end: a bzImage built with an EFI stub is also
/// a PE file, and a signed one (distribution kernels, for Secure Boot) carries its
/// signatures after the kernel, where the PE optional header's certificate table (data
/// directory 4: file offset, size) says. `None` when there is no such table.
fn pe_certificates_end(image: &[u8]) -> Option<u64> {
    if image.get(..2)? != b"MZ" {
        return None;
    }
    let pe = u32_at(image, 0x3C)? as usize;
    if image.get(pe..pe.checked_add(4)?)? != b"PE\0\0" {
        return None;
    }
    let opt = pe + 24;
    // PE32 or PE32+: where NumberOfRvaAndSizes sits; the directories follow it.
    let count_at = match u16_at(image, opt)? {
        0x10B => opt + 92,
        0x20B => opt + 108,
        _ => return None,
    };
    if u32_at(image, count_at)? <= 4 {
        return None;
    }
    let dir = count_at + 4 + 4 * 8;
    let (offset, size) = (u32_at(image, dir)?, u32_at(image, dir + 4)?);
    (size != 0).then(|| u64::from(offset) + u64::from(size))
}

/// Loads a bzImage and writes its zero page; `rsdp` goes into `acpi_rsdp_addr`.
pub fn load_bzimage<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    opts: &BootOptions,
    rsdp: Option<u64>,
) -> Result<Loaded> {
    let hdr = read_setup_header(image)?;
    let sects = match hdr.setup_sects {
        0 => 4,
        n => u64::from(n),
    };
    let setup_size = (sects + 1) * 512;
    let len = image.len() as u64;
    if len <= setup_size {
        return Err(BootError::Truncated {
            what: "the bzImage protected-mode kernel (after the setup sectors)",
            needed: setup_size + 1,
            have: len,
        });
    }
    let kernel_size = len - setup_size;
    // syssize: the protected-mode kernel's length in 16-byte units (it ends with the
    // build's CRC), as the build wrote it; a file cut short boots and faults otherwise.
    let declared = u64::from(hdr.syssize) * 16;
    if kernel_size < declared {
        return Err(BootError::Truncated {
            what: "the bzImage protected-mode kernel (the setup header's syssize x 16 bytes)",
            needed: setup_size + declared,
            have: len,
        });
    }
    if let Some(end) = pe_certificates_end(image) {
        if end > len {
            return Err(BootError::Truncated {
                what: "the signature appended to the bzImage (its PE header's certificate table)",
                needed: end,
                have: len,
            });
        }
    }
    let load_addr = u64::from(hdr.code32_start);
    let ram = opts.ram_bytes;
    check_segment(ram, load_addr, kernel_size, LowMemory::Refuse)?;

    let result = BzImage::load(
        mem,
        None,
        &mut Cursor::new(image),
        Some(GuestAddress(HIGH_MEMORY_START)),
    )
    .map_err(|e| BootError::LinuxLoader(e.to_string()))?;
    let hdr = result.setup_header.unwrap_or(hdr);
    let image_range = (result.kernel_load.0, result.kernel_end);

    // Keep the initrd clear of the area the kernel decompresses into.
    let init_size = u64::from(hdr.init_size);
    let mut reserved_end = image_range.1.max(load_addr + init_size);
    if hdr.relocatable_kernel != 0 && hdr.version >= 0x020a {
        reserved_end = reserved_end.max(hdr.pref_address.saturating_add(init_size));
    }
    let initrd_max = match hdr.initrd_addr_max {
        0 => DEFAULT_INITRD_ADDR_MAX,
        v => v,
    };
    let cmdline_max = match hdr.cmdline_size {
        0 => 255,
        v => v as usize,
    };

    let mut params = boot_params {
        hdr,
        ..boot_params::default()
    };
    fill_zero_page(
        mem,
        &mut params,
        opts,
        rsdp,
        cmdline_max,
        u64::from(initrd_max) + 1,
        (image_range.0, reserved_end),
    )?;

    let version = hdr.version;
    let xloadflags = hdr.xloadflags;
    let gdt = write_gdt(mem)?;
    let mut state = if version >= 0x020c && xloadflags & XLF_KERNEL_64 != 0 {
        write_identity_page_tables(mem)?;
        EntryState::long64(image_range.0 + ENTRY64_OFFSET)
    } else {
        EntryState::protected32(image_range.0)
    };
    state.rsi = ZERO_PAGE_ADDR;
    state.gdt = Some(gdt);
    Ok(Loaded {
        format: ImageFormat::BzImage,
        entry: state,
        e820: e820_map(ram),
        image_range,
        rsdp,
        facs: None,
    })
}

/// Loads an ELF64 vmlinux for its 64-bit entry and writes a zero page for it.
pub fn load_elf<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    opts: &BootOptions,
    rsdp: Option<u64>,
) -> Result<Loaded> {
    let parsed = elf::parse(image)?;
    if !parsed.is64 {
        return Err(BootError::Elf(
            "a Linux vmlinux must be a 64-bit ELF (ELFCLASS64)".into(),
        ));
    }
    let ram = opts.ram_bytes;
    let image_range = elf::load_segments(mem, image, &parsed, ram, LowMemory::Refuse)?;
    let entry = elf::physical_entry(&parsed);
    elf::check_entry(&parsed, entry, image_range)?;

    let mut params = boot_params::default();
    params.hdr.boot_flag = BOOT_FLAG;
    params.hdr.header = HDR_MAGIC;
    params.hdr.kernel_alignment = 0x0100_0000;
    fill_zero_page(
        mem,
        &mut params,
        opts,
        rsdp,
        VMLINUX_CMDLINE_MAX,
        PCI_HOLE_START,
        image_range,
    )?;

    let gdt = write_gdt(mem)?;
    write_identity_page_tables(mem)?;
    let mut state = EntryState::long64(entry);
    state.rsi = ZERO_PAGE_ADDR;
    state.gdt = Some(gdt);
    Ok(Loaded {
        format: ImageFormat::LinuxElf,
        entry: state,
        e820: e820_map(ram),
        image_range,
        rsdp,
        facs: None,
    })
}

/// Fills the loader-owned fields of the zero page (command line, initrd, e820, RSDP),
/// writes the command line and initrd, and writes the zero page.
fn fill_zero_page<M: GuestMemoryBackend>(
    mem: &M,
    params: &mut boot_params,
    opts: &BootOptions,
    rsdp: Option<u64>,
    cmdline_max: usize,
    initrd_limit: u64,
    avoid: (u64, u64),
) -> Result<()> {
    let ram = opts.ram_bytes;
    params.hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
    params.hdr.loadflags |= CAN_USE_HEAP;
    params.hdr.heap_end_ptr = 0xFE00;

    // Command line.
    let area_max = (BOOT_DATA_END - LINUX_CMDLINE_ADDR - 1) as usize;
    let max = cmdline_max.min(area_max);
    let cmdline = opts.cmdline.as_bytes();
    if cmdline.contains(&0) {
        return Err(BootError::CmdlineHasNul);
    }
    if cmdline.len() > max {
        return Err(BootError::CmdlineTooLong {
            len: cmdline.len(),
            max,
        });
    }
    let mut buf = Vec::with_capacity(cmdline.len() + 1);
    buf.extend_from_slice(cmdline);
    buf.push(0);
    write_bytes(mem, LINUX_CMDLINE_ADDR, &buf)?;
    params.hdr.cmd_line_ptr = LINUX_CMDLINE_ADDR as u32;

    // Initrd.
    if let Some(initrd) = &opts.initrd {
        let size = initrd.len() as u64;
        let limit = initrd_limit.min(PCI_HOLE_START);
        let start = place_high(ram, size, limit, avoid, "initrd")?;
        write_bytes(mem, start, initrd)?;
        params.hdr.ramdisk_image = start as u32;
        params.hdr.ramdisk_size = size as u32;
    }

    // Memory map.
    let map = e820_map(ram);
    let mut table = [boot_e820_entry::default(); E820_MAX_ENTRIES_ZEROPAGE];
    for (slot, e) in table.iter_mut().zip(map.iter()) {
        *slot = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind.code(),
        };
    }
    params.e820_table = table;
    params.e820_entries = map.len().min(E820_MAX_ENTRIES_ZEROPAGE) as u8;
    params.acpi_rsdp_addr = rsdp.unwrap_or(0);

    let bp = BootParams::new::<boot_params>(params, GuestAddress(ZERO_PAGE_ADDR));
    LinuxBootConfigurator::write_bootparams::<M>(&bp, mem)
        .map_err(|e| BootError::LinuxLoader(e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::elf::build::{elf, Ph};
    use crate::entry::CpuMode;
    use crate::layout::{read_bytes, PML4_ADDR};
    use crate::multiboot::tests::{mem, opts};
    use vm_memory::GuestMemoryMmap;

    const MIB: u64 = 1 << 20;

    #[test]
    fn linux_is_told_by_its_bzimage_header_or_its_elf_notes() {
        assert!(is_linux(&bzimage(0x20f, 0, 4096)));
        let load = || Ph::load(0x10_0000, vec![0xAB; 0x200], 0x3000);
        let entry = || Ph::note("Xen", crate::pvh::XEN_ELFNOTE_PHYS32_ENTRY, &[0; 8]);
        // A vmlinux with a PVH entry: Xen's GUEST_OS note, Linux's own notes, or both.
        for notes in [
            vec![Ph::note("Xen", XEN_ELFNOTE_GUEST_OS, b"linux\0"), entry()],
            vec![Ph::note("Linux", 0x100, b"6.1.0\0"), entry()],
            vec![Ph::note("Linux", 0x101, &[0; 4])],
        ] {
            let mut phs = vec![load()];
            phs.extend(notes);
            assert!(is_linux(&elf(true, 0x10_0000, &phs)));
        }
        // A PVH or multiboot test kernel is not Linux, nor is another OS's GUEST_OS.
        assert!(!is_linux(&crate::pvh::tests::pvh_image(true)));
        assert!(!is_linux(&elf(
            true,
            0x10_0000,
            &[
                load(),
                Ph::note("Xen", XEN_ELFNOTE_GUEST_OS, b"netbsd\0"),
                entry()
            ]
        )));
        assert!(!is_linux(b"\x7fELF"));
        assert!(!is_linux(&[]));
    }

    /// A fake bzImage: 4 setup sectors + boot sector, then `payload` bytes of "kernel".
    pub(crate) fn bzimage(version: u16, xloadflags: u16, payload: usize) -> Vec<u8> {
        let setup_sects = 4u8;
        let mut img = vec![0u8; (setup_sects as usize + 1) * 512];
        img[0x1F1] = setup_sects;
        img[0x1FE..0x200].copy_from_slice(&BOOT_FLAG.to_le_bytes());
        img[0x202..0x206].copy_from_slice(&HDR_MAGIC.to_le_bytes());
        img[0x206..0x208].copy_from_slice(&version.to_le_bytes());
        img[0x211] = LOADED_HIGH;
        img[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
        img[0x22C..0x230].copy_from_slice(&0x37FF_FFFFu32.to_le_bytes());
        img[0x236..0x238].copy_from_slice(&xloadflags.to_le_bytes());
        img[0x238..0x23C].copy_from_slice(&2048u32.to_le_bytes());
        img[0x260..0x264].copy_from_slice(&0x40_0000u32.to_le_bytes()); // init_size
        img[0x1F4..0x1F8].copy_from_slice(&(payload as u32 / 16).to_le_bytes()); // syssize
        img.extend((0..payload).map(|i| (i % 251) as u8));
        img
    }

    #[test]
    fn signed_bzimage_shorter_than_its_certificate_table_is_refused() {
        let m = mem(64 * MIB);
        let mut img = bzimage(0x020f, XLF_KERNEL_64, 0x4000);
        // A PE32+ header at 0x40 whose certificate table is the last 0x100 bytes.
        img[..2].copy_from_slice(b"MZ");
        img[0x3C..0x40].copy_from_slice(&0x40u32.to_le_bytes());
        img[0x40..0x44].copy_from_slice(b"PE\0\0");
        let opt = 0x40 + 24;
        img[opt..opt + 2].copy_from_slice(&0x20Bu16.to_le_bytes());
        img[opt + 108..opt + 112].copy_from_slice(&6u32.to_le_bytes());
        let dir = opt + 112 + 32;
        let unsigned_len = img.len();
        let signed_len = unsigned_len + 0x100;
        img[dir..dir + 4].copy_from_slice(&(unsigned_len as u32).to_le_bytes());
        img[dir + 4..dir + 8].copy_from_slice(&0x100u32.to_le_bytes());
        img.resize(signed_len, 0x5A);
        assert_eq!(pe_certificates_end(&img), Some(signed_len as u64));
        assert!(load_bzimage(&m, &img, &opts(64 * MIB), None).is_ok());
        let e = load_bzimage(&m, &img[..signed_len - 1], &opts(64 * MIB), None).unwrap_err();
        assert!(e.to_string().contains("certificate table"), "{e}");
        assert_eq!(pe_certificates_end(&bzimage(0x020f, 0, 16)), None);
    }

    #[test]
    fn bzimage_shorter_than_syssize_is_refused() {
        let m = mem(64 * MIB);
        let img = bzimage(0x020f, XLF_KERNEL_64, 0x4000);
        assert!(load_bzimage(&m, &img, &opts(64 * MIB), None).is_ok());
        for cut in [img.len() - 1, img.len() - 0x2000] {
            let e = load_bzimage(&m, &img[..cut], &opts(64 * MIB), None).unwrap_err();
            assert!(
                matches!(e, BootError::Truncated { needed, have, .. }
                    if needed == img.len() as u64 && have == cut as u64),
                "{e}"
            );
            assert!(e.to_string().contains("syssize"), "{e}");
        }
    }

    fn zero_page(m: &GuestMemoryMmap<()>) -> boot_params {
        let mut p = boot_params::default();
        read_bytes(m, ZERO_PAGE_ADDR, p.as_mut_slice()).unwrap();
        p
    }

    #[test]
    fn bzimage_64bit() {
        let ram = 64 * MIB;
        let m = mem(ram);
        let img = bzimage(0x020f, XLF_KERNEL_64, 0x3000);
        let mut o = opts(ram);
        o.initrd = Some(vec![0x77; 9000]);
        let l = load_bzimage(&m, &img, &o, Some(0xE0000)).unwrap();
        assert_eq!(l.format, ImageFormat::BzImage);
        assert_eq!(l.image_range, (0x10_0000, 0x10_3000));
        assert_eq!(l.entry.mode, CpuMode::Long64);
        assert_eq!(l.entry.rip, 0x10_0200);
        assert_eq!(l.entry.rsi, ZERO_PAGE_ADDR);
        assert_eq!(l.entry.page_table_root, Some(PML4_ADDR));
        let mut k = vec![0u8; 0x3000];
        read_bytes(&m, 0x10_0000, &mut k).unwrap();
        assert_eq!(&k[..], &img[5 * 512..]);

        let p = zero_page(&m);
        let hdr = p.hdr;
        assert_eq!({ hdr.type_of_loader }, 0xFF);
        assert_ne!(hdr.loadflags & CAN_USE_HEAP, 0);
        assert_eq!({ hdr.cmd_line_ptr }, LINUX_CMDLINE_ADDR as u32);
        assert_eq!({ p.acpi_rsdp_addr }, 0xE0000);
        let mut c = vec![0u8; o.cmdline.len() + 1];
        read_bytes(&m, LINUX_CMDLINE_ADDR, &mut c).unwrap();
        assert_eq!(&c[..o.cmdline.len()], o.cmdline.as_bytes());
        assert_eq!(c[o.cmdline.len()], 0);

        let map = e820_map(ram);
        assert_eq!(p.e820_entries as usize, map.len());
        let table = p.e820_table;
        for (t, e) in table.iter().zip(map.iter()) {
            let t = *t;
            assert_eq!(
                ({ t.addr }, { t.size }, { t.r#type }),
                (e.addr, e.size, e.kind.code())
            );
        }

        let (start, size) = (hdr.ramdisk_image as u64, hdr.ramdisk_size as u64);
        assert_eq!(size, 9000);
        assert_eq!(start % 4096, 0);
        // Clear of the decompression area (load + init_size).
        assert!(start >= 0x10_0000 + 0x40_0000);
        assert!(start + size <= ram);
        let mut r = vec![0u8; 9000];
        read_bytes(&m, start, &mut r).unwrap();
        assert!(r.iter().all(|&b| b == 0x77));
    }

    #[test]
    fn bzimage_32bit_entry_for_old_protocol() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let l = load_bzimage(&m, &bzimage(0x0206, 0, 0x1000), &opts(ram), None).unwrap();
        assert_eq!(l.entry.mode, CpuMode::Protected32);
        assert_eq!(l.entry.rip, 0x10_0000);
        assert_eq!(l.entry.rsi, ZERO_PAGE_ADDR);
        assert_eq!({ zero_page(&m).acpi_rsdp_addr }, 0);
    }

    #[test]
    fn bzimage_bad_headers() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let o = opts(ram);
        let mut bad = bzimage(0x020f, XLF_KERNEL_64, 0x1000);
        bad[0x202] = b'X';
        let e = load_bzimage(&m, &bad, &o, None).unwrap_err();
        assert!(matches!(e, BootError::BzImageBadMagic { .. }), "{e}");
        assert!(e.to_string().contains("HdrS"));

        let mut bad = bzimage(0x020f, XLF_KERNEL_64, 0x1000);
        bad[0x1FE] = 0;
        assert!(matches!(
            load_bzimage(&m, &bad, &o, None),
            Err(BootError::BzImageBadBootFlag { .. })
        ));
        assert!(matches!(
            load_bzimage(&m, &bzimage(0x0204, 0, 0x1000), &o, None),
            Err(BootError::BzImageProtocolTooOld { major: 2, minor: 4 })
        ));
        let mut zimage = bzimage(0x020f, 0, 0x1000);
        zimage[0x211] = 0;
        assert!(matches!(
            load_bzimage(&m, &zimage, &o, None),
            Err(BootError::BzImageNotLoadedHigh)
        ));
        let only_setup = bzimage(0x020f, 0, 0);
        assert!(matches!(
            load_bzimage(&m, &only_setup, &o, None),
            Err(BootError::Truncated { .. })
        ));
        assert!(matches!(
            load_bzimage(&m, &bzimage(0x020f, 0, 0x1000)[..0x230], &o, None),
            Err(BootError::Truncated { .. })
        ));
        let mut long = opts(ram);
        long.cmdline = "x".repeat(3000);
        assert!(matches!(
            load_bzimage(&m, &bzimage(0x020f, 0, 0x1000), &long, None),
            Err(BootError::CmdlineTooLong { max: 2048, .. })
        ));
    }

    #[test]
    fn bzimage_too_big_for_ram() {
        let ram = 2 * MIB;
        let m = mem(ram);
        assert!(matches!(
            load_bzimage(&m, &bzimage(0x020f, 0, 0x20_0000), &opts(ram), None),
            Err(BootError::SegmentOutsideRam { .. })
        ));
    }

    #[test]
    fn vmlinux_64bit_entry() {
        let ram = 64 * MIB;
        let m = mem(ram);
        let mut ph = Ph::load(0x100_0000, vec![0xC3; 0x800], 0x2000);
        ph.vaddr = 0xffff_ffff_8100_0000;
        let img = elf(true, 0x100_0000, &[ph]);
        let mut o = opts(ram);
        o.initrd = Some(vec![1; 100]);
        let l = load_elf(&m, &img, &o, None).unwrap();
        assert_eq!(l.format, ImageFormat::LinuxElf);
        assert_eq!(l.entry.mode, CpuMode::Long64);
        assert_eq!(l.entry.rip, 0x100_0000);
        assert_eq!(l.entry.rsi, ZERO_PAGE_ADDR);
        let p = zero_page(&m);
        assert_eq!({ p.hdr.boot_flag }, BOOT_FLAG);
        assert_eq!({ p.hdr.header }, HDR_MAGIC);
        assert_eq!({ p.hdr.ramdisk_size }, 100);
        let mut b = [0u8; 4];
        read_bytes(&m, 0x100_0000, &mut b).unwrap();
        assert_eq!(b, [0xC3; 4]);
        // ELF32 is refused.
        let img32 = elf(false, 0x100_0000, &[Ph::load(0x100_0000, vec![0; 4], 4)]);
        assert!(matches!(
            load_elf(&m, &img32, &o, None),
            Err(BootError::Elf(_))
        ));
    }
}
