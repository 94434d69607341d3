//! The one error type of this crate.
//!
//! Every variant describes a problem with the guest image, the boot options or the
//! guest memory the caller passed in; a command-line front end maps all of them to
//! "bad input".

use thiserror::Error;

/// Why an image could not be loaded or a boot structure could not be built.
#[derive(Debug, Error)]
pub enum BootError {
    /// The image matches none of the supported formats.
    #[error(
        "unrecognised kernel image ({len} bytes): looked for a Linux bzImage (\"HdrS\" at offset 0x202), \
         an ELF with a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY), a multiboot v1 header \
         (magic 0x1BADB002 in the first 8 KiB) and a 64-bit ELF; pass a kernel in one of these formats"
    )]
    UnknownFormat {
        /// Size of the image.
        len: usize,
    },
    /// The image is shorter than a structure it declares.
    #[error(
        "kernel image is truncated: {what} needs bytes up to offset {needed:#x} but the file has only \
         {have:#x} bytes; the file is incomplete or corrupt"
    )]
    Truncated {
        /// The structure that does not fit.
        what: &'static str,
        /// Offset one past the last byte it needs.
        needed: u64,
        /// Size of the image.
        have: u64,
    },
    /// The guest RAM size is too small to boot anything.
    #[error("guest RAM of {ram:#x} bytes is too small: at least {min:#x} bytes are needed")]
    RamTooSmall {
        /// RAM asked for.
        ram: u64,
        /// Smallest RAM accepted.
        min: u64,
    },

    /// No multiboot header in the first 8 KiB.
    #[error(
        "no multiboot v1 header (magic 0x1BADB002, 4-byte aligned) in the first 8 KiB of the image"
    )]
    MultibootHeaderNotFound,
    /// A multiboot magic was found but its checksum is wrong.
    #[error(
        "multiboot header at offset {offset:#x} has a bad checksum: magic {magic:#x} + flags {flags:#x} \
         + checksum {checksum:#x} must be 0 modulo 2^32; rebuild the image with a correct header"
    )]
    MultibootChecksum {
        /// Offset of the header in the image.
        offset: usize,
        /// The magic field.
        magic: u32,
        /// The flags field.
        flags: u32,
        /// The checksum field.
        checksum: u32,
    },
    /// The multiboot header requires features this loader does not provide.
    #[error(
        "multiboot header requires unsupported features (flags {flags:#x}, unknown required bits \
         {unknown:#x}); only bits 0 (page-aligned modules), 1 (memory map), 2 (video, ignored) and \
         16 (a.out kludge) are supported"
    )]
    MultibootUnsupportedFlags {
        /// The header's flags.
        flags: u32,
        /// The required bits this loader does not know.
        unknown: u32,
    },
    /// The a.out kludge addresses are inconsistent with each other or with the file.
    #[error("multiboot a.out kludge is invalid: {0}")]
    AoutKludge(String),

    /// The file is not an ELF the loader accepts.
    #[error("invalid ELF image: {0}")]
    Elf(String),
    /// A 64-bit ELF entry point that a 32-bit protected-mode entry cannot reach.
    #[error(
        "ELF entry point {entry:#x} is above 4 GiB; a 32-bit entry (multiboot/PVH) must lie below 4 GiB"
    )]
    EntryAbove4G {
        /// The entry point.
        entry: u64,
    },
    /// No program header has anything to load.
    #[error("the ELF image has no PT_LOAD segment with a non-zero size; nothing to load")]
    NoLoadableSegments,
    /// The entry point is not inside the loaded image.
    #[error(
        "entry point {entry:#x} is outside the loaded image {start:#x}..{end:#x}; the image is corrupt"
    )]
    EntryOutsideImage {
        /// Entry point.
        entry: u64,
        /// First loaded byte.
        start: u64,
        /// One past the last loaded byte.
        end: u64,
    },
    /// A segment would land below 1 MiB in a loader that keeps its boot structures there
    /// (PVH, Linux).
    #[error(
        "image segment {start:#x}..{end:#x} overlaps the low 1 MiB, which this boot protocol \
         uses for its boot data (page tables, boot info, command line); link the kernel at or \
         above 0x100000, or boot it through multiboot"
    )]
    SegmentInLowMemory {
        /// First byte of the segment.
        start: u64,
        /// One past its last byte.
        end: u64,
    },
    /// Two PT_LOAD segments overlap in physical memory.
    #[error(
        "image segments {:#x}..{:#x} and {:#x}..{:#x} overlap in physical memory; the image is corrupt",
        first.0, first.1, second.0, second.1
    )]
    SegmentsOverlap {
        /// The lower segment (start, end).
        first: (u64, u64),
        /// The segment that starts inside it (start, end).
        second: (u64, u64),
    },
    /// A segment does not fit in guest RAM.
    #[error(
        "image segment {start:#x}..{end:#x} is outside guest RAM (RAM: {ram}); give the guest more \
         memory or link the kernel lower"
    )]
    SegmentOutsideRam {
        /// First byte of the segment.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The RAM ranges, for the message.
        ram: String,
    },
    /// A module / initrd does not fit in RAM next to the image.
    #[error(
        "no room for the {what} ({size:#x} bytes) in guest RAM below {limit:#x} outside the kernel \
         image {image_start:#x}..{image_end:#x}; give the guest more memory or use a smaller {what}"
    )]
    NoRoomForModule {
        /// "initrd" or "module".
        what: &'static str,
        /// Its size.
        size: u64,
        /// Highest end address allowed.
        limit: u64,
        /// Start of the kernel image.
        image_start: u64,
        /// End of the kernel image.
        image_end: u64,
    },
    /// A segment would overwrite a part of low memory the platform cannot move.
    #[error(
        "image segment {start:#x}..{end:#x} overlaps {area} ({area_start:#x}..{area_end:#x}), \
         which the platform keeps there; link the kernel elsewhere (0x500..0x9fc00 or from \
         0x100000)"
    )]
    SegmentOverlapsFixedArea {
        /// First byte of the segment.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// What lives there.
        area: &'static str,
        /// First byte of the area.
        area_start: u64,
        /// One past its last byte.
        area_end: u64,
    },
    /// A kernel below 1 MiB leaves no room for the boot structures next to it.
    #[error(
        "the kernel image {image_start:#x}..{image_end:#x} leaves no {needed:#x}-byte gap below \
         the EBDA (0x500..0x9fc00) for the boot structures (GDT, stack, boot info, command \
         line, memory map); make the image smaller or link it at or above 0x100000"
    )]
    NoRoomForBootData {
        /// Start of the kernel image.
        image_start: u64,
        /// End of the kernel image.
        image_end: u64,
        /// Bytes needed.
        needed: u64,
    },
    /// The boot data area below 1 MiB is full.
    #[error(
        "boot information does not fit in the boot data area {start:#x}..{end:#x} (needs {needed:#x} \
         more bytes); shorten the command line"
    )]
    BootDataFull {
        /// Start of the area.
        start: u64,
        /// End of the area.
        end: u64,
        /// Bytes that did not fit.
        needed: u64,
    },
    /// The command line contains a NUL byte.
    #[error("the kernel command line contains a NUL byte; remove it")]
    CmdlineHasNul,
    /// The command line is longer than the kernel accepts.
    #[error("the kernel command line is {len} bytes long but the kernel accepts at most {max}")]
    CmdlineTooLong {
        /// Length of the command line (without the terminating NUL).
        len: usize,
        /// Maximum the kernel accepts.
        max: usize,
    },
    /// Writing or reading guest memory failed (the memory does not cover the address).
    #[error(
        "guest memory access at {addr:#x} ({len:#x} bytes) failed: {source}; the guest memory does \
         not cover this range (was it built from layout::ram_regions with the same RAM size?)"
    )]
    GuestMemory {
        /// Guest-physical address of the access.
        addr: u64,
        /// Length of the access.
        len: u64,
        /// The vm-memory error.
        source: vm_memory::GuestMemoryError,
    },

    /// The ELF has no PVH entry note.
    #[error(
        "the ELF image has no PVH entry note (PT_NOTE \"Xen\" type 18, XEN_ELFNOTE_PHYS32_ENTRY); build \
         the kernel with PVH support"
    )]
    PvhNoteNotFound,
    /// The PVH entry note is malformed.
    #[error("the PVH entry note is malformed: {0}")]
    PvhNote(String),

    /// Not a Linux bzImage: the "HdrS" magic is missing.
    #[error(
        "not a Linux bzImage: the setup header magic at offset 0x202 is {found:#010x}, expected \
         0x53726448 (\"HdrS\")"
    )]
    BzImageBadMagic {
        /// The value found.
        found: u32,
    },
    /// Not a Linux bzImage: the 0xAA55 boot flag is missing.
    #[error("not a Linux bzImage: the boot flag at offset 0x1fe is {found:#06x}, expected 0xaa55")]
    BzImageBadBootFlag {
        /// The value found.
        found: u16,
    },
    /// The bzImage uses a boot protocol older than 2.06.
    #[error(
        "the bzImage uses boot protocol {major}.{minor:02}; at least 2.06 is required (use a newer kernel)"
    )]
    BzImageProtocolTooOld {
        /// Major version.
        major: u8,
        /// Minor version.
        minor: u8,
    },
    /// The bzImage is not a "big kernel" loaded at 1 MiB.
    #[error(
        "the bzImage is not loaded high (LOADED_HIGH is clear); zImage kernels are not supported"
    )]
    BzImageNotLoadedHigh,
    /// linux-loader rejected the image or could not write it.
    #[error("loading the Linux kernel failed: {0}")]
    LinuxLoader(String),

    /// More vCPUs than the ACPI/MADT layout supports.
    #[error("{cpus} vCPUs requested but the ACPI tables support 1..={max}")]
    BadCpuCount {
        /// vCPUs asked for.
        cpus: u32,
        /// Most supported.
        max: u32,
    },
}

/// Result with a [`BootError`].
pub type Result<T> = std::result::Result<T, BootError>;
