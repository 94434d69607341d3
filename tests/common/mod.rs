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

/// The results schema the project publishes, `docs/results.schema.json` (a test of
/// exitlab-results fails when it is not what the code generates).
pub fn results_schema() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results.schema.json")
}

/// Checks `json`, a results file exitlab wrote (`what` names it in messages), against
/// the published schema ([`results_schema_errors`]) and returns it parsed: every test
/// that reads a results file exitlab wrote reads it through here (or [`read_results`]),
/// so that a schema that does not describe what exitlab writes fails a test.
pub fn results_json(json: &[u8], what: &str) -> serde_json::Value {
    let value: serde_json::Value = serde_json::from_slice(json).unwrap_or_else(|e| {
        panic!(
            "{what} is not JSON ({e}): {}",
            String::from_utf8_lossy(json)
        )
    });
    if let Some(errors) = results_schema_errors(json) {
        panic!("{what} does not match docs/results.schema.json:\n{errors}");
    }
    value
}

/// A python3 that can run `import` (a Python import statement): the system interpreter
/// first, where Debian's modules are installed and which may not be first on PATH (pyenv
/// and the like). Fails the calling test, saying "no python3 with {missing}", when there
/// is none: the tests that need a Python module do not skip.
pub fn python_with(import: &str, missing: &str) -> &'static str {
    ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .args(["-c", import])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .unwrap_or_else(|| panic!("no python3 with {missing}"))
}

/// What Python's `jsonschema` (draft 2020-12) finds wrong with `json` against the
/// published results schema, `None` when it matches. The validator is Debian's
/// python3-jsonschema, which .ci/run installs; without it the calling test fails, it
/// does not skip.
pub fn results_schema_errors(json: &[u8]) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    const SCRIPT: &str = "import json, sys\n\
        from jsonschema import Draft202012Validator\n\
        schema = json.load(open(sys.argv[1]))\n\
        Draft202012Validator.check_schema(schema)\n\
        doc = json.load(sys.stdin)\n\
        errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))\n\
        for e in errors[:10]:\n    print('/'.join(map(str, e.absolute_path)) or '(the file)', ':', e.message[:300])\n\
        sys.exit(3 if errors else 0)\n";
    let python = python_with(
        "from jsonschema import Draft202012Validator",
        "jsonschema: the results files exitlab writes are checked against \
         docs/results.schema.json with it (apt-get install python3-jsonschema; .ci/run \
         installs it)",
    );
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .arg(results_schema())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .expect("python's stdin")
        .write_all(json)
        .expect("the results reach python");
    let o = child.wait_with_output().expect("python3 ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    match o.status.code() {
        Some(0) => None,
        // The document does not match; anything else is the check itself failing.
        Some(3) => Some(said),
        _ => panic!("the schema check failed to run: {said}"),
    }
}

/// [`results_json`] of the results file at `path`.
pub fn read_results(path: &std::path::Path) -> serde_json::Value {
    let bytes = std::fs::read(path)
        .unwrap_or_else(|e| panic!("cannot read the results file {}: {e}", path.display()));
    results_json(&bytes, &path.display().to_string())
}
