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

/// Runs `exitlab ARGS...` and returns its output, killing it and failing the calling
/// test if it has not ended after `guard`: a guard against a hang that would otherwise
/// hold the test run forever, to be set far beyond any run's duration (it asserts
/// nothing about speed).
pub fn exitlab_guarded(args: &[&str], guard: std::time::Duration) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = std::process::Command::new(EXITLAB)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the exitlab binary runs");
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = reader(Box::new(child.stdout.take().unwrap()));
    let stderr = reader(Box::new(child.stderr.take().unwrap()));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for exitlab") {
            break status;
        }
        if started.elapsed() > guard {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "exitlab {} had not ended after {} s (the hang guard): killed",
                args.join(" "),
                guard.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
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

/// A test's scratch directory (`exitlab-TAG-PID` in the temporary directory, made
/// afresh), removed when the guard is dropped: when the test ends, passed or failed (a
/// failing assertion unwinds through it), so that test runs leave nothing behind.
pub struct Scratch(std::path::PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("exitlab-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("the temporary directory is writable");
        Scratch(d)
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
