//! Guest-physical memory layout: RAM regions, the e820 map and the fixed places of the
//! boot structures.
//!
//! ```text
//! 0x0000_0000 .. 0x0000_1000   left alone (real-mode IVT, AP trampoline)
//! 0x0000_1000 .. 0x0000_2000   GDT (GDT_ADDR)
//! 0x0000_2000 .. 0x0000_8000   identity page tables for long-mode entries (PML4, PDPT, 4 PDs)
//! 0x0000_8000 .. 0x0000_9000   boot stack (BOOT_STACK_TOP = 0x9000)
//! 0x0000_9000 .. 0x0000_a000   boot info page: multiboot info / Linux zero page / PVH start info
//! 0x0000_a000 .. 0x0009_fc00   boot data: command lines, memory maps, module lists, strings
//!                              (Linux command line fixed at LINUX_CMDLINE_ADDR = 0x20000)
//! 0x0009_fc00 .. 0x000a_0000   EBDA (e820 reserved)
//! 0x000a_0000 .. 0x000e_0000   VGA hole (mapped, absent from e820)
//! 0x000e_0000 .. 0x000f_f000   BIOS area: ACPI RSDP and tables (e820 reserved)
//! 0x000f_f000 .. 0x0010_0000   BIOS area: real-mode interrupt handlers (crate::firmware)
//! 0x0010_0000 .. PCI_HOLE_START   RAM: kernel image, then initrd/modules placed high
//! PCI_HOLE_START .. 4 GiB         no RAM (MMIO)
//! 4 GiB ..                        the rest of RAM
//! ```
//!
//! All structures live in RAM slots that [`ram_regions`] returns, so the VMM maps exactly
//! those regions and nothing else.

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

use crate::error::{BootError, Result};

/// Start of the PCI/MMIO hole below 4 GiB.
pub const PCI_HOLE_START: u64 = 0xC000_0000;
/// End of the PCI/MMIO hole (4 GiB).
pub const PCI_HOLE_END: u64 = 0x1_0000_0000;
/// Start of the extended BIOS data area (end of conventional RAM).
pub const EBDA_START: u64 = 0x9_FC00;
/// Start of the legacy VGA hole.
pub const VGA_START: u64 = 0xA_0000;
/// Start of the BIOS area, where ACPI tables live.
pub const BIOS_START: u64 = 0xE_0000;
/// End of the BIOS area and start of high memory (1 MiB).
pub const HIGH_MEMORY_START: u64 = 0x10_0000;

/// Guest-physical address of the GDT written for every entry.
pub const GDT_ADDR: u64 = 0x1000;
/// Guest-physical address of the PML4 for long-mode entries.
pub const PML4_ADDR: u64 = 0x2000;
/// Guest-physical address of the PDPT for long-mode entries.
pub const PDPT_ADDR: u64 = 0x3000;
/// Guest-physical address of the first of four page directories (2 MiB pages, 4 GiB).
pub const PD_ADDR: u64 = 0x4000;
/// Initial stack pointer handed to every entry (the stack page is 0x8000..0x9000).
pub const BOOT_STACK_TOP: u64 = 0x9000;
/// Guest-physical address of the boot info page (multiboot info, zero page or PVH start info).
pub const BOOT_INFO_ADDR: u64 = 0x9000;
/// Start of the boot data area (strings, memory maps, module lists).
pub const BOOT_DATA_START: u64 = 0xA000;
/// End of the boot data area.
pub const BOOT_DATA_END: u64 = EBDA_START;
/// Fixed guest-physical address of the Linux command line.
pub const LINUX_CMDLINE_ADDR: u64 = 0x2_0000;
/// Start of the region holding the ACPI tables (inside the BIOS area).
pub const ACPI_START: u64 = BIOS_START;
/// End of the region holding the ACPI tables (the firmware's interrupt handlers follow).
pub const ACPI_END: u64 = BIOS_STUBS_ADDR;
/// Where the real-mode interrupt handlers of [`crate::firmware`] live (F000:F000).
pub const BIOS_STUBS_ADDR: u64 = 0xF_F000;

/// Smallest guest RAM the loaders accept (low memory plus 1 MiB above it).
pub const MIN_RAM_BYTES: u64 = 2 * 1024 * 1024;

/// A 4 KiB page.
pub const PAGE_SIZE: u64 = 0x1000;

/// The type of an e820 range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E820Kind {
    /// Usable RAM (e820 type 1).
    Ram,
    /// Reserved (e820 type 2).
    Reserved,
    /// ACPI tables, reclaimable after they were read (e820 type 3).
    Acpi,
}

impl E820Kind {
    /// The numeric e820 type (also the multiboot and PVH memory-map type).
    pub fn code(self) -> u32 {
        match self {
            E820Kind::Ram => 1,
            E820Kind::Reserved => 2,
            E820Kind::Acpi => 3,
        }
    }
}

/// One e820 range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct E820Entry {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// What the range is.
    pub kind: E820Kind,
}

impl E820Entry {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.addr.saturating_add(self.size)
    }
}

/// RAM size actually used: `ram_bytes` rounded down to a whole page.
pub fn effective_ram(ram_bytes: u64) -> u64 {
    ram_bytes & !(PAGE_SIZE - 1)
}

/// End of the RAM below the PCI hole (exclusive).
pub fn low_ram_end(ram_bytes: u64) -> u64 {
    effective_ram(ram_bytes).min(PCI_HOLE_START)
}

/// Bytes of RAM mapped from 4 GiB up.
pub fn high_ram_bytes(ram_bytes: u64) -> u64 {
    effective_ram(ram_bytes).saturating_sub(PCI_HOLE_START)
}

/// The guest RAM slots for `ram_bytes` of RAM (rounded down to whole pages): one from 0
/// up to the PCI hole, and the rest from 4 GiB up. The VMM maps exactly these.
pub fn ram_regions(ram_bytes: u64) -> Vec<(GuestAddress, usize)> {
    let mut regions = Vec::with_capacity(2);
    let low = low_ram_end(ram_bytes);
    if low > 0 {
        regions.push((GuestAddress(0), low as usize));
    }
    let high = high_ram_bytes(ram_bytes);
    if high > 0 {
        regions.push((GuestAddress(PCI_HOLE_END), high as usize));
    }
    regions
}

/// The e820 map matching [`ram_regions`]: conventional RAM up to the EBDA, the EBDA and
/// BIOS area (with the ACPI tables) reserved, RAM from 1 MiB to the PCI hole, and RAM
/// above 4 GiB. The VGA hole 0xA0000..0xE0000 is not listed. Sorted by address.
pub fn e820_map(ram_bytes: u64) -> Vec<E820Entry> {
    let low = low_ram_end(ram_bytes);
    let mut map = Vec::with_capacity(5);
    let mut push = |addr: u64, end: u64, kind: E820Kind| {
        if end > addr {
            map.push(E820Entry {
                addr,
                size: end - addr,
                kind,
            });
        }
    };
    push(0, low.min(EBDA_START), E820Kind::Ram);
    push(EBDA_START, VGA_START, E820Kind::Reserved);
    push(BIOS_START, HIGH_MEMORY_START, E820Kind::Reserved);
    push(HIGH_MEMORY_START, low, E820Kind::Ram);
    let high = high_ram_bytes(ram_bytes);
    push(PCI_HOLE_END, PCI_HOLE_END + high, E820Kind::Ram);
    map
}

/// Checks that `ram_bytes` is enough to boot.
pub fn check_ram(ram_bytes: u64) -> Result<()> {
    if effective_ram(ram_bytes) < MIN_RAM_BYTES {
        return Err(BootError::RamTooSmall {
            ram: ram_bytes,
            min: MIN_RAM_BYTES,
        });
    }
    Ok(())
}

/// Whether `start..end` lies inside one RAM range at or above 1 MiB.
pub fn in_high_ram(ram_bytes: u64, start: u64, end: u64) -> bool {
    let low = low_ram_end(ram_bytes);
    let high_end = PCI_HOLE_END + high_ram_bytes(ram_bytes);
    (start >= HIGH_MEMORY_START && end <= low && start <= end)
        || (start >= PCI_HOLE_END && end <= high_end && start <= end)
}

/// Human-readable RAM ranges, for error messages.
pub fn describe_ram(ram_bytes: u64) -> String {
    ram_regions(ram_bytes)
        .iter()
        .map(|(a, l)| format!("{:#x}..{:#x}", a.0, a.0 + *l as u64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Low memory the platform cannot move, whatever the kernel: the real-mode IVT and
/// BIOS data area a guest may rely on, the EBDA, the VGA hole and the BIOS area (option
/// ROMs and the ACPI tables). Everything else below 1 MiB (the GDT, the boot stack and
/// the boot data) moves out of a multiboot kernel's way ([`BootArea::for_image`]).
pub const FIXED_LOW_AREAS: &[(u64, u64, &str)] = &[
    (0, 0x500, "the real-mode IVT and BIOS data area"),
    (EBDA_START, VGA_START, "the EBDA"),
    (VGA_START, 0xC_0000, "the VGA hole"),
    (
        0xC_0000,
        HIGH_MEMORY_START,
        "the BIOS area (option ROMs and the ACPI tables)",
    ),
];

/// Which segments below 1 MiB a loader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LowMemory {
    /// None: the loader's boot structures are fixed there (PVH, Linux).
    Refuse,
    /// Those that avoid [`FIXED_LOW_AREAS`]; the loader then places its boot
    /// structures around the image (multiboot, as QEMU does).
    AroundFixedAreas,
}

/// Checks that a loadable range `start..start+len` is in RAM and, below 1 MiB, allowed
/// by `low`.
pub(crate) fn check_segment(ram_bytes: u64, start: u64, len: u64, low: LowMemory) -> Result<()> {
    let end = start.checked_add(len).ok_or(BootError::SegmentOutsideRam {
        start,
        end: u64::MAX,
        ram: describe_ram(ram_bytes),
    })?;
    if start < HIGH_MEMORY_START {
        if low == LowMemory::Refuse {
            return Err(BootError::SegmentInLowMemory { start, end });
        }
        if let Some(&(area_start, area_end, area)) = FIXED_LOW_AREAS
            .iter()
            .find(|(a, b, _)| start < *b && *a < end.max(start + 1))
        {
            return Err(BootError::SegmentOverlapsFixedArea {
                start,
                end,
                area,
                area_start,
                area_end,
            });
        }
        return Ok(());
    }
    if !in_high_ram(ram_bytes, start, end) {
        return Err(BootError::SegmentOutsideRam {
            start,
            end,
            ram: describe_ram(ram_bytes),
        });
    }
    Ok(())
}

/// Where a loader puts its boot structures below 1 MiB: the GDT page, the boot stack
/// page, the boot info page, then the boot data up to `data_end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BootArea {
    /// The GDT.
    pub gdt: u64,
    /// The initial stack pointer (top of the stack page).
    pub stack_top: u64,
    /// The boot info block (multiboot info, zero page or PVH start info).
    pub info: u64,
    /// First byte of the boot data (strings, memory map, module list).
    pub data_start: u64,
    /// One past its last byte.
    pub data_end: u64,
}

/// Smallest gap [`BootArea::for_image`] accepts: GDT, stack and info pages and one page
/// of boot data.
const BOOT_AREA_MIN: u64 = 4 * PAGE_SIZE;

impl BootArea {
    /// The fixed place every image at or above 1 MiB gets.
    pub(crate) const STANDARD: BootArea = BootArea {
        gdt: GDT_ADDR,
        stack_top: BOOT_STACK_TOP,
        info: BOOT_INFO_ADDR,
        data_start: BOOT_DATA_START,
        data_end: BOOT_DATA_END,
    };

    /// The standard area, unless the image `(start, end)` overlaps it: then a gap of
    /// low RAM next to the image, after it where it fits (as QEMU puts the multiboot
    /// info after the kernel), else before it.
    pub(crate) fn for_image(image: (u64, u64)) -> Result<BootArea> {
        let (start, end) = image;
        if start >= HIGH_MEMORY_START || end <= GDT_ADDR {
            return Ok(Self::STANDARD);
        }
        let gap = |lo: u64, hi: u64| -> Option<BootArea> {
            let lo = align_up(lo, PAGE_SIZE)?;
            (hi > lo && hi - lo >= BOOT_AREA_MIN).then_some(BootArea {
                gdt: lo,
                stack_top: lo + 2 * PAGE_SIZE,
                info: lo + 2 * PAGE_SIZE,
                data_start: lo + 3 * PAGE_SIZE,
                data_end: hi,
            })
        };
        gap(end, EBDA_START)
            .or_else(|| gap(0x500, start))
            .ok_or(BootError::NoRoomForBootData {
                image_start: start,
                image_end: end,
                needed: BOOT_AREA_MIN,
            })
    }
}

/// Rounds `v` up to a multiple of `align` (a power of two); `None` on overflow.
pub(crate) fn align_up(v: u64, align: u64) -> Option<u64> {
    Some(v.checked_add(align - 1)? & !(align - 1))
}

/// Finds the highest page-aligned place for `size` bytes in low RAM (1 MiB ..
/// min(`limit`, end of low RAM)) that does not overlap `image` (start, end).
pub(crate) fn place_high(
    ram_bytes: u64,
    size: u64,
    limit: u64,
    image: (u64, u64),
    what: &'static str,
) -> Result<u64> {
    let top = low_ram_end(ram_bytes).min(limit) & !(PAGE_SIZE - 1);
    let err = || BootError::NoRoomForModule {
        what,
        size,
        limit: top,
        image_start: image.0,
        image_end: image.1,
    };
    let candidate = |top: u64| -> Option<u64> {
        let start = top.checked_sub(size)? & !(PAGE_SIZE - 1);
        (start >= HIGH_MEMORY_START).then_some(start)
    };
    // Above the image (or anywhere below the top if the image is elsewhere).
    if let Some(start) = candidate(top) {
        if start >= image.1 || start + size <= image.0 {
            return Ok(start);
        }
    }
    // Below the image.
    if let Some(start) = candidate(image.0.min(top)) {
        return Ok(start);
    }
    Err(err())
}

/// Writes `data` at `addr`, mapping failures to [`BootError::GuestMemory`].
pub(crate) fn write_bytes<M: GuestMemoryBackend>(mem: &M, addr: u64, data: &[u8]) -> Result<()> {
    mem.write_slice(data, GuestAddress(addr))
        .map_err(|source| BootError::GuestMemory {
            addr,
            len: data.len() as u64,
            source,
        })
}

/// Reads `buf.len()` bytes from `addr`.
#[cfg(test)]
pub(crate) fn read_bytes<M: GuestMemoryBackend>(mem: &M, addr: u64, buf: &mut [u8]) -> Result<()> {
    let len = buf.len() as u64;
    mem.read_slice(buf, GuestAddress(addr))
        .map_err(|source| BootError::GuestMemory { addr, len, source })
}

/// Zeroes `len` bytes from `addr`.
pub(crate) fn zero_bytes<M: GuestMemoryBackend>(mem: &M, addr: u64, len: u64) -> Result<()> {
    const CHUNK: u64 = 64 * 1024;
    let zeros = [0u8; CHUNK as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        write_bytes(mem, addr + done, &zeros[..n as usize])?;
        done += n;
    }
    Ok(())
}

/// A bump allocator over the boot data area.
#[derive(Debug)]
pub(crate) struct BootData {
    next: u64,
    end: u64,
}

impl BootData {
    /// An allocator over the whole boot data area.
    pub(crate) fn new() -> Self {
        Self::within(&BootArea::STANDARD)
    }

    /// An allocator over the boot data of `area`.
    pub(crate) fn within(area: &BootArea) -> Self {
        BootData {
            next: area.data_start,
            end: area.data_end,
        }
    }

    /// Reserves `len` bytes aligned to `align` (a power of two).
    pub(crate) fn alloc(&mut self, len: u64, align: u64) -> Result<u64> {
        let area_end = self.end;
        let full = |needed| BootError::BootDataFull {
            start: self.next,
            end: area_end,
            needed,
        };
        let start = align_up(self.next, align).ok_or(full(len))?;
        let end = start.checked_add(len).ok_or(full(len))?;
        if end > self.end {
            return Err(full(end - self.end));
        }
        self.next = end;
        Ok(start)
    }

    /// Allocates and writes `data`.
    pub(crate) fn put<M: GuestMemoryBackend>(
        &mut self,
        mem: &M,
        data: &[u8],
        align: u64,
    ) -> Result<u64> {
        let addr = self.alloc(data.len() as u64, align)?;
        write_bytes(mem, addr, data)?;
        Ok(addr)
    }

    /// Allocates and writes `s` followed by a NUL.
    pub(crate) fn put_cstr<M: GuestMemoryBackend>(&mut self, mem: &M, s: &str) -> Result<u64> {
        if s.as_bytes().contains(&0) {
            return Err(BootError::CmdlineHasNul);
        }
        let mut bytes = Vec::with_capacity(s.len() + 1);
        bytes.extend_from_slice(s.as_bytes());
        bytes.push(0);
        self.put(mem, &bytes, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;

    #[test]
    fn regions_small() {
        assert_eq!(
            ram_regions(64 * MIB),
            vec![(GuestAddress(0), (64 * MIB) as usize)]
        );
        assert_eq!(
            ram_regions(64 * MIB + 5),
            vec![(GuestAddress(0), (64 * MIB) as usize)]
        );
    }

    #[test]
    fn regions_split_at_hole() {
        assert_eq!(
            ram_regions(4 * GIB),
            vec![
                (GuestAddress(0), PCI_HOLE_START as usize),
                (GuestAddress(PCI_HOLE_END), GIB as usize)
            ]
        );
        assert_eq!(ram_regions(3 * GIB).len(), 1);
    }

    #[test]
    fn e820_small() {
        let m = e820_map(64 * MIB);
        assert_eq!(
            m,
            vec![
                E820Entry {
                    addr: 0,
                    size: 0x9FC00,
                    kind: E820Kind::Ram
                },
                E820Entry {
                    addr: 0x9FC00,
                    size: 0x400,
                    kind: E820Kind::Reserved
                },
                E820Entry {
                    addr: 0xE0000,
                    size: 0x20000,
                    kind: E820Kind::Reserved
                },
                E820Entry {
                    addr: 0x100000,
                    size: 63 * MIB,
                    kind: E820Kind::Ram
                },
            ]
        );
    }

    #[test]
    fn e820_matches_regions() {
        for ram in [2 * MIB, 64 * MIB, 3 * GIB, 4 * GIB, 6 * GIB + 4096] {
            let regions = ram_regions(ram);
            let map = e820_map(ram);
            // Every e820 entry lies inside a mapped region.
            for e in &map {
                assert!(
                    regions
                        .iter()
                        .any(|(a, l)| e.addr >= a.0 && e.end() <= a.0 + *l as u64),
                    "{e:?} not mapped for ram {ram:#x}"
                );
            }
            let ram_total: u64 = map
                .iter()
                .filter(|e| e.kind == E820Kind::Ram)
                .map(|e| e.size)
                .sum();
            let mapped: u64 = regions.iter().map(|(_, l)| *l as u64).sum();
            // Mapped minus EBDA, VGA hole and BIOS area.
            assert_eq!(ram_total, mapped - (HIGH_MEMORY_START - EBDA_START));
            // Sorted, non-overlapping.
            for w in map.windows(2) {
                assert!(w[0].end() <= w[1].addr);
            }
        }
        let big = e820_map(6 * GIB);
        let last = big.last().unwrap();
        assert_eq!((last.addr, last.size), (PCI_HOLE_END, 3 * GIB));
    }

    #[test]
    fn placement() {
        let ram = 64 * MIB;
        let a = place_high(ram, 5000, u64::MAX, (MIB, 4 * MIB), "initrd").unwrap();
        assert_eq!(a, (64 * MIB - 5000) & !0xfff);
        // The image occupies the top: go below it.
        let b = place_high(ram, 4096, u64::MAX, (32 * MIB, 64 * MIB), "initrd").unwrap();
        assert_eq!(b, 32 * MIB - 4096);
        assert!(matches!(
            place_high(ram, 64 * MIB, u64::MAX, (MIB, 2 * MIB), "initrd"),
            Err(BootError::NoRoomForModule { .. })
        ));
    }

    #[test]
    fn segment_checks() {
        let ram = 64 * MIB;
        let (refuse, around) = (LowMemory::Refuse, LowMemory::AroundFixedAreas);
        assert!(check_segment(ram, MIB, 4096, refuse).is_ok());
        assert!(matches!(
            check_segment(ram, 0x9000, 4096, refuse),
            Err(BootError::SegmentInLowMemory { .. })
        ));
        assert!(check_segment(ram, 0x8000, 0x2A6C, around).is_ok());
        assert!(check_segment(ram, 0x500, 0x9F700, around).is_ok());
        for (start, len, area) in [
            (0x400u64, 0x200u64, "IVT"),
            (0x0, 1, "IVT"),
            (0x9F000, 0x1000, "EBDA"),
            (0xB8000, 0x10, "VGA"),
            (0xF0000, 0x20000, "BIOS"),
        ] {
            let e = check_segment(ram, start, len, around).unwrap_err();
            assert!(
                matches!(e, BootError::SegmentOverlapsFixedArea { .. })
                    && e.to_string().contains(area),
                "{start:#x}+{len:#x}: {e}"
            );
        }
        assert!(matches!(
            check_segment(ram, 63 * MIB, 2 * MIB, refuse),
            Err(BootError::SegmentOutsideRam { .. })
        ));
        assert!(matches!(
            check_segment(ram, u64::MAX - 1, 4096, around),
            Err(BootError::SegmentOutsideRam { .. })
        ));
    }

    #[test]
    fn boot_area_moves_out_of_a_low_image() {
        assert_eq!(
            BootArea::for_image((MIB, 2 * MIB)).unwrap(),
            BootArea::STANDARD
        );
        // A real-mode kernel at 0x8000: the area goes after it.
        let a = BootArea::for_image((0x8000, 0xA86C)).unwrap();
        assert_eq!(
            (a.gdt, a.stack_top, a.info, a.data_start),
            (0xB000, 0xD000, 0xD000, 0xE000)
        );
        assert_eq!(a.data_end, EBDA_START);
        // An image up to the EBDA: before it.
        let b = BootArea::for_image((0x40000, 0x9F000)).unwrap();
        assert_eq!((b.gdt, b.data_end), (0x1000, 0x40000));
        // No gap of four pages anywhere.
        assert!(matches!(
            BootArea::for_image((0x2000, 0x9D000)),
            Err(BootError::NoRoomForBootData { .. })
        ));
    }
}
