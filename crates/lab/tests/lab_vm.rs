//! Integration tests that boot the lab kernel in real VMs through /dev/kvm.
//!
//! They need a usable /dev/kvm and fail without one (CI=true or not): a missing KVM is
//! reported by the first test with the reason.
#![deny(unsafe_code)]

use std::time::{Duration, Instant};

use exitlab_lab::analysis::{self, Baseline};
use exitlab_lab::catalogue::{self, Where};
use exitlab_lab::runner::{self, Outcome, RunParams};
use exitlab_results::results::{CounterVerdict, Handling, TestStatus};

mod common;
use common::kvm;

fn params(samples: u64, batch: u64) -> RunParams {
    RunParams {
        ring: 0,
        samples,
        batch,
        warmup: 10,
        timeout: Duration::from_secs(3),
        pin: None,
        bare: false,
        irq: Default::default(),
        inject_cycles: 0,
        guest_cycles: 0,
    }
}

fn host_is_paravirtual() -> bool {
    exitlab_host::survey().is_nested_or_paravirtual()
}

#[test]
fn every_default_test_runs_with_plausible_samples_and_exact_exit_counts() {
    let kvm = kvm();
    let pv = host_is_paravirtual();
    let mut base = Baseline::default();
    for def in catalogue::default_suite() {
        let p = params(300, 1);
        let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
        if def.baseline && m.outcome == Outcome::Completed {
            // As bench does: the exits KVM counts during the empty loop (a busy host's
            // interrupts) are no test's, so a loaded host does not make a userspace exit
            // look partly handled in the kernel.
            base.loop_kvm_exits_per_iter = analysis::exits_per_iteration(&m);
        }
        if def.name == "vmcall" && pv {
            // On a paravirtual kvm_pvm a hypercall never completes: the test is skipped
            // saying so. On another nested host it must complete.
            if std::path::Path::new("/sys/module/kvm_pvm").exists() {
                assert_eq!(
                    m.outcome,
                    Outcome::Skipped(runner::NO_HYPERCALLS.into()),
                    "vmcall"
                );
                continue;
            }
        }
        if let Outcome::Skipped(why) = &m.outcome {
            // Only cpuid_0xd may be skipped, and only where guests see no XSAVE; the bench
            // skips it there too (runner::skip_reason decides for both).
            assert_eq!(def.name, "cpuid_0xd", "{why}");
            assert_eq!(why, runner::NO_XSAVE);
            assert_eq!(exitlab_vmm::Capabilities::get(&kvm).xsave_max_subleaf, None);
            continue;
        }
        assert_eq!(m.outcome, Outcome::Completed, "{}", def.name);
        assert_eq!(m.samples.len(), 300, "{}", def.name);
        let r = analysis::analyse(&m, &base, 1_000_000, false);
        assert_eq!(r.status, TestStatus::Ok, "{}", def.name);
        let c = r.cycles.as_ref().unwrap();
        assert!(c.min > 0.0 && c.max.is_finite(), "{}: {c:?}", def.name);
        let check = r.exit_check.as_ref().unwrap();
        assert!(check.passed, "{}: {}", def.name, check.detail);
        if def.expected == Where::User {
            assert_eq!(check.observed_user_exits, 310, "{}", def.name);
            assert_eq!(r.handled, Some(Handling::User), "{}", def.name);
            // Every sample saw exactly one userspace exit, with ordered host stamps.
            assert!(m.samples.iter().all(|s| s.seq_delta == 1), "{}", def.name);
            assert!(r.userspace_share.is_some(), "{}", def.name);
        } else {
            assert_eq!(check.observed_user_exits, 0, "{}", def.name);
            assert!(m.samples.iter().all(|s| s.seq_delta == 0), "{}", def.name);
            // Only what was observed, never the catalogue's expectation: KVM's counter
            // either counted exits beyond the userspace ones in a tenth of the iterations
            // (the test's own, or a busy host's interrupts during the empty loop) or it
            // did not, and the column says which.
            let (user, kernel) = analysis::observed_exits(&m, &base);
            assert_eq!(user, 0, "{}", def.name);
            let kernel_seen = kernel.is_some_and(|k| k * 10 >= 310);
            let expected = if kernel_seen {
                Handling::Kernel
            } else {
                Handling::NotObserved
            };
            assert_eq!(r.handled, Some(expected), "{}: {kernel:?}", def.name);
        }
        // KVM's own counters agree with exitlab's, or say they do not count.
        let k = r
            .kvm_counters
            .as_ref()
            .expect("this host has KVM binary stats");
        for c in &k.checks {
            assert_ne!(c.verdict, CounterVerdict::Mismatch, "{}: {c:?}", def.name);
        }
        let exits = k.checks.iter().find(|c| c.counter == "exits").unwrap();
        assert!(exits.kvm >= m.counts.total(), "{}: {exits:?}", def.name);
    }
}

#[test]
fn the_exit_path_probes_are_taken_around_three_kinds_of_test_outside_their_counted_exits() {
    let kvm = kvm();
    assert!(
        exitlab_vmm::Capabilities::get(&kvm).ioeventfd(),
        "the probe's port needs ioeventfds, which every KVM this project supports has"
    );
    // cpuid exits to no port, hlt runs without an in-kernel irqchip, inl_from_user
    // exits to the VMM on every iteration: the probes are the same in all three.
    let mut agreed = 0;
    for name in ["cpuid", "hlt", "inl_from_user"] {
        let def = catalogue::find(name).unwrap();
        let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(200, 1)).unwrap();
        assert_eq!(m.outcome, Outcome::Completed, "{name}");
        // Both probes at both ends, each block at least its accesses' worth of exits
        // (an exit costs far more than a cycle on any host).
        let p = m
            .exit_probe
            .per_exit()
            .unwrap_or_else(|| panic!("{name}: {:?}", m.exit_probe));
        for v in [p.kernel_before, p.kernel_after, p.user_before, p.user_after] {
            assert!(v >= 50.0, "{name}: {p:?}");
        }
        // The userspace probe's doorbells reach the VMM: they cost more than the writes
        // the kernel absorbs.
        assert!(p.user_before > p.kernel_before, "{name}: {p:?}");
        // Outside the counted part: exact userspace counts, and KVM counted no port
        // exit there beyond the ones exitlab saw (the probes' 4 x 72 accesses would be).
        let r = analysis::analyse(&m, &Baseline::default(), 1_000_000, false);
        let check = r.exit_check.as_ref().unwrap();
        assert!(check.passed, "{name}: {}", check.detail);
        let k = r
            .kvm_counters
            .as_ref()
            .expect("this host has KVM binary stats");
        // A host may count no port exit of a test at all (kvm_pvm counts none); a count
        // must agree with exitlab's.
        let io = k.checks.iter().find(|c| c.counter == "io_exits");
        assert!(
            io.is_some_and(|c| matches!(
                c.verdict,
                CounterVerdict::Agree | CounterVerdict::NotCounted
            )),
            "{name}: {io:?}"
        );
        agreed += usize::from(io.is_some_and(|c| c.verdict == CounterVerdict::Agree));
    }
    // kvm_pvm counts no port exit at all; every other KVM counts them, and there a
    // probe write inside the counted part would show as more exits than exitlab saw.
    if !std::path::Path::new("/sys/module/kvm_pvm").exists() {
        assert!(
            agreed > 0,
            "KVM counted the port exits of none of the three tests"
        );
    }
}

#[test]
fn batches_larger_than_one_ring_are_reassembled() {
    let kvm = kvm();
    let def = catalogue::find("outl_to_user").unwrap();
    // More samples than one ring holds: at least one BATCH doorbell plus DONE.
    let n = exitlab_abi::SAMPLES_PER_BATCH + 100;
    let mut p = params(n, 1);
    p.ring = 3; // ring 3 runs the loop natively on hosts that emulate ring 0
                // The no-progress window must hold a whole ring of userspace exits between two
                // doorbells: 3 s did not in a debug build inside an emulated L1 (run-in-l1), where
                // an exit costs ~100x a hardware one.
    p.timeout = Duration::from_secs(60);
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    assert_eq!(m.outcome, Outcome::Completed);
    assert_eq!(m.samples.len() as u64, n);
    assert_eq!(m.doorbells, 2);
    assert_eq!(m.counts.io_out, n + 10);
    assert_eq!(m.counts.doorbell, 2);
}

#[test]
fn batch_of_iterations_gives_batch_exits_per_sample() {
    let kvm = kvm();
    let def = catalogue::find("mmio_read_user").unwrap();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(50, 7)).unwrap();
    assert_eq!(m.outcome, Outcome::Completed);
    assert!(m.samples.iter().all(|s| s.seq_delta == 7));
    assert_eq!(m.counts.mmio_read, 10 + 50 * 7);
    let check = analysis::exit_check(&m);
    assert!(check.passed, "{}", check.detail);
}

#[test]
fn each_test_runs_its_own_batch_unless_one_is_given() {
    // Without --batch a kernel-handled test takes four iterations a sample and a
    // userspace-handled one a single one; the guest's own counts say what it ran: the
    // iterations that did the guest work (kernel-handled tests only) and the userspace
    // exits between two samples.
    let kvm = kvm();
    let kernel = catalogue::find("outl_to_kernel").unwrap();
    let user = catalogue::find("mmio_read_user").unwrap();
    assert_eq!((kernel.batch, user.batch), (catalogue::KERNEL_BATCH, 1));
    let run = |def, batch| {
        let p = RunParams {
            guest_cycles: 100,
            ..params(20, batch)
        };
        let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
        assert_eq!(m.outcome, Outcome::Completed, "{} {batch}", def.name);
        m
    };
    let k = run(kernel, runner::BATCH_PER_TEST);
    assert_eq!(k.params.batch, catalogue::KERNEL_BATCH);
    assert_eq!(k.guest_work.iterations, 10 + 20 * catalogue::KERNEL_BATCH);
    let u = run(user, runner::BATCH_PER_TEST);
    assert_eq!(u.params.batch, 1);
    assert!(u.samples.iter().all(|s| s.seq_delta == 1));
    assert_eq!(u.counts.mmio_read, 10 + 20);
    // A batch given is every test's.
    let k = run(kernel, 3);
    assert_eq!((k.params.batch, k.guest_work.iterations), (3, 10 + 20 * 3));
    let u = run(user, 3);
    assert!(u.samples.iter().all(|s| s.seq_delta == 3));
    assert_eq!(u.counts.mmio_read, 10 + 20 * 3);
}

#[test]
fn ring3_refuses_privileged_instructions_as_skipped() {
    let kvm = kvm();
    let def = catalogue::find("rdmsr_user").unwrap();
    let mut p = params(10, 1);
    p.ring = 3;
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    match m.outcome {
        Outcome::Skipped(r) => assert!(r.contains("ring 0"), "{r}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn garbage_in_the_shared_page_is_a_protocol_error() {
    let kvm = kvm();
    let def = catalogue::find("selftest_garbage").unwrap();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(10, 1)).unwrap();
    match m.outcome {
        Outcome::Failed(r) => {
            assert!(r.contains("guest protocol error"), "{r}");
            assert!(r.contains("exceeds the ring"), "{r}");
            assert!(r.contains("rip="), "registers missing: {r}");
            // The lab kernel runs in 64-bit mode: the report carries the top of its stack.
            assert!(r.contains("stack (rsp upwards):"), "stack missing: {r}");
        }
        o => panic!("{o:?}"),
    }
    assert!(m.samples.is_empty());
}

#[test]
fn triple_fault_is_reported_with_registers() {
    let kvm = kvm();
    let def = catalogue::find("selftest_triple_fault").unwrap();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(10, 1)).unwrap();
    match m.outcome {
        Outcome::Failed(r) => {
            assert!(r.contains("shut down"), "{r}");
            assert!(r.contains("rip="), "{r}");
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn guest_exception_is_reported_with_vector_and_rip() {
    let kvm = kvm();
    let def = catalogue::find("selftest_ud").unwrap();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(10, 1)).unwrap();
    match m.outcome {
        Outcome::Failed(r) => assert!(r.contains("vector 6 (#UD)"), "{r}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn spinning_guest_is_stopped_after_its_timeout() {
    let kvm = kvm();
    let def = catalogue::find("selftest_spin").unwrap();
    let mut p = params(10, 1);
    p.timeout = Duration::from_millis(700);
    let t = Instant::now();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(700), "{took:?}");
    // Only a guard against a watchdog that never fires: the outcome below says it did.
    assert!(took < Duration::from_secs(120), "{took:?}");
    match m.outcome {
        Outcome::DidNotComplete(r) => {
            assert!(r.contains("no progress for 0.7 s"), "{r}");
            assert!(r.contains("rip="), "{r}");
            // The in-kernel LAPIC's state is reported, and a vCPU spinning (not halted)
            // is not taken for one the host failed to wake.
            assert!(r.contains("\ninterrupts: runnable, IF="), "{r}");
            assert!(!r.contains(runner::LOST_WAKEUP), "{r}");
            assert!(!r.contains(runner::SHADOW_IGNORED), "{r}");
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn every_sample_of_a_userspace_exit_has_an_ordered_host_timeline() {
    let kvm = kvm();
    let def = catalogue::find("inl_from_user").unwrap();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(200, 1)).unwrap();
    assert_eq!(m.outcome, Outcome::Completed);
    let off = m
        .tsc_offset()
        .expect("KVM_VCPU_TSC_OFFSET is needed for the phase breakdown");
    // On a host whose TSC offset is exact, every sample's host stamps fall inside the
    // guest's interval, in order, and each leg takes time.
    let (e, h, n) = exitlab_results::samples::phase_values(&m.samples, off);
    assert_eq!(e.len(), 200, "samples with unordered stamps were left out");
    assert!(e.iter().chain(&n).all(|&x| x > 0.0));
    assert!(h.iter().all(|&x| x >= 0.0));
    // The phases put the VMM's time where it is: with a known busy-wait of N cycles added
    // to the handling of each userspace exit, the handling phase grows by what the waits
    // added by the VMM's count (within a fifth) and the two kernel legs together by much
    // less.
    const N: u64 = 2_000_000;
    let phases = |inject_cycles: u64| {
        let p = RunParams {
            inject_cycles,
            ..params(40, 1)
        };
        let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
        assert_eq!(m.outcome, Outcome::Completed);
        let r = analysis::analyse(&m, &Baseline::default(), 1_000_000, false);
        (r.phases.expect("phases"), m.injected)
    };
    let ((off, none), (on, spun)) = (phases(0), phases(N));
    assert_eq!(none.waits, 0);
    let handling = on.handling.median - off.handling.median;
    let (lo, hi) = spun_range(N, spun);
    assert!(
        (lo..hi).contains(&handling),
        "waits of {N} cycles that spun {spun:?} added {handling:.0} to the handling phase"
    );
    let legs = |p: &exitlab_results::results::Phases| p.exit_leg.median + p.entry_leg.median;
    assert!(
        (legs(&on) - legs(&off)).abs() < 0.2 * spun.min as f64,
        "the kernel legs moved with the VMM's wait: {:.0} -> {:.0}",
        legs(&off),
        legs(&on)
    );
}

/// What waits of `n` cycles that spun `spun` can add to a median of exit costs: between
/// a fifth less than the shortest wait and a fifth more than the longest. On a host where
/// the VMM keeps its CPU every wait adds about `n` (calibrated to `n` on average: one can
/// count a few cycles under it, by how far its spin's last pass fell short of the
/// median's), and so does this range; where the VMM's thread loses its CPU while it spins
/// (a nested guest's emulated CPUs sharing one host thread), the waits are longer and the
/// exits get what they spun.
fn spun_range(n: u64, spun: exitlab_vmm::vcpu::InjectedWaits) -> (f64, f64) {
    eprintln!(
        "inject-cycles {n}: {} waits spun {:.0} cycles on average (shortest {}, longest {})",
        spun.waits,
        spun.mean().unwrap_or(0.0),
        spun.min,
        spun.max
    );
    assert!(spun.waits > 0 && spun.min >= n - n / 100, "{spun:?}");
    (0.8 * spun.min as f64, 1.2 * spun.max as f64)
}

#[test]
fn phases_survive_four_rounds_in_four_vms() {
    let kvm = kvm();
    let def = catalogue::find("inl_from_user").unwrap();
    let rounds: Vec<_> = (0..4)
        .map(|_| runner::run_test(&kvm, exitlab_guest::IMAGE, def, params(50, 1)).unwrap())
        .collect();
    let m = runner::Measurement::merge(rounds).unwrap();
    assert_eq!(m.outcome, Outcome::Completed);
    assert_eq!(m.rounds.len(), 4);
    let r = analysis::analyse(&m, &Baseline::default(), 1_000_000, false);
    assert_eq!(r.phases.expect("phases after 4 rounds").exit_leg.n, 200);
    assert!(r.exit_check.unwrap().passed);
}

#[test]
fn bare_loop_answers_the_same_port_reads() {
    let kvm = kvm();
    let def = catalogue::find("inl_from_user").unwrap();
    let mut p = params(100, 1);
    p.bare = true;
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    // The guest got through all 110 port reads: the bare loop answered each one, and
    // published stamps for each, one exit per sample.
    assert_eq!(m.outcome, Outcome::Completed);
    assert_eq!(m.samples.len(), 100);
    assert!(m.samples.iter().all(|s| s.seq_delta == 1));
    assert_eq!(
        exitlab_results::samples::host_values(&m.samples).0.len(),
        100
    );
    // It counts only doorbells (READY is before the measured part, DONE in it).
    assert_eq!(m.counts.doorbell, 1);
    assert_eq!(m.counts.total(), 1);
    let kvm_exits = m.kvm_exits().expect("this host has KVM binary stats");
    assert!(kvm_exits >= 111, "KVM counted {kvm_exits} exits");
}

#[test]
fn many_exits_per_sample_are_progress_for_the_watchdog() {
    // Each sample takes enough userspace exits to last about three times the no-progress
    // window (the cost of one exit is measured first), and no doorbell comes until DONE.
    // The run is not stopped while it moves. The window is 1 s rather than the 0.5 s
    // it once was: on a loaded 2-CPU host a vCPU thread can wait half a second for a CPU,
    // which is no progress and was once taken for a stall.
    let kvm = kvm();
    let def = catalogue::find("inl_from_user").unwrap();
    let mut p = params(20, 1);
    p.ring = 3;
    let probe = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    assert_eq!(probe.outcome, Outcome::Completed);
    let khz = f64::from(probe.tsc_khz.expect("KVM_GET_TSC_KHZ"));
    let cycles = exitlab_results::samples::per_iteration(&probe.samples, 1).unwrap();
    let fastest = cycles.iter().copied().fold(f64::INFINITY, f64::min);
    let timeout = Duration::from_secs(1);
    let exits_per_sample = (3.0 * timeout.as_secs_f64() * khz * 1e3 / fastest).ceil() as u64;
    let mut p = params(2, exits_per_sample.clamp(1_000, 5_000_000));
    p.ring = 3;
    p.timeout = timeout;
    let t = Instant::now();
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    assert_eq!(m.outcome, Outcome::Completed, "after {:?}", t.elapsed());
    assert_eq!(m.counts.io_in, 10 + 2 * p.batch);
}

#[test]
fn injected_cycles_add_to_every_userspace_exit_and_to_no_kernel_one() {
    // The known-answer control: the VMM adds N host cycles per userspace exit by a
    // busy-wait. Its count of waits must equal the test's userspace exits (warm-up
    // included), and the net figure must grow by what the waits added by its count
    // (about N where the VMM keeps its CPU) within 20 %, while a kernel-handled test is
    // not touched (no wait at all). N is about
    // 1 ms of host time, far above what an exit costs (20k-50k cycles on a paravirtual
    // host, more in a nested one), so that the host's noise cannot move the difference of
    // the medians by a fifth of it.
    const N: u64 = 2_000_000;
    let kvm = kvm();
    let user = catalogue::find("inl_from_user").unwrap();
    let kernel = catalogue::find("inl_from_kernel").unwrap();
    let net_median = |m: &runner::Measurement| {
        let r = analysis::analyse(m, &Baseline::default(), 0, false);
        r.net_median_cycles.unwrap()
    };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let mut spun = exitlab_vmm::vcpu::InjectedWaits::default();
    for _ in 0..3 {
        for cycles in [0, N] {
            let p = RunParams {
                inject_cycles: cycles,
                ..params(30, 1)
            };
            let m = runner::run_test(&kvm, exitlab_guest::IMAGE, user, p).unwrap();
            assert_eq!(m.outcome, Outcome::Completed);
            let expected = if cycles == 0 { 0 } else { m.counts.io_in };
            assert_eq!(m.counts.io_in, 10 + 30);
            assert_eq!(m.injected.waits, expected, "one wait per userspace exit");
            if cycles == 0 {
                off.push(net_median(&m));
            } else {
                on.push(net_median(&m));
                spun = spun.merged(m.injected);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let added = median(&mut on) - median(&mut off);
    let (lo, hi) = spun_range(N, spun);
    assert!(
        (lo..hi).contains(&added),
        "injecting {N} cycles that spun {spun:?} added {added:.0} to the net median"
    );
    let p = RunParams {
        inject_cycles: N,
        ..params(100, 1)
    };
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, kernel, p).unwrap();
    assert_eq!(m.outcome, Outcome::Completed);
    assert_eq!(
        m.injected.waits, 0,
        "a kernel-handled test has no userspace exit"
    );
}

#[test]
fn guest_work_adds_its_calibrated_cost_to_kernel_handled_loops_only() {
    // The guest-side known-answer control: with guest-cycles N the lab kernel waits N TSC
    // cycles (plus a bounded overshoot) after the measured instruction of each iteration
    // of a kernel-handled test's loop, and after nothing in the empty loop each sample is
    // net of. The empty loop's own run with the work (loop_overhead) calibrates what the
    // work costs. N is large enough that host noise cannot hide it.
    const N: u64 = 50_000;
    let kvm = kvm();
    let baseline = catalogue::baseline();
    let kernel = catalogue::find("cpuid").unwrap();
    let user = catalogue::find("inl_from_user").unwrap();
    let run = |def, cycles| {
        let p = RunParams {
            guest_cycles: cycles,
            ..params(300, 1)
        };
        let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
        assert_eq!(m.outcome, Outcome::Completed, "{} {cycles}", def.name);
        m
    };
    let paired =
        |m: &runner::Measurement| exitlab_results::samples::paired_net(&m.samples, m.params.batch);
    let loops = |m: &runner::Measurement| -> Vec<f64> {
        m.samples.iter().map(|s| s.g_loop as f64).collect()
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut calibration, mut kernel_off, mut kernel_on, mut user_off, mut user_on) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut loop_off, mut loop_on) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        for cycles in [0, N] {
            let done = if cycles == 0 { 0 } else { 10 + 300 };
            let b = run(baseline, cycles);
            assert_eq!(
                b.guest_work.iterations, done,
                "the empty loop's calibration"
            );
            let k = run(kernel, cycles);
            assert_eq!(k.guest_work.iterations, done, "one wait per iteration");
            assert!(
                k.guest_work.spent >= done * cycles,
                "each wait spans N at least"
            );
            let c = analysis::exit_check(&k);
            assert!(c.passed, "kernel-handled: no userspace exit: {c:?}");
            let u = run(user, cycles);
            assert_eq!(u.guest_work, runner::GuestWork::default(), "no work for it");
            assert_eq!(u.counts.io_in, 10 + 300, "one userspace exit per iteration");
            if cycles == 0 {
                assert_eq!(b.guest_work, runner::GuestWork::default());
                kernel_off.push(median(paired(&k)));
                user_off.push(median(paired(&u)));
                loop_off.push(median(loops(&k)));
            } else {
                calibration.push(median(paired(&b)));
                kernel_on.push(median(paired(&k)));
                user_on.push(median(paired(&u)));
                loop_on.push(median(loops(&k)));
            }
        }
    }
    let calibration = median(calibration);
    assert!(
        calibration >= N as f64,
        "the work alone costs {calibration:.0} cycles, less than the {N} it waits"
    );
    let added = median(kernel_on) - median(kernel_off);
    assert!(
        added >= 0.9 * calibration,
        "the work (calibrated {calibration:.0}) added only {added:.0} to cpuid's net median"
    );
    let moved = median(user_on) - median(user_off);
    assert!(
        moved.abs() < 0.5 * N as f64,
        "inl_from_user has no work but moved by {moved:.0}"
    );
    // The empty loop each sample is net of does not include the work.
    let (lo, lw) = (median(loop_off), median(loop_on));
    assert!(
        lw < lo + 0.5 * N as f64,
        "the paired empty loop took {lw:.0} cycles with the work, {lo:.0} without"
    );
}

#[test]
fn guest_work_is_refused_where_the_figure_would_not_show_it() {
    let kvm = kvm();
    let def = catalogue::find("ipi_one_way").unwrap();
    let p = RunParams {
        guest_cycles: 1_000,
        ..params(10, 1)
    };
    let m = runner::run_test(&kvm, exitlab_guest::IMAGE, def, p).unwrap();
    match &m.outcome {
        Outcome::Skipped(why) => assert!(why.contains("guest-cycles"), "{why}"),
        other => panic!("{other:?}"),
    }
}
