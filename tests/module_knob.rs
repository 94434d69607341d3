//! `bench --ab MODULE.PARAM=A,B`: a KVM module parameter as an A/B knob, end to end.
//!
//! On a host whose KVM cannot be switched (the project's kvm_pvm hosts: kvm built in,
//! paravirtual) the refusals are asserted: exit 14 with the reason, nothing changed.
//! Where kvm and kvm_amd/kvm_intel are loadable modules and this runs as root (inside
//! `run-in-l1`), the A/B runs for real: a reload parameter (`kvm_amd.npt` or
//! `kvm_intel.ept`), a run-time one (`kvm.halt_poll_ns`), an A/A, SIGINT during a run and
//! `kill -9` followed by the next start, each ending with every parameter as it was.
//! With `EXITLAB_REQUIRE_MODULE_RELOAD=1` (`.ci/run` in the L1) a host that cannot
//! switch fails these tests instead.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{exitlab, exitlab_guarded};

/// The tests that change the host must not overlap.
static HOST: Mutex<()> = Mutex::new(());

fn require_reload() -> bool {
    std::env::var("EXITLAB_REQUIRE_MODULE_RELOAD").is_ok_and(|v| v == "1")
}

/// The vendor module and a parameter of it that needs a reload, where this host has
/// loadable KVM modules and this runs as root; `None` otherwise.
fn reloadable() -> Option<(&'static str, &'static str)> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))?;
    if !root || Path::new("/sys/module/kvm_pvm").exists() {
        return None;
    }
    [("kvm_amd", "npt"), ("kvm_intel", "ept")]
        .into_iter()
        .find(|(m, p)| {
            let dir = Path::new("/sys/module").join(m);
            dir.join("initstate").exists() && dir.join("parameters").join(p).exists()
        })
}

/// Every parameter of the KVM modules loaded now.
fn kvm_params() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in ["kvm", "kvm_amd", "kvm_intel"] {
        let dir = Path::new("/sys/module").join(m).join("parameters");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let v = std::fs::read_to_string(e.path()).unwrap_or_default();
            out.insert(
                format!("{m}.{}", e.file_name().to_string_lossy()),
                v.trim().to_string(),
            );
        }
    }
    out
}

/// Fails when a reload is required here, else says the change was not exercised.
fn not_exercised(what: &str) {
    assert!(
        !require_reload(),
        "EXITLAB_REQUIRE_MODULE_RELOAD=1 but this host cannot switch KVM modules ({what})"
    );
    eprintln!("{what}: NOT exercised on this host (no loadable KVM modules, or not root)");
}

#[test]
fn a_host_that_cannot_switch_a_kvm_module_parameter_refuses_before_anything_changes() {
    if reloadable().is_some() {
        return not_exercised_here_but_elsewhere();
    }
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let before = kvm_params();
    let o = exitlab(&[
        "bench",
        "--tests",
        "cpuid",
        "--rounds",
        "2",
        "--ab",
        "kvm.halt_poll_ns=0,200000",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    // Paravirtual (kvm_pvm), built in and read-only, not root: whichever this host is,
    // exit 14 and the reason; nothing ran and nothing changed.
    assert_eq!(o.status.code(), Some(14), "{err}");
    assert!(
        err.contains("paravirtual")
            || err.contains("built into the kernel")
            || err.contains("needs root"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("A/B:"));
    assert_eq!(kvm_params(), before);
    // A module this host does not have, and a value the kernel cannot take.
    let o = exitlab(&["bench", "--ab", "kvm_nosuch.x=0,1"]);
    assert!(
        matches!(o.status.code(), Some(14)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = exitlab(&["bench", "--ab", "kvm.halt_poll_ns=0,two words"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// On a host that can switch, the refusal test has nothing to refuse: the tests below
/// exercise the switching there.
fn not_exercised_here_but_elsewhere() {
    eprintln!(
        "this host can switch KVM module parameters: the refusals are checked on hosts that cannot"
    );
}

/// `bench --tests cpuid --rounds 2 --samples 8 --ab KNOB --accept-no-verdict --json F`:
/// its output and file.
fn module_ab(
    dir: &common::Scratch,
    ab: &str,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let f = dir.join("ab.json");
    let mut args = vec![
        "bench",
        "--tests",
        "cpuid",
        "--rounds",
        "2",
        "--samples",
        "8",
        "--ab",
        ab,
        "--accept-no-verdict",
        "--json",
        f.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = exitlab_guarded(&args, Duration::from_secs(1800));
    let v = serde_json::from_slice(&std::fs::read(&f).unwrap_or_default()).unwrap_or_default();
    (o, v)
}

#[test]
fn a_reload_parameter_is_switched_between_side_runs_recorded_and_restored() {
    let Some((module, param)) = reloadable() else {
        return not_exercised("bench --ab of a reload parameter");
    };
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let before = kvm_params();
    let knob = format!("{module}.{param}");
    let dir = common::Scratch::new("module-knob");
    let (o, v) = module_ab(&dir, &format!("{knob}=0,1"), &[]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Rounds A B, B A: switches before sides 1, 2 and 4 (the third runs B again).
    let host = v["ab"]["host"].as_array().unwrap();
    let switched: Vec<bool> = host.iter().map(|s| s["switched"] == true).collect();
    assert_eq!(switched, [true, true, false, true], "{}", v["ab"]["host"]);
    for s in host {
        let want = if s["side"] == "a" { "N" } else { "Y" };
        assert_eq!(s["in_force"], want, "{s}");
        assert_eq!(s["params"][&knob], want, "{s}");
        assert!(
            s["build_ids"]["kernel"].is_string() && s["build_ids"][module].is_string(),
            "{s}"
        );
        if s["switched"] == true {
            assert_eq!(s["reloaded"], true, "{s}");
            assert!(s["seconds"].as_f64().unwrap() > 0.0, "{s}");
        }
    }
    assert!(
        out.contains(&format!(
            "host knob {knob}: 3 switches (3 by reloading the module)"
        )),
        "{out}"
    );
    assert!(out.contains("switch seconds: "), "{out}");
    // Every parameter as it was, /dev/kvm there.
    assert_eq!(kvm_params(), before);
    assert!(Path::new("/dev/kvm").exists());
    // A value the module refuses: a clear error before the first round, and nothing left
    // changed.
    let (o, _) = module_ab(&dir, &format!("{knob}=0,maybe"), &[]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(kvm_params(), before);
}

#[test]
fn a_run_time_parameter_is_written_between_side_runs_and_an_a_a_flags_no_test() {
    if reloadable().is_none() {
        return not_exercised("bench --ab of kvm.halt_poll_ns");
    }
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let before = kvm_params();
    let dir = common::Scratch::new("module-knob-rt");
    let (o, v) = module_ab(&dir, "kvm.halt_poll_ns=0,200000", &["--idle", "hlt"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let host = v["ab"]["host"].as_array().unwrap();
    assert!(
        host.iter().all(|s| s["reloaded"] == false),
        "{}",
        v["ab"]["host"]
    );
    assert_eq!(host[0]["in_force"], "0");
    assert_eq!(host[1]["in_force"], "200000");
    assert_eq!(kvm_params(), before);
    // The same value twice: no switch after the first, and no test called changed.
    let original = before["kvm.halt_poll_ns"].clone();
    let dir = common::Scratch::new("module-knob-aa");
    let (o, v) = module_ab(
        &dir,
        &format!("kvm.halt_poll_ns={original},{original}"),
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(0), "{out}");
    let switches = v["ab"]["host"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["switched"] == true)
        .count();
    assert!(switches <= 1, "{}", v["ab"]["host"]);
    assert!(!out.contains("gate: slower"), "{out}");
    assert_eq!(kvm_params(), before);
}

#[test]
fn sigint_and_kill_9_during_a_module_ab_leave_every_parameter_as_it_was() {
    let Some((module, param)) = reloadable() else {
        return not_exercised("SIGINT and kill -9 during a module A/B");
    };
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let before = kvm_params();
    let knob = format!("{module}.{param}=0,1");
    for signal in ["INT", "KILL"] {
        let dir = common::Scratch::new(&format!("module-knob-{signal}"));
        let f = dir.join("ab.json");
        let mut child = std::process::Command::new(common::EXITLAB)
            .args([
                "bench",
                "--tests",
                "cpuid",
                "--rounds",
                "20",
                "--samples",
                "40",
                "--ab",
                &knob,
                "--quiet",
                "--json",
            ])
            .arg(&f)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Side A's value (N) comes in force twice: when the values are tried before the
        // first round (N, then Y, then the original), and for the first side-run. Wait for
        // the second, then signal.
        let started = Instant::now();
        let (mut was_n, mut times_n) = (false, 0);
        while times_n < 2 {
            let is_n = kvm_params()
                .get(&format!("{module}.{param}"))
                .map(String::as_str)
                == Some("N");
            times_n += usize::from(is_n && !was_n);
            was_n = is_n;
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "the first switch never came"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "exitlab ended before switching"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(2));
        let _ = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status();
        let out = child.wait_with_output().unwrap();
        let (status, said) = (out.status, String::from_utf8_lossy(&out.stderr).to_string());
        if signal == "INT" {
            // Interrupted: the rounds kept, every parameter restored on the way out.
            assert_eq!(status.code(), Some(130), "{said}");
            assert_eq!(kvm_params(), before, "{said}");
        } else {
            // Killed: the state file is left, and the next start restores from it.
            assert_eq!(status.code(), None, "{said}");
            assert_ne!(kvm_params(), before);
            let h = exitlab(&["host"]);
            let err = String::from_utf8_lossy(&h.stderr).to_string();
            assert!(err.contains("restored what exitlab pid"), "{err}");
            assert_eq!(kvm_params(), before);
        }
    }
}
