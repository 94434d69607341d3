//! The independent floor (`exitlab-floor`, a bare KVM_RUN loop in C) and the overhead
//! experiment of `exitlab bench` that compares `exitlab run` against it.
//!
//! The floor must run the harness kernel and count exactly the exits the guest makes.
//! bench runs the overhead experiment with the default suite or when asked for, records
//! its kernel-side comparison as fields consistent with each other, shows it as one
//! progress step, and stops it at `--timeout`, marking the results incomplete.
//!
//! These tests need /dev/kvm; those that read the comparison also need root and tracefs
//! (the experiment mounts it if needed), and fail saying so without them.
#![deny(unsafe_code)]

use std::process::Command;

use serde_json::Value;

mod common;

/// The harness kernel in a file of this test's own.
fn harness(name: &str) -> std::path::PathBuf {
    let p = common::tempdir(name).join("harness.elf");
    std::fs::write(&p, exitlab_guest::HARNESS).expect("writing the harness kernel");
    p
}

#[test]
fn the_floor_runs_the_harness_and_counts_exactly_its_exits() {
    common::require_kvm();
    let kernel = harness("floor-counts");
    let floor = exitlab_floor::path().expect("the floor program is available");
    let out = Command::new(&floor)
        .arg("--serial")
        .arg(&kernel)
        .arg("outs=1234 ins=567")
        .output()
        .expect("running exitlab-floor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The guest says what it did, on COM1, which the floor copied with --serial...
    assert!(
        stdout.contains("X outs=1234 ins=567 port=0x1234"),
        "{stdout}"
    );
    // ...and the floor counted exactly those exits, and the guest's exit value.
    let c = exitlab_floor::parse_counts(&stderr).expect("the floor's counts line");
    assert_eq!((c.ins, c.outs, c.debug_exit), (567, 1234, 0), "{stderr}");
    assert_eq!(c.seccomp, 0, "no filter unless asked: {stderr}");
    assert_eq!(
        c.serial as usize,
        stdout.len(),
        "one serial exit per byte the guest printed"
    );
    // With --seccomp the same run happens under the one-rule filter, which the kernel
    // reports at the end (mode 2: a filter).
    let filtered = Command::new(&floor)
        .args(["--seccomp"])
        .arg(&kernel)
        .arg("outs=12 ins=34")
        .output()
        .expect("running exitlab-floor --seccomp");
    let stderr = String::from_utf8_lossy(&filtered.stderr);
    assert_eq!(filtered.status.code(), Some(0), "{stderr}");
    let c = exitlab_floor::parse_counts(&stderr).expect("the floor's counts line");
    assert_eq!((c.ins, c.outs, c.seccomp), (34, 12, 2), "{stderr}");
    // A file that is no kernel is refused with status 2 before KVM is used.
    let bad = Command::new(&floor)
        .arg(floor.with_file_name("no-such-kernel"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

fn bench_json(extra: &[&str]) -> (Option<i32>, Value, String) {
    let dir = common::tempdir("floor-bench");
    // One file per set of options: the tests of this binary run at the same time.
    let p = dir.join(format!("r{}.json", extra.join("").replace('-', "_")));
    let mut args = vec![
        "bench",
        "--tests",
        "cpuid",
        "--samples",
        "30",
        "--rounds",
        "1",
        "--json",
        p.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    // Each run takes seconds to a minute or two (the overhead experiment); ten minutes
    // only guards against a hang.
    let o = common::exitlab_guarded(&args, std::time::Duration::from_secs(600));
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let v: Value = common::read_results(&p);
    (o.status.code(), v, stderr)
}

#[test]
fn bench_runs_the_overhead_experiment_only_with_the_default_suite_or_when_asked() {
    common::require_kvm();
    let (code, v, stderr) = bench_json(&[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(v["vmm_overhead"].is_null(), "--tests cpuid: not asked for");
    assert!(v["floor"].is_null());
    assert!(!stderr.contains("VMM overhead"), "{stderr}");
}

#[test]
fn bench_records_exitlab_against_the_floor_as_consistent_fields() {
    common::require_kvm();
    let (code, v, stderr) = bench_json(&["--overhead"]);
    assert_eq!(code, Some(0), "{stderr}");
    // One progress step for the whole experiment.
    assert_eq!(stderr.matches("VMM overhead").count(), 1, "{stderr}");
    let f = &v["floor"];
    assert_eq!(
        f["status"], "measured",
        "the kernel view needs root and tracefs: {f}"
    );
    let rounds = f["rounds"].as_u64().unwrap();
    let per_run = f["exits_per_run"].as_u64().unwrap();
    assert_eq!(rounds, u64::from(exitlab_lab::floor::ROUNDS));
    assert_eq!(per_run, exitlab_lab::floor::EXITS_PER_RUN);
    for side in ["exitlab", "floor", "filtered_floor"] {
        let s = &f[side];
        assert_eq!(s["exits"].as_u64(), Some(rounds * per_run), "{side}: {s}");
        assert_eq!(s["exits_expected"].as_u64(), Some(rounds * per_run));
        assert_eq!(s["user"]["n"].as_u64(), Some(rounds * per_run), "{side}");
        assert_eq!(s["round_medians"].as_array().unwrap().len() as u64, rounds);
        let (p10, med) = (
            s["user"]["p10"].as_f64().unwrap(),
            s["user"]["median"].as_f64().unwrap(),
        );
        assert!(0.0 < p10 && p10 <= med, "{side}: {s}");
    }
    assert!(f["exitlab"]["command"]
        .as_str()
        .unwrap()
        .starts_with("exitlab run"));
    assert!(f["floor"]["command"]
        .as_str()
        .unwrap()
        .starts_with("exitlab-floor"));
    assert!(f["filtered_floor"]["command"]
        .as_str()
        .unwrap()
        .starts_with("exitlab-floor --seccomp"));
    let ratio = |over: &str, q: &str| {
        f["exitlab"]["user"][q].as_f64().unwrap() / f[over]["user"][q].as_f64().unwrap()
    };
    for (field, q) in [("ratio_p10", "p10"), ("ratio_median", "median")] {
        let r = f[field].as_f64().unwrap();
        assert!((r - ratio("floor", q)).abs() < 1e-9, "{field} {r}");
    }
    for (i, q) in ["p10", "median"].into_iter().enumerate() {
        let r = f["ratio_filtered"][i].as_f64().unwrap();
        assert!((r - ratio("filtered_floor", q)).abs() < 1e-9, "{q} {r}");
    }
    assert_eq!(f["lost_events"], 0);
    // The in-process stamps stay, as a diagnostic.
    assert!(v["vmm_overhead"]["full"]["n"]
        .as_u64()
        .is_some_and(|n| n > 0));
    assert!(v["incomplete"].is_null());
}

#[test]
fn bench_timeout_covers_the_overhead_experiment() {
    common::require_kvm();
    // The limit must fall inside the experiment, after the test's round: time the round
    // alone first (process start included), and give the whole command three times that.
    // The experiment (ten runs of 100,000 exits) takes far longer on any host.
    let started = std::time::Instant::now();
    let (code, _, stderr) = bench_json(&["--no-overhead"]);
    assert_eq!(code, Some(0), "{stderr}");
    let limit = (3.0 * started.elapsed().as_secs_f64()).ceil().max(1.0) as u64;
    let limit_arg = limit.to_string();
    let (code, v, stderr) = bench_json(&["--overhead", "--timeout", &limit_arg]);
    assert_eq!(code, Some(124), "{stderr}");
    // The limit stopped the experiment, not the end of the command: its one progress
    // step ends as not completed, ...
    assert_eq!(
        stderr
            .matches(&format!(
                "{} did-not-complete",
                exitlab_lab::bench::OVERHEAD_LABEL
            ))
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.matches("VMM overhead").count(), 1, "{stderr}");
    // ... and the results say so and keep no figure of it.
    let why = v["incomplete"].as_str().expect("marked incomplete");
    assert!(
        why.starts_with(&format!(
            "--timeout {limit} s expired: interrupted during the VMM overhead experiment"
        )),
        "{why}"
    );
    assert!(v["floor"].is_null(), "no figures from a cut experiment");
    assert!(
        v["vmm_overhead"].is_null(),
        "no figures from a cut experiment"
    );
    assert_eq!(
        v["tests"].as_array().unwrap().len(),
        2,
        "the suite's tests are kept"
    );
}

#[test]
#[should_panic(expected = "the hang guard")]
fn the_hang_guard_kills_a_run_that_outlasts_it() {
    common::require_kvm();
    // The default suite and the overhead experiment run for minutes, far beyond a
    // one-second guard.
    let json = common::tempdir("floor-guard").join("r.json");
    common::exitlab_guarded(
        &["bench", "--json", json.to_str().unwrap()],
        std::time::Duration::from_secs(1),
    );
}
