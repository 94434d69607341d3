//! The lab kernel's loader on arbitrary bytes: the multiboot loader with the options
//! crates/lab/src/kernel.rs (private to the lab) loads the lab kernel with: no ACPI
//! tables, no command line, no modules.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let opts = exitlab_boot::BootOptions {
        kernel_path: "exitlab-lab-kernel".into(),
        ram_bytes: common::RAM,
        acpi: false,
        ..exitlab_boot::BootOptions::default()
    };
    let _ = exitlab_boot::multiboot::load(common::mem(), data, &opts);
});
