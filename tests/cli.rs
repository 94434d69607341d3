//! Tests of the `exitlab` command line: bad input gets a clear message and exit code 2,
//! and the main commands produce what they promise.

use std::process::{Command, Output};

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
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("exitlab-cli-{}-{}", std::process::id(), line!()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
