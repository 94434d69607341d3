//! Format detection and the loader it picks (multiboot, PVH, bzImage, vmlinux), as
//! `exitlab run` uses them, on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if let Some((opts, image)) = common::split(data) {
        let _ = exitlab_boot::detect(image);
        if let Ok(l) = exitlab_boot::load(common::mem(), image, &opts) {
            assert!(l.image_range.0 <= l.image_range.1);
        }
    }
});
