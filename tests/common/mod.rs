//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

/// Opens /dev/kvm, or fails the calling test with one line naming /dev/kvm and what to do.
pub fn kvm() -> Arc<kvm_ioctls::Kvm> {
    Arc::new(exitlab_vmm::testing::kvm_or_fail())
}

/// Fails the calling test with one clear line when /dev/kvm cannot be used (for tests
/// that run the `exitlab` binary, which would otherwise report it in its own way).
pub fn require_kvm() {
    drop(exitlab_vmm::testing::kvm_or_fail());
}

/// The `exitlab` binary under test.
pub const EXITLAB: &str = env!("CARGO_BIN_EXE_exitlab");

/// Runs `exitlab ARGS...` and returns its output.
pub fn exitlab(args: &[&str]) -> std::process::Output {
    std::process::Command::new(EXITLAB)
        .args(args)
        .output()
        .expect("the exitlab binary runs")
}

/// A fresh directory under the target's temporary directory for one test.
pub fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("create a scratch directory");
    d
}

/// Says what a test that passes could not check on this host ("NOT VERIFIED here: ...",
/// "NOT CHECKED on this host: ..."). libtest keeps what a passing test prints with
/// `eprintln!` to itself, so `cargo test` would show only "ok"; this line is written to
/// the process's standard error directly, and shows beside the test's result.
pub fn say_not_verified(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
