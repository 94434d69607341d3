//! Tests of the `exitlab` command line: bad input gets a clear message and exit code 2,
//! and the main commands produce what they promise.

use std::process::{Command, Output};

mod common;

fn exitlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_exitlab"))
        .args(args)
        .output()
        .expect("the exitlab binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn unknown_test_is_rejected_with_the_valid_names() {
    let o = exitlab(&["bench", "--tests", "cpuid,nosuchtest"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("unknown test 'nosuchtest'"), "{e}");
    assert!(e.contains("inl_from_user"), "{e}");
}

#[test]
fn nonsensical_numbers_are_rejected() {
    for args in [
        &["bench", "--samples", "0"][..],
        &["bench", "--samples", "-5"],
        &["bench", "--batch", "0"],
        &["bench", "--ring", "2"],
        &["bench", "--ring", "7"],
        &["bench", "--timeout", "0"],
        &["bench", "--timeout", "nan"],
        &["bench", "--samples", "abc"],
        &["bench", "--samples", "10000000", "--batch", "1000"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty(), "{args:?}");
    }
}

#[test]
fn pinning_to_a_missing_cpu_says_how_many_there_are() {
    let o = exitlab(&["bench", "--pin", "4096"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("this host has only"), "{}", stderr(&o));
}

#[test]
fn pinning_outside_the_affinity_mask_is_refused() {
    // CPU 1 exists on this 2-CPU host, but a process confined to CPU 0 cannot use it.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        panic!("this test needs a host with at least 2 CPUs");
    }
    let o = Command::new("taskset")
        .args(["-c", "0"])
        .arg(env!("CARGO_BIN_EXE_exitlab"))
        .args(["bench", "--pin", "1", "--samples", "1"])
        .output()
        .expect("taskset (util-linux) runs");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("CPUs 0 available to exitlab (its affinity mask)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn exit_codes_and_ring_values_are_in_help() {
    let o = exitlab(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let h = stdout(&o);
    for line in ["Exit codes", "124", "130", "isa-debug-exit"] {
        assert!(h.contains(line), "{line} missing from:\n{h}");
    }
    let b = stdout(&exitlab(&["bench", "--help"]));
    assert!(b.contains("[possible values: 0, 3]"), "{b}");
    for sub in ["bench", "run", "host", "report", "compare"] {
        let o = exitlab(&[sub, "-q", "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub} -q");
        let o = exitlab(&[sub, "-v", "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub} -v");
    }
}

#[test]
fn completions_and_man_page_come_from_the_command_definition() {
    let o = exitlab(&["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(s.contains("exitlab") && s.contains("--no-overhead"), "{s}");
    let o = exitlab(&["completions", "zsh"]);
    assert!(stdout(&o).contains("#compdef exitlab"));
    let o = exitlab(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    let m = stdout(&o);
    assert!(m.contains(".TH exitlab") && m.contains("Exit codes"), "{m}");
    assert_eq!(
        exitlab(&["completions", "nosuchshell"]).status.code(),
        Some(2)
    );
}

#[test]
fn results_files_that_are_not_regular_files_are_refused() {
    for args in [
        &["report", "/dev/zero"][..],
        &["compare", "/dev/zero", "/dev/zero"],
        &["report", "/"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("give a regular file"), "{}", stderr(&o));
    }
}

#[test]
fn unwritable_json_path_is_rejected_before_running() {
    let o = exitlab(&["bench", "--json", "/nonexistent-dir/x/results.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent-dir/x"), "{}", stderr(&o));
    let dir = std::env::temp_dir();
    let o = exitlab(&["bench", "--json", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn list_names_every_test() {
    let o = exitlab(&["bench", "--list"]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    for name in [
        "loop_overhead",
        "cpuid",
        "cpuid_0xd",
        "vmcall",
        "hlt",
        "inl_from_kernel",
        "outl_to_kernel",
        "inl_from_user",
        "outl_to_user",
        "mmio_read_user",
        "mmio_write_user",
        "mmio_write_ioeventfd",
        "rd_tsc_adjust_msr",
        "wr_tsc_adjust_msr",
        "rdmsr_user",
        "wrmsr_user",
        "mov_from_cr8",
        "mov_to_cr8",
    ] {
        assert!(
            s.lines().any(|l| l.starts_with(name)),
            "{name} missing from:\n{s}"
        );
    }
}

#[test]
fn host_json_has_the_documented_keys() {
    common::require_kvm();
    let o = exitlab(&["host", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["cpu"]["model_name"].is_string());
    assert!(v["kernel"]["release"].is_string());
    assert!(v["virtualization"]["summary"].is_string());
    assert!(v["kvm"]["available"].as_bool().unwrap_or(false), "{v}");
    let text = exitlab(&["host"]);
    assert_eq!(text.status.code(), Some(0));
    assert!(stdout(&text).contains("KVM"));
}

#[test]
fn bench_writes_json_that_report_and_compare_read_back() {
    common::require_kvm();
    let dir = tempdir();
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    for p in [&a, &b] {
        let o = exitlab(&[
            "bench",
            "--tests",
            "cpuid,outl_to_user",
            "--samples",
            "100",
            "--ring",
            "3",
            "--raw",
            "--no-overhead",
            "--rounds",
            "2",
            "--json",
            p.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("outl_to_user"), "{out}");
        assert!(out.contains("exit check: all"), "{out}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["config"]["ring"], 3);
    assert_eq!(v["config"]["rounds"], 2);
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 3, "loop_overhead is always measured first");
    assert_eq!(tests[0]["name"], "loop_overhead");
    let outl = tests.iter().find(|t| t["name"] == "outl_to_user").unwrap();
    assert_eq!(outl["raw_samples"].as_array().unwrap().len(), 100);
    assert_eq!(outl["exit_check"]["passed"], true);
    assert_eq!(
        outl["exits"]["io_out"], 500,
        "100 samples + 200 warm-up iterations in each of 2 rounds"
    );
    let r = exitlab(&["report", a.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0));
    assert!(stdout(&r).contains("outl_to_user"));
    let md = exitlab(&["report", "--markdown", a.to_str().unwrap()]);
    assert!(stdout(&md).contains("| "));
    let c = exitlab(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    assert!(stdout(&c).contains("outl_to_user"));
    let bad = exitlab(&["report", dir.join("missing.json").to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    // Tampered files: negative cycles are refused; terminal escapes are not printed.
    let mut t = v.clone();
    t["tests"][1]["cycles"]["median"] = serde_json::json!(-5.0);
    let neg = dir.join("negative.json");
    std::fs::write(&neg, serde_json::to_vec(&t).unwrap()).unwrap();
    for args in [
        vec!["report", neg.to_str().unwrap()],
        vec!["compare", a.to_str().unwrap(), neg.to_str().unwrap()],
    ] {
        let o = exitlab(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("must be finite and not negative"),
            "{}",
            stderr(&o)
        );
    }
    let mut t = v.clone();
    t["tests"][1]["name"] = serde_json::json!("\u{1b}]0;owned\u{7}\u{1b}[2Jcpuid");
    t["notes"] = serde_json::json!(["\u{1b}[31mred\u{9b}2J"]);
    let esc = dir.join("escapes.json");
    std::fs::write(&esc, serde_json::to_vec(&t).unwrap()).unwrap();
    for args in [
        vec!["report", esc.to_str().unwrap()],
        vec!["report", "--markdown", esc.to_str().unwrap()],
        vec!["compare", a.to_str().unwrap(), esc.to_str().unwrap()],
    ] {
        let o = exitlab(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{9b}') && !out.contains('\u{7}'),
            "{args:?}"
        );
    }
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("exitlab-cli-{}-{}", std::process::id(), line!()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
