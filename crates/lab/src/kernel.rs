//! Loading the lab kernel into a VM.

use exitlab_boot::{BootOptions, EntryState};
use vm_memory::GuestMemoryMmap;

/// Loads the lab kernel image (a multiboot image) into `mem` of `ram_bytes` and returns
/// its entry state.
pub fn load(mem: &GuestMemoryMmap, image: &[u8], ram_bytes: u64) -> Result<EntryState, String> {
    load_with_cmdline(mem, image, ram_bytes, "")
}

/// [`load`] with a multiboot command line for the kernel.
pub fn load_with_cmdline(
    mem: &GuestMemoryMmap,
    image: &[u8],
    ram_bytes: u64,
    cmdline: &str,
) -> Result<EntryState, String> {
    let opts = BootOptions {
        kernel_path: "exitlab-lab-kernel".into(),
        cmdline: cmdline.into(),
        ram_bytes,
        acpi: false,
        ..BootOptions::default()
    };
    exitlab_boot::multiboot::load(mem, image, &opts)
        .map(|l| l.entry)
        .map_err(|e| e.to_string())
}
