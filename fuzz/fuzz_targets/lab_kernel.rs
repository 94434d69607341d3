//! The lab kernel loader (crates/lab/src/kernel.rs) on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let _ = exitlab_lab::kernel::load(common::mem(), data, common::RAM);
});
