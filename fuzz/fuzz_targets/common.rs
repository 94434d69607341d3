#![allow(dead_code)]
//! Shared by the image-loader targets: one guest address space, built once, and the
//! boot options drawn from the input's first byte.

use std::sync::OnceLock;

use exitlab_boot::BootOptions;
use vm_memory::GuestMemoryMmap;

/// Guest RAM of the fuzzed loads (the loader writes into it; it is reserved lazily).
pub const RAM: u64 = 64 << 20;

pub fn mem() -> &'static GuestMemoryMmap {
    static MEM: OnceLock<GuestMemoryMmap> = OnceLock::new();
    MEM.get_or_init(|| {
        GuestMemoryMmap::from_ranges(&exitlab_boot::layout::ram_regions(RAM))
            .expect("reserve guest RAM")
    })
}

/// Splits the input into options (first byte) and the image.
pub fn split(data: &[u8]) -> Option<(BootOptions, &[u8])> {
    let (&flags, image) = data.split_first()?;
    let opts = BootOptions {
        kernel_path: "fuzz".into(),
        cmdline: if flags & 1 != 0 { "console=ttyS0".into() } else { String::new() },
        initrd: (flags & 2 != 0).then(|| vec![0x5A; 4096]),
        cpus: 1 + u32::from(flags >> 5),
        ram_bytes: RAM,
        acpi: flags & 4 != 0,
        pm_timer_32bit: true,
        prefer_pvh: flags & 8 != 0,
    };
    Some((opts, image))
}
