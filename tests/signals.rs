//! SIGINT and SIGTERM during `exitlab run` stop the vCPUs, tear the VM down and end with
//! the interrupted exit code (130). `cargo test --test signals -- --nocapture` prints how
//! long each teardown took. An A/B run interrupted before any round completed ends with
//! 130 too, not as a host failure.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

/// `exitlab run` of the conformance kernel spinning until stopped.
fn spinning_run() -> std::process::Child {
    common::require_kvm();
    let dir = common::tempdir("soak-signal");
    let kernel = dir.join("pvh.elf");
    std::fs::write(&kernel, exitlab_guest::CONFORMANCE_PVH).unwrap();
    Command::new(common::EXITLAB)
        .arg("run")
        .arg(&kernel)
        .args(["--cmdline", "timeout", "--cpus", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn sigint_and_sigterm_stop_the_vm_with_the_interrupted_code() {
    for sig in ["-INT", "-TERM"] {
        let mut child = spinning_run();
        // Signal once the guest says it spins (so the VMM's handlers are installed and
        // the VM runs), not after a fixed sleep that a slow host can outlast.
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        assert!(
            lines.any(|l| l.is_ok_and(|l| l.contains("# timeout: spinning"))),
            "the guest never said it spins"
        );
        let pid = child.id().to_string();
        let t = Instant::now();
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
        let out = child.wait_with_output().unwrap();
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{sig}: {err}");
        assert!(err.contains("interrupted"), "{sig}: {err}");
        assert!(
            // A guard against a teardown that hangs, not a speed target.
            took < Duration::from_secs(60),
            "{sig}: teardown took {took:?}"
        );
        eprintln!(
            "{sig}: stopped and torn down in {:.0} ms",
            took.as_secs_f64() * 1e3
        );
    }
}

#[test]
fn an_ab_run_interrupted_before_its_first_round_completes_exits_130_saying_so() {
    common::require_kvm();
    // Rounds of 200,000 samples take seconds on a paravirtual host and a tenth of a
    // second or more on hardware; the signal goes as soon as the run's first line (printed
    // after the handlers are armed, before the first VM) is out.
    let mut child = Command::new(common::EXITLAB)
        .args(["bench", "--ab", "warmup=200,201", "--tests", "cpuid"])
        .args(["--rounds", "6", "--samples", "200000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()));
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.starts_with("exitlab bench:"))),
        "bench never printed its first line"
    );
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    let err = rest.join("\n");
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted before both sides of the first round completed"),
        "{err}"
    );
}
