//! The chaos kernel against the VMM and the lab's protocol handling: `exitlab run
//! --builtin chaos` for 30 s with a fixed seed must end normally with an account of exits,
//! faults and protocol violations caught, and bounded memory, and the same seed must
//! give the same guest behaviour.

use std::process::Command;

mod common;

fn chaos(args: &[&str]) -> (i32, String, String) {
    common::require_kvm();
    let o = Command::new(common::EXITLAB)
        .args(["run", "--builtin", "chaos"])
        .args(args)
        .output()
        .expect("run exitlab");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn field(out: &str, prefix: &str) -> u64 {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{out}"))
}

#[test]
fn thirty_seconds_of_chaos_end_with_an_account_and_bounded_memory() {
    let (code, out, err) = chaos(&["--seconds", "30", "--seed", "20261123"]);
    eprintln!("{out}");
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("how each PC-platform boot ended:"), "{out}");
    // It says how far it got while it runs, as bench does.
    assert!(
        err.lines()
            .any(|l| l.starts_with("  chaos ") && l.contains("/30 s: ") && l.contains(" boots, ")),
        "no progress line in:\n{err}"
    );
    // Every other boot runs under the lab's doorbell protocol, whose handling must catch
    // the garbage as protocol violations (and end those boots with a message).
    let lab_boots = field(&out, "lab protocol boots:");
    assert!(lab_boots > 0, "{out}");
    let caught = out.lines().any(|l| {
        let l = l.trim_start();
        l.split_once("  ").is_some_and(|(n, kind)| {
            n.parse::<u64>().is_ok()
                && (kind.starts_with("guest protocol error")
                    || kind.starts_with("the guest took an unexpected exception")
                    || kind.starts_with("the lab kernel refused"))
        })
    });
    assert!(
        caught,
        "no protocol violation caught in {lab_boots} lab boots:\n{out}"
    );
    let total = field(&out, "total");
    assert!(
        total > 1000,
        "the guest made only {total} userspace exits:\n{out}"
    );
    assert!(
        field(&out, "io_in") > 0 && field(&out, "io_out") > 0,
        "{out}"
    );
    assert!(
        field(&out, "mmio_read") > 0 && field(&out, "mmio_write") > 0,
        "{out}"
    );
    assert!(out.contains("faults seen:"), "{out}");
    // Memory: a few MiB of VMM plus what the guest touched of its 64 MiB, however many
    // VMs were created and destroyed.
    let peak: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("memory: peak RSS "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in:\n{out}"));
    assert!(peak < 200.0, "peak RSS {peak} MiB:\n{out}");
}

#[test]
fn the_same_seed_gives_the_same_guest_behaviour() {
    let dir = common::tempdir("chaos-seed");
    let run = |seed: &str, name: &str| {
        let p = dir.join(name);
        let (code, out, err) = chaos(&[
            "--seconds",
            "8",
            "--cpus",
            "1",
            "--seed",
            seed,
            "--serial",
            &format!("file:{}", p.display()),
        ]);
        assert_eq!(code, 0, "{out}\n{err}");
        std::fs::read(&p).unwrap()
    };
    let a = run("7", "a");
    let b = run("7", "b");
    let c = run("8", "c");
    // The guest's first line (50 bytes, "CHAOS ops=0 ...") is the same for every seed;
    // what follows is drawn from the seed. How much there is depends on the host's speed
    // (an emulated L1 gives ~100 bytes in 8 s).
    const FIRST_LINE: usize = 50;
    let n = a.len().min(b.len());
    assert!(
        n > FIRST_LINE + 16,
        "too little output to compare ({n} bytes)"
    );
    assert_eq!(a[..n], b[..n], "seed 7 gave two different guest outputs");
    let m = a.len().min(c.len());
    assert!(
        m > FIRST_LINE + 16,
        "too little output to compare ({m} bytes)"
    );
    assert_ne!(
        a[FIRST_LINE..m],
        c[FIRST_LINE..m],
        "seeds 7 and 8 gave the same guest output"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
