//! A/B experiments (`bench --ab KNOB=A,B`): one knob at two values, interleaved.
//!
//! Every round runs the suite once per side, each test in a fresh VM, in the order A B,
//! then B A, and so on, so that a host drifting during the run hurts both sides alike.
//! Each side of a round is one [`bench::run`] with one round; the sides are assembled
//! into one results file whose `tests` are side A's and whose `ab` holds side B's. The
//! comparison ([`exitlab_results::compare::compare_ab`]) pairs the sides round by round.

use std::sync::Arc;

use exitlab_vmm::teardown::Teardown;
use exitlab_vmm::Kvm;

use crate::analysis;
use crate::bench::{self, BenchOptions, Progress};
use crate::catalogue::TestDef;
use crate::host_knob::{HostSwitch, KvmHandle};
use crate::knobs::{self, AbSpec};
use crate::rounds::{self, Flow, Order, Step};
use crate::runner::RunError;
use exitlab_results::format::{fmt_cycles, fmt_cycles_signed};
use exitlab_results::results::{
    AbRun, ExitCheck, Handling, HostSide, Plan, PlanTest, Results, TestResult, TestStatus,
};
use exitlab_results::stats::describe::summarize;
use exitlab_results::stats::{interval, model, plan, units};
use exitlab_vmm::vcpu::InjectedWaits;

/// Why an A/B run produced no results.
#[derive(Debug, thiserror::Error)]
pub enum AbError {
    /// A VM could not be set up.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Interrupted before both sides completed one round.
    #[error("interrupted before both sides of the first round completed; nothing to report")]
    NothingCompleted,
}

/// Runs the A/B experiment: `rounds` rounds of both sides of `spec`, based on `base`
/// (its `rounds` is ignored; its samples are spread over `rounds`). Each round runs
/// every test on both sides, each in a fresh VM, the two sides of a test back to back (A
/// then B in odd rounds, B then A in even ones): a pair shares the host's state as
/// closely as two VMs can, and it is the unit the comparison rests on. With
/// `base.precision` the design is planned: a pilot of [`model::PILOT_UNITS`] pairs (at
/// most `rounds`), then as many pairs of each test as the plan gives it
/// ([`plan::plan`], from the pilot's pairs), exactly.
///
/// With a knob that changes the host (`host_switch`: a KVM module parameter), each round
/// runs the whole suite on one side, then on the other (A B, then B A: one switch a
/// side, not two a test), the value switched before each side whose value differs from
/// the one before, with the lab's handle on `/dev/kvm` closed (`kvm` must be the only one
/// this process holds) and opened again after; what each side ran with is in `ab.host`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    kvm: Arc<Kvm>,
    image: &[u8],
    base: &BenchOptions,
    spec: &AbSpec,
    rounds: u32,
    host: serde_json::Value,
    notes: Vec<String>,
    mut host_switch: Option<&mut dyn HostSwitch>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Results, AbError> {
    let mut handle = KvmHandle::new(kvm);
    let mut host_sides: Vec<HostSide> = Vec::new();
    let mut in_force: Option<String> = None;
    let started = std::time::Instant::now();
    let rounds = u64::from(rounds.max(1)).min(base.params.samples.max(1));
    let side_opts = |value: &str| {
        let mut o = base.clone();
        // Checked when the spec was parsed.
        let _ = spec.knob.set(&mut o, value);
        o.overhead = false;
        o.raw = true;
        o
    };
    let sides = [side_opts(&spec.a), side_opts(&spec.b)];
    let suite = bench::suite_order(&base.tests);
    // Tests still run: a test that did not complete on a side is not run again (a
    // hypercall that never completes would cost its timeout in every round), and a planned
    // design drops each test once it has its pairs.
    let mut open: Vec<&'static TestDef> = suite.clone();
    let per_test = host_switch.is_none();
    let mut steps: [Vec<Results>; 2] = [Vec::new(), Vec::new()];
    let pilot = match base.precision {
        Some(_) => plan::pilot_size(rounds as usize) as u32,
        None => rounds as u32,
    };
    // The plan, made once after the pilot: each test's pairs in all.
    let mut planned: Option<Vec<plan::Planned>> = None;
    let teardown = Teardown::new();
    let ended = rounds::run(
        if base.precision.is_some() {
            u32::MAX
        } else {
            pilot
        },
        2 * suite.len(),
        Order::Fixed,
        base.cancel.as_deref(),
        |step| -> Result<Flow, AbError> {
            let (round, k) = match step {
                Step::Round(round) if round <= pilot => {
                    progress(Progress::Round(round, pilot));
                    return Ok(Flow::Continue);
                }
                Step::Round(round) => {
                    let Some(target) = base.precision else {
                        return Ok(Flow::Stop);
                    };
                    let p = planned.get_or_insert_with(|| {
                        plan_pairs(&suite, &steps, target, started.elapsed(), pilot as usize)
                    });
                    let more = |d: &TestDef| {
                        p.iter()
                            .any(|t| t.name == d.name && t.units >= round as usize)
                    };
                    open.retain(|d| d.baseline || more(d));
                    if !open.iter().any(|d| !d.baseline) {
                        return Ok(Flow::Stop);
                    }
                    let n = open.iter().filter(|d| !d.baseline).count();
                    progress(Progress::AbPrecisionRound(round - pilot, n as u32));
                    return Ok(Flow::Continue);
                }
                Step::Side { round, side } => (round, side),
            };
            // This round's steps: each open test's two sides back to back, or with a host
            // knob the whole suite on one side, then on the other.
            let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
            let (side, tests): (usize, Vec<&'static TestDef>) = if per_test {
                let Some(test) = open.get(k / 2) else {
                    return Ok(Flow::Continue);
                };
                (order[k % 2], vec![*test])
            } else if k < 2 {
                (order[k], open.clone())
            } else {
                return Ok(Flow::Continue);
            };
            if let Some(sw) = host_switch.as_mut() {
                let value = if side == 0 { &spec.a } else { &spec.b };
                let switch = in_force.as_deref() != Some(value.as_str());
                let label = format!("{}={value} (host knob)", spec.knob.name());
                if switch {
                    progress(Progress::Start(&label));
                    // Every VM closed first: a reload cannot unload a module they hold.
                    teardown.finish();
                }
                let rec = handle
                    .switch(&mut **sw, value, round, ["a", "b"][side], switch)
                    .map_err(|e| AbError::Run(RunError::HostSwitch(e)))?;
                if switch {
                    progress(Progress::Done(&label, &TestStatus::Ok));
                }
                in_force = Some(value.clone());
                host_sides.push(rec);
            }
            let kvm = handle.get()?;
            let r = u64::from(round - 1);
            let share = base.params.samples / rounds + u64::from(r < base.params.samples % rounds);
            let mut o = sides[side].clone();
            o.params.samples = share.max(1);
            o.tests = tests;
            // Each step is a one-round run of its own; only the A/B rounds are shown.
            let mut inner = |p: Progress<'_>| {
                if !matches!(p, Progress::Round(..)) {
                    progress(p)
                }
            };
            let res = bench::run_step(&kvm, image, &o, host.clone(), &teardown, &mut inner)?;
            // The handle holds the only reference left, for the next switch to close.
            drop(kvm);
            if res.incomplete.is_some() {
                return Ok(Flow::Stop);
            }
            let stuck: Vec<&str> = res
                .tests
                .iter()
                .filter(|t| matches!(t.status, TestStatus::DidNotComplete { .. }))
                .map(|t| t.name.as_str())
                .collect();
            // A test stuck on one side is dropped after its pair's other side runs too.
            let pair_done = !per_test || k % 2 == 1;
            if pair_done {
                open.retain(|d| !stuck.contains(&d.name));
            }
            steps[side].push(res);
            Ok(Flow::Continue)
        },
    )?;
    drop(teardown);
    let mut out = assemble(base, spec, &sides, &suite, steps, notes)?;
    if let Some(ab) = out.ab.as_mut() {
        ab.host = host_sides;
    }
    out.wall_seconds = started.elapsed().as_secs_f64();
    out.plan = base.precision.map(|target| {
        plan_record(
            &out,
            planned.as_deref().unwrap_or(&[]),
            target,
            pilot,
            started.elapsed(),
        )
    });
    let complete = out.config.rounds;
    let stopped_by_plan = matches!(ended, rounds::Ended::Stopped { .. });
    out.incomplete = ended.round().filter(|_| !stopped_by_plan).map(|round| {
        let during = if round > pilot {
            format!("round {round} (planned after the pilot of {pilot})")
        } else {
            format!("round {round} of {pilot}")
        };
        format!("interrupted during {during}: kept the {complete} round(s) both sides completed")
    });
    Ok(out)
}

/// Test `name`'s results on side `s` over `steps` (each step one round of one test, or
/// of the suite), merged: its rounds in order, its status the first bad one.
fn side_of(steps: &[Results], name: &str) -> Option<TestResult> {
    let same: Vec<&TestResult> = steps.iter().filter_map(|r| r.test(name)).collect();
    let mut t = (*same.first()?).clone();
    t.rounds = same.iter().flat_map(|t| t.rounds.iter().cloned()).collect();
    if let Some(bad) = same.iter().find(|t| !t.status.is_ok()) {
        t.status = bad.status.clone();
    }
    Some(t)
}

/// The plan of a planned A/B design from its pilot (`steps`: each side's one-round steps):
/// each test's pilot pairs ([`units::pairs`] of the sides' rounds so far), what a pair
/// of it cost (both sides' rounds), and what the empty loop costs each round.
fn plan_pairs(
    suite: &[&'static TestDef],
    steps: &[Vec<Results>; 2],
    target: bench::Precision,
    elapsed: std::time::Duration,
    pilot: usize,
) -> Vec<plan::Planned> {
    let cost = |t: &TestResult| -> f64 {
        let secs: Vec<f64> = t.rounds.iter().filter_map(|r| r.seconds).collect();
        secs.iter().sum::<f64>() / secs.len().max(1) as f64
    };
    let mut loop_seconds = 0.0;
    let mut pilots = Vec::new();
    for d in suite {
        let (Some(a), Some(b)) = (side_of(&steps[0], d.name), side_of(&steps[1], d.name)) else {
            continue;
        };
        if d.baseline {
            loop_seconds = cost(&a) + cost(&b);
            continue;
        }
        let estimate = units::pairs(&a, &b).and_then(|(fa, fb, _)| interval::pairs(&fa, &fb).ok());
        pilots.push(plan::Pilot {
            name: d.name.to_string(),
            estimate,
            unit_seconds: cost(&a) + cost(&b),
        });
    }
    plan::on_the_wall(&mut pilots, &mut loop_seconds, pilot, elapsed.as_secs_f64());
    let left = target.budget.saturating_sub(elapsed).as_secs_f64();
    plan::plan(&pilots, pilot, target.target_pct, loop_seconds, left)
}

/// The record of a planned A/B design: the plan, and each test's pairs and final
/// half-width as the comparison of the file gives them.
fn plan_record(
    out: &Results,
    planned: &[plan::Planned],
    target: bench::Precision,
    pilot: u32,
    elapsed: std::time::Duration,
) -> Plan {
    let cmp = exitlab_results::compare::compare_ab_run(out, model::THRESHOLD_PCT);
    let tests = planned
        .iter()
        .map(|p| {
            let change = cmp
                .as_ref()
                .and_then(|c| c.tests.iter().find(|t| t.name == p.name))
                .map(|t| &t.change);
            PlanTest {
                name: p.name.clone(),
                planned: p.units as u32,
                needed: p.needed as u32,
                units: change.map_or(0, |c| c.units[0] as u32),
                half_width_pct: change
                    .and_then(|c| c.ci95_pct)
                    .map(|[lo, hi]| (hi - lo) / 2.0),
            }
        })
        .collect();
    Plan {
        target_pct: target.target_pct,
        by_default: target.by_default,
        budget_seconds: target.budget.as_secs_f64(),
        pilot_units: pilot,
        seconds: elapsed.as_secs_f64(),
        tests,
    }
}

/// One results file of the sides' steps (`sides`: each side's options; `suite`: the
/// tests in order): each test's rounds on both sides, as many on each as it has pairs
/// (a round whose other side never ran is left out), side A's tests and side B's under
/// `ab`, the order of each round, and the runs' notes.
fn assemble(
    base: &BenchOptions,
    spec: &AbSpec,
    sides: &[BenchOptions; 2],
    suite: &[&'static TestDef],
    steps: [Vec<Results>; 2],
    notes: Vec<String>,
) -> Result<Results, AbError> {
    let [a_steps, b_steps] = steps;
    let Some(first) = a_steps.first().or(b_steps.first()) else {
        return Err(AbError::NothingCompleted);
    };
    let mut out = first.clone();
    let (mut a_tests, mut b_tests) = (Vec::new(), Vec::new());
    for d in suite {
        let (Some(mut a), Some(mut b)) = (side_of(&a_steps, d.name), side_of(&b_steps, d.name))
        else {
            continue;
        };
        let pairs = a.rounds.len().min(b.rounds.len());
        a.rounds.truncate(pairs);
        b.rounds.truncate(pairs);
        a_tests.push(merged(a, &a_steps, base.raw));
        b_tests.push(merged(b, &b_steps, base.raw));
    }
    let complete = a_tests.iter().map(|t| t.rounds.len()).max().unwrap_or(0);
    if complete == 0 {
        return Err(AbError::NothingCompleted);
    }
    let khz = first.config.tsc_khz;
    finish_side(&mut a_tests, &a_steps, khz);
    finish_side(&mut b_tests, &b_steps, khz);
    out.tests = a_tests;
    out.config.tests = suite.iter().map(|d| d.name.to_string()).collect();
    out.config.rounds = complete as u32;
    out.config.samples = base.params.samples;
    out.config.raw = base.raw;
    out.config.knobs = knobs::values(&sides[0]);
    out.config.knobs.remove(&spec.knob.name());
    out.notes = notes;
    for r in a_steps.iter().chain(&b_steps) {
        for n in &r.notes {
            // Each step's own calibration or waits: the file gets one over all rounds and
            // both sides.
            let own =
                n.starts_with(analysis::GUEST_WORK_NOTE) || n.starts_with(analysis::INJECTED_NOTE);
            if !own && !out.notes.contains(n) {
                out.notes.push(n.clone());
            }
        }
    }
    out.notes
        .extend(guest_work_ab_note(&out.tests, &b_tests, spec));
    out.notes.extend(injected_ab_note(
        [&out.tests, &b_tests],
        sides.each_ref().map(|o| o.params.inject_cycles),
    ));
    // The sides' order in each completed round, as the driver ran them.
    let order = (1..=complete as u32)
        .map(|round| {
            let seq = Order::Alternate.sequence(round, 2);
            [seq[0], seq[1]].map(|i| ["a", "b"][i].to_string())
        })
        .collect();
    out.ab = Some(AbRun {
        knob: spec.knob.name(),
        a: spec.a.clone(),
        b: spec.b.clone(),
        b_tests,
        order,
        host: Vec::new(),
    });
    Ok(out)
}

/// The note of an A/B run with guest work on either side: what the work costs on each
/// side, calibrated round by round, and so the true change of a kernel-handled test.
fn guest_work_ab_note(a: &[TestResult], b: &[TestResult], spec: &AbSpec) -> Option<String> {
    let (ca, cb) = (
        analysis::guest_work_calibration(a),
        analysis::guest_work_calibration(b),
    );
    if ca.is_none() && cb.is_none() {
        return None;
    }
    let median = |c: Option<analysis::GuestWorkCalibration>| c.map_or(0.0, |c| c.median);
    let side = |name: &str, value: &str, c: Option<analysis::GuestWorkCalibration>| match c {
        Some(c) => format!(
            "{} cycles per iteration with {name}={value} ({} rounds, round medians {}..{})",
            fmt_cycles(c.median),
            c.rounds,
            fmt_cycles(c.lo),
            fmt_cycles(c.hi)
        ),
        None => format!("nothing with {name}={value}"),
    };
    let name = spec.knob.name();
    Some(format!(
        "{}the work alone (loop_overhead with it, net of its paired empty loop) costs {} and {}: the true change of each kernel-handled test is {:+.0} cycles; userspace-handled tests do not get the work and must not move",
        analysis::GUEST_WORK_NOTE,
        side(&name, &spec.a, ca),
        side(&name, &spec.b, cb),
        median(cb) - median(ca)
    ))
}

/// The note of an A/B run with `inject-cycles` on either side (`nominal`: each side's
/// value): what the VMM's waits added on each side by its count, over all rounds, and so
/// the mean change of a userspace-handled test's exits, with the nominal one beside it.
fn injected_ab_note(tests: [&[TestResult]; 2], nominal: [u64; 2]) -> Option<String> {
    let waits = tests.map(analysis::injected_waits);
    if waits.iter().all(Option::is_none) {
        return None;
    }
    let mean = |w: &Option<InjectedWaits>| w.and_then(|w| w.mean()).unwrap_or(0.0);
    let side = |w: &Option<InjectedWaits>, n: u64| match w {
        Some(w) => format!("inject-cycles {n}: {}", analysis::spun_phrase(w)),
        None => format!("inject-cycles {n}: no wait"),
    };
    // The VMM's own stamps around its handling of each exit (the phases, from each
    // side's first round): a second view of what the waits added, taken by the stamps
    // rather than by the waits' own count and calibration.
    let handling: Vec<String> = tests[0]
        .iter()
        .filter(|a| a.expected_handling == Handling::User)
        .filter_map(|a| {
            let b = tests[1].iter().find(|b| b.name == a.name)?;
            let median = |t: &TestResult| t.phases.as_ref().map(|p| p.handling.median);
            Some(format!(
                "{} {}",
                a.name,
                fmt_cycles_signed(median(b)? - median(a)?)
            ))
        })
        .collect();
    let stamps = if handling.is_empty() {
        String::new()
    } else {
        format!(
            "; the VMM's stamps around its handling of each exit (the phases, from the first round of each side only, so indicative) moved by a median {}, the change those tests' figures should show",
            handling.join(", ")
        )
    };
    Some(format!(
        "{}{}; {}: each userspace-handled test's exits got a mean {} cycles more (nominal {}; a median figure gets less where a few waits were far longer than the rest, the VMM's thread having lost its CPU while it spun){stamps}; kernel-handled tests get no wait and must not move",
        analysis::INJECTED_NOTE,
        side(&waits[0], nominal[0]),
        side(&waits[1], nominal[1]),
        fmt_cycles_signed(mean(&waits[1]) - mean(&waits[0])),
        fmt_cycles_signed(nominal[1] as f64 - nominal[0] as f64),
    ))
}

/// Test `t` of one side (its rounds merged by [`side_of`], as many as it has pairs)
/// with what its steps add up to: cycles summarized over all samples, exits and injected
/// waits added, the first failed exit check kept ([`finish_side`] adds what rests on its
/// rounds).
fn merged(mut t: TestResult, steps: &[Results], keep_raw: bool) -> TestResult {
    let same: Vec<&TestResult> = steps
        .iter()
        .filter_map(|r| r.test(&t.name))
        .take(t.rounds.len().max(1))
        .collect();
    t.samples = same.iter().map(|t| t.samples).sum();
    let raw: Vec<u64> = same
        .iter()
        .flat_map(|t| t.raw_samples.clone().unwrap_or_default())
        .collect();
    let per_iter: Vec<f64> = raw
        .iter()
        .map(|&c| c as f64 / t.batch.max(1) as f64)
        .collect();
    t.cycles = summarize(&per_iter).ok().or(t.cycles);
    t.raw_samples = keep_raw.then_some(raw);
    t.exits = Default::default();
    for s in &same {
        for (k, v) in &s.exits {
            *t.exits.entry(k.clone()).or_default() += v;
        }
    }
    t.injected = same
        .iter()
        .filter_map(|t| t.injected)
        .reduce(InjectedWaits::merged);
    t.exit_check = same
        .iter()
        .filter_map(|s| s.exit_check.clone())
        .find(|c: &ExitCheck| !c.passed)
        .or(t.exit_check);
    t
}

/// What rests on every round of one side's merged `tests`: the net distribution as the
/// average of the rounds' percentiles (Vincent averaging; each of the side's `runs` holds
/// one round), and the figure stored at `tsc_khz`.
fn finish_side(tests: &mut [TestResult], runs: &[Results], tsc_khz: u64) {
    for t in tests {
        let pcts: Vec<&Vec<f64>> = runs
            .iter()
            .filter_map(|r| r.test(&t.name))
            .filter_map(|t| t.net_percentiles.as_ref())
            .collect();
        if let Some(p0) = pcts.first() {
            t.net_percentiles = Some(
                (0..p0.len())
                    .map(|i| pcts.iter().map(|p| p[i]).sum::<f64>() / pcts.len() as f64)
                    .collect(),
            );
        }
        units::store(t, tsc_khz);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue;
    use crate::runner::{Measurement, RunParams};

    #[test]
    fn the_injected_note_gives_the_mean_change_from_the_waits_actually_spun() {
        let result = |inject_cycles: u64, spun: &[u64]| {
            let p = RunParams {
                ring: 3,
                samples: 10,
                batch: 1,
                warmup: 0,
                timeout: std::time::Duration::from_secs(1),
                pin: None,
                bare: false,
                irq: Default::default(),
                inject_cycles,
                guest_cycles: 0,
            };
            let mut m = Measurement::new(catalogue::find("inl_from_user").unwrap(), p);
            spun.iter().for_each(|&c| m.injected.add(c));
            analysis::analyse(&m, &Default::default(), 0, false)
        };
        let (off, on) = ([result(0, &[])], [result(480, &[500, 560, 540])]);
        assert_eq!(injected_ab_note([&off, &off], [0, 0]), None);
        let note = injected_ab_note([&off, &on], [0, 480]).unwrap();
        assert!(note.starts_with(analysis::INJECTED_NOTE), "{note}");
        assert!(
            note.contains("inject-cycles 0: no wait")
                && note.contains("inject-cycles 480: a mean 533 cycles per wait (shortest 500, longest 560, 3 waits; calibrated in a warm loop only)")
                && note.contains("exits got a mean +533 cycles more (nominal +480;"),
            "{note}"
        );
        // No phases: no stamps to quote.
        assert!(!note.contains("the VMM's stamps"), "{note}");
        // With phases, the change of the handling phase's median per userspace test.
        let with_handling = |r: &TestResult, median: f64| {
            let mut r = r.clone();
            let one = |x: f64| summarize(&[x]).expect("a summary of one value");
            r.phases = Some(exitlab_results::results::Phases {
                exit_leg: one(20_000.0),
                handling: one(median),
                entry_leg: one(22_000.0),
            });
            r
        };
        let note = injected_ab_note(
            [
                &[with_handling(&off[0], 104.0)],
                &[with_handling(&on[0], 689.0)],
            ],
            [0, 480],
        )
        .unwrap();
        assert!(
            note.contains(
                "so indicative) moved by a median inl_from_user +585, the change those tests' figures should show"
            ),
            "{note}"
        );
        // Waits on both sides: the difference of their means.
        let more = [result(960, &[1_000, 1_100])];
        let note = injected_ab_note([&on, &more], [480, 960]).unwrap();
        assert!(
            note.contains("a mean +517 cycles more (nominal +480;"),
            "{note}"
        );
    }
}
