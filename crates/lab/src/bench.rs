//! `exitlab bench`: runs a suite of exit tests, each in a fresh VM, and assembles the
//! results: statistics, exit-count checks, the loop-subtracted figures, and the VMM
//! overhead experiment (the full exit loop against a bare KVM_RUN loop).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use exitlab_vmm::teardown::Teardown;
use exitlab_vmm::Kvm;

use crate::analysis::{self, Baseline};
use crate::catalogue::{self, TestDef};
use crate::rounds::{self, Flow, Order, Step};
use crate::runner::{self, Measurement, Outcome, RunError, RunParams};
use exitlab_abi::Sample;
use exitlab_results::figures;
use exitlab_results::packed::PackedSamples;
use exitlab_results::results::RoundFigure;
use exitlab_results::results::{
    BenchConfig, Overhead, Plan, PlanTest, ProcessStats, Results, TestResult, TestStatus, Tool,
};
use exitlab_results::stats::describe::summarize;
use exitlab_results::stats::{interval, model, plan, units};

/// Test used for the VMM overhead experiment.
pub const OVERHEAD_TEST: &str = "inl_from_user";
/// Alternating rounds of full and bare runs pooled for the overhead experiment.
pub const OVERHEAD_ROUNDS: usize = 3;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Tests, in order (loop_overhead is added first if missing).
    pub tests: Vec<&'static TestDef>,
    /// Per-test parameters (ring, samples, batch, warm-up, timeout, pinning).
    pub params: RunParams,
    /// Keep every sample in the results.
    pub raw: bool,
    /// Run the VMM overhead experiment (needs inl_from_user to be runnable).
    pub overhead: bool,
    /// The overhead experiment's headline comparison, `exitlab run` against the
    /// independent bare loop (see [`crate::floor`]); `None` runs only the in-process
    /// stamps (the lab's own tests, which have no exitlab executable to run).
    pub floor: Option<crate::floor::FloorSetup>,
    /// Split each test's samples over this many rounds; every round runs the whole
    /// suite once, each test in a fresh VM, so that slow drifts of the host spread over
    /// all tests alike instead of favouring the ones that ran at a good moment.
    pub rounds: u32,
    /// Set (by a signal handler) to stop after the test that is running: the results
    /// then hold the rounds that completed and say that the run is incomplete.
    pub cancel: Option<Arc<AtomicBool>>,
    /// `--precision`: `rounds` is the pilot, then the plan fixes each test's rounds for
    /// the target within the budget (`docs/model.md`).
    pub precision: Option<Precision>,
    /// Knobs to record in the results besides the run parameters (name, value).
    pub knobs: BTreeMap<String, String>,
    /// Why phase figures cannot be trusted on this host (an unstable TSC), if they
    /// cannot: then no test reports phases (see `host_report::phases_off_reason`).
    pub phases_off: Option<String>,
}

/// Progress events for the caller to show.
pub enum Progress<'a> {
    /// A round of the suite is starting (1-based, of how many).
    Round(u32, u32),
    /// A test (or a step of the overhead experiment) is starting.
    Start(&'a str),
    /// It finished.
    Done(&'a str, &'a TestStatus),
    /// A round of a planned design after its pilot (1-based) for this many tests, those
    /// the plan gave more rounds, is starting.
    PrecisionRound(u32, u32),
    /// A round of a planned A/B design after its pilot (1-based) of both sides, for this
    /// many tests the plan gave more pairs (each side runs them and the empty loop, in
    /// fresh VMs).
    AbPrecisionRound(u32, u32),
}

fn status_of(o: &Outcome) -> TestStatus {
    match o {
        Outcome::Completed => TestStatus::Ok,
        Outcome::Skipped(r) => TestStatus::Skipped { reason: r.clone() },
        Outcome::DidNotComplete(r) => TestStatus::DidNotComplete { reason: r.clone() },
        Outcome::Failed(r) => TestStatus::Failed { reason: r.clone() },
    }
}

fn tsc_from_host(host: &serde_json::Value) -> Option<(u64, String)> {
    let khz = host.get("tsc")?.get("khz")?.as_u64()?;
    let src = host
        .get("tsc")
        .and_then(|t| t.get("source"))
        .and_then(|s| s.as_str())
        .unwrap_or("host probe")
        .to_string();
    Some((khz, src))
}

/// What a planned design asks for (`bench --precision`, or `bench --ab`'s default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Precision {
    /// Each test's 95 % interval (of its figure, or of an A/B run's change) within
    /// `±target_pct` percent.
    pub target_pct: f64,
    /// Wall time for the whole run's rounds, the pilot's included.
    pub budget: Duration,
    /// Whether this is `--ab`'s default ([`Precision::ab_default`]), not one the user
    /// asked for.
    pub by_default: bool,
}

/// `--budget`'s default.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(model::PRECISION_BUDGET_SECONDS as u64);

impl Precision {
    /// `--ab`'s default design: each change's interval within
    /// [`model::AB_TARGET_HALF_WIDTH_PCT`], within [`model::AB_BUDGET_SECONDS`].
    pub fn ab_default() -> Precision {
        Precision {
            target_pct: model::AB_TARGET_HALF_WIDTH_PCT,
            budget: Duration::from_secs_f64(model::AB_BUDGET_SECONDS),
            by_default: true,
        }
    }
}

/// The rounds a run collected, per test in the suite's order.
struct Collected {
    per_test: Vec<Vec<Stored>>,
    /// The round (1-based) during which the user interrupted the run.
    interrupted: Option<u32>,
    /// With a planned design: the plan and what each test got.
    plan: Option<Plan>,
    /// The rounds run first: all of them, or a planned design's pilot.
    first_rounds: u64,
}

/// Runs the suite.
pub fn run(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &BenchOptions,
    host: serde_json::Value,
    notes: Vec<String>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Results, RunError> {
    run_in(kvm, image, opts, host, notes, None, progress)
}

/// One round of exactly `opts.tests` (no empty loop added), its VMs left to `teardown`
/// to close with others: a step of a design that runs each test on its own, such as an
/// A/B run whose pairs are each test's two sides back to back.
pub fn run_step(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &BenchOptions,
    host: serde_json::Value,
    teardown: &Arc<Teardown>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Results, RunError> {
    let one = BenchOptions {
        rounds: 1,
        precision: None,
        overhead: false,
        ..opts.clone()
    };
    run_in(kvm, image, &one, host, Vec::new(), Some(teardown), progress)
}

/// [`run`], or with `step` [`run_step`].
fn run_in(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &BenchOptions,
    host: serde_json::Value,
    notes: Vec<String>,
    step: Option<&Arc<Teardown>>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Results, RunError> {
    let started = Instant::now();
    let started_at_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let tests = match step {
        Some(_) => opts.tests.clone(),
        None => suite_order(&opts.tests),
    };
    let rounds = u64::from(opts.rounds.max(1)).min(opts.params.samples.max(1));
    let collected = collect(kvm, image, &tests, opts, rounds, started, step, progress)?;
    let assembled = assemble(&tests, collected.per_test, opts, &host);
    let mut notes = notes;
    if let Some(e) = &assembled.pin_error {
        notes.push(format!(
            "pinning the vCPU thread failed: {e}; the vCPU ran unpinned"
        ));
    }
    let results = assembled.results;
    let plan = collected.plan.map(|p| with_half_widths(p, &results));
    notes.extend(analysis::guest_work_note(
        &results,
        opts.params.guest_cycles,
    ));
    notes.extend(analysis::injected_note(&results, opts.params.inject_cycles));
    let first = collected.first_rounds;
    let incomplete = collected.interrupted.map(|round| {
        let when = match (u64::from(round) > first, &plan) {
            (true, _) | (false, Some(_)) => {
                format!("round {round} (a planned design; its pilot had {first})")
            }
            _ => format!("round {round} of {first}"),
        };
        interrupted_reason(
            &when,
            results.iter().filter(|r| !r.rounds.is_empty()).count(),
            opts.overhead,
        )
    });
    let mut vmm_memory = assembled.vmm_memory;
    let after = if opts.overhead && incomplete.is_none() {
        overhead_step(kvm, image, opts, &mut vmm_memory, results.len(), progress)?
    } else {
        OverheadStep::default()
    };
    notes.extend(after.notes);
    let (tsc_khz, tsc_khz_source) = assembled
        .tsc_khz
        .or_else(|| tsc_from_host(&host))
        .unwrap_or((0, "unknown".into()));
    Ok(Results {
        schema_version: exitlab_results::results::SCHEMA_VERSION,
        tool: Tool::current(),
        started_at_unix,
        wall_seconds: started.elapsed().as_secs_f64(),
        host,
        config: BenchConfig {
            tests: tests.iter().map(|t| t.name.to_string()).collect(),
            samples: opts.params.samples,
            batch: opts.params.batch,
            warmup: opts.params.warmup,
            ring: opts.params.ring,
            pin: opts.params.pin.map(|p| p as u32),
            timeout_seconds: opts.params.timeout.as_secs_f64(),
            raw: opts.raw,
            tsc_khz,
            tsc_khz_source,
            rounds: rounds as u32,
            knobs: opts.knobs.clone(),
            irq: Some(opts.params.irq.record(opts.params.pin)),
        },
        tests: results,
        vmm_overhead: after.vmm_overhead,
        floor: after.floor,
        notes,
        process: vmm_memory.map(|outside| ProcessStats {
            vmm_rss_outside_guest_bytes: outside.resident,
            vmm_private_outside_guest_bytes: Some(outside.private),
            peak_rss_bytes: exitlab_vmm::sys::peak_rss().unwrap_or(0),
        }),
        provenance: Some(exitlab_results::results::Provenance::current()),
        incomplete: incomplete.or(after.incomplete),
        ab: None,
        plan,
    })
}

/// Runs the rounds: `rounds` of them, or with `--precision` a pilot of that many
/// ([`plan::pilot_size`]) and then the rounds the plan gives each test. The rounds' VMs
/// are closed in batches between rounds ([`one_round`]), the last batch before this
/// returns.
#[allow(clippy::too_many_arguments)]
fn collect(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
    started: Instant,
    shared: Option<&Arc<Teardown>>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Collected, RunError> {
    // Every VM of the run is closed by the time this returns (the teardown's drop), but
    // for a step's, which its caller's teardown closes with others.
    let own;
    let teardown = match shared {
        Some(t) => t,
        None => {
            own = Teardown::new();
            &own
        }
    };
    // A planned design's pilot; each round takes a planned round's share of the samples.
    let pilot = match opts.precision {
        Some(_) => plan::pilot_size(rounds as usize) as u64,
        None => rounds,
    };
    let (mut per_test, interrupted) =
        run_rounds(kvm, image, tests, opts, pilot, rounds, teardown, progress)?;
    let mut out = Collected {
        per_test: Vec::new(),
        interrupted,
        plan: None,
        first_rounds: pilot,
    };
    if let (None, Some(p)) = (interrupted, opts.precision) {
        let share = (opts.params.samples / rounds).max(1);
        let mut one = |i: usize, progress: &mut dyn FnMut(Progress<'_>)| {
            one_round(kvm, image, tests[i], opts, share, teardown, progress)
        };
        let (plan, stopped) = planned_rounds(
            tests,
            &mut per_test,
            pilot as usize,
            p,
            started.elapsed(),
            opts.cancel.as_deref(),
            progress,
            &mut one,
        )?;
        out.plan = Some(Plan {
            seconds: started.elapsed().as_secs_f64(),
            ..plan
        });
        out.interrupted = stopped.map(|r| pilot as u32 + r);
    }
    out.per_test = per_test;
    Ok(out)
}

/// What the analysis of every test's rounds gives the report.
struct Assembled {
    results: Vec<TestResult>,
    /// The first pinning failure.
    pin_error: Option<String>,
    /// The most memory outside guest RAM (each figure's largest).
    vmm_memory: Option<exitlab_vmm::sys::VmmMemory>,
    /// The TSC frequency the figures were converted with, and its source.
    tsc_khz: Option<(u64, String)>,
}

/// Analyses each test's rounds into its result: its figures and the figure every report
/// shows (the samples are dropped once each test is analysed).
fn assemble(
    tests: &[&'static TestDef],
    per_test: Vec<Vec<Stored>>,
    opts: &BenchOptions,
    host: &serde_json::Value,
) -> Assembled {
    let mut base = Baseline::default();
    let mut out = Assembled {
        results: Vec::with_capacity(tests.len()),
        pin_error: None,
        vmm_memory: None,
        tsc_khz: None,
    };
    for (def, rounds) in tests.iter().zip(per_test) {
        let seconds: Vec<f64> = rounds.iter().map(|r| r.seconds.as_secs_f64()).collect();
        let rounds: Vec<Measurement> = rounds.into_iter().map(Stored::into_measurement).collect();
        // The baseline has no net figure: it is the empty loop itself.
        let net = !def.baseline;
        let (figures, kept_samples) = round_figures(&rounds, &seconds, net);
        let Some(m) = Measurement::merge(rounds) else {
            continue;
        };
        if out.tsc_khz.is_none() {
            if let Some(k) = m.tsc_khz {
                out.tsc_khz = Some((k.into(), "KVM_GET_TSC_KHZ".into()));
            }
        }
        let khz = out
            .tsc_khz
            .as_ref()
            .map(|t| t.0)
            .or_else(|| tsc_from_host(host).map(|t| t.0))
            .unwrap_or(0);
        if def.baseline && m.outcome == Outcome::Completed {
            // Set before the loop's own analysis: the exits KVM counts during the empty
            // loop (a busy host's interrupts) are no test's, the loop's included.
            base.loop_kvm_exits_per_iter = analysis::exits_per_iteration(&m);
        }
        let mut r = analysis::analyse(&m, &base, khz, opts.raw);
        r.rounds = figures;
        // The CDF is drawn from every round, as the figure is.
        r.net_percentiles = (m.outcome == Outcome::Completed)
            .then(|| figures::net_percentiles(&kept_samples, m.params.batch, net))
            .flatten();
        units::store(&mut r, khz);
        if opts.phases_off.is_some() {
            r.phases = None;
        }
        if m.outcome != Outcome::Completed {
            // Not run to the end: report what was asked for, not one round's share.
            r.samples = opts.params.samples;
        }
        out.results.push(r);
        out.pin_error = out.pin_error.or(m.pin_error);
        out.vmm_memory = exitlab_vmm::sys::VmmMemory::largest(out.vmm_memory, m.vmm_memory);
    }
    out
}

/// What the VMM overhead experiment adds to the results.
#[derive(Default)]
struct OverheadStep {
    vmm_overhead: Option<Overhead>,
    floor: Option<exitlab_results::results::FloorView>,
    notes: Vec<String>,
    incomplete: Option<String>,
}

/// Runs the VMM overhead experiment (after the tests, `tests_done` of them), shown as
/// one step.
fn overhead_step(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &BenchOptions,
    vmm_memory: &mut Option<exitlab_vmm::sys::VmmMemory>,
    tests_done: usize,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<OverheadStep, RunError> {
    let mut out = OverheadStep::default();
    progress(Progress::Start(OVERHEAD_LABEL));
    let stamps = overhead(kvm, image, opts, vmm_memory)?;
    let kernel = match (&stamps, &opts.floor) {
        (Some(_), Some(setup)) => crate::floor::compare(setup, &|| cancelled(opts)).map(Some),
        (Some(_), None) => Some(None),
        (None, _) => None,
    };
    let status = match (stamps, kernel) {
        (Some(stamps), Some(kernel)) => {
            match stamps {
                Ok(o) => out.vmm_overhead = Some(o),
                Err(why) => out.notes.push(format!(
                    "VMM overhead (in-process stamps) not measured: {why}"
                )),
            }
            out.floor = kernel;
            TestStatus::Ok
        }
        _ => {
            let why = format!(
                "interrupted during the VMM overhead experiment: the {tests_done} test(s) completed all their rounds; the experiment's figures were dropped"
            );
            out.incomplete = Some(why.clone());
            TestStatus::DidNotComplete { reason: why }
        }
    };
    progress(Progress::Done(OVERHEAD_LABEL, &status));
    Ok(out)
}

/// The figure of each completed round of a test (in order, up to the first round that
/// did not complete; `seconds` is each round's wall time), and those rounds' samples.
fn round_figures(
    rounds: &[Measurement],
    seconds: &[f64],
    net: bool,
) -> (Vec<RoundFigure>, Vec<Sample>) {
    let done: Vec<(RoundFigure, &Measurement)> = rounds
        .iter()
        .zip(seconds)
        .take_while(|(m, _)| m.outcome == Outcome::Completed)
        // With guest work on, the empty loop's rounds also get a net median: the work's
        // calibration (the baseline's own figure stays raw).
        .filter_map(|(m, &secs)| {
            let net = net || m.params.guest_cycles != 0;
            let mut f = figures::round_figure(&m.samples, m.params.batch, net)?;
            f.seconds = Some(secs);
            f.sampling_seconds = sampling_seconds(&m.samples, m.tsc_khz);
            with_probe(&mut f, m);
            Some((f, m))
        })
        .collect();
    let samples = done
        .iter()
        .flat_map(|(_, m)| m.samples.iter().copied())
        .collect();
    (done.into_iter().map(|(f, _)| f).collect(), samples)
}

/// Seconds from the first sample's start to the last one's end by the guest's TSC.
fn sampling_seconds(samples: &[Sample], tsc_khz: Option<u32>) -> Option<f64> {
    let khz = f64::from(tsc_khz.filter(|k| *k > 0)?);
    let (first, last) = (samples.first()?, samples.last()?);
    let cycles = last.g_end.checked_sub(first.g_start)?;
    Some(cycles as f64 / (khz * 1000.0))
}

/// The tests in the order they run: the baseline (the empty loop) first, added if
/// missing, because every other figure is reported net of it.
pub fn suite_order(requested: &[&'static TestDef]) -> Vec<&'static TestDef> {
    let mut tests = requested.to_vec();
    if !tests.iter().any(|t| t.baseline) {
        tests.insert(0, catalogue::baseline());
    } else {
        tests.sort_by_key(|t| !t.baseline);
    }
    tests
}

/// Whether the user asked the run to stop (Ctrl-C).
fn cancelled(opts: &BenchOptions) -> bool {
    opts.cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::SeqCst))
}

/// One completed round of a test while the run goes on: the measurement without its
/// samples, which are kept packed (a run holds every round of every test until its
/// last round; see [`exitlab_results::packed`]).
#[derive(Debug, Clone)]
struct Stored {
    m: Measurement,
    samples: PackedSamples,
    /// Wall time of the round, VM creation to teardown.
    seconds: Duration,
}

impl Stored {
    fn new(mut m: Measurement, seconds: Duration) -> Stored {
        let samples = PackedSamples::pack(&m.samples);
        m.samples = Vec::new();
        Stored {
            m,
            samples,
            seconds,
        }
    }

    /// Whether the round ran to the end.
    fn completed(&self) -> bool {
        self.m.outcome == Outcome::Completed
    }

    /// The measurement with its samples unpacked.
    fn into_measurement(self) -> Measurement {
        let mut m = self.m;
        m.samples = self.samples.unpack();
        m
    }
}

/// Runs `rounds` rounds of the whole suite (through [`rounds::run`], the tests in the
/// suite's order every round), each test in a fresh VM every round with its share of
/// the samples (of `share_of` rounds: a planned design's pilot takes the planned rounds'
/// share), so that slow drifts of the host spread over all tests alike. A test that
/// did not complete, failed or was skipped is not run again. Also returns the round
/// (1-based) during which the user interrupted the run, if they did.
#[allow(clippy::too_many_arguments)]
fn run_rounds(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
    share_of: u64,
    teardown: &Arc<Teardown>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(Vec<Vec<Stored>>, Option<u32>), RunError> {
    let mut per_test: Vec<Vec<Stored>> = tests.iter().map(|_| Vec::new()).collect();
    let ended = rounds::run(
        rounds as u32,
        tests.len(),
        Order::Fixed,
        opts.cancel.as_deref(),
        |step| -> Result<Flow, RunError> {
            match step {
                Step::Round(round) => progress(Progress::Round(round, rounds as u32)),
                Step::Side { round, side } => {
                    let done = &mut per_test[side];
                    if done.last().is_some_and(|r| !r.completed()) {
                        return Ok(Flow::Continue);
                    }
                    let r = u64::from(round - 1);
                    let share = opts.params.samples / share_of
                        + u64::from(r < opts.params.samples % share_of);
                    done.push(one_round(
                        kvm,
                        image,
                        tests[side],
                        opts,
                        share,
                        teardown,
                        progress,
                    )?);
                }
            }
            Ok(Flow::Continue)
        },
    )?;
    Ok((per_test, ended.round()))
}

/// Runs one more round of test `i` (its index in the suite) and returns it.
type RoundRunner<'a> =
    dyn FnMut(usize, &mut dyn FnMut(Progress<'_>)) -> Result<Stored, RunError> + 'a;

/// After the pilot (`pilot` rounds of every test, in `per_test`), the plan
/// ([`plan::plan`]) and its rounds: round `k` runs each test the plan gave more than `k`
/// rounds, until every test has its count. Tests that did not complete a round are not
/// run again. Returns the plan (its `seconds` left for the caller) and the round after
/// the pilot (1-based) during which the user interrupted the run, if they did. `elapsed`
/// is the run's wall time so far, the pilot's included: the budget is the whole run's.
#[allow(clippy::too_many_arguments)]
fn planned_rounds(
    tests: &[&'static TestDef],
    per_test: &mut [Vec<Stored>],
    pilot: usize,
    target: Precision,
    elapsed: Duration,
    cancel: Option<&AtomicBool>,
    progress: &mut dyn FnMut(Progress<'_>),
    one: &mut RoundRunner<'_>,
) -> Result<(Plan, Option<u32>), RunError> {
    let pilots: Vec<plan::Pilot> = per_test
        .iter()
        .zip(tests)
        .map(|(done, def)| {
            let figures: Vec<f64> = stored_rounds(done, !def.baseline)
                .iter()
                .map(|f| units::round_value(f, figure_kind(!def.baseline)))
                .filter(|v| v.is_finite())
                .collect();
            let secs: Vec<f64> = done.iter().map(|r| r.seconds.as_secs_f64()).collect();
            plan::Pilot {
                name: def.name.to_string(),
                estimate: interval::one_run(&figures).ok(),
                unit_seconds: secs.iter().sum::<f64>() / secs.len().max(1) as f64,
            }
        })
        .collect();
    let mut pilots = pilots;
    let mut round_seconds = 0.0;
    plan::on_the_wall(
        &mut pilots,
        &mut round_seconds,
        pilot,
        elapsed.as_secs_f64(),
    );
    let planned = plan::plan(
        &pilots,
        pilot,
        target.target_pct,
        round_seconds,
        target.budget.saturating_sub(elapsed).as_secs_f64(),
    );
    let completed = |done: &[Stored]| done.iter().all(Stored::completed);
    let total = planned.iter().map(|p| p.units).max().unwrap_or(pilot);
    let extra = total.saturating_sub(pilot) as u32;
    let ended = rounds::run(extra, tests.len(), Order::Fixed, cancel, |step| {
        match step {
            Step::Round(round) => {
                let open = (0..tests.len())
                    .filter(|&i| planned[i].units > pilot + round as usize - 1)
                    .count();
                progress(Progress::PrecisionRound(round, open as u32));
            }
            Step::Side { round, side } => {
                if planned[side].units > pilot + round as usize - 1 && completed(&per_test[side]) {
                    let r = one(side, progress)?;
                    per_test[side].push(r);
                }
            }
        }
        Ok::<_, RunError>(Flow::Continue)
    })?;
    let interrupted = match ended {
        rounds::Ended::Cancelled { round } => Some(round),
        _ => None,
    };
    let tests_out = tests
        .iter()
        .zip(&planned)
        .zip(per_test.iter())
        .filter(|((def, _), _)| !def.baseline)
        .map(|((def, p), done)| PlanTest {
            name: def.name.to_string(),
            planned: p.units as u32,
            needed: p.needed as u32,
            units: done.len() as u32,
            half_width_pct: None,
        })
        .collect();
    Ok((
        Plan {
            target_pct: target.target_pct,
            by_default: target.by_default,
            budget_seconds: target.budget.as_secs_f64(),
            pilot_units: pilot as u32,
            seconds: 0.0,
            tests: tests_out,
        },
        interrupted,
    ))
}

/// `plan` with each test's final half-width, from its results.
fn with_half_widths(mut plan: Plan, results: &[TestResult]) -> Plan {
    for t in &mut plan.tests {
        t.half_width_pct = results
            .iter()
            .find(|r| r.name == t.name)
            .and_then(units::central)
            .and_then(|c| c.estimate)
            .map(|e| e.half_width_pct());
    }
    plan
}

/// VMs of finished rounds closed together, between two rounds ([`Teardown`]): a VM's
/// closing waited 12-24 ms here (under strace), about half a round; closed this many
/// at a time, in parallel, a default run's rounds took 2.8-3.2 s against 5.3-5.8 s.
const TEARDOWN_BATCH: usize = 16;

/// One round of `def` with `samples` samples, in a fresh VM, shown as it starts and ends,
/// and the time it took. The VM is kept by `teardown` and closed with others
/// ([`TEARDOWN_BATCH`] at a time, between two rounds, the rest when the run's rounds
/// end); the round's time leaves its closing out, so that the round that closes a batch
/// is not charged with the batch (the closing is not a cost of that test's rounds).
fn one_round(
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    opts: &BenchOptions,
    samples: u64,
    teardown: &Arc<Teardown>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Stored, RunError> {
    let started = Instant::now();
    progress(Progress::Start(def.name));
    let m = runner::run_test_deferred(
        kvm,
        image,
        def,
        RunParams {
            samples,
            ..opts.params
        },
        teardown,
    )?;
    let seconds = started.elapsed();
    if teardown.kept() >= TEARDOWN_BATCH {
        teardown.finish();
    }
    progress(Progress::Done(def.name, &status_of(&m.outcome)));
    Ok(Stored::new(m, seconds))
}

/// The figures of each stored round (a round without plausible samples has a NaN
/// median and no net one, so it is never kept).
fn stored_rounds(done: &[Stored], net: bool) -> Vec<RoundFigure> {
    done.iter()
        .map(|r| {
            let samples = r.samples.unpack();
            let mut f =
                figures::round_figure(&samples, r.m.params.batch, net).unwrap_or(RoundFigure {
                    median: f64::NAN,
                    ..Default::default()
                });
            with_probe(&mut f, &r.m);
            f
        })
        .collect()
}

/// `f` with its round's exit-path probes (cycles per exit).
fn with_probe(f: &mut RoundFigure, m: &Measurement) {
    f.probes = m.exit_probe.per_exit();
}

/// The figure a test's rounds are judged by: net, or raw for the empty loop.
fn figure_kind(net: bool) -> units::Figure {
    if net {
        units::Figure::Net
    } else {
        units::Figure::Raw
    }
}

/// Why a run interrupted `when` is incomplete: the tests it kept, and the VMM overhead
/// experiment it did not run, where the run was to end with it.
fn interrupted_reason(when: &str, kept: usize, overhead_due: bool) -> String {
    let overhead = if overhead_due {
        "; the VMM overhead experiment was not run"
    } else {
        ""
    };
    format!(
        "interrupted during {when}: kept the {kept} test(s) with at least one completed round \
         (each with the rounds it completed){overhead}"
    )
}

/// What the progress display shows for the whole VMM overhead experiment (one step).
pub const OVERHEAD_LABEL: &str =
    "VMM overhead (in-process stamps; exitlab run vs exitlab-floor, traced)";

/// The in-process part of the VMM overhead experiment, a diagnostic: the userspace
/// share of `inl_from_user` exits with the full loop (bus lookup, device, accounting)
/// against the same loop with the bare handler, alternating rounds so that host drift
/// affects both alike, as this process's own TSC stamps see it. Both run on a bus
/// populated as `exitlab run` populates it, with the measured port claimed by a device,
/// so that the full loop's lookup searches a real bus and calls a real device. `None`
/// when the user stopped the run (checked between runs).
fn overhead(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &BenchOptions,
    vmm_memory: &mut Option<exitlab_vmm::sys::VmmMemory>,
) -> Result<Option<Result<Overhead, String>>, RunError> {
    let Some(def) = catalogue::find(OVERHEAD_TEST) else {
        return Ok(Some(Err("the test is missing from the catalogue".into())));
    };
    let mut params = opts.params;
    params.batch = 1;
    if runner::skip_reason(kvm, def, params.ring).is_some() {
        params.ring = 0;
    }
    let mut full = Vec::new();
    let mut bare = Vec::new();
    let mut devices = 0;
    for _ in 0..OVERHEAD_ROUNDS {
        for is_bare in [true, false] {
            if cancelled(opts) {
                return Ok(None);
            }
            let (m, n) = runner::run_test_on_pc_bus(
                kvm,
                image,
                def,
                RunParams {
                    bare: is_bare,
                    ..params
                },
            )?;
            *vmm_memory = exitlab_vmm::sys::VmmMemory::largest(*vmm_memory, m.vmm_memory);
            devices = n;
            if m.outcome != Outcome::Completed {
                let status = status_of(&m.outcome);
                let loop_name = if is_bare {
                    "bare handler"
                } else {
                    "full VMM loop"
                };
                return Ok(Some(Err(format!(
                    "{OVERHEAD_TEST} ({loop_name}): {}",
                    status.reason().unwrap_or("failed")
                ))));
            }
            let values = exitlab_results::samples::host_values(&m.samples).0;
            if is_bare {
                bare.extend(values);
            } else {
                full.extend(values);
            }
        }
    }
    match (summarize(&full), summarize(&bare)) {
        (Ok(f), Ok(b)) => Ok(Some(Ok(Overhead {
            bus_devices: Some(devices as u64),
            stamp_step_cycles: exitlab_results::stats::describe::stamp_step(
                full.iter().chain(&bare).copied(),
            ),
            ..Overhead::new(OVERHEAD_TEST, f, b)
        }))),
        _ => Ok(Some(
            Err("no userspace-share samples were collected".into()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use exitlab_abi::Sample;

    use super::*;

    #[test]
    fn an_interrupted_run_names_the_overhead_experiment_only_where_it_was_due() {
        let due = interrupted_reason("round 1 of 12", 2, true);
        assert_eq!(
            due,
            "interrupted during round 1 of 12: kept the 2 test(s) with at least one completed \
             round (each with the rounds it completed); the VMM overhead experiment was not run"
        );
        // bench --tests cpuid,hlt runs no overhead experiment: nothing to say about it.
        let not_due = interrupted_reason("round 1 of 12", 2, false);
        assert!(
            not_due.ends_with("(each with the rounds it completed)"),
            "{not_due}"
        );
    }

    /// A completed round of `cpuid` whose samples' paired loops are `loops`.
    fn round(loops: &[u64]) -> Measurement {
        let def = catalogue::find("cpuid").unwrap();
        let mut m = Measurement::new(
            def,
            RunParams {
                ring: 0,
                samples: loops.len() as u64,
                batch: 1,
                warmup: 0,
                timeout: Duration::from_secs(1),
                pin: None,
                bare: false,
                irq: Default::default(),
                inject_cycles: 0,
                guest_cycles: 0,
            },
        );
        m.samples = loops
            .iter()
            .map(|&l| Sample {
                g_start: 1,
                g_end: 2 + l,
                h_prev_reenter: 0,
                h_return: 0,
                h_reenter: 0,
                seq_delta: 0,
                g_loop: l,
            })
            .collect();
        m
    }

    #[test]
    fn a_stored_round_gives_back_its_samples() {
        let m = round(&[1000, 1010, 1020]);
        let s = Stored::new(m.clone(), Duration::from_millis(5));
        assert!(s.m.samples.is_empty());
        assert_eq!(s.samples.len(), 3);
        assert_eq!(s.into_measurement().samples, m.samples);
    }

    fn round_of_net(net: u64) -> Stored {
        let mut m = round(&[100; 30]);
        for s in &mut m.samples {
            s.g_end = s.g_start + 100 + net;
        }
        m.tsc_khz = Some(1_000_000);
        Stored::new(m, Duration::from_secs(1))
    }

    fn rounds_of(nets: &[u64]) -> Vec<Stored> {
        nets.iter().map(|&n| round_of_net(n)).collect()
    }

    /// The empty loop, a test whose ten pilot rounds agree within 0.2 % and one whose
    /// rounds scatter by ±10 %; each further round of any test gives 1,000 net cycles and
    /// takes a second. Runs `planned_rounds` with a target of ±1 % and `budget` seconds;
    /// returns the plan, the tests (indices) run, in order, and the tests each round
    /// announced.
    fn planned(budget: u64) -> (Plan, Vec<usize>, Vec<u32>) {
        let tests = [
            catalogue::baseline(),
            catalogue::find("cpuid").unwrap(),
            catalogue::find("hlt").unwrap(),
        ];
        let mut per_test = vec![
            rounds_of(&[1000; 10]),
            rounds_of(&[1000, 1001, 999, 1000, 1002, 998, 1000, 1001, 999, 1000]),
            rounds_of(&[1000, 1100, 900, 1050, 950, 1080, 920, 1000, 1040, 960]),
        ];
        let mut ran = Vec::new();
        let mut announced = Vec::new();
        let mut progress = |p: Progress<'_>| {
            if let Progress::PrecisionRound(_, n) = p {
                announced.push(n);
            }
        };
        let mut one = |i: usize, _: &mut dyn FnMut(Progress<'_>)| {
            ran.push(i);
            Ok(round_of_net(1000))
        };
        let target = Precision {
            target_pct: 1.0,
            budget: Duration::from_secs(budget),
            by_default: false,
        };
        let (plan, stopped) = planned_rounds(
            &tests,
            &mut per_test,
            10,
            target,
            Duration::ZERO,
            None,
            &mut progress,
            &mut one,
        )
        .unwrap();
        assert_eq!(stopped, None);
        (plan, ran, announced)
    }

    #[test]
    fn a_planned_design_runs_exactly_the_rounds_its_plan_gives_each_test() {
        let (plan, ran, announced) = planned(1_000);
        let names: Vec<&str> = plan.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["cpuid", "hlt"], "the empty loop is no target");
        let count = |i: usize| ran.iter().filter(|&&r| r == i).count() as u32;
        // The quiet test and the empty loop get the minimum, the scattered one what its
        // pilot's spread needs for ±1 %; each runs exactly its plan.
        let (cpuid, hlt) = (&plan.tests[0], &plan.tests[1]);
        assert_eq!(cpuid.planned, model::MIN_PLANNED_UNITS as u32);
        assert_eq!(count(0), model::MIN_PLANNED_UNITS as u32 - 10);
        assert_eq!(count(1), cpuid.planned - 10);
        assert!(hlt.planned > 100 && hlt.planned >= hlt.needed, "{hlt:?}");
        assert_eq!(count(2), hlt.planned - 10);
        assert_eq!((cpuid.units, hlt.units), (cpuid.planned, hlt.planned));
        // The rounds after the pilot announce the tests they run: three, then one.
        assert_eq!(announced.first(), Some(&3));
        assert_eq!(announced.last(), Some(&1));
        assert_eq!(announced.len() as u32, hlt.planned - 10);
    }

    #[test]
    fn a_plan_that_does_not_fit_its_budget_holds_the_costly_test_to_a_ceiling() {
        // Thirty seconds: each test's round costs a second, so the minimum for the three
        // (ten more rounds each) leaves hlt a few rounds beyond it, far short of its need.
        let (plan, ran, _) = planned(30);
        assert!(ran.len() <= 30, "{}", ran.len());
        let hlt = &plan.tests[1];
        assert!(hlt.planned < hlt.needed, "{hlt:?}");
        assert_eq!(hlt.units, hlt.planned);
        assert_eq!(plan.tests[0].planned, model::MIN_PLANNED_UNITS as u32);
    }
}
