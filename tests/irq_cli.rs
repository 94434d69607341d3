//! The interrupt knobs of `exitlab bench` on the command line: bad values are refused
//! with exit code 2 and a message naming the valid ones, a knob the host's KVM lacks is
//! refused with exit code 3 naming the capability, and the knobs reach the results.

use std::process::Output;

mod common;
use common::{exitlab, Scratch};

/// bench options for one round of five samples after one warm-up iteration.
const ONE_SHORT_ROUND: [&str; 6] = ["--samples", "5", "--warmup", "1", "--rounds", "1"];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `exitlab bench ARGS... --json FILE` in a scratch directory of its own (`tag`)
/// and returns its output and the results file it wrote.
fn bench_json(tag: &str, args: &[&str]) -> (Output, serde_json::Value) {
    let dir = Scratch::new(&format!("irq-cli-{tag}"));
    let json = dir.join("r.json");
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let o = exitlab(&all);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v = common::read_results(&json);
    (o, v)
}

/// The test `name` of a results file.
fn test_named(v: &serde_json::Value, name: &str) -> serde_json::Value {
    v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} missing: {v}"))
}

#[test]
fn bad_knob_values_are_usage_errors() {
    for (args, want) in [
        (&["bench", "--apic", "x3apic"][..], "use xapic or x2apic"),
        (&["bench", "--idle", "nap"], "use poll, hlt or mwait"),
        (
            &["bench", "--disable-exits", "hlt,sleep"],
            "unknown exit 'sleep'",
        ),
        (&["bench", "--pv-ipi", "yes"], "use on or off"),
        (&["bench", "--cpus", "0"], "out of range"),
        (&["bench", "--halt-poll-ns", "lots"], "not a number of ns"),
        (&["bench", "--irqchip", "user"], "use kernel or split"),
        (
            &["bench", "--ab", "irqchip=kernel,user"],
            "use kernel or split",
        ),
        (&["run", "k", "--irqchip", "user"], "use kernel or split"),
    ] {
        let o = exitlab(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = text(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn knobs_are_probed_and_written_into_the_results() {
    let kvm = exitlab_vmm::open_kvm().expect("this test needs a usable /dev/kvm");
    let dir = Scratch::new("irq-cli-knobs");
    let json = dir.join("r.json");
    let offered = exitlab_vmm::knobs::offered_disable_exits(&kvm);
    let o = exitlab(&[
        "bench",
        "--tests",
        "eoi",
        "--samples",
        "5",
        "--warmup",
        "1",
        "--no-overhead",
        "--apic",
        "x2apic",
        "--disable-exits",
        "mwait",
        "--json",
        json.to_str().unwrap(),
    ]);
    if offered & exitlab_vmm::knobs::DISABLE_MWAIT == 0 {
        assert_eq!(o.status.code(), Some(6));
        let e = text(&o.stderr);
        assert!(e.contains("KVM_CAP_X86_DISABLE_EXITS lacks mwait"), "{e}");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("interrupts: apic x2apic"), "{out}");
    assert!(out.contains("disable-exits mwait"), "{out}");
    let v = common::read_results(&json);
    assert_eq!(v["config"]["irq"]["apic"], "x2apic");
    assert_eq!(v["config"]["irq"]["disable_exits"], "mwait");
    let eoi = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "eoi")
        .expect("eoi in the results");
    assert_eq!(eoi["irq"]["apic"], "x2apic");
}

#[test]
fn the_irqchip_knob_is_probed_and_written_into_the_results() {
    let kvm = exitlab_vmm::open_kvm().expect("this test needs a usable /dev/kvm");
    let dir = Scratch::new("irq-cli-irqchip");
    let json = dir.join("r.json");
    let o = exitlab(&[
        "bench",
        "--tests",
        "eoi,inl_from_kernel",
        "--samples",
        "5",
        "--warmup",
        "1",
        "--no-overhead",
        "--rounds",
        "1",
        "--irqchip",
        "split",
        "--json",
        json.to_str().unwrap(),
    ]);
    let has = kvm.check_extension_raw(exitlab_vmm::irqchip::KVM_CAP_SPLIT_IRQCHIP.into()) > 0;
    if !has {
        assert_eq!(o.status.code(), Some(6));
        let e = text(&o.stderr);
        panic!("this host's KVM lacks KVM_CAP_SPLIT_IRQCHIP; exitlab said: {e}");
    }
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("irqchip split"), "{out}");
    assert!(
        out.contains("inl_from_kernel skipped: --irqchip split"),
        "the in-kernel PIC test does not run against the userspace PIC: {out}"
    );
    let v = common::read_results(&json);
    assert_eq!(v["config"]["irq"]["irqchip"], "split");
    assert_eq!(v["config"]["knobs"]["irqchip"], "split");
}

#[test]
fn the_apic_mode_of_every_test_is_recorded() {
    let (o, v) = bench_json(
        "apic",
        &[
            "--tests",
            "eoi,x2apic_eoi",
            "--samples",
            "5",
            "--warmup",
            "1",
            "--no-overhead",
        ],
    );
    let mode = |name: &str| test_named(&v, name)["irq"]["apic"].clone();
    assert_eq!(mode("eoi"), "xapic");
    assert_eq!(mode("x2apic_eoi"), "x2apic");
    assert_eq!(mode("loop_overhead"), "xapic");
    let out = text(&o.stdout);
    assert!(
        out.contains(" apic "),
        "the table has an apic column: {out}"
    );
}

#[test]
fn vcpus_sharing_a_host_cpu_get_one_plain_note() {
    // Both vCPUs of the IPI test pinned to host CPU 0: the report says so once, as a
    // note of its own (it read "note: warning: ..." once).
    let o = exitlab(
        &[
            &["bench", "--tests", "ipi", "--pin", "0,0"][..],
            &ONE_SHORT_ROUND,
            &["--no-overhead"],
        ]
        .concat(),
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    let shared: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("IPI figures mean little"))
        .collect();
    assert_eq!(
        shared,
        [
            "note: several vCPUs are pinned to host CPU(s) 0: IPI figures mean little when vCPUs \
          share a host CPU"
        ],
        "{out}"
    );
    assert!(!out.contains("warning:"), "{out}");
}

#[test]
fn hlt_without_an_irqchip_is_skipped_in_x2apic_mode_saying_why() {
    // Not a guest #GP at the x2APIC MSR write (a failed test, exit 4): a skip, exit 0.
    let (o, v) = bench_json(
        "hlt",
        &[
            &["--tests", "hlt,cpuid"][..],
            &ONE_SHORT_ROUND,
            &["--apic", "x2apic"],
        ]
        .concat(),
    );
    let out = text(&o.stdout);
    assert!(
        out.contains("hlt skipped: --apic x2apic: the test runs with no in-kernel irqchip"),
        "{out}"
    );
    assert_eq!(
        test_named(&v, "cpuid")["status"],
        "ok",
        "the other tests run in x2APIC mode"
    );
    let hlt = test_named(&v, "hlt");
    assert_eq!(hlt["status"], "skipped", "{hlt}");
    assert!(
        hlt["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no local APIC")),
        "{hlt}"
    );
}

#[test]
fn an_ab_run_without_tests_runs_only_the_tests_its_knob_can_affect_and_says_so() {
    // Halt polling changes only where a vCPU is woken from HLT in KVM: no default test
    // (the HLT test has no in-kernel irqchip), so the two IPI tests whose target halts.
    let (o, v) = bench_json(
        "ab-halt-poll",
        &[
            &["--ab", "halt-poll-ns=0,200000", "--accept-no-verdict"][..],
            &["--samples", "5", "--warmup", "1", "--rounds", "2"],
        ]
        .concat(),
    );
    let err = text(&o.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("--ab")).collect();
    assert_eq!(
        said,
        ["exitlab: --ab halt-poll-ns: runs the 2 tests it can affect (none of the default suite's): ipi_halt, hlt_wake (--tests to choose)"],
        "{err}"
    );
    let names = |tests: &serde_json::Value| -> Vec<String> {
        tests
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let ran = ["loop_overhead", "ipi_halt", "hlt_wake"];
    assert_eq!(names(&v["tests"]), ran, "side A");
    assert_eq!(names(&v["ab"]["b_tests"]), ran, "side B");
}

#[test]
fn an_ab_run_warns_once_about_tests_its_knob_cannot_affect_and_runs_them() {
    let (o, v) = bench_json(
        "ab-cannot",
        &[
            &["--tests", "cpuid,eoi", "--ab", "idle=poll,hlt"][..],
            &["--accept-no-verdict", "--samples", "5", "--warmup", "1"],
            &["--rounds", "1"],
        ]
        .concat(),
    );
    let err = text(&o.stderr);
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(
        warned,
        ["exitlab: warning: --ab idle cannot affect cpuid, eoi (idle affects the tests whose IPI targets wait as --idle says): they run anyway, as an A/A control"],
        "{err}"
    );
    assert_eq!(test_named(&v, "eoi")["status"], "ok");
    assert_eq!(test_named(&v, "cpuid")["status"], "ok");
}
