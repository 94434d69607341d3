//! The pvh loader on arbitrary bytes: it must return an error, never panic or write
//! outside guest RAM.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if let Some((opts, image)) = common::split(data) {
        let _ = exitlab_boot::pvh::load(common::mem(), image, &opts, None);
    }
});
