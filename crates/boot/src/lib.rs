//! Guest image loaders, memory maps, ACPI tables and initial register state for exitlab.
//!
//! Everything here works on guest memory (`vm_memory`) and byte slices; nothing touches
//! KVM. The VMM maps [`layout::ram_regions`], calls [`load`], and applies the returned
//! [`entry::EntryState`] to the boot vCPU.
#![deny(unsafe_code)]

pub mod acpi;
mod elf;
pub mod entry;
pub mod error;
pub mod firmware;
pub mod layout;
pub mod linux;
pub mod multiboot;
pub mod pvh;

use vm_memory::GuestMemoryBackend;

pub use acpi::{build_acpi, AcpiInfo};
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
    /// Address of the ACPI FACS (whose waking vector an S3 resume jumps to), when ACPI
    /// tables were built.
    pub facs: Option<u64>,
}

/// Detects the format of `image`. Looks, in order, for a bzImage ("HdrS" at 0x202), an
/// ELF with a PVH entry note, a multiboot v1 header in the first 8 KiB and a 64-bit ELF
/// (taken as a Linux vmlinux).
pub fn detect(image: &[u8]) -> Result<ImageFormat, BootError> {
    if linux::is_bzimage(image) {
        return Ok(ImageFormat::BzImage);
    }
    if pvh::has_pvh_note(image) {
        return Ok(ImageFormat::Pvh);
    }
    let multiboot = multiboot::find_header(image);
    if let Ok(Some(_)) = multiboot {
        return Ok(ImageFormat::Multiboot);
    }
    if elf::is_elf64(image) {
        return Ok(ImageFormat::LinuxElf);
    }
    multiboot?;
    if linux::has_boot_flag(image) && !elf::is_elf(image) {
        // A boot sector without the setup header magic: most likely a damaged bzImage.
        linux::read_setup_header(image)?;
    }
    if elf::is_elf(image) {
        // A damaged ELF says how it is damaged (truncated, bad headers).
        elf::parse(image)?;
    }
    Err(BootError::UnknownFormat { len: image.len() })
}

/// Loads `image` into `mem` according to its detected format and `opts`: builds the ACPI
/// tables first (when `opts.acpi`), then loads the kernel and its boot structures.
/// An ELF with a PVH note is entered through PVH unless `opts.prefer_pvh` is false and it
/// is a 64-bit ELF, which is then entered as a Linux vmlinux.
pub fn load<M: GuestMemoryBackend>(
    mem: &M,
    image: &[u8],
    opts: &BootOptions,
) -> Result<Loaded, BootError> {
    layout::check_ram(opts.ram_bytes)?;
    if opts.cpus == 0 || opts.cpus > acpi::MAX_CPUS {
        return Err(BootError::BadCpuCount {
            cpus: opts.cpus,
            max: acpi::MAX_CPUS,
        });
    }
    let format = detect(image)?;
    let acpi = if opts.acpi {
        Some(acpi::build_acpi(mem, opts.cpus, opts.pm_timer_32bit)?)
    } else {
        None
    };
    let rsdp = acpi.as_ref().map(|a| a.rsdp);
    let mut loaded = match format {
        ImageFormat::Multiboot => {
            let mut loaded = multiboot::load(mem, image, opts)?;
            loaded.rsdp = rsdp;
            loaded
        }
        ImageFormat::Pvh if !opts.prefer_pvh && elf::is_elf64(image) => {
            linux::load_elf(mem, image, opts, rsdp)?
        }
        ImageFormat::Pvh => pvh::load(mem, image, opts, rsdp)?,
        ImageFormat::BzImage => linux::load_bzimage(mem, image, opts, rsdp)?,
        ImageFormat::LinuxElf => linux::load_elf(mem, image, opts, rsdp)?,
    };
    loaded.facs = acpi.map(|a| a.facs);
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::build::{elf, Ph};
    use crate::layout::{e820_map, read_bytes};
    use crate::linux::tests::bzimage;
    use crate::multiboot::tests::{aout_image, mem, opts};
    use crate::pvh::tests::pvh_image;

    const MIB: u64 = 1 << 20;

    #[test]
    fn detects_each_format() {
        assert_eq!(
            detect(&aout_image(0x1000, 0)).unwrap(),
            ImageFormat::Multiboot
        );
        assert_eq!(detect(&pvh_image(true)).unwrap(), ImageFormat::Pvh);
        assert_eq!(detect(&pvh_image(false)).unwrap(), ImageFormat::Pvh);
        assert_eq!(
            detect(&bzimage(0x020f, 1, 0x1000)).unwrap(),
            ImageFormat::BzImage
        );
        let vmlinux = elf(true, 0x100_0000, &[Ph::load(0x100_0000, vec![0; 8], 8)]);
        assert_eq!(detect(&vmlinux).unwrap(), ImageFormat::LinuxElf);
        let e = detect(&[0u8; 1000]).unwrap_err();
        assert!(matches!(e, BootError::UnknownFormat { len: 1000 }));
        assert!(e.to_string().contains("multiboot"));
        // An ELF32 without multiboot header or PVH note is not bootable.
        let elf32 = elf(false, 0x10_0000, &[Ph::load(0x10_0000, vec![0; 8], 8)]);
        assert!(matches!(
            detect(&elf32),
            Err(BootError::UnknownFormat { .. })
        ));
    }

    #[test]
    fn bad_bzimage_magic_is_specific() {
        let mut img = bzimage(0x020f, 1, 0x1000);
        img[0x203] = 0;
        let e = load(&mem(16 * MIB), &img, &opts(16 * MIB)).unwrap_err();
        assert!(matches!(e, BootError::BzImageBadMagic { .. }), "{e}");
    }

    #[test]
    fn bad_multiboot_checksum_is_specific() {
        let mut img = aout_image(0x1000, 0);
        img[20] ^= 0x10;
        let e = load(&mem(16 * MIB), &img, &opts(16 * MIB)).unwrap_err();
        assert!(matches!(e, BootError::MultibootChecksum { .. }), "{e}");
    }

    #[test]
    fn load_multiboot_with_acpi() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let mut o = opts(ram);
        o.cpus = 4;
        let l = load(&m, &aout_image(0x2000, 0x1000), &o).unwrap();
        assert_eq!(l.format, ImageFormat::Multiboot);
        assert_eq!(l.e820, e820_map(ram));
        let rsdp = l.rsdp.unwrap();
        let mut sig = [0u8; 8];
        read_bytes(&m, rsdp, &mut sig).unwrap();
        assert_eq!(&sig, b"RSD PTR ");
        assert!((0xE0000..0x100000).contains(&rsdp) && rsdp & 0xf == 0);
    }

    #[test]
    fn load_pvh_passes_rsdp() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let l = load(&m, &pvh_image(true), &opts(ram)).unwrap();
        assert_eq!(l.format, ImageFormat::Pvh);
        let mut b = [0u8; 8];
        read_bytes(&m, l.entry.rbx + 32, &mut b).unwrap();
        assert_eq!(Some(u64::from_le_bytes(b)), l.rsdp);
    }

    #[test]
    fn pvh_elf64_can_be_entered_as_linux() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let mut o = opts(ram);
        o.prefer_pvh = false;
        let l = load(&m, &pvh_image(true), &o).unwrap();
        assert_eq!(l.format, ImageFormat::LinuxElf);
        assert_eq!(l.entry.mode, CpuMode::Long64);
        // ELF32 PVH images stay PVH.
        let l = load(&m, &pvh_image(false), &o).unwrap();
        assert_eq!(l.format, ImageFormat::Pvh);
    }

    #[test]
    fn load_bzimage_without_acpi() {
        let ram = 32 * MIB;
        let m = mem(ram);
        let mut o = opts(ram);
        o.acpi = false;
        let l = load(&m, &bzimage(0x020f, 1, 0x1000), &o).unwrap();
        assert_eq!(l.format, ImageFormat::BzImage);
        assert_eq!(l.rsdp, None);
    }

    #[test]
    fn rejects_bad_machine_sizes() {
        let m = mem(16 * MIB);
        let mut o = opts(MIB);
        assert!(matches!(
            load(&m, &aout_image(0x1000, 0), &o),
            Err(BootError::RamTooSmall { .. })
        ));
        o.ram_bytes = 16 * MIB;
        o.cpus = 0;
        assert!(matches!(
            load(&m, &aout_image(0x1000, 0), &o),
            Err(BootError::BadCpuCount { .. })
        ));
    }

    #[test]
    fn truncated_vmlinux() {
        let img = elf(true, 0x100_0000, &[Ph::load(0x100_0000, vec![9; 512], 512)]);
        let e = load(&mem(32 * MIB), &img[..300], &opts(32 * MIB)).unwrap_err();
        assert!(matches!(e, BootError::Truncated { .. }), "{e}");
    }
}
