//! A QEMU-based test runner drives exitlab from the outside: `tests/qemu-runner/play.sh`
//! plays the probes and invocations of the public x86 unit-test suite's runner against
//! the binary named `exitlab-qemu` (and against the two-line wrapper the README shows),
//! booting exitlab's conformance kernel the way the runner boots its tests. A binary
//! that does not answer the probes must make the script fail.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

const EXITLAB: &str = env!("CARGO_BIN_EXE_exitlab");

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("qemu-runner")
        .join(format!("{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn play(qemu: &Path, kernel: &Path) -> Output {
    Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/qemu-runner/play.sh"
        ))
        .env("QEMU", qemu)
        .env("KERNEL", kernel)
        .env("APPEND", "fwcfg firmware")
        .output()
        .expect("bash runs the script")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn kernel(dir: &Path) -> PathBuf {
    let k = dir.join("conformance-multiboot.elf");
    std::fs::write(&k, exitlab_guest::CONFORMANCE_MULTIBOOT).unwrap();
    k
}

#[test]
fn the_runner_s_probes_and_invocations_pass_against_exitlab_qemu() {
    common::require_kvm();
    let dir = scratch("named");
    let link = dir.join("exitlab-qemu");
    std::os::unix::fs::symlink(EXITLAB, &link).unwrap();
    let o = play(&link, &kernel(&dir));
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("0 check(s) failed"), "{t}");
    for must in [
        "ok   --help mentions QEMU",
        "ok   -device '?' lists \"pc-testdev\"",
        "ok   refused, naming q35",
        "ok   the kernel passes under the runner's rules: -cpu qemu64,+x2apic,+tsc-deadline",
    ] {
        assert!(t.contains(must), "no `{must}` in:\n{t}");
    }
}

#[test]
fn the_readme_s_wrapper_answers_the_runner_too() {
    common::require_kvm();
    let dir = scratch("wrapper");
    let w = dir.join("qemu-wrapper");
    std::fs::write(
        &w,
        format!("#!/bin/sh\nexec {EXITLAB} run --qemu-args -- \"$@\"\n"),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&w).status().unwrap();
    let o = play(&w, &kernel(&dir));
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_binary_that_does_not_answer_the_probes_fails_the_script() {
    let dir = scratch("true");
    let o = play(Path::new("/bin/true"), &kernel(&dir));
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("FAIL --help does not mention QEMU"), "{t}");
    assert!(
        t.contains("FAIL -device '?' does not list \"pc-testdev\""),
        "{t}"
    );
    assert!(
        t.contains("does not pass under the runner's rules"),
        "a silent exit 0 is no pass: {t}"
    );
}
