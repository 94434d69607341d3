//! A small, validating reader for little-endian x86 ELF32/ELF64 executables: program
//! headers, PT_NOTE contents and loading PT_LOAD segments by physical address.
//!
//! Why hand-written: linux-loader (already a dependency, used for bzImage) reads only
//! ELF64 headers and loads a kernel the Linux way, but the multiboot and PVH test
//! kernels this reads are mostly ELF32 and are loaded by physical address under
//! multiboot's rules (segments below 1 MiB around fixed areas, entry translated from
//! virtual to physical). `object` and `goblin` would parse the headers, which is a
//! third of this file; the rest, the checks that turn a malformed image into an error
//! naming the field, the segment or the area at fault before anything is written to
//! guest memory, would stay. One reader with its own checks is shorter than a crate
//! plus a translation of its errors.

use std::ops::Range;

use vm_memory::GuestMemoryBackend;

use crate::error::{BootError, Result};
use crate::layout::{check_segment, write_bytes, zero_bytes, LowMemory};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const EM_386: u16 = 3;
const EM_X86_64: u16 = 62;

/// One PT_LOAD segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Offset of the file bytes.
    pub offset: u64,
    /// Virtual address.
    pub vaddr: u64,
    /// Physical (load) address.
    pub paddr: u64,
    /// Bytes taken from the file.
    pub filesz: u64,
    /// Bytes in memory (the rest zeroed).
    pub memsz: u64,
}

/// One note from a PT_NOTE segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    /// Name without the terminating NUL.
    pub name: Vec<u8>,
    /// Note type.
    pub kind: u32,
    /// Range of the descriptor in the image.
    pub desc: Range<usize>,
}

/// The parts of an ELF executable the loaders need.
#[derive(Debug, Clone)]
pub(crate) struct Elf {
    /// ELFCLASS64.
    pub is64: bool,
    /// e_entry.
    pub entry: u64,
    /// PT_LOAD segments with a non-zero memory size.
    pub segments: Vec<Segment>,
    /// All notes of all PT_NOTE segments.
    pub notes: Vec<Note>,
}

/// Whether the image starts with the ELF magic.
pub(crate) fn is_elf(image: &[u8]) -> bool {
    image.len() >= 4 && &image[..4] == b"\x7fELF"
}

/// Whether the image is an ELFCLASS64 file.
pub(crate) fn is_elf64(image: &[u8]) -> bool {
    is_elf(image) && image.len() > 4 && image[4] == 2
}

fn slice<'a>(image: &'a [u8], off: u64, len: u64, what: &'static str) -> Result<&'a [u8]> {
    let end = off.checked_add(len).ok_or(BootError::Truncated {
        what,
        needed: u64::MAX,
        have: image.len() as u64,
    })?;
    if end > image.len() as u64 {
        return Err(BootError::Truncated {
            what,
            needed: end,
            have: image.len() as u64,
        });
    }
    Ok(&image[off as usize..end as usize])
}

pub(crate) fn u16_at(image: &[u8], off: u64, what: &'static str) -> Result<u16> {
    let b = slice(image, off, 2, what)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

pub(crate) fn u32_at(image: &[u8], off: u64, what: &'static str) -> Result<u32> {
    let b = slice(image, off, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn u64_at(image: &[u8], off: u64, what: &'static str) -> Result<u64> {
    let b = slice(image, off, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

/// Parses and validates the ELF header, program headers and notes.
pub(crate) fn parse(image: &[u8]) -> Result<Elf> {
    if !is_elf(image) {
        return Err(BootError::Elf("missing the \\x7fELF magic".into()));
    }
    slice(image, 0, 16, "ELF identification")?;
    let is64 = match image[4] {
        1 => false,
        2 => true,
        c => return Err(BootError::Elf(format!("unknown ELF class {c}"))),
    };
    if image[5] != 1 {
        return Err(BootError::Elf(
            "not little-endian (EI_DATA != ELFDATA2LSB); x86 images are little-endian".into(),
        ));
    }
    let hdr = "ELF header";
    let machine = u16_at(image, 18, hdr)?;
    if machine != EM_386 && machine != EM_X86_64 {
        return Err(BootError::Elf(format!(
            "machine {machine} is not x86 (EM_386 = 3 or EM_X86_64 = 62)"
        )));
    }
    let (entry, phoff, phentsize, phnum) = if is64 {
        (
            u64_at(image, 24, hdr)?,
            u64_at(image, 32, hdr)?,
            u16_at(image, 54, hdr)?,
            u16_at(image, 56, hdr)?,
        )
    } else {
        (
            u64::from(u32_at(image, 24, hdr)?),
            u64::from(u32_at(image, 28, hdr)?),
            u16_at(image, 42, hdr)?,
            u16_at(image, 44, hdr)?,
        )
    };
    let min_phentsize = if is64 { 56 } else { 32 };
    if phnum == 0 {
        return Err(BootError::NoLoadableSegments);
    }
    if phentsize < min_phentsize {
        return Err(BootError::Elf(format!(
            "program header entry size {phentsize} is smaller than {min_phentsize}"
        )));
    }
    slice(
        image,
        phoff,
        u64::from(phentsize) * u64::from(phnum),
        "the program header table",
    )?;

    let mut segments = Vec::new();
    let mut notes = Vec::new();
    for i in 0..u64::from(phnum) {
        let ph = phoff + i * u64::from(phentsize);
        let what = "a program header";
        let p_type = u32_at(image, ph, what)?;
        let (offset, vaddr, paddr, filesz, memsz, align) = if is64 {
            (
                u64_at(image, ph + 8, what)?,
                u64_at(image, ph + 16, what)?,
                u64_at(image, ph + 24, what)?,
                u64_at(image, ph + 32, what)?,
                u64_at(image, ph + 40, what)?,
                u64_at(image, ph + 48, what)?,
            )
        } else {
            (
                u64::from(u32_at(image, ph + 4, what)?),
                u64::from(u32_at(image, ph + 8, what)?),
                u64::from(u32_at(image, ph + 12, what)?),
                u64::from(u32_at(image, ph + 16, what)?),
                u64::from(u32_at(image, ph + 20, what)?),
                u64::from(u32_at(image, ph + 28, what)?),
            )
        };
        match p_type {
            PT_LOAD => {
                if filesz > memsz {
                    return Err(BootError::Elf(format!(
                        "segment {i}: file size {filesz:#x} exceeds memory size {memsz:#x}"
                    )));
                }
                slice(image, offset, filesz, "a PT_LOAD segment's file data")?;
                if memsz > 0 {
                    segments.push(Segment {
                        offset,
                        vaddr,
                        paddr,
                        filesz,
                        memsz,
                    });
                }
            }
            PT_NOTE => {
                let data = slice(image, offset, filesz, "a PT_NOTE segment")?;
                parse_notes(data, offset as usize, align, &mut notes)?;
            }
            _ => {}
        }
    }
    // The section header table is not needed to load, but the header declares where it
    // ends; a file shorter than that is cut off (it usually ends the file, so an image
    // short by even one byte shows here).
    let (shoff, shentsize, shnum) = if is64 {
        (
            u64_at(image, 40, hdr)?,
            u16_at(image, 58, hdr)?,
            u16_at(image, 60, hdr)?,
        )
    } else {
        (
            u64::from(u32_at(image, 32, hdr)?),
            u16_at(image, 46, hdr)?,
            u16_at(image, 48, hdr)?,
        )
    };
    if shoff != 0 {
        // e_shnum 0 with a table: the count is in the first entry (extended numbering).
        slice(
            image,
            shoff,
            u64::from(shentsize) * u64::from(shnum.max(1)),
            "the section header table (e_shoff + e_shnum x e_shentsize)",
        )?;
    }
    Ok(Elf {
        is64,
        entry,
        segments,
        notes,
    })
}

fn parse_notes(data: &[u8], base: usize, align: u64, notes: &mut Vec<Note>) -> Result<()> {
    let pad = if align == 8 { 8 } else { 4 };
    let round = |v: usize| v.div_ceil(pad) * pad;
    let mut at = 0usize;
    while at + 12 <= data.len() {
        let rd = |o: usize| u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
        let namesz = rd(at) as usize;
        let descsz = rd(at + 4) as usize;
        let kind = rd(at + 8);
        let name_start = at + 12;
        let desc_start = name_start
            .checked_add(round(namesz))
            .filter(|&v| v <= data.len());
        let desc_start = desc_start.ok_or_else(|| {
            BootError::Elf(format!(
                "note at offset {:#x} overruns its segment",
                base + at
            ))
        })?;
        let desc_end = desc_start
            .checked_add(descsz)
            .filter(|&v| v <= data.len())
            .ok_or_else(|| {
                BootError::Elf(format!(
                    "note at offset {:#x} overruns its segment",
                    base + at
                ))
            })?;
        let mut name = data[name_start..name_start + namesz].to_vec();
        if name.last() == Some(&0) {
            name.pop();
        }
        notes.push(Note {
            name,
            kind,
            desc: base + desc_start..base + desc_end,
        });
        at = desc_start + round(descsz);
    }
    Ok(())
}

/// Loads every PT_LOAD segment at its physical address (copying the file bytes and
/// zeroing the rest) after checking all of them against the RAM layout. Returns the
/// loaded range (lowest start, highest end).
pub(crate) fn load_segments<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    elf: &Elf,
    ram_bytes: u64,
    low: LowMemory,
) -> Result<(u64, u64)> {
    if elf.segments.is_empty() {
        return Err(BootError::NoLoadableSegments);
    }
    for s in &elf.segments {
        check_segment(ram_bytes, s.paddr, s.memsz, low)?;
    }
    check_no_overlap(elf)?;
    let mut lo = u64::MAX;
    let mut hi = 0;
    for s in &elf.segments {
        let data = slice(image, s.offset, s.filesz, "a PT_LOAD segment's file data")?;
        write_bytes(mem, s.paddr, data)?;
        zero_bytes(mem, s.paddr + s.filesz, s.memsz - s.filesz)?;
        lo = lo.min(s.paddr);
        hi = hi.max(s.paddr + s.memsz);
    }
    Ok((lo, hi))
}

/// Refuses PT_LOAD segments whose physical ranges overlap: one would silently overwrite
/// the other. (Ranges are known to be in RAM, so their ends do not overflow.)
fn check_no_overlap(elf: &Elf) -> Result<()> {
    let mut r: Vec<(u64, u64)> = elf
        .segments
        .iter()
        .filter(|s| s.memsz > 0)
        .map(|s| (s.paddr, s.paddr + s.memsz))
        .collect();
    r.sort_unstable();
    for w in r.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(BootError::SegmentsOverlap {
                first: w[0],
                second: w[1],
            });
        }
    }
    Ok(())
}

/// Translates a virtual entry point to a physical one when it falls in a segment whose
/// virtual and physical addresses differ; otherwise returns it unchanged.
pub(crate) fn physical_entry(elf: &Elf) -> u64 {
    for s in &elf.segments {
        if s.vaddr != s.paddr && elf.entry >= s.vaddr && elf.entry - s.vaddr < s.memsz {
            return s.paddr + (elf.entry - s.vaddr);
        }
    }
    elf.entry
}

/// Test helpers that build ELF images.
#[cfg(test)]
pub(crate) mod build {
    /// A program header for [`elf`].
    pub struct Ph {
        pub p_type: u32,
        pub vaddr: u64,
        pub paddr: u64,
        pub data: Vec<u8>,
        pub memsz: u64,
        pub align: u64,
    }

    impl Ph {
        pub fn load(paddr: u64, data: Vec<u8>, memsz: u64) -> Ph {
            Ph {
                p_type: 1,
                vaddr: paddr,
                paddr,
                data,
                memsz,
                align: 0x1000,
            }
        }

        pub fn note(name: &str, kind: u32, desc: &[u8]) -> Ph {
            let mut d = Vec::new();
            d.extend_from_slice(&(name.len() as u32 + 1).to_le_bytes());
            d.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            d.extend_from_slice(&kind.to_le_bytes());
            d.extend_from_slice(name.as_bytes());
            d.push(0);
            while d.len() % 4 != 0 {
                d.push(0);
            }
            d.extend_from_slice(desc);
            while d.len() % 4 != 0 {
                d.push(0);
            }
            let len = d.len() as u64;
            Ph {
                p_type: 4,
                vaddr: 0,
                paddr: 0,
                data: d,
                memsz: len,
                align: 4,
            }
        }
    }

    /// Builds an ELF32 (`is64 == false`) or ELF64 executable with the given headers.
    pub fn elf(is64: bool, entry: u64, phs: &[Ph]) -> Vec<u8> {
        let (ehsize, phentsize) = if is64 { (64usize, 56usize) } else { (52, 32) };
        let mut data_off = ehsize + phentsize * phs.len();
        let mut out = vec![0u8; data_off];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = if is64 { 2 } else { 1 };
        out[5] = 1;
        out[6] = 1;
        out[16..18].copy_from_slice(&2u16.to_le_bytes());
        out[18..20].copy_from_slice(&(if is64 { 62u16 } else { 3 }).to_le_bytes());
        out[20..24].copy_from_slice(&1u32.to_le_bytes());
        if is64 {
            out[24..32].copy_from_slice(&entry.to_le_bytes());
            out[32..40].copy_from_slice(&(ehsize as u64).to_le_bytes());
            out[52..54].copy_from_slice(&(ehsize as u16).to_le_bytes());
            out[54..56].copy_from_slice(&(phentsize as u16).to_le_bytes());
            out[56..58].copy_from_slice(&(phs.len() as u16).to_le_bytes());
        } else {
            out[24..28].copy_from_slice(&(entry as u32).to_le_bytes());
            out[28..32].copy_from_slice(&(ehsize as u32).to_le_bytes());
            out[40..42].copy_from_slice(&(ehsize as u16).to_le_bytes());
            out[42..44].copy_from_slice(&(phentsize as u16).to_le_bytes());
            out[44..46].copy_from_slice(&(phs.len() as u16).to_le_bytes());
        }
        let mut offsets = Vec::new();
        for ph in phs {
            offsets.push(data_off);
            data_off += ph.data.len();
        }
        for (i, ph) in phs.iter().enumerate() {
            let at = ehsize + i * phentsize;
            let off = offsets[i] as u64;
            let filesz = ph.data.len() as u64;
            let h = &mut out[at..at + phentsize];
            h[0..4].copy_from_slice(&ph.p_type.to_le_bytes());
            if is64 {
                h[4..8].copy_from_slice(&7u32.to_le_bytes());
                h[8..16].copy_from_slice(&off.to_le_bytes());
                h[16..24].copy_from_slice(&ph.vaddr.to_le_bytes());
                h[24..32].copy_from_slice(&ph.paddr.to_le_bytes());
                h[32..40].copy_from_slice(&filesz.to_le_bytes());
                h[40..48].copy_from_slice(&ph.memsz.to_le_bytes());
                h[48..56].copy_from_slice(&ph.align.to_le_bytes());
            } else {
                h[4..8].copy_from_slice(&(off as u32).to_le_bytes());
                h[8..12].copy_from_slice(&(ph.vaddr as u32).to_le_bytes());
                h[12..16].copy_from_slice(&(ph.paddr as u32).to_le_bytes());
                h[16..20].copy_from_slice(&(filesz as u32).to_le_bytes());
                h[20..24].copy_from_slice(&(ph.memsz as u32).to_le_bytes());
                h[24..28].copy_from_slice(&7u32.to_le_bytes());
                h[28..32].copy_from_slice(&(ph.align as u32).to_le_bytes());
            }
        }
        for ph in phs {
            out.extend_from_slice(&ph.data);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    #[test]
    fn parses_segments_and_notes() {
        let img = elf(
            true,
            0x100000,
            &[
                Ph::load(0x100000, vec![1, 2, 3], 0x1000),
                Ph::note("Xen", 18, &0x100000u32.to_le_bytes()),
            ],
        );
        let e = parse(&img).unwrap();
        assert!(e.is64);
        assert_eq!(e.segments.len(), 1);
        assert_eq!(e.segments[0].memsz, 0x1000);
        assert_eq!(e.notes.len(), 1);
        assert_eq!(e.notes[0].name, b"Xen");
        assert_eq!(e.notes[0].kind, 18);
        assert_eq!(&img[e.notes[0].desc.clone()], &0x100000u32.to_le_bytes());
    }

    #[test]
    fn truncated_rejected() {
        let img = elf(false, 0x100000, &[Ph::load(0x100000, vec![7; 100], 0x1000)]);
        for cut in [10, 60, img.len() - 1] {
            assert!(
                matches!(parse(&img[..cut]), Err(BootError::Truncated { .. })),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn filesz_over_memsz_rejected() {
        let img = elf(false, 0x100000, &[Ph::load(0x100000, vec![7; 100], 10)]);
        assert!(matches!(parse(&img), Err(BootError::Elf(_))));
    }

    #[test]
    fn virtual_entry_translated() {
        let mut ph = Ph::load(0x200000, vec![0x90; 16], 16);
        ph.vaddr = 0xffff_ffff_8020_0000;
        let img = elf(true, 0xffff_ffff_8020_0004, &[ph]);
        assert_eq!(physical_entry(&parse(&img).unwrap()), 0x200004);
    }
}

/// Checks that `entry` lies inside one of the loaded segments of `parsed`, whose loaded
/// range is `range`.
pub(crate) fn check_entry(parsed: &Elf, entry: u64, range: (u64, u64)) -> Result<()> {
    if parsed
        .segments
        .iter()
        .any(|s| entry >= s.paddr && entry - s.paddr < s.memsz)
    {
        Ok(())
    } else {
        Err(BootError::EntryOutsideImage {
            entry,
            start: range.0,
            end: range.1,
        })
    }
}
