//! Turns a raw [`Measurement`] into a [`TestResult`]: per-iteration cycles, the
//! exit-count check, where the exit was handled, the phase breakdown of userspace exits,
//! KVM_RUN as seen from the VMM, and the VMM's userspace share. The arithmetic on the
//! samples themselves is [`exitlab_results::samples`]; this module adds what the lab
//! knows of the run (its test, parameters and exit counts).

use std::collections::BTreeMap;

use exitlab_abi::{Sample, SAMPLES_PER_BATCH};

use crate::catalogue::{TestDef, UserExit, Where};
use exitlab_results::format::fmt_cycles;
use exitlab_results::results::{
    CounterCheck, CounterVerdict, ExitCheck, Handling, KvmCounters, Phases, RoundSpread,
    TestResult, TestStatus,
};
use exitlab_results::samples::{
    host_values, paired_net, per_iteration, phase_values_by_round, round_spread, summary_of, Round,
};

use crate::runner::{Measurement, Outcome};
use exitlab_vmm::vcpu::InjectedWaits;

/// Context from other tests of the same run that one test's analysis needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Baseline {
    /// KVM exits per iteration of `loop_overhead` (what the loop alone costs in
    /// in-kernel exits on this host; 0 on hardware).
    pub loop_kvm_exits_per_iter: Option<f64>,
}

fn expected_handling(w: Where) -> Handling {
    match w {
        Where::Kernel => Handling::Kernel,
        Where::User => Handling::User,
        Where::Nowhere => Handling::None,
    }
}

/// The exit-count check: a `User` test must cause exactly one userspace exit of its kind
/// per iteration (warm-up included) and no other userspace exit except the doorbells;
/// any other test must cause no userspace exit but the doorbells. The host's per-exit
/// sequence numbers, as the guest saw them, must add up the same way.
pub fn exit_check(m: &Measurement) -> ExitCheck {
    let p = &m.params;
    let iterations = p.warmup + p.samples * p.batch;
    let measured_iterations = p.samples * p.batch;
    let counts: BTreeMap<&str, u64> = m.counts.entries().into_iter().collect();
    let kind = m.def.user_exit.map(|k| k.name());
    let expected = if kind.is_some() { iterations } else { 0 };
    let observed = kind.and_then(|k| counts.get(k).copied()).unwrap_or(0);
    let mut problems = Vec::new();
    if observed != expected {
        problems.push(format!(
            "{} {} exits, expected {expected}",
            observed,
            kind.unwrap_or("userspace")
        ));
    }
    for (name, &n) in &counts {
        if Some(*name) == kind || *name == "doorbell" || n == 0 {
            continue;
        }
        problems.push(format!("{n} unexpected {name} exits"));
    }
    // The protocol rings one BATCH per full ring and one DONE per round: the VMM's count
    // of doorbell exits and the hook's count of doorbells must both be that.
    let doorbells_expected = expected_doorbells(m);
    let doorbell_exits = counts.get("doorbell").copied().unwrap_or(0);
    if doorbell_exits != doorbells_expected || m.doorbells != doorbells_expected {
        problems.push(format!(
            "{doorbell_exits} doorbell exits and {} doorbells handled, expected {doorbells_expected}",
            m.doorbells
        ));
    }
    let seq_sum: u64 = m.samples.iter().map(|s| s.seq_delta).sum();
    let seq_expected = if kind.is_some() {
        measured_iterations
    } else {
        0
    };
    if seq_sum != seq_expected {
        problems.push(format!(
            "the guest saw {seq_sum} userspace exits inside its samples, expected {seq_expected}"
        ));
    }
    let passed = problems.is_empty();
    let detail = if passed {
        match kind {
            Some(k) => format!("{observed} {k} exits for {iterations} iterations, none other"),
            None => format!(
                "no userspace exit in {iterations} iterations (besides {} doorbells)",
                m.doorbells
            ),
        }
    } else {
        problems.join("; ")
    };
    let observed_user = if kind.is_some() {
        observed
    } else {
        m.counts.total() - m.counts.doorbell
    };
    ExitCheck {
        expected_user_exits: expected,
        observed_user_exits: observed_user,
        passed,
        detail,
        // Whether where the exits went was seen needs the run's baseline: [`analyse`].
        observed: None,
    }
}

/// Doorbells the protocol rings after READY: per round, one BATCH for each full ring of
/// samples and one DONE.
pub fn expected_doorbells(m: &Measurement) -> u64 {
    let per_round = |samples: u64| samples / SAMPLES_PER_BATCH + 1;
    if m.rounds.is_empty() {
        per_round(m.params.samples)
    } else {
        m.rounds.iter().map(|r| per_round(r.samples as u64)).sum()
    }
}

/// All KVM exits per iteration of a run, from KVM's binary statistics; of the empty
/// loop's run, [`Baseline::loop_kvm_exits_per_iter`] (what a busy host's interrupts cost
/// every test alike).
pub fn exits_per_iteration(m: &Measurement) -> Option<f64> {
    let p = &m.params;
    let iterations = (p.warmup + p.samples * p.batch).max(1) as f64;
    m.kvm_exits().map(|k| k as f64 / iterations)
}

/// KVM exits per iteration above the empty loop's, from KVM's binary statistics.
pub fn kvm_exits_per_iteration(m: &Measurement, base: &Baseline) -> Option<f64> {
    exits_per_iteration(m).map(|e| e - base.loop_kvm_exits_per_iter.unwrap_or(0.0))
}

/// Userspace exits of the test's own kind (every userspace exit but the doorbells for a
/// test that expects none), and the exits KVM counted beyond all userspace exits and the
/// empty loop's (`None` without binary stats).
pub fn observed_exits(m: &Measurement, base: &Baseline) -> (u64, Option<u64>) {
    let user = match m.def.user_exit {
        Some(k) => m
            .counts
            .entries()
            .into_iter()
            .find(|(name, _)| *name == k.name())
            .map_or(0, |e| e.1),
        None => m.counts.total() - m.counts.doorbell,
    };
    let p = &m.params;
    let iterations = (p.warmup + p.samples * p.batch) as f64;
    let kernel = m.kvm_exits().map(|k| {
        let loop_exits = base.loop_kvm_exits_per_iter.unwrap_or(0.0) * iterations;
        (k as f64 - m.counts.total() as f64 - loop_exits)
            .max(0.0)
            .round() as u64
    });
    (user, kernel)
}

/// Where the exits were handled, as observed and only as observed: "user" when at least
/// a tenth of the iterations exited to userspace, "kernel" when KVM counted at least a
/// tenth of the iterations in exits it handled itself, "mixed" (with both counts) when
/// both hold, and "not observed" when neither does (a host that handles the instruction
/// without a counted exit, or no binary stats to count kernel exits with). The
/// catalogue's expectation plays no part.
pub fn observed_handling(m: &Measurement, base: &Baseline) -> Handling {
    let p = &m.params;
    let iterations = (p.warmup + p.samples * p.batch).max(1);
    let (user, kernel) = observed_exits(m, base);
    let seen = |n: u64| n.saturating_mul(10) >= iterations;
    match (seen(user), kernel.filter(|&k| seen(k))) {
        (true, Some(kernel)) => Handling::Mixed { user, kernel },
        (true, None) => Handling::User,
        (false, Some(_)) => Handling::Kernel,
        (false, None) => Handling::NotObserved,
    }
}

/// KVM's name of the counter that counts `kind`'s exits.
fn kvm_counter_of(kind: UserExit) -> Option<&'static str> {
    match kind {
        UserExit::IoIn | UserExit::IoOut => Some("io_exits"),
        UserExit::MmioRead | UserExit::MmioWrite => Some("mmio_exits"),
        UserExit::Hlt => Some("halt_exits"),
        UserExit::Rdmsr | UserExit::Wrmsr => None,
    }
}

/// Compares KVM's counters with exitlab's counts of the same exits over the measured
/// part: `exits` with every userspace exit, `io_exits` with port exits (doorbells
/// included), `mmio_exits` with MMIO exits, `halt_exits` with HLT exits. KVM counts the
/// exits it handles itself too, so it may count more, except for the test's own
/// userspace kind, every exit of which must have reached the VMM. `None` without binary
/// stats.
pub fn kvm_cross_check(m: &Measurement) -> Option<KvmCounters> {
    let deltas = m.kvm_counters.as_ref()?;
    let c = &m.counts;
    let own = m.def.user_exit.and_then(kvm_counter_of);
    let pairs = [
        ("exits", c.total()),
        ("io_exits", c.io_in + c.io_out + c.doorbell),
        ("mmio_exits", c.mmio_read + c.mmio_write),
        ("halt_exits", c.hlt),
    ];
    let checks = pairs
        .into_iter()
        .filter_map(|(name, exitlab)| {
            let kvm = *deltas.get(name)?;
            let verdict = if kvm == exitlab {
                CounterVerdict::Agree
            } else if kvm == 0 {
                CounterVerdict::NotCounted
            } else if kvm < exitlab || own == Some(name) {
                CounterVerdict::Mismatch
            } else {
                CounterVerdict::KernelHandled
            };
            Some(CounterCheck {
                counter: name.to_string(),
                kvm,
                exitlab,
                verdict,
            })
        })
        .collect();
    Some(KvmCounters {
        deltas: deltas
            .iter()
            .filter(|(_, &v)| v > 0)
            .map(|(k, &v)| (k.clone(), v))
            .collect(),
        checks,
    })
}

/// With HLT exits disabled, no vCPU may have a HLT exit in KVM's binary stats; a host
/// that accepts KVM_X86_DISABLE_EXITS_HLT but still intercepts HLT fails the check.
pub fn check_disabled_exits(m: &Measurement, check: &mut ExitCheck) {
    if m.params.irq.disable_exits & exitlab_vmm::knobs::DISABLE_HLT == 0 {
        return;
    }
    let exiting: Vec<String> = m
        .per_vcpu
        .iter()
        .filter_map(|v| match v.halt_exits {
            Some(n) if n > 0 => Some(format!("{n} on vCPU {}", v.vcpu)),
            _ => None,
        })
        .collect();
    if !exiting.is_empty() {
        check.passed = false;
        check.detail += &format!(
            "; HLT exits were disabled (KVM_X86_DISABLE_EXITS_HLT accepted), yet KVM counted HLT exits: {} (this host does not honour the capability)",
            exiting.join(", ")
        );
    }
}

/// Builds the result of one test.
pub fn analyse(m: &Measurement, base: &Baseline, tsc_khz: u64, raw: bool) -> TestResult {
    let mut r = unfinished_result(m);
    if let Some(status) = status_of(&m.outcome) {
        r.status = status;
        return r;
    }
    if let Err(e) = per_iteration(&m.samples, m.params.batch) {
        r.status = TestStatus::Failed { reason: e };
        return r;
    }
    // Every sample counts: a busy host is a sign reported beside the figures
    // (`docs/model.md`), never a filter.
    let (samples, rounds) = (&m.samples, &m.rounds);
    r.round_spread = Some(RoundSpread {
        rounds: m.rounds.len() as u32,
        spread: round_spread(samples, rounds, m.params.batch),
    });
    let values = per_iteration(samples, m.params.batch).unwrap_or_default();
    r.cycles = summary_of(&values);
    r.exits = m
        .counts
        .entries()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    r.kvm_exits = m.kvm_exits();
    r.kvm_counters = kvm_cross_check(m);
    r.handled = Some(observed_handling(m, base));
    r.exit_check = Some(exit_check(m));
    if let Some(c) = r.exit_check.as_mut() {
        check_disabled_exits(m, c);
        c.observed = Some(ExitCheck::observed_for(r.expected_handling, r.handled));
    }
    net_figures(&mut r, m, samples, tsc_khz);
    userspace_figures(&mut r, m, samples, rounds);
    if raw {
        r.raw_samples = Some(
            m.samples
                .iter()
                .map(|s| s.g_end.wrapping_sub(s.g_start))
                .collect(),
        );
    }
    r
}

/// The result of `m` before any figure: its test, ring, counts asked for and vCPUs.
fn unfinished_result(m: &Measurement) -> TestResult {
    let def: &TestDef = m.def;
    TestResult {
        name: def.name.to_string(),
        ring: m.params.ring,
        status: TestStatus::Ok,
        handled: None,
        expected_handling: expected_handling(def.expected),
        baseline: def.baseline,
        samples: m.params.samples,
        batch: m.params.batch,
        cycles: None,
        net_median_cycles: None,
        median_ns: None,
        median_ns_is_net: false,
        exits: BTreeMap::new(),
        kvm_exits: None,
        kvm_counters: None,
        round_spread: None,
        exit_check: None,
        phases: None,
        kvm_run_cycles: None,
        userspace_share: None,
        raw_samples: None,
        rounds: Vec::new(),
        net_percentiles: None,
        injected: (m.params.inject_cycles != 0).then_some(m.injected),
        irq: Some(exitlab_results::irq::IrqResult {
            apic: m.apic,
            cpus: m.params.irq.cpus_for(def),
            per_vcpu: m.per_vcpu.clone(),
        }),
    }
}

/// The status of a run that did not complete; `None` when it did.
fn status_of(outcome: &Outcome) -> Option<TestStatus> {
    match outcome {
        Outcome::Completed => None,
        Outcome::Skipped(reason) => Some(TestStatus::Skipped {
            reason: reason.clone(),
        }),
        Outcome::DidNotComplete(reason) => Some(TestStatus::DidNotComplete {
            reason: reason.clone(),
        }),
        Outcome::Failed(reason) => Some(TestStatus::Failed {
            reason: reason.clone(),
        }),
    }
}

/// The net median (each sample minus its paired empty loop) and the median in ns.
fn net_figures(r: &mut TestResult, m: &Measurement, samples: &[Sample], tsc_khz: u64) {
    let def: &TestDef = m.def;
    if let Some(c) = &r.cycles {
        // Net of the loop: the median of each sample minus the empty loop measured just
        // before it in the same VM (paired, so host drift between tests cancels out).
        let net = if def.baseline {
            None
        } else {
            summary_of(&paired_net(samples, m.params.batch)).map(|n| n.median)
        };
        r.net_median_cycles = net;
        if tsc_khz > 0 {
            let cycles = net.unwrap_or(c.median);
            r.median_ns = Some(cycles * 1e6 / tsc_khz as f64);
            r.median_ns_is_net = net.is_some();
        }
    }
}

/// What the guest work (`guest-cycles`, a known-answer control) costs in one run: the
/// empty loop's rounds with the work, each sample net of its paired empty loop without
/// it, measured in the same run as the tests it is added to, over every round that has
/// it, as the figures of the tests it calibrates are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuestWorkCalibration {
    /// Median over the rounds of each round's median (cycles per iteration).
    pub median: f64,
    /// Lowest round median.
    pub lo: f64,
    /// Highest round median.
    pub hi: f64,
    /// Rounds it rests on.
    pub rounds: usize,
}

/// The calibration of the guest work in a run's results, from the baseline's per-round
/// net medians (only a run with the work gives the baseline one); `None` without.
pub fn guest_work_calibration(tests: &[TestResult]) -> Option<GuestWorkCalibration> {
    let t = tests.iter().find(|t| t.baseline && t.status.is_ok())?;
    let mut v: Vec<f64> = t
        .rounds
        .iter()
        .filter_map(|r| r.net_median.filter(|x| x.is_finite()))
        .collect();
    v.sort_by(f64::total_cmp);
    let median = summary_of(&v)?.median;
    Some(GuestWorkCalibration {
        median,
        lo: v[0],
        hi: v[v.len() - 1],
        rounds: v.len(),
    })
}

/// How the note on the guest work starts.
pub const GUEST_WORK_NOTE: &str = "guest work (known-answer control): ";

/// The note of a run with guest work: what it costs, as calibrated.
pub fn guest_work_note(tests: &[TestResult], guest_cycles: u64) -> Option<String> {
    let c = guest_work_calibration(tests)?;
    Some(format!(
        "{GUEST_WORK_NOTE}guest-cycles {guest_cycles} after the measured instruction of every kernel-handled test; the work alone (loop_overhead with it, net of its paired empty loop) costs a median {} cycles per iteration over {} rounds (round medians {}..{}): the change those tests should show; userspace-handled tests do not get it",
        fmt_cycles(c.median),
        c.rounds,
        fmt_cycles(c.lo),
        fmt_cycles(c.hi),
    ))
}

/// How the note on the VMM's injected waits (`inject-cycles`) starts.
pub const INJECTED_NOTE: &str = "injected waits (known-answer control): ";

/// The waits the VMM added to all the tests of a run (`inject-cycles`), together; `None`
/// with the knob off.
pub fn injected_waits(tests: &[TestResult]) -> Option<InjectedWaits> {
    tests
        .iter()
        .filter_map(|t| t.injected)
        .reduce(InjectedWaits::merged)
}

/// What waits spun, in words: their mean, extremes and count, and where they were
/// calibrated (on unmeasured exits left without one, or in a warm loop only).
pub fn spun_phrase(w: &InjectedWaits) -> String {
    match w.mean() {
        Some(mean) => format!(
            "a mean {} cycles per wait (shortest {}, longest {}, {} waits; {})",
            fmt_cycles(mean),
            fmt_cycles(w.min as f64),
            fmt_cycles(w.max as f64),
            fmt_cycles(w.waits as f64),
            calibration_phrase(w)
        ),
        // Exits left without a wait and none with one: every calibration where the waits
        // are made ended with its run after its first exit.
        None if w.unwaited > 0 => format!(
            "no wait ({} exit{} left without one by a calibration where the waits are made, which the run ended within)",
            fmt_cycles(w.unwaited as f64),
            if w.unwaited == 1 { "" } else { "s" }
        ),
        None => "no wait".to_string(),
    }
}

/// Where waits were calibrated: in a warm loop only, or where they were made (on the
/// first exits, left without a wait by turns), and in how many VMs that calibration was
/// done and not used, or begun and not done.
fn calibration_phrase(w: &InjectedWaits) -> String {
    let count = |n: u64| fmt_cycles(n as f64);
    if w.unwaited == 0 && w.in_situ == 0 {
        return "calibrated in a warm loop only".to_string();
    }
    let where_made = format!(
        "on the first exits, which the guest does not measure, {} of them left without a wait",
        count(w.unwaited)
    );
    // A file written before the calibrations were counted has neither count, and says
    // where the waits were calibrated as it did then.
    let counted = w.in_situ > 0 || w.in_situ_cut > 0;
    let used = w.in_situ.saturating_sub(w.in_situ_unused);
    let mut s = if counted && used == 0 {
        format!("calibrated in a warm loop, the calibration where they were made ({where_made}) used in no VM")
    } else {
        format!("calibrated where they were made, {where_made}")
    };
    if w.in_situ_unused > 0 {
        s.push_str(&format!(
            "; in {} of the {} VMs where that calibration was done a wait there added over {} cycles beyond its spin and the warm loop's calibration stood",
            count(w.in_situ_unused),
            count(w.in_situ),
            count(exitlab_vmm::vcpu::MAX_EXCESS)
        ));
    }
    if w.in_situ_cut > 0 {
        s.push_str(&format!(
            "; in {} VM{} the run ended before that calibration was done, and the warm loop's stood",
            count(w.in_situ_cut),
            if w.in_situ_cut == 1 { "" } else { "s" }
        ));
    }
    s
}

/// The note of a run with `inject-cycles` on: what the waits added by the VMM's count
/// (spins and their calibrated cost outside them), the change userspace-handled tests'
/// exits got on average (each test's own is in its `injected`).
pub fn injected_note(tests: &[TestResult], inject_cycles: u64) -> Option<String> {
    let w = injected_waits(tests)?;
    Some(format!(
        "{INJECTED_NOTE}inject-cycles {inject_cycles} after every userspace exit; the VMM measured {}: what userspace-handled tests' exits got on average (per test in its `injected`; a median figure gets less where a few waits were far longer than the rest); kernel-handled tests get no wait",
        spun_phrase(&w)
    ))
}

/// What the VMM saw of a userspace-exit test: its share per exit, KVM_RUN, and the
/// phase breakdown where the catalogue asks for it.
fn userspace_figures(r: &mut TestResult, m: &Measurement, samples: &[Sample], rounds: &[Round]) {
    let def: &TestDef = m.def;
    if def.user_exit.is_some() && m.params.batch == 1 {
        let (share, run) = host_values(samples);
        r.userspace_share = summary_of(&share);
        r.kvm_run_cycles = summary_of(&run);
        if def.phases {
            let (e, h, n) = phase_values_by_round(samples, rounds);
            if let (Some(exit_leg), Some(handling), Some(entry_leg)) =
                (summary_of(&e), summary_of(&h), summary_of(&n))
            {
                r.phases = Some(Phases {
                    exit_leg,
                    handling,
                    entry_leg,
                });
            }
        }
    }
    if def.user_exit.is_some() && !m.kvm_run_log.is_empty() {
        // The VMM's own log: every KVM_RUN of the measured iterations, back to back when
        // batch > 1 (with batch 1 each one also spans the guest's sample bookkeeping).
        let log: Vec<f64> = m.kvm_run_log.iter().map(|&d| d as f64).collect();
        r.kvm_run_cycles = summary_of(&log);
    }
}

#[cfg(test)]
mod tests {
    //! Synthetic measurements with known answers: no KVM needed.
    use std::time::Duration;

    use super::*;
    use crate::catalogue;
    use crate::runner::RunParams;
    use exitlab_results::samples::phase_values_by_round;
    use exitlab_results::testing::sample;
    use exitlab_vmm::vcpu::ExitCounts;

    fn params(samples: u64, batch: u64, warmup: u64) -> RunParams {
        RunParams {
            ring: 0,
            samples,
            batch,
            warmup,
            timeout: Duration::from_secs(1),
            pin: None,
            bare: false,
            irq: Default::default(),
            inject_cycles: 0,
            guest_cycles: 0,
        }
    }

    /// One completed round of `inl_from_user`: `n` samples with the given phases, and
    /// the exit counts the protocol implies.
    fn user_round(n: u64, offset: i64, exit: u64, handle: u64, entry: u64) -> Measurement {
        let def = catalogue::find("inl_from_user").unwrap();
        let mut m = Measurement::new(def, params(n, 1, 10));
        m.samples = (0..n)
            .map(|i| {
                sample(
                    1_000_000 + i * 100_000,
                    exit + handle + entry,
                    300,
                    exit,
                    handle,
                    offset,
                )
            })
            .collect();
        m.counts = ExitCounts {
            io_in: n + 10,
            doorbell: 1,
            ..ExitCounts::default()
        };
        m.doorbells = 1;
        m.rounds = vec![Round {
            samples: n as usize,
            tsc_offset: Some(offset),
        }];
        m
    }

    #[test]
    fn net_figures_subtract_each_samples_own_loop() {
        // Totals 1000, 1100, 5000 with loops 200, 500, 100: nets 800, 600, 4900 per
        // sample; batch 2 halves them; the net median is the median of the nets (400),
        // not the difference of the medians ((1100 - 200) / 2 = 450).
        let s = [
            sample(0, 1000, 200, 1, 1, 0),
            sample(10_000, 1100, 500, 1, 1, 0),
            sample(20_000, 5000, 100, 1, 1, 0),
        ];
        assert_eq!(paired_net(&s, 2), vec![400.0, 300.0, 2450.0]);
        let def = catalogue::find("cpuid").unwrap();
        let mut m = Measurement::new(def, params(3, 2, 0));
        m.samples = s.to_vec();
        m.counts.doorbell = 1;
        m.doorbells = 1;
        let r = analyse(&m, &Baseline::default(), 2_000_000, false);
        assert_eq!(r.net_median_cycles, Some(400.0));
        assert_eq!(r.cycles.as_ref().unwrap().median, 550.0);
        // 400 cycles at 2 GHz are 200 ns.
        assert_eq!(r.median_ns, Some(200.0));
        assert!(r.median_ns_is_net);
    }

    #[test]
    fn an_exit_check_records_whether_it_saw_where_the_exits_went() {
        // 25 iterations (15 warm-up + 10) of a kernel-handled test, no userspace exit but
        // the doorbell: the check passes either way; it saw where the exits went only
        // where KVM's counters counted them.
        let kernel = |name: &str| {
            let mut m = Measurement::new(catalogue::find(name).unwrap(), params(10, 1, 15));
            m.samples = (1..=10)
                .map(|i| Sample {
                    seq_delta: 0,
                    ..sample(i * 1000, 500, 100, 1, 1, 0)
                })
                .collect();
            m.counts.doorbell = 1;
            m.doorbells = 1;
            m
        };
        let check = |m: &Measurement| {
            analyse(m, &Baseline::default(), 0, false)
                .exit_check
                .unwrap()
        };
        let uncounted = check(&with_kvm(kernel("cpuid"), &[("exits", 1)]));
        assert!(uncounted.passed, "{}", uncounted.detail);
        assert_eq!(uncounted.observed, Some(false));
        assert_eq!(check(&kernel("cpuid")).observed, Some(false), "no stats");
        let counted = check(&with_kvm(kernel("cpuid"), &[("exits", 1 + 25)]));
        assert!(counted.passed);
        assert_eq!(counted.observed, Some(true));
        // Where no exit is expected at all, and where the VMM counts every one, the check
        // saw everything there was to see.
        assert_eq!(check(&kernel("loop_overhead")).observed, Some(true));
        let user = check(&user_round(25, 0, 1, 1, 1));
        assert!(user.passed);
        assert_eq!(user.observed, Some(true));
    }

    #[test]
    fn percentiles_of_a_known_set() {
        // 1..=101 cycles per iteration: median 51, p10 11, p90 91 (type 7).
        let def = catalogue::find("cpuid").unwrap();
        let mut m = Measurement::new(def, params(101, 1, 0));
        m.samples = (1..=101).map(|i| sample(i * 1000, i, 0, 1, 1, 0)).collect();
        m.counts.doorbell = 1;
        m.doorbells = 1;
        let c = analyse(&m, &Baseline::default(), 0, false).cycles.unwrap();
        assert_eq!((c.p10, c.median, c.p90), (11.0, 51.0, 91.0));
    }

    #[test]
    fn phases_survive_merging_four_rounds_with_different_offsets() {
        let rounds: Vec<Measurement> = [-5_000_000i64, 7_000_000, 123, -42]
            .iter()
            .map(|&off| user_round(25, off, 600, 90, 500))
            .collect();
        let m = Measurement::merge(rounds).unwrap();
        assert_eq!(m.outcome, Outcome::Completed);
        assert_eq!(m.samples.len(), 100);
        assert_eq!(m.rounds.len(), 4);
        assert_eq!(m.params.samples, 100);
        assert_eq!(m.params.warmup, 40);
        assert_eq!(m.counts.io_in, 140);
        assert_eq!(m.doorbells, 4);
        let (e, _, _) = phase_values_by_round(&m.samples, &m.rounds);
        assert_eq!(e.len(), 100, "every round's samples keep their phases");
        let r = analyse(&m, &Baseline::default(), 1_000_000, false);
        let p = r.phases.expect("phases after merging 4 rounds");
        assert_eq!(
            (p.exit_leg.median, p.handling.median, p.entry_leg.median),
            (600.0, 90.0, 500.0)
        );
        assert_eq!(p.exit_leg.n, 100);
        let check = r.exit_check.unwrap();
        assert!(check.passed, "{}", check.detail);
    }

    #[test]
    fn a_round_that_did_not_complete_decides_the_merged_outcome() {
        let mut bad = user_round(25, 0, 600, 90, 500);
        bad.outcome = Outcome::DidNotComplete("stuck".into());
        let rounds = vec![
            user_round(25, 0, 600, 90, 500),
            bad,
            user_round(25, 0, 1, 1, 1),
        ];
        let m = Measurement::merge(rounds).unwrap();
        assert_eq!(m.outcome, Outcome::DidNotComplete("stuck".into()));
        assert!(m.samples.is_empty() && m.rounds.is_empty());
        assert!(Measurement::merge(Vec::new()).is_none());
    }

    #[test]
    fn exit_check_counts_doorbells_against_the_protocol() {
        let m = user_round(25, 0, 600, 90, 500);
        assert!(exit_check(&m).passed);
        // One doorbell more than one DONE: the VMM counted an exit the protocol did not
        // ring (or the guest rang one too many).
        let mut extra = m.clone();
        extra.counts.doorbell = 2;
        extra.doorbells = 2;
        let c = exit_check(&extra);
        assert!(!c.passed);
        assert!(
            c.detail
                .contains("2 doorbell exits and 2 doorbells handled, expected 1"),
            "{}",
            c.detail
        );
        // A full ring rings BATCH as well: 16384 + 1 samples need 2 doorbells.
        let mut big = Measurement::new(m.def, params(SAMPLES_PER_BATCH + 1, 1, 0));
        big.rounds = vec![Round {
            samples: (SAMPLES_PER_BATCH + 1) as usize,
            tsc_offset: None,
        }];
        assert_eq!(expected_doorbells(&big), 2);
        // One userspace exit short.
        let mut short = m;
        short.counts.io_in -= 1;
        assert!(!exit_check(&short).passed);
    }

    fn with_kvm(mut m: Measurement, counters: &[(&str, u64)]) -> Measurement {
        m.kvm_counters = Some(counters.iter().map(|&(k, v)| (k.to_string(), v)).collect());
        m
    }

    #[test]
    fn handling_is_only_what_was_observed() {
        let base = Baseline {
            loop_kvm_exits_per_iter: Some(0.2),
        };
        // 35 iterations (10 warm-up + 25), 35 io_in exits + 1 doorbell.
        let user = user_round(25, 0, 1, 1, 1);
        assert_eq!(observed_handling(&user, &base), Handling::User);
        let user_kvm = with_kvm(user.clone(), &[("exits", 36 + 7)]);
        assert_eq!(observed_handling(&user_kvm, &base), Handling::User);
        // A kernel test: no userspace exit but the doorbell. KVM counted 35 exits beyond
        // the userspace one and the loop's 7 (0.2 per iteration): kernel.
        let def = catalogue::find("inl_from_kernel").unwrap();
        let mut k = Measurement::new(def, params(25, 1, 10));
        k.counts.doorbell = 1;
        k.doorbells = 1;
        assert_eq!(
            observed_handling(&k, &base),
            Handling::NotObserved,
            "no stats"
        );
        let counted = with_kvm(k.clone(), &[("exits", 1 + 7 + 35)]);
        assert_eq!(observed_handling(&counted, &base), Handling::Kernel);
        // The host counted only the loop's exits: not observed, never the expectation.
        let uncounted = with_kvm(k, &[("exits", 1 + 7)]);
        assert_eq!(observed_handling(&uncounted, &base), Handling::NotObserved);
        // Half the iterations in userspace, half in the kernel: mixed, with counts.
        let mut half = user_round(25, 0, 1, 1, 1);
        half.counts.io_in = 18;
        let half = with_kvm(half, &[("exits", 19 + 7 + 17)]);
        assert_eq!(
            observed_handling(&half, &base),
            Handling::Mixed {
                user: 18,
                kernel: 17
            }
        );
        assert_eq!(
            Handling::Mixed {
                user: 18,
                kernel: 17
            }
            .label(),
            "mixed (user 18, kernel 17)"
        );
    }

    #[test]
    fn kvm_counters_are_cross_checked_with_exitlabs_counts() {
        let verdicts = |m: &Measurement| -> Vec<(String, CounterVerdict)> {
            kvm_cross_check(m)
                .unwrap()
                .checks
                .into_iter()
                .map(|c| (c.counter, c.verdict))
                .collect()
        };
        let m = user_round(25, 0, 1, 1, 1);
        assert!(kvm_cross_check(&m).is_none(), "no stats, no check");
        // 35 io_in + 1 doorbell = 36 port exits.
        let agree = with_kvm(
            m.clone(),
            &[("exits", 40), ("io_exits", 36), ("mmio_exits", 0)],
        );
        assert_eq!(
            verdicts(&agree),
            vec![
                ("exits".into(), CounterVerdict::KernelHandled),
                ("io_exits".into(), CounterVerdict::Agree),
                ("mmio_exits".into(), CounterVerdict::Agree),
            ]
        );
        let uncounted = with_kvm(m.clone(), &[("exits", 40), ("io_exits", 0)]);
        assert_eq!(verdicts(&uncounted)[1].1, CounterVerdict::NotCounted);
        let fewer = with_kvm(m.clone(), &[("exits", 30)]);
        assert_eq!(verdicts(&fewer)[0].1, CounterVerdict::Mismatch);
        // More port exits than reached the VMM, on a test whose every port exit must.
        let more = with_kvm(m, &[("io_exits", 50)]);
        assert_eq!(verdicts(&more)[0].1, CounterVerdict::Mismatch);
        // A kernel port test: the extra port exits are the kernel's.
        let def = catalogue::find("inl_from_kernel").unwrap();
        let mut k = Measurement::new(def, params(25, 1, 10));
        k.counts.doorbell = 1;
        let k = with_kvm(
            k,
            &[("io_exits", 36), ("insn_emulation", 7), ("halt_exits", 0)],
        );
        let c = kvm_cross_check(&k).unwrap();
        assert_eq!(c.checks[0].verdict, CounterVerdict::KernelHandled);
        assert_eq!(c.deltas.get("insn_emulation"), Some(&7));
        assert!(
            !c.deltas.contains_key("halt_exits"),
            "zero deltas are not kept"
        );
    }

    #[test]
    fn injected_waits_are_recorded_per_test_with_the_knob_on_and_noted_together() {
        let wait = |spun: &[u64]| {
            let mut w = InjectedWaits::default();
            spun.iter().for_each(|&c| w.add(c));
            w
        };
        let result = |name: &str, inject_cycles: u64, injected: InjectedWaits| {
            let p = RunParams {
                inject_cycles,
                ..params(100, 1, 0)
            };
            let mut m = Measurement::new(catalogue::find(name).unwrap(), p);
            m.injected = injected;
            unfinished_result(&m)
        };
        // With the knob off a test records nothing and the run has no note.
        let off = [result("inl_from_user", 0, InjectedWaits::default())];
        assert_eq!(off[0].injected, None);
        assert_eq!(injected_note(&off, 0), None);
        // With it on each test records its own waits (none for a kernel-handled one); the
        // note pools them.
        let tests = [
            result("inl_from_user", 1_000, wait(&[1_010, 1_030])),
            result("cpuid", 1_000, InjectedWaits::default()),
            result("rdmsr_user", 1_000, wait(&[1_020, 9_000])),
        ];
        assert_eq!(tests[0].injected, Some(wait(&[1_010, 1_030])));
        assert_eq!(tests[1].injected, Some(InjectedWaits::default()));
        let all = injected_waits(&tests).unwrap();
        assert_eq!(all, wait(&[1_010, 1_030, 1_020, 9_000]));
        let note = injected_note(&tests, 1_000).unwrap();
        assert!(note.starts_with(INJECTED_NOTE), "{note}");
        assert!(
            note.contains("inject-cycles 1000")
                && note.contains(
                    "a mean 3,015 cycles per wait (shortest 1,010, longest 9,000, 4 waits; calibrated in a warm loop only)"
                ),
            "{note}"
        );
        // Waits calibrated where they were made say on how many exits left without one.
        let calibrated = InjectedWaits {
            unwaited: 64,
            in_situ: 2,
            ..wait(&[1_010, 1_030])
        };
        let tests = [result("inl_from_user", 1_000, calibrated)];
        let note = injected_note(&tests, 1_000).unwrap();
        assert!(
            note.contains("2 waits; calibrated where they were made, on the first exits, which the guest does not measure, 64 of them left without a wait)"),
            "{note}"
        );
        // The note of a run whose one userspace-handled test made waits `w` contains `want`.
        let says = |w: InjectedWaits, want: &str| {
            let note = injected_note(&[result("inl_from_user", 1_000, w)], 1_000).unwrap();
            assert!(note.contains(want), "{note}");
        };
        // Where that calibration was not used in some VMs, the note says in how many.
        let partly = InjectedWaits {
            in_situ_unused: 1,
            ..calibrated
        };
        says(partly, "64 of them left without a wait; in 1 of the 2 VMs where that calibration was done a wait there added over 1,000 cycles beyond its spin and the warm loop's calibration stood)");
        // Where a run ended before its calibration was done, the note says in how many
        // VMs, and where none was done, that the waits kept the warm loop's.
        let cut = InjectedWaits {
            in_situ_cut: 1,
            ..partly
        };
        says(cut, "the warm loop's calibration stood; in 1 VM the run ended before that calibration was done, and the warm loop's stood)");
        let only_cut = InjectedWaits {
            unwaited: 5,
            in_situ: 0,
            in_situ_cut: 3,
            ..wait(&[1_010, 1_030])
        };
        says(only_cut, "2 waits; calibrated in a warm loop, the calibration where they were made (on the first exits, which the guest does not measure, 5 of them left without a wait) used in no VM; in 3 VMs the run ended before that calibration was done, and the warm loop's stood)");
        // Nor where every calibration done went unused.
        let all_unused = InjectedWaits {
            in_situ_unused: 2,
            ..calibrated
        };
        says(all_unused, "calibrated in a warm loop, the calibration where they were made (on the first exits, which the guest does not measure, 64 of them left without a wait) used in no VM; in 2 of the 2 VMs where that calibration was done");
        // A run that ended within its calibration after its first exit made no wait:
        // the note says why.
        let first_only = InjectedWaits {
            unwaited: 1,
            in_situ_cut: 1,
            ..InjectedWaits::default()
        };
        says(first_only, "measured no wait (1 exit left without one by a calibration where the waits are made, which the run ended within)");
    }

    #[test]
    fn the_guest_work_calibration_is_the_empty_loop_rounds_net_median() {
        use exitlab_results::results::RoundFigure;
        let params = RunParams {
            guest_cycles: 1_300,
            ..params(100, 1, 0)
        };
        let round = |net: Option<f64>| RoundFigure {
            samples: 100,
            median: 1_400.0,
            net_median: net,
            ..Default::default()
        };
        let mut base = unfinished_result(&Measurement::new(catalogue::baseline(), params));
        let mut cpuid =
            unfinished_result(&Measurement::new(catalogue::find("cpuid").unwrap(), params));
        cpuid.rounds = vec![round(Some(9_000.0)); 3];
        // Without the work the empty loop's rounds have no net figure: no calibration.
        base.rounds = vec![round(None); 3];
        let tests = [base.clone(), cpuid.clone()];
        assert_eq!(guest_work_calibration(&tests), None);
        assert_eq!(guest_work_note(&tests, 0), None);
        // Every round counts, the one far out included: the median of the six.
        base.rounds = [1_331.0, 1_329.0, 1_330.0, 1_900.0, 1_328.0, 1_332.0]
            .map(|v| round(Some(v)))
            .to_vec();
        let tests = [base, cpuid];
        let c = guest_work_calibration(&tests).unwrap();
        assert_eq!(
            (c.median, c.lo, c.hi, c.rounds),
            (1_330.5, 1_328.0, 1_900.0, 6)
        );
        let note = guest_work_note(&tests, 1_300).unwrap();
        assert!(note.starts_with(GUEST_WORK_NOTE), "{note}");
        assert!(
            note.contains("guest-cycles 1300")
                && note.contains("median 1,331 cycles")
                && note.contains("over 6 rounds (round medians 1,328..1,900)"),
            "{note}"
        );
    }
}
