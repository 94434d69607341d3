//! Guest image loaders, memory maps, ACPI tables and initial register state for exitlab.
//!
//! Everything here works on guest memory (`vm_memory`) and byte slices; nothing touches
//! KVM. The VMM maps [`layout::ram_regions`], calls [`load`], and applies the returned
//! [`entry::EntryState`] to the boot vCPU.

mod elf;
pub mod entry;
pub mod error;
pub mod layout;
pub mod multiboot;

use vm_memory::GuestMemoryBackend;

pub use entry::{CpuMode, EntryState};
pub use error::BootError;
pub use layout::{E820Entry, E820Kind};

/// The kernel image formats this crate loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// Multiboot v1 (a.out kludge or ELF).
    Multiboot,
    /// ELF with a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY).
    Pvh,
    /// Linux bzImage.
    BzImage,
    /// Linux vmlinux (ELF64), entered at its 64-bit entry point.
    LinuxElf,
}

/// What to boot and with how much of a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootOptions {
    /// Path of the kernel image, as the user gave it (multiboot puts it first on the command line).
    pub kernel_path: String,
    /// Kernel command line.
    pub cmdline: String,
    /// Initial ramdisk (multiboot module 0, PVH module 0, Linux initrd).
    pub initrd: Option<Vec<u8>>,
    /// Number of vCPUs (MADT entries).
    pub cpus: u32,
    /// Guest RAM in bytes (the same value passed to [`layout::ram_regions`]).
    pub ram_bytes: u64,
    /// Build ACPI tables (RSDP, RSDT, XSDT, FADT, MADT, DSDT) in the BIOS area.
    pub acpi: bool,
    /// The ACPI PM timer is 32 bits wide (FADT TMR_VAL_EXT); else 24 bits.
    pub pm_timer_32bit: bool,
    /// For an ELF vmlinux that has a PVH note: enter through PVH (true) or at the 64-bit
    /// ELF entry with a zero page (false).
    pub prefer_pvh: bool,
}

impl Default for BootOptions {
    fn default() -> Self {
        BootOptions {
            kernel_path: String::new(),
            cmdline: String::new(),
            initrd: None,
            cpus: 1,
            ram_bytes: 0,
            acpi: true,
            pm_timer_32bit: true,
            prefer_pvh: true,
        }
    }
}

/// The result of loading an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The format that was loaded.
    pub format: ImageFormat,
    /// Initial state of the boot vCPU.
    pub entry: EntryState,
    /// The memory map given to the guest.
    pub e820: Vec<E820Entry>,
    /// Guest-physical range the kernel image (with its bss) occupies: (start, end).
    pub image_range: (u64, u64),
    /// Address of the ACPI RSDP, when ACPI tables were built.
    pub rsdp: Option<u64>,
}

/// Detects the format of `image`.
pub fn detect(image: &[u8]) -> Result<ImageFormat, BootError> {
    if multiboot::find_header(image)?.is_some() {
        return Ok(ImageFormat::Multiboot);
    }
    Err(BootError::UnknownFormat { len: image.len() })
}

/// Loads `image` into `mem` according to its detected format and `opts`.
pub fn load<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    opts: &BootOptions,
) -> Result<Loaded, BootError> {
    layout::check_ram(opts.ram_bytes)?;
    match detect(image)? {
        ImageFormat::Multiboot => multiboot::load(mem, image, opts),
        _ => Err(BootError::UnknownFormat { len: image.len() }),
    }
}
