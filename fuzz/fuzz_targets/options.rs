//! The option parsers that take structured values: `--serial` (stdio, none,
//! file:PATH) and CPU lists (the affinity mask `--pin` is checked against).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/input.rs"]
mod input;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = input::parse_serial(s);
        if let Some(cpus) = input::parse_cpu_list(s) {
            assert!(cpus.len() <= s.len() * (1 << 16) + 1);
        }
    }
});
