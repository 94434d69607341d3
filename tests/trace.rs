//! `exitlab trace` on exitlab's own VMM, with exit counts known in advance: the second
//! harness kernel (`exitlab_guest::HARNESS`) in its exits mode does exactly N OUTs and
//! M INs to port 0x1234 (which nothing claims, so each one is a userspace exit),
//! separated by writes to the marker port 0x80. The trace must count exactly those, in
//! the phases the markers delimit, and remove the tracefs instance it created.
//!
//! These tests need root, tracefs (the command mounts it if needed) and /dev/kvm; they
//! fail, saying which is missing, without them.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

use exitlab_trace::{Event, Session, SessionConfig};
use serde_json::Value;

const EXITLAB: &str = env!("CARGO_BIN_EXE_exitlab");
const OUTS: u64 = 1234;
const INS: u64 = 567;

fn harness_path() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.join(format!("harness-trace-{}.elf", std::process::id()));
    std::fs::write(&p, exitlab_guest::HARNESS).expect("writing the harness kernel");
    p
}

/// Held by the tests that plant stale tracing instances or check that none is left: the
/// tests of this file run at once, and one's planted instance, made after another's
/// `--cleanup` removed the stale ones but before it listed what was left, made that one
/// report it as stale and not removable (a CI run, 28 Nov 2026).
static STALE_INSTANCES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn require_host() {
    assert!(
        std::path::Path::new("/dev/kvm").exists(),
        "this test needs /dev/kvm (KVM), which this host lacks"
    );
}

/// The counts of userspace exits of `what` to `port`, per phase, in thread `t`.
fn counts_per_phase(t: &Value, what: &str, port: u64) -> Vec<u64> {
    t["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| {
            p["classes"]
                .as_array()
                .expect("classes")
                .iter()
                .filter(|c| {
                    c["key"]["handled"] == "user"
                        && c["key"]["what"] == what
                        && c["key"]["target"]["port"].as_u64() == Some(port)
                })
                .map(|c| c["count"].as_u64().expect("count"))
                .sum()
        })
        .collect()
}

#[test]
fn trace_counts_exactly_the_harness_exits_and_cleans_up() {
    require_host();
    let _one_at_a_time = STALE_INSTANCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // An instance left behind by a process that no longer exists (pid beyond pid_max)
    // is removed by the next session.
    let stale = PathBuf::from("/sys/kernel/tracing/instances/exitlab-4294967295-0");
    if stale.parent().is_some_and(|p| p.is_dir()) {
        std::fs::create_dir(&stale).expect("creating a stale instance (needs root)");
    }
    let kernel = harness_path();
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trace-{}.json", std::process::id()));
    let out = Command::new(EXITLAB)
        .args(["trace", "--marker-port", "0x80", "--json"])
        .arg(&json)
        .args(["--", EXITLAB, "run", "--serial", "none", "--timeout", "60"])
        .arg(&kernel)
        .arg("--cmdline")
        .arg(format!("outs={OUTS} ins={INS} marker=0x80"))
        .output()
        .expect("running exitlab trace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    // The traced run ended as the harness asked: debug-exit 0 -> exit status 1, which
    // trace passes on (a traced command's failure is its exit status's).
    assert_eq!(
        out.status.code(),
        Some(1),
        "exitlab trace failed (it needs root and tracefs):\n{all}"
    );
    assert!(stdout.contains("(exit status: 1)"), "{all}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON profile"))
            .expect("valid JSON");
    assert_eq!(report["lost"], 0, "the kernel dropped events:\n{all}");
    let threads = report["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 1, "one vCPU thread expected:\n{all}");
    let t = &threads[0];
    // Phases: boot (banner on COM1), the OUTs after marker 1, the INs after marker 2,
    // the end after marker 3.
    let outs = counts_per_phase(t, "out", 0x1234);
    let ins = counts_per_phase(t, "in", 0x1234);
    let markers = counts_per_phase(t, "out", 0x80);
    assert_eq!(outs, vec![0, OUTS, 0, 0], "{all}");
    assert_eq!(ins, vec![0, 0, INS, 0], "{all}");
    assert_eq!(markers, vec![0, 1, 1, 1], "{all}");
    // Every OUT and IN but the last of its phase is followed by a KVM_RUN entry, so
    // each has a userspace time.
    let phase1 = &t["phases"][1]["classes"];
    let out_class = phase1
        .as_array()
        .and_then(|c| c.iter().find(|c| c["key"]["what"] == "out"))
        .expect("the OUT class");
    assert_eq!(out_class["user"]["n"], OUTS, "{all}");
    // Where the host fires kvm_exit (SVM/VMX KVM; this host's kvm_pvm does not), every
    // OUT's exit leg (kvm_exit -> kvm_userspace_exit) is paired and positive, and the
    // report says which view it had.
    if report["kvm_exit_seen"] == true {
        let leg = &out_class["exit_leg"];
        assert_eq!(leg["n"], OUTS, "every OUT has an exit leg:\n{all}");
        assert!(leg["median"].as_f64().is_some_and(|m| m > 0.0), "{all}");
    } else {
        assert!(out_class["exit_leg"].is_null(), "{all}");
        assert!(
            report["notes"].as_array().is_some_and(|n| n
                .iter()
                .any(|n| n.as_str().is_some_and(|s| s.contains("kvm_exit")))),
            "a host without kvm_exit is named in the notes:\n{all}"
        );
    }
    // The instance it named is gone.
    let dir = stderr
        .split_whitespace()
        .find(|w| w.contains("/instances/exitlab-"))
        .expect("the instance path on stderr");
    assert!(!std::path::Path::new(dir).exists(), "{dir} was left behind");
    // The stale instance is gone: exitlab trace removes stale instances when it starts
    // (so may the other tests of this file, each of which starts a session too).
    assert!(!stale.exists(), "{} was left in place", stale.display());
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&kernel);
}

#[test]
fn trace_refuses_to_run_without_a_target() {
    let out = Command::new(EXITLAB)
        .arg("trace")
        .output()
        .expect("running exitlab trace");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pid PID or a command"));
}

#[test]
fn trace_exits_with_the_status_of_a_traced_command_that_failed() {
    // Its tracing instance is live while it runs: kept apart from the tests that list
    // what instances are left.
    let _one_at_a_time = STALE_INSTANCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let trace = |script: &str| {
        Command::new(EXITLAB)
            .args(["trace", "--", "sh", "-c", script])
            .output()
            .expect("running exitlab trace")
    };
    let failed = trace("exit 7");
    let (out, err) = (
        String::from_utf8_lossy(&failed.stdout),
        String::from_utf8_lossy(&failed.stderr),
    );
    assert_eq!(failed.status.code(), Some(7), "{out}\n{err}");
    // The profile is printed all the same, and the status is said.
    assert!(
        out.contains("command: sh -c exit 7 (exit status: 7)"),
        "{out}"
    );
    assert!(
        err.contains("the traced command failed: exit status 7, which exitlab trace exits with"),
        "{err}"
    );
    let killed = trace("kill -TERM $$");
    assert_eq!(
        killed.status.code(),
        Some(128 + 15),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    let ok = trace("exit 0");
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(!String::from_utf8_lossy(&ok.stderr).contains("failed"));
}

#[test]
fn trace_counts_the_harness_exits_under_the_bare_loop_too() {
    require_host();
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trace-bare-{}.json", std::process::id()));
    let out = Command::new(EXITLAB)
        .args(["trace", "--json"])
        .arg(&json)
        .args(["--", EXITLAB, "agree", "--bare-run", "outs=321 ins=123"])
        .output()
        .expect("running exitlab trace");
    let all = format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains("(exit status: 0)"),
        "the bare run failed:\n{all}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON profile"))
            .expect("valid JSON");
    assert_eq!(report["lost"], 0, "{all}");
    let t = &report["threads"][0];
    let sum = |v: Vec<u64>| v.into_iter().sum::<u64>();
    assert_eq!(sum(counts_per_phase(t, "out", 0x1234)), 321, "{all}");
    assert_eq!(sum(counts_per_phase(t, "in", 0x1234)), 123, "{all}");
    let _ = std::fs::remove_file(&json);
}

/// This process's start time (clock ticks after boot), as tracing instance names carry it.
fn own_start_time() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn stale_tracing_instances_are_recognised_by_their_owner_and_removed() {
    require_host();
    let _one_at_a_time = STALE_INSTANCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Mounts tracefs if needed; removes what earlier runs left.
    let first = Command::new(EXITLAB)
        .args(["trace", "--cleanup"])
        .output()
        .unwrap();
    assert_eq!(
        first.status.code(),
        Some(0),
        "exitlab trace --cleanup needs root and tracefs: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    let inst = PathBuf::from("/sys/kernel/tracing/instances");
    let me = std::process::id();
    let start = own_start_time();
    // Left by processes that are gone: a PID no process can have, and this PID with
    // another start time (a killed owner whose PID was given to a later process).
    let dead = inst.join("exitlab-4294967295-1-0");
    let reused = inst.join(format!("exitlab-{me}-{}-0", start + 1));
    // This process's own, as a running exitlab's would be.
    let live = inst.join(format!("exitlab-{me}-{start}-99"));
    for d in [&dead, &reused, &live] {
        std::fs::create_dir(d).expect("creating a tracing instance (needs root)");
    }
    let out = Command::new(EXITLAB)
        .args(["trace", "--cleanup"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!dead.exists() && !reused.exists(), "{stdout}");
    assert!(
        live.exists(),
        "a running owner's instance is kept: {stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{}: in use by running process {me}",
            live.display()
        )),
        "{stdout}"
    );
    std::fs::remove_dir(&live).unwrap();
    // bench removes stale instances when it starts.
    std::fs::create_dir(&dead).unwrap();
    let out = Command::new(EXITLAB)
        .args([
            "bench",
            "--tests",
            "cpuid",
            "--samples",
            "10",
            "--rounds",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dead.exists(), "bench removed the stale instance");
}

#[test]
fn trace_floor_compares_exitlab_run_with_the_bare_loop_on_exact_counts() {
    require_host();
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trace-floor-{}.json", std::process::id()));
    let out = Command::new(EXITLAB)
        .args([
            "trace", "--floor", "--rounds", "2", "--exits", "300", "--json",
        ])
        .arg(&json)
        .args(["--", "--no-seccomp"])
        .output()
        .expect("running exitlab trace --floor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("ratio"), "{stdout}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["status"], "measured", "{v}");
    assert_eq!(v["rounds"], 2);
    for side in ["exitlab", "floor"] {
        assert_eq!(v[side]["exits"], 600, "{side}: {v}");
        assert_eq!(v[side]["user"]["n"], 600, "{side}");
    }
    assert!(
        v["exitlab"]["command"]
            .as_str()
            .unwrap()
            .starts_with("exitlab run --no-seccomp"),
        "the options after -- go to exitlab run: {v}"
    );
    let _ = std::fs::remove_file(&json);
}

/// This thread's id (from /proc/thread-self, which names it).
fn this_thread() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("a thread id")
}

#[test]
fn a_session_checkpoint_splits_its_capture_where_it_was_taken() {
    // No KVM here: this thread's `getcwd` system calls (79 on x86-64, which the session
    // itself never makes), 3, then 5 after the first checkpoint, then 2 after the
    // second; each capture holds its own share, and the checkpoints' markers are no
    // records. Needs root and tracefs.
    let tid = this_thread();
    let mut session = Session::start(&SessionConfig {
        pids: vec![tid],
        follow_forks: false,
        buffer_kb: 1024,
        syscall: Some(79),
    })
    .expect("a tracing session (this test needs root and tracefs)");
    let getcwd = |n: usize| {
        for _ in 0..n {
            let _ = std::env::current_dir();
        }
    };
    let calls = |c: &exitlab_trace::Capture| {
        assert!(
            !c.records
                .iter()
                .any(|r| matches!(r.event, Event::Marker { .. })),
            "a checkpoint's marker is no record"
        );
        c.records
            .iter()
            .filter(|r| r.tid == tid && matches!(r.event, Event::SysEnter { nr: 79, .. }))
            .count()
    };
    getcwd(3);
    let first = session.checkpoint().expect("first checkpoint");
    getcwd(5);
    let second = session.checkpoint().expect("second checkpoint");
    getcwd(2);
    let rest = session.finish().expect("finish");
    assert_eq!(
        [calls(&first), calls(&second), calls(&rest)],
        [3, 5, 2],
        "lost {} {} {}",
        first.lost,
        second.lost,
        rest.lost
    );
}
