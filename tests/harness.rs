//! The second harness (`exitlab_guest::HARNESS`) under `exitlab run`, and `exitlab
//! agree`, which sets its figures beside exitlab's bench.
//!
//! What is checked is behaviour, never a timing: the harness does exactly the port
//! accesses it is asked for (KVM and exitlab count them, the values read back are the
//! open bus's), its timing mode prints one block per test per rep that the lab's parser
//! accepts, and `exitlab agree` gives every test a figure from both harnesses.
//!
//! These tests need /dev/kvm and fail, saying so, without it.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

use exitlab_lab::agreement::{parse_harness_output, HARNESS_LOOP, HARNESS_TESTS};

const EXITLAB: &str = env!("CARGO_BIN_EXE_exitlab");

fn harness_path(tag: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("harness-{tag}-{}.elf", std::process::id()));
    std::fs::write(&p, exitlab_guest::HARNESS).expect("writing the harness kernel");
    p
}

fn require_kvm() {
    assert!(
        std::path::Path::new("/dev/kvm").exists(),
        "this test needs /dev/kvm (KVM), which this host lacks"
    );
}

/// `exitlab run` of the harness: (exit code, serial output, stderr).
fn run(kernel: &PathBuf, cmdline: &str) -> (i32, String, String) {
    let out = Command::new(EXITLAB)
        .args(["run", "--timeout", "120", "--exit-stats"])
        .arg(kernel)
        .args(["--cmdline", cmdline])
        .output()
        .expect("running exitlab run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn stat(stderr: &str, name: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next().and_then(|v| v.parse().ok()))?
        })
        .unwrap_or_else(|| panic!("no {name} in --exit-stats:\n{stderr}"))
}

#[test]
fn exits_mode_does_exactly_the_accesses_asked_for() {
    require_kvm();
    let k = harness_path("exits");
    let (code, out, err) = run(&k, "outs=300 ins=77 port=0x1234 marker=0x80");
    // Debug-exit 0 -> exit code 1.
    assert_eq!(code, 1, "{out}\n{err}");
    // 77 reads of the open bus (all ones) sum to -77 modulo 2^32.
    let sum = 0u32.wrapping_sub(77);
    assert!(
        out.contains(&format!("X outs=300 ins=77 port=0x1234 sum={sum:#x}")),
        "{out}"
    );
    // The harness reads nothing else; it writes the OUTs, 3 markers, each serial byte
    // (one OUT per byte, no status polling) and the debug-exit.
    assert_eq!(stat(&err, "io_in"), 77, "{err}");
    assert_eq!(
        stat(&err, "io_out"),
        300 + 3 + out.len() as u64 + 1,
        "{out}\n{err}"
    );
    let _ = std::fs::remove_file(&k);
}

#[test]
fn timing_mode_prints_every_block_and_does_every_iteration() {
    require_kvm();
    let k = harness_path("timing");
    let (code, out, err) = run(&k, "k=3 reps=4 tests=inl_from_user,outl_to_user,cpuid");
    assert_eq!(code, 1, "{out}\n{err}");
    let h = parse_harness_output(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!((h.k, h.reps), (3, 4));
    let names: Vec<&str> = h.blocks.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        vec!["cpuid", "inl_from_user", HARNESS_LOOP, "outl_to_user"]
    );
    assert!(h.blocks.values().flatten().all(|&c| c > 0));
    // One warm-up block and 4 timed blocks of 8 iterations each.
    assert_eq!(stat(&err, "io_in"), 5 * 8, "{err}");
    assert_eq!(stat(&err, "io_out"), 5 * 8 + out.len() as u64 + 1, "{err}");
    let _ = std::fs::remove_file(&k);
}

#[test]
fn harness_refuses_out_of_range_parameters() {
    require_kvm();
    let k = harness_path("bad");
    let (code, out, err) = run(&k, "k=21");
    // Debug-exit 1 -> exit code 3.
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(parse_harness_output(&out)
        .unwrap_err()
        .contains("the harness refused"));
    let _ = std::fs::remove_file(&k);
}

#[test]
fn agree_gives_every_test_a_figure_from_both_harnesses() {
    require_kvm();
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("agree-{}.json", std::process::id()));
    let out = Command::new(EXITLAB)
        .args([
            "agree",
            "--rounds",
            "2",
            "--k",
            "2",
            "--reps",
            "5",
            "--samples",
            "40",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("running exitlab agree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON")).expect("valid");
    let rows = v["rows"].as_array().expect("rows");
    let tests: Vec<&str> = rows.iter().filter_map(|r| r["test"].as_str()).collect();
    assert_eq!(tests, HARNESS_TESTS);
    for r in rows {
        let verdict = r["verdict"].as_str().unwrap_or("");
        if r["harness"].is_null() {
            // Only a host limit the harness names (no IA32_TSC_ADJUST) may leave a gap.
            assert!(verdict.contains("harness skipped it"), "{r}");
            continue;
        }
        assert_eq!(r["harness"]["n"], 10, "2 rounds x 5 blocks: {r}");
        assert!(r["exitlab_net_median"].is_number(), "{r}");
        assert!(verdict == "agrees" || verdict.starts_with("differs"), "{r}");
        assert!(stdout.contains(r["test"].as_str().unwrap_or("?")));
        // The harness has exitlab's instructions for every test whose timed loop
        // reloads operands; cpuid and rdmsr load theirs already.
        let reloads = !matches!(r["test"].as_str(), Some("cpuid" | "rd_tsc_adjust_msr"));
        assert_eq!(!r["harness_reload"].is_null(), reloads, "{r}");
    }
    // Both empty loops were timed per iteration: the harness's per rep, exitlab's per
    // round, so the mode factor is there.
    assert_eq!(v["harness_loop_step"]["n"], 10, "{v}");
    assert!(
        v["exitlab_loop_step"].as_f64().is_some_and(|s| s > 0.0),
        "{v}"
    );
    assert!(v["mode_factor"].is_number(), "{v}");
    assert!(stdout.contains("mode factor"), "{stdout}");
    let _ = std::fs::remove_file(&json);
}
