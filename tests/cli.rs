//! Tests of the `exitlab` command line: bad input gets a clear message and exit code 2,
//! and the main commands produce what they promise.
#![deny(unsafe_code)]

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
        &["bench", "--stall-timeout", "0"],
        &["bench", "--stall-timeout", "nan"],
        &["bench", "--timeout", "nan"],
        &["bench", "--timeout=-1"],
        &["bench", "--timeout", "1e99"],
        &["run", "--timeout", "1e99", "k.elf"],
        &["trace", "--seconds", "1e99", "--", "true"],
        &["trace", "--phase-seconds", "0", "--", "true"],
        &["bench", "--samples", "abc"],
        &["bench", "--samples", "10000000", "--batch", "1000"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty(), "{args:?}");
    }
}

#[test]
fn precision_and_budget_must_be_sensible() {
    for (args, says) in [
        (
            &["bench", "--precision", "0"][..],
            "--precision 0 must be a percentage",
        ),
        (
            &["bench", "--precision=-1"],
            "--precision -1 must be a percentage",
        ),
        (
            &["bench", "--precision", "nan"],
            "--precision NaN must be a percentage",
        ),
        (
            &["bench", "--precision", "101"],
            "--precision 101 must be a percentage",
        ),
        (&["bench", "--precision", "abc"], "--precision"),
        (
            &["bench", "--precision", "1", "--budget", "0"],
            "--budget 0 must be a number of seconds",
        ),
        (
            &["bench", "--precision", "1", "--budget", "nan"],
            "--budget NaN must be",
        ),
        (
            &["bench", "--precision", "1", "--budget", "1e99"],
            "--budget 1e99 must be",
        ),
        (&["bench", "--budget", "30"], "give --precision PCT"),
        // --budget bounds an --ab run's default planned design, which given rounds turn off.
        (
            &[
                "bench",
                "--ab",
                "warmup=200,201",
                "--rounds",
                "4",
                "--budget",
                "30",
            ],
            "give --precision PCT",
        ),
        (
            &["bench", "--ab", "warmup=200,201", "--budget", "1e99"],
            "--budget 1e99 must be",
        ),
        // A planned design fixes its rounds itself.
        (
            &["bench", "--precision", "1", "--rounds", "4"],
            "cannot be used with",
        ),
        // --runs writes its runs into a directory.
        (&["bench", "--runs", "3"], "give --json DIR"),
        (&["bench", "--runs", "3", "--json"], "give --json DIR"),
        (
            &[
                "bench",
                "--workload",
                "hackbench",
                "--kernel",
                "vmlinux",
                "--precision",
                "1",
            ],
            "--precision and --budget apply to the exit tests",
        ),
        (
            &[
                "bench",
                "--workload",
                "hackbench",
                "--kernel",
                "vmlinux",
                "--ab",
                "apic=xapic,x2apic",
                "--budget",
                "30",
            ],
            "--precision and --budget apply to the exit tests",
        ),
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// A run of cpuid and outl_to_user at ring 3 with 150 samples and `extra` (without
/// `--rounds`, a planned design fixes them): its exit status, output and file.
fn planned_run(
    dir: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> (Option<i32>, String, serde_json::Value) {
    let p = dir.join(name);
    let mut args = vec![
        "bench",
        "--tests",
        "cpuid,outl_to_user",
        "--samples",
        "150",
        "--ring",
        "3",
        "--no-overhead",
        "--quiet",
        "--json",
        p.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = exitlab(&args);
    let v = if p.exists() {
        common::read_results(&p)
    } else {
        serde_json::Value::Null
    };
    (o.status.code(), format!("{}{}", stdout(&o), stderr(&o)), v)
}

/// The number of rounds of test `name` in `tests` (a results file's `tests` or
/// `ab.b_tests`).
fn rounds_of(tests: &serde_json::Value, name: &str) -> u64 {
    let t = tests.as_array().unwrap().iter().find(|t| t["name"] == name);
    t.map_or(0, |t| t["rounds"].as_array().unwrap().len() as u64)
}

#[test]
fn a_planned_run_takes_its_pilot_then_exactly_the_rounds_its_plan_gives_each_test() {
    let dir = tempdir_named("precision");
    // A target any pilot meets: every test gets the fewest a plan gives (20 rounds).
    let (code, _, wide) = planned_run(&dir, "wide.json", &["--precision", "50"]);
    assert_eq!(code, Some(0));
    let p = &wide["plan"];
    assert_eq!(
        (p["target_pct"].as_f64(), p["pilot_units"].as_u64()),
        (Some(50.0), Some(10))
    );
    assert_eq!(p["budget_seconds"], 60.0);
    let tests = p["tests"].as_array().unwrap();
    let names: Vec<&str> = tests.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cpuid", "outl_to_user"]);
    for t in tests {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["planned"], 20, "{p}");
        // Each test ran exactly its plan: no round added or set aside.
        assert_eq!(rounds_of(&wide["tests"], name), 20, "{name}");
        assert_eq!(t["units"], 20, "{p}");
        assert!(t["half_width_pct"].as_f64().unwrap() > 0.0, "{p}");
    }
    // A target no run reaches, with a budget of one second: the pilot, then what fits,
    // and the report names the tests short of their need.
    let (code, out, tight) = planned_run(
        &dir,
        "tight.json",
        &["--precision", "0.0001", "--budget", "1"],
    );
    assert_eq!(code, Some(0), "{out}");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("plan: short of the target (budget or interruption): "))
        .unwrap_or_else(|| panic!("{out}"));
    for t in tight["plan"]["tests"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert!(t["planned"].as_u64() < t["needed"].as_u64(), "{t}");
        assert_eq!(
            rounds_of(&tight["tests"], name),
            t["planned"].as_u64().unwrap()
        );
        assert!(line.contains(&format!("{name} ±")), "{name}: {out}");
    }
}

#[test]
fn an_ab_run_is_planned_by_default_given_rounds_are_the_whole_design_and_too_few_pairs_fail_closed()
{
    let dir = tempdir_named("ab-precision");
    // (An A/B run of `tests`, 10 samples, at ring 3, with `extra`: its status, output and
    // file.)
    let ab_run = |name: &str, tests: &str, extra: &[&str]| {
        let path = dir.join(name);
        let mut args = vec!["bench", "--tests", tests, "--samples", "10", "--ring", "3"];
        args.extend(["--ab", "warmup=200,201", "--quiet", "--json"]);
        args.push(path.to_str().unwrap());
        args.extend_from_slice(extra);
        let o = exitlab(&args);
        let v = common::read_results(&path);
        (o.status.code(), stdout(&o), v)
    };
    // Without --precision or --rounds: the default planned design, here within 6 s.
    let (code, out, v) = ab_run("default.json", "cpuid,outl_to_user", &["--budget", "6"]);
    let p = &v["plan"];
    assert_eq!(p["by_default"], true, "{p}");
    assert_eq!(
        (p["budget_seconds"].as_f64(), p["target_pct"].as_f64()),
        (Some(6.0), Some(1.2))
    );
    assert_eq!(p["pilot_units"], 10, "{p}");
    // Each test's A and B rounds are the pairs its plan gave it, the pairs' order the
    // rounds run, and the end of the plan is no interruption.
    let most = p["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["planned"].as_u64().unwrap())
        .max();
    assert_eq!(v["config"]["rounds"].as_u64(), most, "{p}");
    assert_eq!(
        v["ab"]["order"].as_array().unwrap().len() as u64,
        most.unwrap()
    );
    for t in p["tests"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let planned = t["planned"].as_u64().unwrap();
        assert!(planned >= 10, "{p}");
        assert_eq!(rounds_of(&v["tests"], name), planned, "{name}: {p}");
        assert_eq!(rounds_of(&v["ab"]["b_tests"], name), planned, "{name}: {p}");
    }
    assert!(v["incomplete"].is_null(), "{}", v["incomplete"]);
    assert!(
        out.contains("plan (bench --ab's default): each change's 95% interval within ±1.2%: a pilot of 10 units"),
        "{out}"
    );
    // An A/A run gates on nothing: exit 0, or 4 only where the output names the test.
    assert!(
        code == Some(0) || (code == Some(4) && out.contains("gate: slower")),
        "{code:?} {out}"
    );
    // Given rounds are the whole design: no plan. Three pairs are too few for a verdict,
    // so the gate fails closed (exit 12) unless that is accepted.
    let (code, out, v) = ab_run("rounds.json", "cpuid", &["--rounds", "3"]);
    assert!(v["plan"].is_null(), "{}", v["plan"]);
    assert_eq!(v["config"]["rounds"].as_u64(), Some(3));
    assert_eq!(code, Some(12), "{out}");
    assert!(
        out.contains("no verdict for loop_overhead, cpuid: 3 pairs; at least 5 a side are needed"),
        "{out}"
    );
    assert!(
        out.contains("exit 12: a test the gate judges has no verdict"),
        "{out}"
    );
    let (code, _, _) = ab_run(
        "accepted.json",
        "cpuid",
        &["--rounds", "3", "--accept-no-verdict"],
    );
    assert_eq!(code, Some(0));
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
    // Columns line up however long a name is: the "expected" column starts at the same
    // place on every row, and the default suite is marked.
    let header = s.lines().next().unwrap();
    assert!(
        header.starts_with("test ") && header.contains("expected  default"),
        "{header}"
    );
    let at = header.find("expected").unwrap();
    let rows: Vec<&str> = s.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(rows.len() > 18, "{s}");
    for row in &rows {
        assert!(row[..at].ends_with("  "), "{row}");
        let cells: Vec<&str> = row[at..].split_whitespace().collect();
        assert!(["kernel", "user", "none"].contains(&cells[0]), "{row}");
        assert!(["yes", "no"].contains(&cells[1]), "{row}");
    }
    // The `column`th cell after the name (0: expected) of the test's row.
    let cell = |name: &str, column: usize| {
        let row = rows
            .iter()
            .find(|r| r.split_whitespace().next() == Some(name))
            .unwrap();
        row[at..]
            .split_whitespace()
            .nth(column)
            .unwrap()
            .to_string()
    };
    assert_eq!(cell("cpuid", 1), "yes");
    assert_eq!(cell("x2apic_self_ipi_tpr_sti_nop", 1), "no");
    // Each test's iterations per sample without --batch: four for an exit KVM handles
    // in the kernel, one for the rest.
    let batch = |name: &str| cell(name, 3);
    assert!(header.contains("ring3  batch  what"), "{header}");
    for (name, b) in [
        ("loop_overhead", "1"),
        ("cpuid", "4"),
        ("mov_to_cr8", "4"),
        ("inl_from_user", "1"),
        ("hlt", "1"),
        ("ipi", "1"),
    ] {
        assert_eq!(batch(name), b, "{name}");
    }
}

#[test]
fn clap_errors_read_as_exitlab_errors() {
    for args in [
        &["bench", "--nosuchoption"][..],
        &["nosuchcommand"],
        &["run"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = stderr(&o);
        assert!(e.starts_with("exitlab: "), "{args:?}: {e}");
        assert!(!e.contains("error: "), "{args:?}: {e}");
    }
    // --help stays on standard output with success.
    let o = exitlab(&["bench", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Usage:"));
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
        // The empty loop and outl_to_user are checked at least; cpuid too where KVM's
        // counters see its exits.
        assert!(out.contains(" tests checked, all passed"), "{out}");
    }
    let v = common::read_results(&a);
    common::read_results(&b);
    assert_eq!(v["schema_version"], 3);
    // Without --batch each test ran at its own, and the file says so.
    assert_eq!(v["config"]["batch"], 0);
    assert_eq!(
        (&v["tests"][1]["name"], &v["tests"][1]["batch"]),
        (&serde_json::json!("cpuid"), &serde_json::json!(4))
    );
    assert_eq!(v["tests"][2]["batch"], 1);
    // One entry per round run: exactly the 2 asked for.
    assert_eq!(
        v["tests"][1]["rounds"].as_array().unwrap().len() as u64,
        v["tests"][1]["round_spread"]["rounds"].as_u64().unwrap()
    );
    assert!(v["provenance"]["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--raw"));
    assert_eq!(v["config"]["ring"], 3);
    assert_eq!(v["config"]["rounds"], 2);
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 3, "loop_overhead is always measured first");
    assert_eq!(tests[0]["name"], "loop_overhead");
    let outl = tests.iter().find(|t| t["name"] == "outl_to_user").unwrap();
    // 2 rounds of 50 samples, each with its own 200 warm-up iterations.
    let rounds = outl["round_spread"]["rounds"].as_u64().unwrap();
    assert_eq!(rounds, 2);
    assert_eq!(
        outl["raw_samples"].as_array().unwrap().len() as u64,
        50 * rounds
    );
    assert_eq!(outl["exit_check"]["passed"], true);
    assert_eq!(outl["exits"]["io_out"], (50 + 200) * rounds);
    let r = exitlab(&["report", a.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0));
    assert!(stdout(&r).contains("outl_to_user"));
    let md = exitlab(&["report", "--markdown", a.to_str().unwrap()]);
    assert!(stdout(&md).contains("| "));
    // Two real runs of 2 rounds: too few for a verdict, which compare says; and two
    // single files are a screen that cannot gate: exit 12.
    let c = exitlab(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(12), "{}", stderr(&c));
    assert!(stdout(&c).contains("outl_to_user"));
    assert!(
        stdout(&c).contains("2 rounds; at least 5 a side are needed"),
        "{}",
        stdout(&c)
    );
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
        vec![
            "compare",
            "--accept-no-verdict",
            a.to_str().unwrap(),
            esc.to_str().unwrap(),
        ],
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

/// A scratch directory of the calling test, removed when it ends.
fn tempdir_named(tag: &str) -> common::Scratch {
    common::Scratch::new(&format!("cli-{tag}"))
}

fn tempdir() -> common::Scratch {
    tempdir_named("json")
}

/// A small real run with enough rounds for a conclusion; returns its file.
fn small_run(dir: &std::path::Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    small_run_printing(dir, name, extra).0
}

/// [`small_run`], and what it printed.
fn small_run_printing(
    dir: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> (std::path::PathBuf, String) {
    let with_rounds = [&["--rounds", "5"][..], extra].concat();
    let (code, out, _) = planned_run(dir, name, &with_rounds);
    assert_eq!(code, Some(0), "{out}");
    (dir.join(name), out)
}

/// An edit that sets outl_to_user's round figures to its third round's, times `factor`,
/// each round `step` (a fraction) apart: rounds of known spread at a known level.
fn outl_to_user_at(step: f64, factor: f64) -> impl Fn(&mut serde_json::Value) {
    move |v: &mut serde_json::Value| {
        for t in v["tests"].as_array_mut().unwrap() {
            if t["name"] == "outl_to_user" {
                let rounds = t["rounds"].as_array_mut().unwrap();
                let mid = rounds[2]["net_median"].as_f64().unwrap();
                for (i, r) in rounds.iter_mut().enumerate() {
                    let wobble = 1.0 + step * (i as f64 - 2.0);
                    r["net_median"] = serde_json::json!(mid * wobble * factor);
                }
            }
        }
    }
}

fn edit_json(
    from: &std::path::Path,
    to: &std::path::Path,
    edit: impl FnOnce(&mut serde_json::Value),
) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(from).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(to, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn compare_of_two_files_is_a_screen_that_names_a_slower_test_and_cannot_gate() {
    let dir = tempdir_named("compare");
    let a = small_run(&dir, "a.json", &[]);
    let a_s = a.to_str().unwrap();
    // A file against itself: no change anywhere; a screen exits 12 (it cannot gate), 0
    // when that is accepted.
    let same = exitlab(&["compare", a_s, a_s]);
    assert_eq!(same.status.code(), Some(12), "{}", stdout(&same));
    let out = stdout(&same);
    for t in ["cpuid", "outl_to_user"] {
        let row = out.lines().find(|l| l.starts_with(t)).unwrap();
        assert!(
            row.contains("+0.0%") && !row.ends_with("slower") && !row.ends_with("faster"),
            "{row}"
        );
    }
    assert!(out.contains("screen: one run a side cannot gate"), "{out}");
    assert!(
        out.contains("exit 12: two single files cannot gate"),
        "{out}"
    );
    assert!(!out.contains("warning"), "{out}");
    let ok = exitlab(&["compare", "--accept-no-verdict", a_s, a_s]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    // Known figures: outl_to_user's rounds made tight around their median in `tight`,
    // and 30 % slower in every round in `slow`: the screen names it slower, and still
    // cannot gate.
    let tight = dir.join("tight.json");
    let scaled = |factor: f64| outl_to_user_at(0.01, factor);
    edit_json(&a, &tight, scaled(1.0));
    let slow = dir.join("slow.json");
    edit_json(&a, &slow, scaled(1.3));
    let a_s = tight.to_str().unwrap();
    let c = exitlab(&["compare", a_s, slow.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(12), "{}", stdout(&c));
    let out = stdout(&c);
    assert!(out.contains("slower in this screen: outl_to_user"), "{out}");
    let row = out.lines().find(|l| l.starts_with("outl_to_user")).unwrap();
    assert!(row.contains("+30.0%") && row.ends_with("slower"), "{row}");
    // The other direction is faster.
    let back = exitlab(&["compare", slow.to_str().unwrap(), a_s]);
    let row = stdout(&back)
        .lines()
        .find(|l| l.starts_with("outl_to_user"))
        .map(str::to_string);
    assert!(
        row.is_some_and(|r| r.ends_with("faster")),
        "{}",
        stdout(&back)
    );
    // A threshold above the change: not slower.
    let lax = exitlab(&["compare", a_s, slow.to_str().unwrap(), "--threshold", "40"]);
    assert!(
        !stdout(&lax).contains("slower in this screen"),
        "{}",
        stdout(&lax)
    );
    // Another host: warnings name the fields.
    let other = dir.join("other.json");
    edit_json(&tight, &other, |v| {
        v["host"]["cpu"]["model_name"] = "Some Other CPU".into();
        v["host"]["cpu"]["microcode"] = "0xdead".into();
    });
    let out = stdout(&exitlab(&["compare", a_s, other.to_str().unwrap()]));
    assert!(out.contains("warning: host CPU model differs:"), "{out}");
    assert!(out.contains("\"Some Other CPU\" after"), "{out}");
    assert!(out.contains("warning: host microcode differs:"), "{out}");
    // Too few rounds: no verdict, and why.
    let few = dir.join("few.json");
    edit_json(&slow, &few, |v| {
        for t in v["tests"].as_array_mut().unwrap() {
            t["rounds"].as_array_mut().unwrap().truncate(3);
        }
    });
    let f = exitlab(&["compare", a_s, few.to_str().unwrap()]);
    assert!(
        stdout(&f).contains(
            "no verdict for loop_overhead, cpuid, outl_to_user: 5 and 3 rounds; at least 5 a side are needed"
        ),
        "{}",
        stdout(&f)
    );
    // An A/B run is not a side of compare: report compares its sides.
    let help = exitlab(&["compare", "--help"]);
    assert!(
        stdout(&help).contains("Exit status: 0 the gate passes; 4 a test is slower"),
        "{}",
        stdout(&help)
    );
}

#[test]
fn compare_of_directories_judges_with_runs_as_units_and_gates() {
    let dir = tempdir_named("compare-runs");
    let a = small_run(&dir, "a.json", &[]);
    // Copies of one run whose outl_to_user rounds sit at a level per copy: runs that
    // differ by about 1 % (before), and by 1 % around +30 % (slow).
    let level = |factor: f64| outl_to_user_at(0.002, factor);
    let side = |name: &str, factors: &[f64]| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (i, f) in factors.iter().enumerate() {
            edit_json(&a, &d.join(format!("run{i}.json")), level(*f));
        }
        d.to_str().unwrap().to_string()
    };
    let before = side("before", &[1.0, 1.01, 0.99]);
    let slow = side("slow", &[1.3, 1.31, 1.29]);
    let odd = side("odd", &[1.0, 1.3, 0.995]);
    let c = exitlab(&["compare", &before, &slow]);
    assert_eq!(c.status.code(), Some(4), "{}", stdout(&c));
    let out = stdout(&c);
    assert!(
        out.contains("each side: geometric mean of its runs' figures; units: runs"),
        "{out}"
    );
    let row = out.lines().find(|l| l.starts_with("outl_to_user")).unwrap();
    assert!(
        row.contains("+30.0%") && row.contains(" 3 ") && row.ends_with("slower"),
        "{row}"
    );
    assert!(
        out.contains("gate: slower beyond 2% (Holm over 2 tests): outl_to_user"),
        "{out}"
    );
    // --gate names what the gate judges: cpuid alone did not move.
    let c = exitlab(&["compare", "--gate", "cpuid", &before, &slow]);
    assert_eq!(c.status.code(), Some(0), "{}", stdout(&c));
    // One run of the after side at +30 %: the interval holds how far runs differ, the
    // gate does not fire, and the odd run is named beside the verdict.
    let c = exitlab(&["compare", &before, &odd]);
    assert_eq!(c.status.code(), Some(0), "{}", stdout(&c));
    let out = stdout(&c);
    let row = out.lines().find(|l| l.starts_with("outl_to_user")).unwrap();
    assert!(row.ends_with("inconclusive"), "{row}");
    assert!(
        out.contains("sign: odd runs (over 5% from their side's median run): outl_to_user after"),
        "{out}"
    );
    assert!(out.contains("odd/run1.json"), "{out}");
    // A single file against a directory is a comparison of runs too: one run is too few,
    // and the gate fails closed.
    let c = exitlab(&["compare", a.to_str().unwrap(), &slow]);
    assert_eq!(c.status.code(), Some(12), "{}", stdout(&c));
    let out = stdout(&c);
    assert!(
        out.contains("1 and 3 runs; at least 3 a side are needed"),
        "{out}"
    );
    // A directory of one run is a set of runs, not a file: the same.
    let one = side("one", &[1.0]);
    let c = exitlab(&["compare", &one, &slow]);
    assert_eq!(c.status.code(), Some(12), "{}", stdout(&c));
    let c = exitlab(&["compare", "--accept-no-verdict", &one, &slow]);
    assert_eq!(c.status.code(), Some(0), "{}", stdout(&c));
    // A run counted twice (two files with the same bytes) is refused: its zero spread
    // would narrow the interval.
    let twice = side("twice", &[1.0, 1.01]);
    std::fs::copy(
        dir.join("twice").join("run0.json"),
        dir.join("twice").join("run2.json"),
    )
    .unwrap();
    let t = exitlab(&["compare", &twice, &before]);
    assert_eq!(t.status.code(), Some(2), "{}", stdout(&t));
    assert!(
        stderr(&t).contains("are the same run, byte for byte"),
        "{}",
        stderr(&t)
    );
    // Refusals: an empty directory, and an A/B run as a side.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = exitlab(&["compare", &before, empty.to_str().unwrap()]);
    assert_eq!(e.status.code(), Some(2));
    assert!(
        stderr(&e).contains("holds no results file (*.json)"),
        "{}",
        stderr(&e)
    );
    let ab = dir.join("ab.json");
    edit_json(&a, &ab, |v| {
        v["ab"] = serde_json::json!({"knob": "warmup", "a": "200", "b": "201", "b_tests": v["tests"].clone(), "order": []});
    });
    let e = exitlab(&["compare", a.to_str().unwrap(), ab.to_str().unwrap()]);
    assert_eq!(e.status.code(), Some(2));
    assert!(
        stderr(&e).contains("is an A/B run (bench --ab)"),
        "{}",
        stderr(&e)
    );
}

#[test]
fn bench_runs_writes_one_file_per_run_that_compare_reads_as_runs() {
    let dir = tempdir_named("runs");
    let d = dir.join("build-a");
    // `bench --runs N --json DIR` of one short test, the way each run here is taken.
    let runs = |n: &str, dir: &std::path::Path| {
        exitlab(&[
            "bench",
            "--tests",
            "cpuid",
            "--samples",
            "30",
            "--rounds",
            "5",
            "--ring",
            "3",
            "--runs",
            n,
            "--quiet",
            "--json",
            dir.to_str().unwrap(),
        ])
    };
    // A run into a directory that must be refused before anything runs.
    let refused_into = |dir: &std::path::Path| {
        exitlab(&[
            "bench",
            "--tests",
            "cpuid",
            "--runs",
            "1",
            "--json",
            dir.to_str().unwrap(),
        ])
    };
    let o = runs("3", &d);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut files: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["run-01.json", "run-02.json", "run-03.json"]);
    let out = stdout(&o);
    assert!(out.contains("3 runs; each run's figure"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("cpuid"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(".."), "a 95% interval over the runs: {row}");
    // More runs of the same build go into the same directory, numbered on.
    let again = runs("1", &d);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        d.join("run-04.json").exists(),
        "{:?}",
        std::fs::read_dir(&d).unwrap().count()
    );
    assert!(
        stdout(&again).contains("4 runs; each run's figure"),
        "{}",
        stdout(&again)
    );
    // A run of another kernel in the directory: refused before anything runs, naming it.
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run-04.json")).unwrap()).unwrap();
    other["host"]["build_ids"]["kernel"] = serde_json::json!("00000000deadbeef");
    let odir = tempdir_named("runs-other");
    std::fs::write(odir.join("run-01.json"), other.to_string()).unwrap();
    let refused = refused_into(&odir);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("holds runs of another build")
            && stderr(&refused).contains("kernel"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        std::fs::read_dir(&odir).unwrap().count(),
        1,
        "nothing written"
    );
    // A file there that is not a results file: refused too.
    std::fs::write(odir.join("run-01.json"), "{}").unwrap();
    let refused = refused_into(&odir);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("is not a results file"),
        "{}",
        stderr(&refused)
    );
    // The directory against itself: runs as units, every test judged, the gate passes.
    let c = exitlab(&["compare", d.to_str().unwrap(), d.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(0), "{}", stdout(&c));
    assert!(stdout(&c).contains("gate: passes"), "{}", stdout(&c));
}

#[test]
fn ab_run_gives_medians_changes_and_verdicts_and_the_seed_table() {
    let dir = tempdir_named("ab");
    let p = dir.join("ab.json");
    let o = exitlab(&[
        "bench",
        "--tests",
        "outl_to_user",
        "--samples",
        "150",
        "--ring",
        "3",
        "--ab",
        "batch=1,4",
        "--rounds",
        "6",
        "--format",
        "seed",
        "--json",
        p.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    // The gate fires (4) only where the model's verdict under the table is slower.
    let slower = out
        .lines()
        .any(|l| l.starts_with("outl_to_user: change B vs A") && l.ends_with("slower"));
    let code = o.status.code();
    assert!(
        code == Some(0) || (code == Some(4) && slower),
        "{code:?} {}{out}",
        stderr(&o)
    );
    assert!(out.contains("outl_to_user batch=1"), "{out}");
    assert!(out.contains("Average"), "{out}");
    assert!(out.contains("%Reduction"), "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .count(),
        6,
        "{out}"
    );
    let v = common::read_results(&p);
    assert_eq!(v["ab"]["knob"], "batch");
    assert_eq!(v["ab"]["order"][0], serde_json::json!(["a", "b"]));
    assert_eq!(v["ab"]["order"][1], serde_json::json!(["b", "a"]));
    let b = v["ab"]["b_tests"].as_array().unwrap();
    let outl = b.iter().find(|t| t["name"] == "outl_to_user").unwrap();
    assert_eq!(outl["rounds"].as_array().unwrap().len(), 6);
    assert_eq!(outl["batch"], 4);
    assert_eq!(outl["exit_check"]["passed"], true);
    // The report prints the A/B table with a verdict per test.
    let r = exitlab(&["report", p.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let out = stdout(&r);
    let ab_part = &out[out.find("A/B: batch = 1 (A) vs 4 (B)").expect("A/B table")..];
    let row = ab_part
        .lines()
        .find(|l| l.starts_with("outl_to_user"))
        .unwrap();
    assert!(
        ["faster", "slower", "equivalent", "inconclusive"]
            .iter()
            .any(|v| row.ends_with(v)),
        "{row}"
    );
    // Six pairs, every one.
    assert!(row.contains(" 6 ") && row.contains('%'), "{row}");
    // Unknown knobs and bad values are refused before anything runs.
    let bad = exitlab(&["bench", "--ab", "nosuchknob=1,2"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("unknown knob 'nosuchknob'"),
        "{}",
        stderr(&bad)
    );
    let bad = exitlab(&["bench", "--format", "seed"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// `bench --tests cpuid,inl_from_user --ab AB --rounds 2` with `args`, the known-answer
/// controls' A/B run (`tag` names its directory): the results file it wrote.
fn known_answer_ab(tag: &str, args: &[&str], ab: &str) -> serde_json::Value {
    let dir = tempdir_named(tag);
    let p = dir.join("ab.json");
    let mut all = vec!["bench", "--tests", "cpuid,inl_from_user", "--ab", ab];
    all.extend_from_slice(args);
    // Two pairs are too few for a verdict: accepted, these tests check the records.
    all.extend([
        "--rounds",
        "2",
        "--accept-no-verdict",
        "--json",
        p.to_str().unwrap(),
    ]);
    let o = exitlab(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    common::read_results(&p)
}

/// Test `name` of side `side` ("a" or "b") of an A/B results file.
fn ab_side_test(v: &serde_json::Value, side: &str, name: &str) -> serde_json::Value {
    let tests = if side == "a" {
        &v["tests"]
    } else {
        &v["ab"]["b_tests"]
    };
    let t = tests.as_array().unwrap().iter().find(|t| t["name"] == name);
    t.unwrap().clone()
}

/// The notes of a results file that start with `prefix`.
fn notes_starting<'a>(v: &'a serde_json::Value, prefix: &str) -> Vec<&'a str> {
    let notes = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str());
    notes.filter(|n| n.starts_with(prefix)).collect()
}

#[test]
fn guest_cycles_ab_records_its_calibration_and_leaves_exits_and_userspace_tests_alone() {
    let v = known_answer_ab(
        "guest-cycles",
        &["--samples", "200", "--ring", "3"],
        "guest-cycles=0,50000",
    );
    assert_eq!(v["ab"]["knob"], "guest-cycles");
    let side = |key: &str, name: &str| ab_side_test(&v, key, name);
    // The work changes no exit: both sides pass the same exit check with the same counts.
    for name in ["cpuid", "inl_from_user"] {
        let (a, b) = (side("a", name), side("b", name));
        assert_eq!(a["exit_check"]["passed"], true, "{name}");
        assert_eq!(b["exit_check"]["passed"], true, "{name}");
        assert_eq!(a["exits"], b["exits"], "{name}");
    }
    // Side B's empty loop carries the calibration round by round; side A's none.
    let calibration: Vec<f64> = side("b", "loop_overhead")["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["net_median"].as_f64().unwrap())
        .collect();
    assert_eq!(calibration.len(), 2);
    assert!(
        calibration.iter().all(|&c| c >= 50_000.0),
        "{calibration:?}"
    );
    assert!(side("a", "loop_overhead")["rounds"][0]["net_median"].is_null());
    let note = notes_starting(&v, "guest work");
    assert_eq!(note.len(), 1, "one note for the experiment: {note:?}");
    assert!(
        note[0].contains("nothing with guest-cycles=0") && note[0].contains("true change"),
        "{}",
        note[0]
    );
    // Out-of-range values are refused before anything runs, as a flag and in --ab.
    for args in [
        &["bench", "--guest-cycles", "100000001"][..],
        &["bench", "--ab", "guest-cycles=0,100000001"][..],
    ] {
        let bad = exitlab(args);
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
        assert!(stderr(&bad).contains("100000000"), "{}", stderr(&bad));
    }
}

#[test]
fn inject_cycles_ab_records_what_the_vmm_waits_added() {
    const N: u64 = 200_000;
    let v = known_answer_ab(
        "inject-cycles",
        &["--samples", "40"],
        &format!("inject-cycles=0,{N}"),
    );
    let test = |side: &str, name: &str| ab_side_test(&v, side, name);
    // Side A waited nowhere and records nothing; on side B the userspace-handled test
    // recorded one wait per port read of both rounds (warm-up included, as its exit
    // counts are) but for every other one of the first 64 of each round's 200 warm-up
    // reads, which the control left without a wait to calibrate itself where it waits;
    // each about N (calibrated to N on average; one can count a little under it, and no
    // less than N - 1,000: the calibration shortens a spin by at most 1,000 cycles); the
    // kernel-handled one none.
    for name in ["cpuid", "inl_from_user"] {
        assert!(test("a", name).get("injected").is_none(), "{name}");
    }
    let user = test("b", "inl_from_user");
    let w = &user["injected"];
    let waits = w["waits"].as_u64().unwrap();
    let rounds = user["rounds"].as_array().unwrap().len() as u64;
    let unwaited = w["unwaited"].as_u64().unwrap();
    assert_eq!(
        waits + unwaited,
        user["exits"]["io_in"].as_u64().unwrap(),
        "{w}"
    );
    // Where a wait costs far more than its spin (an emulated CPU: the L1 guest of hosts
    // without /dev/kvm), the warm calibration is not used, nor this one; the note says
    // which.
    let notes = notes_starting(&v, "injected waits");
    let warm_only = notes
        .iter()
        .any(|n| n.contains("calibrated in a warm loop only"));
    assert_eq!(
        unwaited,
        if warm_only { 0 } else { rounds * 32 },
        "{w} {notes:?}"
    );
    // One calibration where the waits are made per VM (a round's), used unless the note
    // says in how many it was not.
    let in_situ = w["in_situ"].as_u64().unwrap();
    assert_eq!(in_situ, if warm_only { 0 } else { rounds }, "{w}");
    // Each of them ran to its end within the 200 warm-up reads, and the tests without a
    // userspace exit (cpuid, the empty loop) began none: none was cut short, and the
    // note says of none that a run ended within it.
    for t in v["ab"]["b_tests"].as_array().unwrap() {
        let cut = &t["injected"]["in_situ_cut"];
        assert!(cut.is_null() || *cut == 0, "{}: {t}", t["name"]);
    }
    assert_eq!(test("b", "cpuid")["injected"]["in_situ_cut"], 0);
    assert!(
        !notes.iter().any(|n| n.contains("the run ended")),
        "{notes:?}"
    );
    let unused = w["in_situ_unused"].as_u64().unwrap();
    assert!(
        unused == 0
            || notes
                .iter()
                .any(|n| n.contains(&format!("in {unused} of the {in_situ} VMs"))),
        "{w} {notes:?}"
    );
    assert!(w["min"].as_u64().unwrap() >= N - 1_000, "{w}");
    assert!(w["spun"].as_u64().unwrap() >= waits * (N - 1_000), "{w}");
    assert_eq!(test("b", "cpuid")["injected"]["waits"], 0);
    // One note for the experiment, with the true change beside the nominal one.
    let notes = notes_starting(&v, "injected waits");
    assert_eq!(notes.len(), 1, "one note for the experiment: {notes:?}");
    assert!(
        notes[0].contains("inject-cycles 0: no wait")
            && notes[0].contains("cycles more (nominal +200,000"),
        "{}",
        notes[0]
    );
}

/// Runs `cmd` with `text` on its standard input and returns its output; fails the
/// calling test, saying `missing`, when the program cannot be started.
fn fed(cmd: &mut Command, text: &str, missing: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?} ({e}): {missing}", cmd.get_program()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Parses `text` with Python: `openmetrics` with the Prometheus client's OpenMetrics
/// parser and its parser of the older text format 0.0.4 (what node_exporter's textfile
/// collector and the Pushgateway read), from Debian's python3-prometheus-client, which
/// .ci/run installs; `csv` with the
/// standard library's reader; returns what was found, or fails the test with the
/// parser's error. A missing parser fails the test: it does not skip.
fn python_parse(format: &str, text: &str) -> String {
    let script = match format {
        "openmetrics" => {
            "import sys\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
             from prometheus_client.parser import text_string_to_metric_families as text_0_0_4\n\
             text = sys.stdin.read()\n\
             fams = list(text_string_to_metric_families(text))\n\
             n = sum(len(f.samples) for f in fams)\n\
             old = list(text_0_0_4(text))\n\
             assert sum(len(f.samples) for f in old) == n, 'text format 0.0.4 reads otherwise'\n\
             print(f'{len(fams)} families, {n} samples')\n"
        }
        "openmetrics-families" => {
            "import sys, json\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
             fams = list(text_string_to_metric_families(sys.stdin.read()))\n\
             print(json.dumps([{'name': f.name, 'type': f.type, 'unit': f.unit, 'samples': \
             [{'name': s.name, 'labels': s.labels, 'value': s.value} for s in f.samples]} for f in fams]))\n"
        }
        _ => {
            "import sys, csv\n\
             rows = list(csv.reader(sys.stdin))\n\
             widths = sorted({len(r) for r in rows})\n\
             print(f'{len(rows)} rows of {\",\".join(map(str, widths))} fields')\n"
        }
    };
    let python = common::python_with(
        "import prometheus_client.openmetrics.parser",
        "the Prometheus client: this test needs it to check the OpenMetrics output \
         (apt-get install python3-prometheus-client; .ci/run installs it)",
    );
    let o = fed(
        Command::new(python).args(["-c", script]),
        text,
        "python3 runs",
    );
    assert!(
        o.status.success(),
        "the {format} parser refused the output: {}\n{text}",
        stderr(&o)
    );
    stdout(&o).trim().to_string()
}

/// The metric families of an OpenMetrics text as Prometheus' OpenMetrics parser reads
/// them: `[{"name", "type", "unit", "samples": [{"name", "labels", "value"}]}]`.
fn metric_families(text: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(&python_parse("openmetrics-families", text)).unwrap()
}

/// Checks `text` with Prometheus' `promtool check metrics`: the text-format 0.0.4 parser
/// that node_exporter's textfile collector and the Pushgateway read with, and its
/// linter. Fails (does not skip) without promtool (Debian's prometheus package, which
/// .ci/run installs).
fn promtool_check(text: &str) {
    let o = fed(
        Command::new("promtool").args(["check", "metrics"]),
        text,
        "this test checks the OpenMetrics output with promtool \
         (apt-get install prometheus; .ci/run installs it)",
    );
    assert!(
        o.status.success(),
        "promtool check metrics refused the output: {}{}\n{text}",
        stdout(&o),
        stderr(&o)
    );
}

/// The value of the label `name` on the first sample line of family `family`.
fn label_of<'a>(text: &'a str, family: &str, name: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{family}{{")))
        .unwrap_or_else(|| panic!("no {family}: {text}"));
    let at = line
        .find(&format!("{name}=\""))
        .unwrap_or_else(|| panic!("no {name}: {line}"))
        + name.len()
        + 2;
    &line[at..at + line[at..].find('"').unwrap()]
}

#[test]
fn report_formats_csv_openmetrics_and_html() {
    let dir = tempdir_named("formats");
    let a = small_run(&dir, "a.json", &[]);
    let a_s = a.to_str().unwrap();
    let csv = exitlab(&["report", "--format", "csv", a_s]);
    assert_eq!(csv.status.code(), Some(0), "{}", stderr(&csv));
    let text = stdout(&csv);
    assert!(
        text.starts_with("file,side,test,ring,batch,status"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 4, "header and three tests: {text}");
    assert_eq!(python_parse("csv", &text), "4 rows of 21 fields", "{text}");
    // Each row gives its test's iterations per sample.
    for (test, batch) in [("cpuid", 4), ("outl_to_user", 1)] {
        assert!(
            text.contains(&format!(",{test},3,{batch},ok,")),
            "{test}: {text}"
        );
    }
    let om = exitlab(&["report", "--format", "openmetrics", a_s]);
    let text = stdout(&om);
    assert!(text.ends_with("# EOF\n"), "{text}");
    // The run is named by its own id, not by the path as typed.
    let run = label_of(&text, "exitlab_run_info", "run").to_string();
    assert!(!text.contains(a_s) && !text.contains("a.json"), "{text}");
    assert!(
        text.contains(&format!(
            "exitlab_exit_net_median_cycles{{run=\"{run}\",test=\"cpuid\",ring=\"3\",apic=\"xapic\",host=\""
        )),
        "{text}"
    );
    // Each series names its test's iterations per sample: cpuid's figure is from batches
    // of 4, outl_to_user's from single exits.
    for (test, batch) in [("cpuid", 4), ("outl_to_user", 1)] {
        let series = text
            .lines()
            .find(|l| {
                l.starts_with("exitlab_exit_net_median_cycles{")
                    && l.contains(&format!("test=\"{test}\""))
            })
            .unwrap_or_else(|| panic!("{test}: {text}"));
        assert!(series.contains(&format!(",batch=\"{batch}\"")), "{series}");
    }
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    let families = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        python_parse("openmetrics", &text),
        format!("{families} families, {samples} samples")
    );
    promtool_check(&text);
    // The same file named otherwise, or a copy of it: the same series.
    let copy = dir.join("copy.json");
    std::fs::copy(&a, &copy).unwrap();
    let other_path = format!("{}/./a.json", dir.display());
    for name in [other_path.as_str(), copy.to_str().unwrap()] {
        let o = exitlab(&["report", "--format", "openmetrics", name]);
        assert_eq!(stdout(&o), text, "{name}");
    }
    // Several files (one of them twice): every run keeps its own labels, a file given
    // twice is one run, two plain files are compared as a screen that cannot gate, and
    // both of Prometheus' parsers take it.
    let b = small_run(&dir, "b.json", &[]);
    let om = exitlab(&[
        "report",
        "--format",
        "openmetrics",
        a_s,
        b.to_str().unwrap(),
        &other_path,
    ]);
    assert_eq!(om.status.code(), Some(0), "{}", stderr(&om));
    let text = stdout(&om);
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    let families = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        python_parse("openmetrics", &text),
        format!("{families} families, {samples} samples"),
        "{text}"
    );
    promtool_check(&text);
    let runs: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("exitlab_run_info{"))
        .map(|l| l.split('"').nth(1).unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "{text}");
    assert!(runs.contains(run.as_str()), "{text}");
    assert!(!text.contains("#2\""), "{text}");
    assert!(
        text.contains("design=\"screen\"") && text.contains("outcome=\"cannot_gate\"} 1\n"),
        "{text}"
    );
    let csv = exitlab(&["report", "--format", "csv", a_s, b.to_str().unwrap()]);
    assert_eq!(python_parse("csv", &stdout(&csv)), "7 rows of 21 fields");
    // Markdown: every table row has as many cells as its header.
    let md = stdout(&exitlab(&["report", "--format", "md", a_s]));
    let mut rows = md.lines().filter(|l| l.starts_with('|'));
    let cells = |l: &str| l.matches('|').count();
    let header = rows.next().expect("a Markdown table");
    assert!(rows.all(|r| cells(r) == cells(header)), "{md}");
    // A stuck test: one line in the table; its registers only with -v.
    let stuck = dir.join("stuck.json");
    edit_json(&a, &stuck, |v| {
        let t = &mut v["tests"][1];
        t["status"] = "did_not_complete".into();
        t["reason"] = "no progress for 3.0 s\nvCPU registers when stopped:\nrip=0x100883".into();
        t["cycles"] = serde_json::Value::Null;
    });
    let r = exitlab(&["report", stuck.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    assert!(
        stdout(&r).contains("no progress for 3.0 s (registers and stack"),
        "{}",
        stdout(&r)
    );
    assert!(!stdout(&r).contains("rip=") && !stderr(&r).contains("rip="));
    let r = exitlab(&["-v", "report", stuck.to_str().unwrap()]);
    assert!(stderr(&r).contains("rip=0x100883"), "{}", stderr(&r));
    let html = dir.join("r.html");
    let h = exitlab(&["report", a_s, a_s, "-o", html.to_str().unwrap()]);
    assert_eq!(h.status.code(), Some(0), "{}", stderr(&h));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<figure class=\"cdf\"").count(), 3);
    assert!(!page.contains("<script"));
}

#[test]
fn report_openmetrics_of_two_ab_runs_has_quantiles_an_info_metric_verdicts_and_the_gate() {
    let dir = tempdir_named("om-ab");
    // Two small A/B runs; bench exits 0, 4 (the gate fires) or 12 (no verdict).
    let mut runs = Vec::new();
    for (name, knob) in [("ab1.json", "batch=1,2"), ("ab2.json", "warmup=200,201")] {
        let (code, out, v) = planned_run(&dir, name, &["--rounds", "5", "--ab", knob]);
        assert!(matches!(code, Some(0 | 4 | 12)), "{code:?}: {out}");
        runs.push((dir.join(name), code, v));
    }
    let names: Vec<&str> = runs.iter().map(|r| r.0.to_str().unwrap()).collect();
    let om = exitlab(&["report", "--format", "openmetrics", names[0], names[1]]);
    assert_eq!(om.status.code(), Some(0), "{}", stderr(&om));
    let text = stdout(&om);
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        python_parse("openmetrics", &text),
        format!("{types} families, {samples} samples")
    );
    promtool_check(&text);
    let families = metric_families(&text);
    let family = |name: &str| -> &serde_json::Value {
        families
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no family {name}: {text}"))
    };
    let samples_of = |name: &str| family(name)["samples"].as_array().unwrap().clone();
    // The info metric: one per run, value 1, saying what the run is and whether its
    // figures are hardware figures.
    let info = samples_of("exitlab_run_info");
    assert_eq!(info.len(), 2, "{text}");
    let mut ids = Vec::new();
    for (s, (_, _, v)) in info.iter().zip(&runs) {
        assert_eq!(s["value"], 1.0, "{s}");
        let l = &s["labels"];
        for key in [
            "version",
            "revision",
            "kernel",
            "host_kind",
            "started",
            "ab_knob",
        ] {
            assert!(l[key].as_str().is_some_and(|x| !x.is_empty()), "{key}: {s}");
        }
        let kind = v["host"]["virtualization"]["kind"].as_str().unwrap();
        assert_eq!(l["host_kind"], kind, "{s}");
        let hardware = if kind == "bare_metal" { "yes" } else { "no" };
        assert_eq!(l["hardware_figures"], hardware, "{s}");
        assert_eq!(l["ab_knob"], v["ab"]["knob"], "{s}");
        ids.push(l["run"].as_str().unwrap().to_string());
    }
    assert_ne!(ids[0], ids[1]);
    // Percentiles as a summary's quantiles, on both sides of both runs.
    assert_eq!(family("exitlab_exit_cycles")["type"], "summary");
    assert_eq!(family("exitlab_exit_cycles")["unit"], "cycles");
    let cycles = samples_of("exitlab_exit_cycles");
    for id in &ids {
        let mut sides = std::collections::BTreeSet::new();
        for q in ["0.1", "0.5", "0.9", "0.99"] {
            let hits: Vec<&serde_json::Value> = cycles
                .iter()
                .filter(|s| s["labels"]["run"] == id.as_str() && s["labels"]["quantile"] == q)
                .collect();
            assert!(!hits.is_empty(), "{id} {q}: {text}");
            sides.extend(hits.iter().map(|s| s["labels"]["side"].to_string()));
        }
        assert_eq!(sides.len(), 2, "{id}: {sides:?}");
    }
    for name in [
        "exitlab_exit_mean_cycles",
        "exitlab_exit_net_median_cycles",
        "exitlab_exit_net_median_ci95_lower_cycles",
        "exitlab_exit_net_median_ci95_upper_cycles",
    ] {
        assert!(!samples_of(name).is_empty(), "{name}");
        assert!(
            samples_of(name)
                .iter()
                .all(|s| s["labels"]["quantile"].is_null()),
            "{name}"
        );
    }
    // Each test of each run has exactly one verdict, and each run's gate one outcome:
    // the one bench exited with.
    let verdicts = samples_of("exitlab_change_verdict");
    let gates = samples_of("exitlab_gate");
    for (id, (_, code, v)) in ids.iter().zip(&runs) {
        let mine: Vec<&serde_json::Value> = verdicts
            .iter()
            .filter(|s| s["labels"]["run"] == id.as_str())
            .collect();
        let tests: std::collections::BTreeSet<String> = mine
            .iter()
            .map(|s| s["labels"]["test"].as_str().unwrap().to_string())
            .collect();
        assert!(tests.len() >= 2, "{id}: {tests:?}");
        for t in &tests {
            let on: Vec<&&serde_json::Value> = mine
                .iter()
                .filter(|s| s["labels"]["test"] == t.as_str() && s["value"] == 1.0)
                .collect();
            assert_eq!(on.len(), 1, "{id} {t}: {mine:?}");
        }
        let outcome: Vec<&str> = gates
            .iter()
            .filter(|s| s["labels"]["run"] == id.as_str() && s["value"] == 1.0)
            .map(|s| s["labels"]["outcome"].as_str().unwrap())
            .collect();
        let want = match code {
            Some(4) => "fires",
            Some(12) => "no_verdict",
            _ => "passes",
        };
        assert_eq!(outcome, [want], "{id} (bench exited {code:?}): {text}");
        assert_eq!(
            gates
                .iter()
                .find(|s| s["labels"]["run"] == id.as_str())
                .unwrap()["labels"]["a"],
            format!(
                "{}={}",
                v["ab"]["knob"].as_str().unwrap(),
                v["ab"]["a"].as_str().unwrap()
            )
        );
    }
    for name in [
        "exitlab_change_ratio",
        "exitlab_change_ci95_lower_ratio",
        "exitlab_change_ci95_upper_ratio",
        "exitlab_change_min_detectable_ratio",
    ] {
        assert!(!samples_of(name).is_empty(), "{name}: {text}");
    }
}

#[test]
fn report_o_writes_the_format_its_extension_names_and_refuses_a_contradicting_format() {
    let dir = tempdir_named("report-o");
    let a = small_run(&dir, "a.json", &[]);
    let a_s = a.to_str().unwrap();
    let write = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut args = vec!["report", a_s, "-o", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        (exitlab(&args), out)
    };
    // What each format starts or ends with, as stdout gives it with --format.
    let md = stdout(&exitlab(&["report", "--format", "md", a_s]));
    for (name, format) in [
        ("r.md", "md"),
        ("r.csv", "csv"),
        ("r.prom", "openmetrics"),
        ("r.om", "openmetrics"),
        ("r.html", "html"),
        ("r.txt", "text"),
    ] {
        let (o, out) = write(name, &[]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let text = std::fs::read_to_string(&out).unwrap();
        let expected = stdout(&exitlab(&["report", "--format", format, a_s]));
        if format == "html" {
            assert!(text.starts_with("<!DOCTYPE html>"), "{name}: {text}");
        } else {
            assert_eq!(text, expected, "{name} is not {format}");
        }
        if format == "md" {
            assert_eq!(text, md);
            assert!(text.lines().any(|l| l.starts_with("| ")), "{text}");
        }
    }
    // --format that agrees with the extension, or an extension that names no format.
    let (o, _) = write("agree.csv", &["--format", "csv"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (o, out) = write("notes.txt", &["--format", "md"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(out).unwrap(), md);
    // --format that contradicts the extension: refused, nothing written.
    for (name, extra) in [
        ("bad.md", &["--format", "csv"][..]),
        ("bad.html", &["--format", "text"]),
        ("bad.csv", &["--markdown"]),
        ("bad.prom", &["--format", "html"]),
    ] {
        let (o, out) = write(name, extra);
        assert_eq!(o.status.code(), Some(2), "{name} {extra:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.starts_with("exitlab: ") && e.contains("contradicts") && e.contains(name),
            "{e}"
        );
        assert!(!out.exists(), "{name} was written");
    }
}

#[test]
fn schema_prints_the_published_schema_which_takes_what_bench_writes_and_nothing_retyped() {
    let published = std::fs::read_to_string(common::results_schema()).unwrap();
    let o = exitlab(&["schema"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        published,
        "exitlab schema is not docs/results.schema.json"
    );
    let dir = tempdir_named("schema");
    let out = dir.join("s.json");
    let o = exitlab(&["schema", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), published);
    let v: serde_json::Value = serde_json::from_str(&published).unwrap();
    assert_eq!(v["$id"], "urn:exitlab:results:schema:3");
    assert_eq!(v["properties"]["schema_version"]["const"], 3);
    // What bench writes matches it (small_run checks it too) ...
    let a = small_run(&dir, "a.json", &[]);
    let good = std::fs::read(&a).unwrap();
    let v = common::results_json(&good, "a.json");
    // ... fields exitlab does not know yet are allowed (an optional field added later) ...
    let mut extra = v.clone();
    extra["tests"][1]["a_field_added_later"] = serde_json::json!({"x": 1});
    assert_eq!(
        common::results_schema_errors(&serde_json::to_vec(&extra).unwrap()),
        None
    );
    // ... and what it would not write is refused, naming the field.
    for (edit, field) in [
        (
            Box::new(|v: &mut serde_json::Value| v["tests"][1]["cycles"]["median"] = "fast".into())
                as Box<dyn Fn(&mut serde_json::Value)>,
            "tests/1/cycles :",
        ),
        (
            Box::new(|v| v["schema_version"] = 4.into()),
            "schema_version",
        ),
        (
            Box::new(|v| v["tests"][1]["status"] = "maybe".into()),
            "tests/1",
        ),
        (
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("tests");
            }),
            "(the file)",
        ),
        (
            Box::new(|v| v["config"]["ring"] = (-1).into()),
            "config/ring",
        ),
    ] {
        let mut bad = v.clone();
        edit(&mut bad);
        let errors = common::results_schema_errors(&serde_json::to_vec(&bad).unwrap())
            .unwrap_or_else(|| panic!("{field}: the schema took a doctored file"));
        assert!(errors.contains(field), "{field}: {errors}");
    }
}

#[test]
fn sigint_during_a_multi_test_bench_keeps_the_completed_rounds() {
    common::require_kvm();
    let dir = tempdir_named("sigint");
    let p = dir.join("int.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_exitlab"))
        .args([
            "bench",
            "--ring",
            "3",
            "--samples",
            "20000",
            "--rounds",
            "40",
            "--json",
            p.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the progress line shows two tests done in the first round (a fixed
    // sleep was too short on a slow or loaded host). stderr is read on a thread of its own
    // and kept whole for the checks below.
    let mut err = child.stderr.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok(n @ 1..) = std::io::Read::read(&mut err, &mut buf) {
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let text = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        let done = text
            .split_once("round 1/40 ")
            .map_or(0, |(_, marks)| marks.chars().filter(|c| *c == '.').count());
        if done >= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "two tests of round 1 not done in 300 s: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // kill(1) rather than libc::kill, which would need an unsafe block here.
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let o = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let err = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        stdout(&o).contains("incomplete: interrupted during round"),
        "{}",
        stdout(&o)
    );
    assert!(err.contains("(marked incomplete)"), "{err}");
    let v = common::read_results(&p);
    assert!(
        v["incomplete"].as_str().unwrap().contains("interrupted"),
        "{v}"
    );
    let tests = v["tests"].as_array().unwrap();
    assert!(tests.len() > 1, "more than one test kept: {}", tests.len());
    let rounds = tests[0]["rounds"].as_array().unwrap().len();
    assert!((1..40).contains(&rounds), "{rounds} rounds kept");
    // The summary counts the tests that kept a round, not those with none.
    let with_rounds = tests
        .iter()
        .filter(|t| !t["rounds"].as_array().unwrap().is_empty())
        .count();
    assert!(
        v["incomplete"].as_str().unwrap().contains(&format!(
            "kept the {with_rounds} test(s) with at least one completed round"
        )),
        "{with_rounds} tests have rounds: {}",
        v["incomplete"]
    );
    // The progress lines explain their marks before the first round.
    assert!(
        err.contains("(one mark per test: . done, T did not complete"),
        "{err}"
    );
    let r = exitlab(&["report", p.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    assert!(
        stdout(&r).contains("incomplete: interrupted"),
        "{}",
        stdout(&r)
    );
}

/// Runs exitlab with standard output going to /dev/full, where every write fails.
fn exitlab_to_full_disk(args: &[&str]) -> Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full exists on Linux");
    Command::new(env!("CARGO_BIN_EXE_exitlab"))
        .args(args)
        .stdout(full)
        .output()
        .expect("the exitlab binary runs")
}

#[test]
fn standard_output_that_cannot_be_written_exits_10_with_one_line() {
    for args in [
        &["bench", "--list"][..],
        &["man"],
        &["host", "--json"],
        &["host"],
    ] {
        let o = exitlab_to_full_disk(args);
        assert_eq!(o.status.code(), Some(10), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("No space left on device"), "{args:?}: {e}");
        assert!(
            !e.contains("panicked") && !e.contains("internal error"),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn json_without_a_file_goes_to_standard_output_alone() {
    // `host` needs no KVM for this: without it, it still describes the host (exit 6).
    let o = exitlab(&["host", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not only JSON ({e}): {}", stdout(&o)));
    let available = v["kvm"]["available"].as_bool().unwrap();
    assert_eq!(
        o.status.code(),
        Some(if available { 0 } else { 6 }),
        "{}",
        stderr(&o)
    );
    let dash = exitlab(&["host", "--json", "-"]);
    assert!(serde_json::from_slice::<serde_json::Value>(&dash.stdout).is_ok());

    // With a file: the text on standard output, the JSON in the file.
    let dir = tempdir_named("jsonfile");
    let f = dir.join("host.json");
    let o = exitlab(&["host", "--json", f.to_str().unwrap()]);
    assert!(stdout(&o).contains("KVM"), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
    assert!(v["schema_version"].is_number(), "{v}");
    assert!(
        stderr(&o).contains("host description written to"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_json_without_a_file_prints_only_the_results() {
    common::require_kvm();
    let o = exitlab(&[
        "bench",
        "--tests",
        "cpuid",
        "--samples",
        "30",
        "--rounds",
        "1",
        "--no-overhead",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = common::results_json(&o.stdout, "bench --json's standard output");
    assert_eq!(v["schema_version"], 3);
    assert_eq!(
        v["tests"].as_array().unwrap().len(),
        2,
        "loop_overhead and cpuid"
    );
}

#[test]
fn bench_timeout_keeps_the_completed_rounds_and_exits_124() {
    common::require_kvm();
    let dir = tempdir_named("timeout");
    let p = dir.join("t.json");
    let started = std::time::Instant::now();
    let o = exitlab(&[
        "bench",
        "--tests",
        "cpuid",
        "--samples",
        "100000",
        "--rounds",
        "1000",
        "--timeout",
        "2",
        "--json",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(124), "{}", stderr(&o));
    // It stops at the end of the test then running, not after the 1,000 rounds.
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
    let v = common::read_results(&p);
    let why = v["incomplete"].as_str().unwrap();
    assert!(
        why.starts_with("--timeout 2 s expired: interrupted during round"),
        "{why}"
    );
    assert!(
        stdout(&o).contains("incomplete: --timeout 2 s expired"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_host_that_refuses_file_descriptors_exits_8_saying_what_to_do() {
    common::require_kvm();
    let kernel = common::tempdir("fdlimit").join("conformance.elf");
    std::fs::write(&kernel, exitlab_guest::CONFORMANCE_PVH).unwrap();
    // Too few descriptors for 4 vCPUs and the platform's eventfds, enough to open the
    // kernel image and /dev/kvm: the host refuses the VM's setup.
    for limit in ["6", "8", "10", "12"] {
        let o = Command::new("prlimit")
            .arg(format!("--nofile={limit}"))
            .arg(env!("CARGO_BIN_EXE_exitlab"))
            .args(["run", "--cpus", "4", "--serial", "none", "--timeout", "30"])
            .arg(&kernel)
            .output()
            .expect("prlimit (util-linux) runs");
        assert_eq!(o.status.code(), Some(8), "nofile {limit}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("Too many open files"), "nofile {limit}: {e}");
        assert!(e.contains("ulimit -n"), "nofile {limit}: {e}");
    }
}

#[test]
fn run_help_lists_every_builtin_kernel() {
    let o = exitlab(&["run", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    for name in [
        "conformance",
        "conformance-flat",
        "conformance-pvh",
        "realmode",
        "harness",
        "chaos",
    ] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(&format!("- {name}:"))),
            "{name} missing from run --help:\n{out}"
        );
    }
    // Options that only chaos takes are refused for the others, and chaos refuses the
    // options it decides itself; neither opens KVM.
    for args in [
        &["run", "--builtin", "conformance", "--seed", "3"][..],
        &["run", "--builtin", "chaos", "--cmdline", "x"],
        &["run", "--builtin", "nosuch"],
        &["run", "--builtin", "harness", "kernel.elf"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn vcpu_filter_options_belong_to_the_subcommands_that_run_vcpus() {
    for (sub, has) in [
        ("bench", true),
        ("run", true),
        ("agree", true),
        ("compare", false),
        ("report", false),
        ("host", false),
        ("trace", false),
        ("completions", false),
    ] {
        let o = exitlab(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub}: {}", stderr(&o));
        let help = stdout(&o);
        for option in ["--no-seccomp", "--strict-ioctl"] {
            // An option of its own (trace's help may name run's, which --floor passes on).
            assert_eq!(
                help.lines()
                    .any(|l| l.split_whitespace().next() == Some(option)),
                has,
                "{sub} --help and {option}:\n{help}"
            );
        }
    }
    // Where they mean nothing they are refused, as any unknown option is.
    for args in [
        &["--no-seccomp", "host"][..],
        &["host", "--no-seccomp"],
        &["compare", "--strict-ioctl", "a.json", "b.json"],
        &["trace", "--no-seccomp", "--", "true"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("unexpected argument"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // Where they belong they still work, the one excluding the other.
    let o = exitlab(&["run", "--no-seccomp", "--builtin", "conformance"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("SUMMARY"), "{}", stdout(&o));
    let o = exitlab(&["bench", "--no-seccomp", "--strict-ioctl", "--list"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn run_help_lists_qemu_args_which_works_as_it_says() {
    let help = stdout(&exitlab(&["run", "--help"]));
    assert!(
        help.contains("--qemu-args [<QEMU-OPTIONS>...]")
            && help.contains("exitlab run --qemu-args -- QEMU-OPTIONS..."),
        "{help}"
    );
    // Right after `run` (taken before the parser), and after a global option (through it).
    for args in [
        &["run", "--qemu-args", "--", "-version"][..],
        &["-q", "run", "--qemu-args", "--", "-version"],
        &["run", "-q", "--qemu-args", "--", "-version"],
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(
            stdout(&o).starts_with("QEMU-compatible exitlab version"),
            "{args:?}: {}",
            stdout(&o)
        );
    }
    // Everything after it is QEMU's: exitlab's own run options do not go with it.
    let o = exitlab(&[
        "-q",
        "run",
        "--cpus",
        "2",
        "--qemu-args",
        "--",
        "-kernel",
        "k",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("'--cpus <CPUS>' cannot be used with '--qemu-args"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unknown_names_get_the_closest_known_one() {
    for (args, says) in [
        (
            &["bench", "--tests", "cpuid,inl_from_usr"][..],
            "unknown test 'inl_from_usr' (did you mean 'inl_from_user'?); `exitlab bench --list` lists the tests",
        ),
        (
            &["bench", "--ab", "apci=xapic,x2apic"],
            "--ab apci=xapic,x2apic: unknown knob 'apci' (did you mean 'apic'?); knobs: ring,",
        ),
        (
            &["run", "builtin:conformanc"],
            "there is no built-in kernel \"conformanc\" (did you mean 'conformance'?): choose one of",
        ),
        (
            &["run", "--builtin", "conformanc"],
            "tip: a similar value exists: 'conformance'",
        ),
        (&["benhc"], "tip: a similar subcommand exists: 'bench'"),
        (&["help", "benh"], "tip: a similar subcommand exists: 'bench'"),
        (&["help", "reprot"], "tip: a similar subcommand exists: 'report'"),
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    // The suggestion stands instead of the 40-odd test names; a name like none of them
    // still gets the list.
    let e = stderr(&exitlab(&["bench", "--tests", "inl_from_usr"]));
    assert!(!e.contains("smp_bringup"), "{e}");
    let e = stderr(&exitlab(&["bench", "--tests", "nosuchtest"]));
    assert!(
        !e.contains("did you mean") && e.contains("smp_bringup"),
        "{e}"
    );
}

#[test]
fn a_builtin_kernel_ending_through_debug_exit_says_value_status_and_rule() {
    common::require_kvm();
    let o = exitlab(&["run", "--builtin", "conformance", "--timeout", "120"]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(out.contains("SUMMARY "), "{out}\n{err}");
    // The kernel writes 0 when every test passed: exit status 1, QEMU's (0 << 1) | 1.
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {err}");
    for part in [
        "wrote 0 (0x0) to the debug-exit port 0xf4",
        "exit status 1 = (0 << 1) | 1",
        "isa-debug-exit",
    ] {
        assert!(lines[0].contains(part), "{part:?} not in {err}");
    }
    // --quiet keeps it off stderr; the status is the same.
    let o = exitlab(&["-q", "run", "--builtin", "realmode", "--timeout", "60"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("hello from real mode"),
        "{}",
        stdout(&o)
    );
    assert_eq!(stderr(&o), "");
}

/// The lines of `text` longer than the terminal reports' limit (characters, not bytes).
fn too_long(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.chars().count() > exitlab_results::format::MAX_LINE)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_line_of_every_terminal_report_fits_in_160_characters() {
    let dir = tempdir_named("line-length");
    let (a, out_a) = small_run_printing(&dir, "a.json", &[]);
    let (b, _) = small_run_printing(&dir, "b.json", &[]);
    let ab = dir.join("ab.json");
    let o = exitlab(&[
        "bench",
        "--tests",
        "cpuid,outl_to_user",
        "--samples",
        "60",
        "--ring",
        "3",
        "--rounds",
        "5",
        "--ab",
        "warmup=200,201",
        "--accept-no-verdict",
        "--json",
        ab.to_str().unwrap(),
    ]);
    let out_ab = stdout(&o);
    assert_eq!(
        out_ab.matches("not hardware figures").count(),
        usize::from(is_virtualized()),
        "the A/B table says its caveat once: {out_ab}"
    );
    let seed = stdout(&exitlab(&[
        "report",
        "--format",
        "text",
        ab.to_str().unwrap(),
    ]));
    let runs = dir.join("runs");
    let o = exitlab(&[
        "bench",
        "--tests",
        "cpuid",
        "--samples",
        "20",
        "--rounds",
        "5",
        "--ring",
        "3",
        "--runs",
        "3",
        "--json",
        runs.to_str().unwrap(),
    ]);
    let out_runs = stdout(&o);
    let (a_s, b_s, r_s) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        runs.to_str().unwrap(),
    );
    let outputs = [
        ("bench", out_a),
        ("bench --ab", out_ab),
        ("report of an A/B run", seed),
        ("bench --runs", out_runs),
        ("report", stdout(&exitlab(&["report", a_s, b_s]))),
        (
            "report --format md",
            stdout(&exitlab(&["report", "--format", "md", a_s, b_s])),
        ),
        (
            "compare of two files",
            stdout(&exitlab(&["compare", a_s, b_s])),
        ),
        (
            "compare of directories",
            stdout(&exitlab(&["compare", r_s, r_s])),
        ),
    ];
    for (what, text) in &outputs {
        assert!(!text.is_empty(), "{what} printed nothing");
        let long = too_long(text);
        assert!(
            long.is_empty(),
            "{what}: {} lines over 160 characters:\n{}",
            long.len(),
            long.join("\n")
        );
    }
}

#[test]
fn the_seed_table_gives_a_negative_reduction_for_a_known_slowdown_and_the_verdict_under_it() {
    let dir = tempdir_named("seed-sign");
    let ab = dir.join("ab.json");
    // Side B's VMM waits 200,000 cycles in every userspace exit: B is far slower.
    let o = exitlab(&[
        "bench",
        "--tests",
        "inl_from_user",
        "--samples",
        "30",
        "--rounds",
        "5",
        "--ab",
        "inject-cycles=0,200000",
        "--format",
        "seed",
        "--accept-no-verdict",
        "--json",
        ab.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert!(
        matches!(o.status.code(), Some(0) | Some(4)),
        "{}{out}",
        stderr(&o)
    );
    let header = out
        .lines()
        .find(|l| l.starts_with("run "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(header.contains("inl_from_user inject-cycles=0"), "{out}");
    let red = out
        .lines()
        .find(|l| l.starts_with("%Reduction"))
        .unwrap_or_else(|| panic!("{out}"));
    let cell = red.split_whitespace().last().unwrap();
    assert!(cell.starts_with('-') && cell.ends_with('%'), "{red}");
    // The averages carry thousands separators, and the model's change and verdict follow.
    let avg = out.lines().find(|l| l.starts_with("Average")).unwrap();
    assert!(avg.contains(','), "{avg}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("inl_from_user: change B vs A +") && l.ends_with("slower")),
        "{out}"
    );
    assert_eq!(
        out.matches("not hardware figures").count(),
        usize::from(is_virtualized()),
        "the caveat once: {out}"
    );
}

/// Whether this host's figures are not hardware figures (a VM, or paravirtual KVM).
fn is_virtualized() -> bool {
    let o = exitlab(&["host", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["virtualization"]["kind"]
        .as_str()
        .is_some_and(|k| k != "bare_metal")
}
