//! The results-file reader and everything `report` and `compare` do with what it
//! accepts, on arbitrary bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn path() -> &'static std::path::Path {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        std::env::temp_dir().join(format!("exitlab-fuzz-results-{}.json", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(path(), data).expect("write the input");
    if let Ok(r) = exitlab_results::results::read(path()) {
        let _ = exitlab_results::report::render_table(&r);
        let _ = exitlab_results::report::render_markdown(&r);
        let c = exitlab_results::compare::compare(&r, &r, 0.0);
        let _ = exitlab_results::compare::render_comparison(&c, ["before", "after"]);
    }
});
