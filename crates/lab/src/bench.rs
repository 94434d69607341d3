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
use exitlab_results::central;
use exitlab_results::figures;
use exitlab_results::format::fmt_cycles;
use exitlab_results::packed::PackedSamples;
use exitlab_results::results::RoundFigure;
use exitlab_results::results::{
    BenchConfig, Overhead, ProcessStats, Results, TestResult, TestStatus, Tool,
};
use exitlab_results::stats::summarize;
use exitlab_results::variance::{self, PrecisionRun, PrecisionTest};

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
    /// `--precision`: after the planned rounds, rounds until every test's interval is
    /// within the target or the budget ends (instead of the extra rounds that replace
    /// outlier rounds).
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
    /// An extra round (1-based) for this many tests replacing outlier rounds is starting.
    ExtraRound(u32, u32),
    /// A `--precision` round (1-based, after the planned ones) for this many tests whose
    /// interval is not yet within the target is starting.
    PrecisionRound(u32, u32),
    /// A `--precision` round (1-based, after the planned ones) of both sides of an A/B
    /// run for this many tests whose change's interval is not yet within the target
    /// (each side runs them and the empty loop, in fresh VMs).
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

/// How much slower than the run's typical round a sample's empty loop may run before
/// the host-noise detector flags the sample. On a quiet host the loop's round medians
/// agree within about 1 %; a busy host slows the guest by 10-50 % for a while.
pub const NOISE_TOLERANCE: f64 = 0.03;

/// What `bench --precision` asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Precision {
    /// Every test's 95 % interval of its central figure within `±target_pct` percent.
    pub target_pct: f64,
    /// Wall time for the whole run's rounds, the planned ones included.
    pub budget: Duration,
    /// Whether this is `--ab`'s default target ([`Precision::ab_default`]), not one
    /// the user asked for.
    pub by_default: bool,
}

/// `--budget`'s default.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(60);

/// The change an `--ab` run should be able to find in every test (80 % of the time)
/// when neither `--precision` nor `--rounds` is given, percent.
pub const AB_DEFAULT_DETECTABLE_PCT: f64 = 2.0;

/// The wall-time budget of `--ab`'s default target, the planned rounds included.
pub const AB_DEFAULT_BUDGET: Duration = Duration::from_secs(20);

impl Precision {
    /// `--ab`'s default: after the planned rounds, pairs of rounds of the tests whose
    /// change's interval is too wide to find a change of [`AB_DEFAULT_DETECTABLE_PCT`]
    /// 80 % of the time, while [`AB_DEFAULT_BUDGET`] lasts.
    pub fn ab_default() -> Precision {
        Precision {
            target_pct: exitlab_results::verdict::half_width_detecting(AB_DEFAULT_DETECTABLE_PCT),
            budget: AB_DEFAULT_BUDGET,
            by_default: true,
        }
    }
}

/// The rounds a run collected, per test in the suite's order.
struct Collected {
    per_test: Vec<Vec<Stored>>,
    /// The round (1-based) during which the user interrupted the run.
    interrupted: Option<u32>,
    /// With `--precision`: the outcome.
    precision: Option<PrecisionRun>,
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
    let started = Instant::now();
    let started_at_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let tests = suite_order(&opts.tests);
    let rounds = u64::from(opts.rounds.max(1)).min(opts.params.samples.max(1));
    let collected = collect(kvm, image, &tests, opts, rounds, started, progress)?;
    let assembled = assemble(&tests, collected.per_test, opts, &host);
    let mut notes = notes;
    if let Some(e) = &assembled.pin_error {
        notes.push(format!(
            "pinning the vCPU thread failed: {e}; the vCPU ran unpinned"
        ));
    }
    let results = assembled.results;
    notes.extend(noise_note(&results, &assembled.quiet_loop_limits));
    notes.extend(assembled.other_state.as_ref().map(other_state_note));
    notes.extend(analysis::guest_work_note(
        &results,
        opts.params.guest_cycles,
    ));
    notes.extend(analysis::injected_note(&results, opts.params.inject_cycles));
    let incomplete = collected.interrupted.map(|round| {
        let when = match u64::from(round).checked_sub(rounds) {
            Some(extra) if extra > 0 => {
                format!("extra round {extra} (after the {rounds} planned ones)")
            }
            _ => format!("round {round} of {rounds}"),
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
        precision: collected.precision,
    })
}

/// Runs the planned rounds, then either the rounds `--precision` asks for or the extra
/// rounds that replace outlier rounds. A one-round run is one step of a design that
/// interleaves runs (A/B): it gets no extra rounds, which would break the interleaving.
/// The rounds' VMs are closed in batches between rounds ([`one_round`]), the last batch
/// before this returns.
fn collect(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
    started: Instant,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Collected, RunError> {
    // Every VM of the run is closed by the time this returns (the teardown's drop).
    let teardown = &Teardown::new();
    let (mut per_test, interrupted) =
        run_rounds(kvm, image, tests, opts, rounds, teardown, progress)?;
    let mut out = Collected {
        per_test: Vec::new(),
        interrupted,
        precision: None,
    };
    if interrupted.is_none() && (rounds > 1 || opts.precision.is_some()) {
        let share = (opts.params.samples / rounds).max(1);
        // --precision's rounds take K&J's optimal samples per round for each test, from
        // its planned rounds' variance components; extra rounds replacing outliers take
        // a planned round's share.
        let samples: Vec<u64> = tests
            .iter()
            .zip(&per_test)
            .map(|(def, done)| match opts.precision {
                Some(_) => optimal_share(done, !def.baseline, share),
                None => share,
            })
            .collect();
        let mut one = |i: usize, progress: &mut dyn FnMut(Progress<'_>)| {
            one_round(kvm, image, tests[i], opts, samples[i], teardown, progress)
        };
        if let Some(p) = opts.precision {
            // What is left of the budget once the planned rounds ran.
            let left = Precision {
                budget: p.budget.saturating_sub(started.elapsed()),
                ..p
            };
            let began = Instant::now();
            let (outcome, stopped) = until_precise(
                tests,
                &mut per_test,
                left,
                &|| began.elapsed(),
                opts.cancel.as_deref(),
                progress,
                &mut one,
            )?;
            out.precision = Some(PrecisionRun {
                seconds: started.elapsed().as_secs_f64(),
                budget_seconds: p.budget.as_secs_f64(),
                ..outcome
            });
            out.interrupted = stopped.map(|r| rounds as u32 + r);
        } else {
            out.interrupted =
                replace_outliers(tests, opts, rounds, &mut per_test, progress, &mut one)?;
        }
    }
    out.per_test = per_test;
    Ok(out)
}

/// What the analysis of every test's rounds gives the report.
struct Assembled {
    results: Vec<TestResult>,
    /// The host-noise detector's limit for each batch the tests ran at.
    quiet_loop_limits: Vec<(u64, f64)>,
    /// The rounds the tests' figures set aside as taken in another host state.
    other_state: Option<OtherState>,
    /// The first pinning failure.
    pin_error: Option<String>,
    /// The most memory outside guest RAM (each figure's largest).
    vmm_memory: Option<exitlab_vmm::sys::VmmMemory>,
    /// The TSC frequency the figures were converted with, and its source.
    tsc_khz: Option<(u64, String)>,
}

/// Analyses each test's rounds into its result: figures, central figure, variance
/// components (the samples are dropped once each test is analysed).
fn assemble(
    tests: &[&'static TestDef],
    per_test: Vec<Vec<Stored>>,
    opts: &BenchOptions,
    host: &serde_json::Value,
) -> Assembled {
    let limits = quiet_loop_limits(&per_test);
    let mut base = Baseline::default();
    let mut out = Assembled {
        results: Vec::with_capacity(tests.len()),
        quiet_loop_limits: limits.clone(),
        other_state: None,
        pin_error: None,
        vmm_memory: None,
        tsc_khz: None,
    };
    for (def, rounds) in tests.iter().zip(per_test) {
        base.quiet_loop_limit = test_batch(&rounds)
            .and_then(|b| limits.iter().find(|(batch, _)| *batch == b))
            .map(|(_, limit)| *limit);
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
        // The CDF is drawn from the rounds the central figure rests on.
        r.net_percentiles = (m.outcome == Outcome::Completed)
            .then(|| figures::net_percentiles(&kept_samples, m.params.batch, net))
            .flatten();
        central::store(&mut r, khz);
        r.variance = variance::components(&r);
        let outliers = central::central(&r).map_or(0, |c| c.outliers() as u32);
        if let Some(spread) = r.round_spread.as_mut() {
            spread.outlier_rounds = outliers;
        }
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
    out.other_state = other_state(&out.results);
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
/// did not complete; `seconds` is each round's wall time), and the samples of the rounds
/// the central figure keeps (every round but the outliers, see
/// [`central::outlier_rounds`]).
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
    let figs: Vec<RoundFigure> = done.iter().map(|(f, _)| f.clone()).collect();
    let kept = central::kept_mask(&figs, figure_kind(net));
    let samples = done
        .iter()
        .zip(&kept)
        .filter(|(_, k)| **k)
        .flat_map(|((_, m), _)| m.samples.iter().copied())
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
fn suite_order(requested: &[&'static TestDef]) -> Vec<&'static TestDef> {
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
/// the samples, so that slow drifts of the host spread over all tests alike. A test that
/// did not complete, failed or was skipped is not run again. Also returns the round
/// (1-based) during which the user interrupted the run, if they did.
fn run_rounds(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
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
                    let share =
                        opts.params.samples / rounds + u64::from(r < opts.params.samples % rounds);
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

/// After the planned rounds, `--precision`'s rounds: a round of every test whose 95 %
/// interval is not yet within the target, until none is left or `target`'s budget (what
/// remains of the run's) would end during the next round: `spent` (the time since these
/// rounds began) plus the time each open test's last round took. The empty loop and tests that did not complete are not
/// targets. Returns the outcome (its `seconds` left for the caller) and the extra round
/// (1-based) during which the user interrupted the run, if they did.
fn until_precise(
    tests: &[&'static TestDef],
    per_test: &mut [Vec<Stored>],
    target: Precision,
    spent: &dyn Fn() -> Duration,
    cancel: Option<&AtomicBool>,
    progress: &mut dyn FnMut(Progress<'_>),
    one: &mut RoundRunner<'_>,
) -> Result<(PrecisionRun, Option<u32>), RunError> {
    let targets: Vec<usize> = (0..tests.len())
        .filter(|&i| !tests[i].baseline && per_test[i].iter().all(Stored::completed))
        .collect();
    // Each round's figure, kept as the rounds come (unpacking every round's samples
    // before every round would cost more than a round).
    let mut figures: Vec<Vec<RoundFigure>> = per_test
        .iter()
        .zip(tests)
        .map(|(done, def)| stored_rounds(done, !def.baseline))
        .collect();
    // The interval of the central figure: the rounds of the test's quick host state.
    let half_width = |rounds: &[RoundFigure], i: usize| {
        let figure = figure_kind(!tests[i].baseline);
        variance::half_width_of(&central::state_values(rounds, figure).0)
    };
    let mut open: Vec<usize> = Vec::new();
    let ended = rounds::run(
        u32::MAX,
        tests.len(),
        Order::Fixed,
        cancel,
        |step| -> Result<Flow, RunError> {
            match step {
                Step::Round(round) => {
                    open = targets
                        .iter()
                        .copied()
                        .filter(|&i| {
                            !variance::reaches(half_width(&figures[i], i), target.target_pct)
                        })
                        .collect();
                    let next: Duration = open
                        .iter()
                        .filter_map(|&i| per_test[i].last().map(|r| r.seconds))
                        .sum();
                    if open.is_empty() || spent() + next > target.budget {
                        return Ok(Flow::Stop);
                    }
                    progress(Progress::PrecisionRound(round, open.len() as u32));
                }
                Step::Side { side, .. } if open.contains(&side) => {
                    let r = one(side, progress)?;
                    if r.completed() {
                        figures[side].extend(stored_rounds(
                            std::slice::from_ref(&r),
                            !tests[side].baseline,
                        ));
                    } else {
                        open.retain(|&i| i != side);
                    }
                    per_test[side].push(r);
                }
                Step::Side { .. } => {}
            }
            Ok(Flow::Continue)
        },
    )?;
    let interrupted = match ended {
        rounds::Ended::Cancelled { round } => Some(round),
        _ => None,
    };
    let tests_out: Vec<PrecisionTest> = targets
        .iter()
        .map(|&i| {
            let done = &per_test[i];
            let h = done
                .iter()
                .all(Stored::completed)
                .then(|| half_width(&figures[i], i))
                .flatten();
            PrecisionTest {
                name: tests[i].name.to_string(),
                rounds: done.len() as u32,
                half_width_pct: h,
                reached: variance::reaches(h, target.target_pct),
            }
        })
        .collect();
    Ok((
        PrecisionRun {
            target_pct: target.target_pct,
            by_default: target.by_default,
            budget_seconds: target.budget.as_secs_f64(),
            seconds: spent().as_secs_f64(),
            rounds: tests_out.iter().map(|t| t.rounds).max().unwrap_or(0),
            tests: tests_out,
        },
        interrupted,
    ))
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

/// The tests (indices) with fewer than `planned` clean rounds: rounds the central figure
/// keeps that no sign calls slow ([`central::slow_rounds`]). A round of a slower host
/// state, or whose figure lies far from the test's other rounds
/// ([`central::outlier_rounds`]), is set aside and replaced by an extra round; a test
/// whose figure rests on its slow rounds for want of quick ones is short of all its
/// rounds, so that the extra rounds look for the quick state while the budget lasts. A
/// test with a round that did not complete is not run again.
fn short_of_clean_rounds(
    tests: &[&'static TestDef],
    per_test: &[Vec<Stored>],
    planned: u64,
) -> Vec<usize> {
    per_test
        .iter()
        .zip(tests)
        .enumerate()
        .filter(|(_, (done, _))| done.iter().all(|r| r.m.outcome == Outcome::Completed))
        .filter(|(_, (done, def))| {
            let net = !def.baseline;
            let rounds = stored_rounds(done, net);
            let slow = central::slow_rounds(&rounds);
            let clean = central::kept_mask(&rounds, figure_kind(net))
                .iter()
                .zip(&slow)
                .filter(|(k, s)| **k && !**s)
                .count();
            (clean as u64) < planned
        })
        .map(|(i, _)| i)
        .collect()
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
fn figure_kind(net: bool) -> central::Figure {
    if net {
        central::Figure::Net
    } else {
        central::Figure::Raw
    }
}

/// Fewest samples a `--precision` round takes, whatever K&J's formula says: a round's
/// median and scatter need some samples to mean anything.
pub const MIN_ROUND_SAMPLES: u64 = 30;

/// K&J's optimal samples per round for a test from its completed rounds so far (see
/// [`variance::optimal_samples`]), between [`MIN_ROUND_SAMPLES`] and `share` (a planned
/// round's); `share` when the components cannot be estimated.
fn optimal_share(done: &[Stored], net: bool, share: u64) -> u64 {
    let rounds: Vec<RoundFigure> = done
        .iter()
        .take_while(|r| r.completed())
        .filter_map(|r| {
            let samples = r.samples.unpack();
            let mut f = figures::round_figure(&samples, r.m.params.batch, net)?;
            f.seconds = Some(r.seconds.as_secs_f64());
            f.sampling_seconds = sampling_seconds(&samples, r.m.tsc_khz);
            Some(f)
        })
        .collect();
    variance::of_rounds(&rounds, figure_kind(net))
        .and_then(|v| v.optimal_samples_per_round)
        .map_or(share, |n| {
            (n.ceil() as u64).clamp(MIN_ROUND_SAMPLES.min(share), share)
        })
}

/// After the planned rounds, runs extra rounds of the tests that have fewer than the
/// planned rounds once outlier rounds are set aside ([`central::outlier_rounds`]: host
/// interference on the exit path), one extra round at a time, each with one round's
/// share of samples, at most as many extra rounds as planned ones. The host-noise
/// filter's share of a round no longer asks for extra rounds: the central figure does
/// not use it, and over 298 rounds the share it flagged did not tell how far a round's
/// figure lay from the test's others (`docs/statistics.md`). Returns the round during
/// which the user interrupted the run, if they did.
fn replace_outliers(
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
    per_test: &mut [Vec<Stored>],
    progress: &mut dyn FnMut(Progress<'_>),
    one: &mut RoundRunner<'_>,
) -> Result<Option<u32>, RunError> {
    for round in 0..rounds {
        let lacking = short_of_clean_rounds(tests, per_test, rounds);
        if lacking.is_empty() {
            break;
        }
        progress(Progress::ExtraRound(round as u32 + 1, lacking.len() as u32));
        for i in lacking {
            if cancelled(opts) {
                return Ok(Some(rounds as u32 + round as u32 + 1));
            }
            per_test[i].push(one(i, progress)?);
        }
    }
    Ok(None)
}

/// The median of the empty loop the guest measured before each sample of a completed
/// round: how fast the host ran the guest while the round ran.
fn round_loop_median(r: &Stored) -> Option<f64> {
    if r.m.outcome != Outcome::Completed {
        return None;
    }
    let loops: Vec<f64> = r.samples.iter().map(|s| s.g_loop as f64).collect();
    summarize(&loops).ok().map(|s| s.median)
}

/// The empty-loop medians of every completed round of a run, sorted.
fn round_loop_medians<'a>(per_test: impl IntoIterator<Item = &'a Vec<Stored>>) -> Vec<f64> {
    let mut medians: Vec<f64> = per_test
        .into_iter()
        .flatten()
        .filter_map(round_loop_median)
        .collect();
    medians.sort_unstable_by(f64::total_cmp);
    medians
}

/// The iterations per sample of a test's rounds (every round runs the test's own).
fn test_batch(rounds: &[Stored]) -> Option<u64> {
    rounds.first().map(|r| r.m.params.batch)
}

/// The host-noise detector's limits for a run, one for each batch (iterations per
/// sample) its tests ran at, in ascending order of batch, each from the tests of that
/// batch ([`quiet_loop_limit`]): the empty loop before a sample times as many iterations
/// as the sample, so loops of different batches are not comparable.
fn quiet_loop_limits(per_test: &[Vec<Stored>]) -> Vec<(u64, f64)> {
    let mut batches: Vec<u64> = per_test.iter().filter_map(|r| test_batch(r)).collect();
    batches.sort_unstable();
    batches.dedup();
    batches
        .into_iter()
        .filter_map(|b| {
            quiet_loop_limit(per_test.iter().filter(|r| test_batch(r) == Some(b)))
                .map(|limit| (b, limit))
        })
        .collect()
}

/// The host-noise detector's limit for tests of one batch. Every sample is preceded by
/// the same empty loop, whatever the test, so the loop's median in each round tells how
/// fast the host ran the guest then; the run's typical round (the median of those medians) is the
/// reference, and a sample whose own loop ran more than [`NOISE_TOLERANCE`] slower was
/// taken while the host was busy (see [`analysis::quiet_samples`]). The quietest round
/// was the reference before: one round quicker than all others then made most of a
/// run's samples "noisy" (98 % of one run's rounds, `docs/statistics.md`).
fn quiet_loop_limit<'a>(per_test: impl IntoIterator<Item = &'a Vec<Stored>>) -> Option<f64> {
    let medians = round_loop_medians(per_test);
    if medians.is_empty() {
        return None;
    }
    Some(exitlab_results::stats::percentile(&medians, 50.0) * (1.0 + NOISE_TOLERANCE))
}

/// How much slower than a test's quick rounds a round's empty loop must run for the
/// round to count as taken in a slower host state ([`central::SLOW_STATE_FACTOR`]).
pub const SLOW_STATE_FACTOR: f64 = central::SLOW_STATE_FACTOR;

/// The rounds a run's figures set aside, test by test, as [`central::central`] decides
/// them: the run-wide note says what the figures rest on, by the same rule.
#[derive(Debug, Clone, PartialEq)]
struct OtherState {
    /// Rounds with a figure, all tests.
    rounds: usize,
    /// Of them, set aside as taken in another host state than their test's figure
    /// rests on ([`central::other_state_rounds`]).
    other: usize,
    /// Of the rest, set aside as outliers ([`central::outlier_rounds`]).
    outliers: usize,
    /// Of the slow rounds set aside, those whose empty loop ran as fast as the quick
    /// rounds': the exit-path probe alone told their state.
    by_probe: usize,
    /// The tests with rounds of another state set aside.
    tests: usize,
    /// Of them, those whose figure rests on their slow rounds (their quick ones set aside).
    on_slow: Vec<String>,
    /// The median empty loop of those tests' rounds in their quick state, cycles.
    quick: f64,
    /// The same in their slow state.
    slow: f64,
    /// The batch of the tests `quick` and `slow` come from, where the tests with rounds
    /// set aside ran at more than one (a loop's figure per iteration carries its sample's
    /// clock reads shared among the batch, so it is not comparable across batches).
    loop_batch: Option<u64>,
}

/// Counts the rounds each test's central figure set aside as taken in its other host
/// state, and as outliers; `None` when no test set a round aside as another state's.
fn other_state(results: &[TestResult]) -> Option<OtherState> {
    let median = |mut v: Vec<f64>| {
        v.sort_unstable_by(f64::total_cmp);
        (!v.is_empty()).then(|| exitlab_results::stats::percentile(&v, 50.0))
    };
    let mut out = OtherState {
        rounds: 0,
        other: 0,
        outliers: 0,
        by_probe: 0,
        tests: 0,
        on_slow: Vec::new(),
        quick: f64::NAN,
        slow: f64::NAN,
        loop_batch: None,
    };
    // Each batch's loops apart: a round's loop figure is per iteration, but a sample's
    // clock reads are shared among its iterations, so the figure depends on the batch.
    let mut pools: BTreeMap<u64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for t in results {
        let Some(c) = central::central(t) else {
            continue;
        };
        let (quick, slow) = pools.entry(t.batch).or_default();
        out.rounds += c.rounds.len();
        out.outliers += c.outliers();
        let other = c.other_state_count();
        if other == 0 {
            continue;
        }
        out.other += other;
        out.tests += 1;
        let loops = |of_other: bool| -> Vec<f64> {
            c.loops
                .iter()
                .zip(&c.other_state)
                .filter_map(|(l, o)| (*o == of_other).then_some(*l).flatten())
                .collect()
        };
        let (kept, set_aside) = (loops(false), loops(true));
        // The figure rests on its slow rounds when the rounds set aside are the ones
        // the signs call quick.
        let on_slow = c.other_state.iter().zip(&c.slow).any(|(o, s)| *o && !*s);
        if on_slow {
            out.on_slow.push(t.name.clone());
            quick.extend(set_aside);
            slow.extend(kept);
        } else {
            let loop_slow = central::loop_slow(&c.loops);
            out.by_probe += c
                .other_state
                .iter()
                .zip(&loop_slow)
                .filter(|(o, l)| **o && !**l)
                .count();
            quick.extend(kept);
            slow.extend(set_aside);
        }
    }
    // The batch with the most slow loops speaks for the run (the smaller on a tie).
    let (&batch, (quick, slow)) = pools
        .iter()
        .filter(|(_, (_, slow))| !slow.is_empty())
        .max_by(|(b1, (_, s1)), (b2, (_, s2))| s1.len().cmp(&s2.len()).then(b2.cmp(b1)))?;
    if pools.values().filter(|(_, slow)| !slow.is_empty()).count() > 1 {
        out.loop_batch = Some(batch);
    }
    out.quick = median(quick.clone())?;
    out.slow = median(slow.clone())?;
    (out.other > 0).then_some(out)
}

/// How the note on a slower host state starts.
pub const HOST_STATE_NOTE: &str = "host state: ";

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

/// The note on rounds set aside as taken in another host state.
fn other_state_note(s: &OtherState) -> String {
    let outliers = match s.outliers {
        0 => String::new(),
        n => format!("; {n} more as outliers"),
    };
    let on_slow = if s.on_slow.is_empty() {
        String::new()
    } else {
        format!(" (here: {})", s.on_slow.join(", "))
    };
    let loop_batch = match s.loop_batch {
        None => String::new(),
        Some(b) => format!(
            " that take {b} iteration{} a sample",
            if b == 1 { "" } else { "s" }
        ),
    };
    let by_probe = match s.by_probe {
        0 => String::new(),
        n => format!(
            " {n} slow rounds ran their loop as fast as the quick ones and were told by the exit-path probes alone (port writes an ioeventfd absorbs in the kernel, and doorbells the VMM answers, which the guest times just before the test and just after its last sample; slow: one kind more than {:.0}% above the test's quick rounds at both ends).",
            (central::PROBE_STATE_FACTOR - 1.0) * 100.0
        ),
    };
    format!(
        "{HOST_STATE_NOTE}{} of {} rounds ({} tests) were set aside as taken in another host state than their test's figure rests on{outliers}. A round's state is told by the guest's empty loop (no exit) timed before its samples, and by the exit-path probe: in those tests{loop_batch} the loop took a median {} cycles in the slow state against {} in the quick one ({:.2}x; slow: more than {:.0}% above the test's quick rounds), and every figure of a slow round is higher.{by_probe} Each test's figure rests on one state: its quick rounds where at least {MIN_QUICK} and a quarter of them ran, its slow ones otherwise{on_slow}; the line on rounds set aside names them. Figures taken in different states are not comparable (compare refuses two runs whose kept rounds' empty loops differ; the probes time the exit path a change under test may itself move, so compare does not judge them across runs). Re-run on a quieter host, or use bench --ab, whose rounds are paired",
        s.other,
        s.rounds,
        s.tests,
        fmt_cycles(s.slow),
        fmt_cycles(s.quick),
        s.slow / s.quick,
        (SLOW_STATE_FACTOR - 1.0) * 100.0,
        MIN_QUICK = central::MIN_QUICK_ROUNDS,
    )
}

/// The note that says how many samples the host-noise detector left out, if any. The
/// rounds set aside and the extra rounds that replaced them are the line on rounds set
/// aside's ([`central::outliers_line`]), said there once.
fn noise_note(results: &[TestResult], limits: &[(u64, f64)]) -> Option<String> {
    let (dropped, total) = samples_left_out(results);
    if limits.is_empty() || dropped == 0 {
        return None;
    }
    let limit = match limits {
        [(_, limit)] => format!("{} cycles", fmt_cycles(*limit)),
        _ => limits
            .iter()
            .map(|(batch, limit)| {
                format!(
                    "{} cycles ({batch} iteration{} a sample)",
                    fmt_cycles(*limit),
                    if *batch == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join(" or "),
    };
    Some(format!(
        "host noise: {} of {} samples left out of the figures (exit checks count them): the empty loop measured just before them took more than {limit}, {:.0}% above the run's typical round (the median of the rounds' empty-loop medians, among tests of the same batch); every test kept at least {:.0}% of its samples",
        fmt_cycles(dropped as f64),
        fmt_cycles(total as f64),
        NOISE_TOLERANCE * 100.0,
        exitlab_results::samples::MIN_KEPT_SHARE * 100.0
    ))
}

/// The samples the host-noise detector left out of the tests that completed, and all
/// their samples.
pub(crate) fn samples_left_out<'a>(tests: impl IntoIterator<Item = &'a TestResult>) -> (u64, u64) {
    let (mut dropped, mut total) = (0, 0);
    for t in tests.into_iter().filter(|t| t.status.is_ok()) {
        if let Some(s) = &t.round_spread {
            dropped += s.dropped_samples;
            total += t.samples;
        }
    }
    (dropped, total)
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
            stamp_step_cycles: exitlab_results::stats::stamp_step(
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
    fn the_noise_note_counts_samples_left_out_and_leaves_rounds_to_the_set_aside_line() {
        let mut r = analysis::analyse(&round(&[10, 10, 10]), &Default::default(), 1_000_000, false);
        r.round_spread = Some(exitlab_results::results::RoundSpread {
            rounds: 2,
            dropped_samples: 0,
            spread: 0.0,
            outlier_rounds: 1,
        });
        // No sample left out: no note, whatever rounds were set aside and replaced.
        assert_eq!(noise_note(std::slice::from_ref(&r), &[(1, 100.0)]), None);
        r.round_spread.as_mut().unwrap().dropped_samples = 1;
        let mut other = r.clone();
        other.name = "hlt".into();
        let note = noise_note(&[r, other], &[(1, 100.0)]).unwrap();
        assert!(
            note.starts_with("host noise: 2 of 6 samples left out"),
            "{note}"
        );
        assert!(!note.contains("extra round"), "{note}");
    }

    #[test]
    fn the_noise_note_writes_its_numbers_with_thousands_separators() {
        let mut r = analysis::analyse(&round(&[10, 10, 10]), &Default::default(), 1_000_000, false);
        r.samples = 22_900;
        r.round_spread = Some(exitlab_results::results::RoundSpread {
            rounds: 2,
            dropped_samples: 5_539,
            spread: 0.0,
            outlier_rounds: 0,
        });
        let note = noise_note(std::slice::from_ref(&r), &[(1, 21_210.4)]).unwrap();
        assert!(
            note.starts_with("host noise: 5,539 of 22,900 samples")
                && note.contains("more than 21,210 cycles,"),
            "{note}"
        );
        // Tests of two batches: each batch's limit, named.
        let note = noise_note(&[r], &[(1, 21_210.4), (4, 29_300.0)]).unwrap();
        assert!(
            note.contains(
                "more than 21,210 cycles (1 iteration a sample) or 29,300 cycles (4 iterations a sample),"
            ),
            "{note}"
        );
    }

    fn stored(loops: &[u64]) -> Stored {
        Stored::new(round(loops), Duration::from_millis(5))
    }

    #[test]
    fn a_stored_round_gives_back_its_samples() {
        let m = round(&[1000, 1010, 1020]);
        let s = Stored::new(m.clone(), Duration::from_millis(5));
        assert!(s.m.samples.is_empty());
        assert_eq!(s.samples.len(), 3);
        assert_eq!(s.into_measurement().samples, m.samples);
    }

    #[test]
    fn tests_of_another_batch_get_a_noise_limit_of_their_own() {
        // A sample of four iterations is preceded by an empty loop of four: 2,800
        // cycles where one takes 1,000. Pooled, the batch-4 rounds would set the limit
        // for all, and every batch-1 sample would pass it.
        let at = |batch: u64, loops: &[u64]| {
            let mut m = round(loops);
            m.params.batch = batch;
            Stored::new(m, Duration::from_millis(5))
        };
        let per_test = vec![
            vec![at(1, &[1000; 3]), at(1, &[1010; 3])],
            vec![at(4, &[2800; 3]), at(4, &[2810; 3]), at(4, &[2790; 3])],
            vec![at(4, &[2805; 3])],
        ];
        assert_eq!(
            quiet_loop_limits(&per_test),
            [(1, 1005.0 * 1.03), (4, 2802.5 * 1.03)]
        );
    }

    #[test]
    fn the_typical_round_of_the_run_sets_the_noise_limit() {
        let per_test = vec![
            vec![stored(&[1000, 1010, 1020]), stored(&[1500, 1500, 1600])],
            vec![stored(&[990, 1000, 1005])],
        ];
        // Round medians 1010, 1500, 1000: the median round 1010, plus 3 %.
        assert_eq!(quiet_loop_limit(&per_test), Some(1010.0 * 1.03));
        let mut stuck = round(&[10, 10, 10]);
        stuck.outcome = Outcome::DidNotComplete("stuck".into());
        let mut with_stuck = per_test.clone();
        with_stuck.push(vec![Stored::new(stuck, Duration::ZERO)]);
        assert_eq!(
            quiet_loop_limit(&with_stuck),
            Some(1010.0 * 1.03),
            "a round that did not complete says nothing about the host"
        );
        // One round far quicker than the others does not make them all noisy.
        let quick = vec![
            vec![stored(&[1000; 3]), stored(&[1002; 3]), stored(&[998; 3])],
            vec![stored(&[900; 3])],
        ];
        assert_eq!(quiet_loop_limit(&quick), Some(999.0 * 1.03));
    }

    /// A completed test whose rounds have these (net figure, empty loop) pairs.
    fn test_of_rounds(name: &str, rounds: &[(f64, f64)]) -> TestResult {
        let mut t = analysis::analyse(&round(&[10, 10, 10]), &Default::default(), 1_000_000, false);
        t.name = name.into();
        t.rounds = rounds
            .iter()
            .map(|&(net, empty)| RoundFigure {
                samples: 30,
                median: net + empty,
                net_median: Some(net),
                loop_median: Some(empty),
                ..Default::default()
            })
            .collect();
        t
    }

    #[test]
    fn the_host_state_note_counts_the_rounds_each_test_set_aside() {
        // cpuid: 10 quick rounds (one an outlier) and 3 slow ones: the 3 slow are set
        // aside. hlt: 2 quick rounds and 10 slow: it ran mostly in the slow state, its
        // figure rests on the slow rounds and the 2 quick ones are set aside. A pooled
        // rule over the run's loops would count the 13 slow rounds instead.
        let mut cpuid: Vec<(f64, f64)> = (0..10).map(|i| (3_000.0 + i as f64, 1_000.0)).collect();
        cpuid[4].0 = 4_000.0;
        cpuid.extend([(4_500.0, 1_550.0); 3]);
        let mut hlt: Vec<(f64, f64)> = vec![(6_000.0, 1_010.0); 2];
        hlt.extend((0..10).map(|i| (9_000.0 + i as f64, 1_560.0)));
        let tests = [test_of_rounds("cpuid", &cpuid), test_of_rounds("hlt", &hlt)];
        let s = other_state(&tests).expect("rounds set aside");
        assert_eq!(
            (s.rounds, s.other, s.outliers, s.tests),
            (25, 5, 1, 2),
            "{s:?}"
        );
        assert_eq!(s.on_slow, ["hlt"]);
        // Quick: cpuid's 10 at 1,000 and hlt's 2 at 1,010; slow: 3 at 1,550, 10 at 1,560.
        assert_eq!((s.quick, s.slow), (1_000.0, 1_560.0));
        let line = central::outliers_line(&tests).unwrap();
        assert!(line.contains("cpuid 3 of 13, hlt 2 of 12"), "{line}");
        let note = other_state_note(&s);
        assert!(
            note.starts_with("host state: 5 of 25 rounds (2 tests) were set aside as taken in another host state than their test's figure rests on; 1 more as outliers."),
            "{note}"
        );
        assert!(
            note.contains("1,560 cycles in the slow state against 1,000 in the quick one (1.56x")
                && note.contains("its slow ones otherwise (here: hlt)"),
            "{note}"
        );
        assert!(!note.contains("iteration"), "one batch: {note}");
        // cpuid at four iterations a sample: its loops (per iteration, a quarter of the
        // clock reads each: ~0.36x here) are not pooled with hlt's (one iteration); hlt's
        // batch, with more slow loops, speaks for the run.
        let mut tests = tests;
        tests[0].batch = 4;
        tests[0].rounds.iter_mut().for_each(|r| {
            r.loop_median = r.loop_median.map(|l| l * 0.36);
        });
        let s = other_state(&tests).expect("rounds set aside");
        assert_eq!((s.quick, s.slow, s.loop_batch), (1_010.0, 1_560.0, Some(1)));
        let note = other_state_note(&s);
        assert!(
            note.contains("in those tests that take 1 iteration a sample the loop took a median 1,560 cycles in the slow state against 1,010 in the quick one"),
            "{note}"
        );
        // A spread of a few percent is not a state: no note, whatever the outliers.
        let even: Vec<(f64, f64)> = (0..12)
            .map(|i| {
                (
                    if i == 3 { 5_000.0 } else { 3_000.0 },
                    1_000.0 + 5.0 * i as f64,
                )
            })
            .collect();
        let even = test_of_rounds("cpuid", &even);
        assert_eq!(central::central(&even).unwrap().outliers(), 1);
        assert_eq!(other_state(&[even]), None);
        assert_eq!(other_state(&[]), None);
    }

    #[test]
    fn the_host_state_note_says_how_many_slow_rounds_the_probe_alone_told() {
        // inl_from_user: 9 quick rounds, 2 with a slow loop, and 3 whose loop ran as fast
        // as the quick ones' but whose userspace probe ran 30 % slower before and after.
        let mut rounds: Vec<(f64, f64)> = (0..9).map(|i| (21_500.0 + i as f64, 20_000.0)).collect();
        rounds.extend([(28_000.0, 27_000.0); 2]);
        rounds.extend([(26_500.0, 20_000.0); 3]);
        let mut t = test_of_rounds("inl_from_user", &rounds);
        for (i, r) in t.rounds.iter_mut().enumerate() {
            let user = if i >= 11 { 4_100.0 } else { 3_150.0 };
            r.probes = Some(exitlab_results::results::Probes {
                kernel_before: 1_220.0,
                kernel_after: 1_220.0,
                user_before: user,
                user_after: user,
            });
        }
        let s = other_state(std::slice::from_ref(&t)).expect("rounds set aside");
        assert_eq!((s.rounds, s.other, s.by_probe), (14, 5, 3), "{s:?}");
        let note = other_state_note(&s);
        assert!(
            note.contains(" 3 slow rounds ran their loop as fast as the quick ones and were told by the exit-path probes alone")
                && note.contains("slow: one kind more than 10% above the test's quick rounds at both ends)."),
            "{note}"
        );
        assert_eq!(central::central(&t).unwrap().value, 21_504.0);
    }

    /// A completed round of `cpuid` whose 30 samples all have the net figure `net`,
    /// that took a second.
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

    /// The empty loop, a test whose six rounds agree within 0.2 % and one whose rounds
    /// scatter by ±10 %; each further round of any test gives 1,000 net cycles and takes
    /// a second. Runs `until_precise` with a target of ±1 % and `budget` seconds left;
    /// returns the outcome, the tests (indices) run, in order, and the open tests each
    /// precision round announced.
    fn precise(budget: u64) -> (PrecisionRun, Vec<usize>, Vec<u32>) {
        let tests = [
            catalogue::baseline(),
            catalogue::find("cpuid").unwrap(),
            catalogue::find("hlt").unwrap(),
        ];
        let mut per_test = vec![
            rounds_of(&[1000; 6]),
            rounds_of(&[1000, 1001, 999, 1000, 1002, 998]),
            rounds_of(&[1000, 1100, 900, 1050, 950, 1080]),
        ];
        let mut ran = Vec::new();
        let mut open_counts = Vec::new();
        // A clock that moves only by the rounds' own seconds.
        let clock = std::cell::Cell::new(Duration::ZERO);
        let mut progress = |p: Progress<'_>| {
            if let Progress::PrecisionRound(_, n) = p {
                open_counts.push(n);
            }
        };
        let mut one = |i: usize, _: &mut dyn FnMut(Progress<'_>)| {
            ran.push(i);
            let r = round_of_net(1000);
            clock.set(clock.get() + r.seconds);
            Ok(r)
        };
        let target = Precision {
            target_pct: 1.0,
            budget: Duration::from_secs(budget),
            by_default: false,
        };
        let (out, stopped) = until_precise(
            &tests,
            &mut per_test,
            target,
            &|| clock.get(),
            None,
            &mut progress,
            &mut one,
        )
        .unwrap();
        assert_eq!(stopped, None);
        (out, ran, open_counts)
    }

    #[test]
    fn precision_rounds_run_only_the_tests_short_of_the_target_until_they_reach_it() {
        let (out, ran, open) = precise(100);
        // Only hlt was short of ±1 %: neither the empty loop nor cpuid ran again.
        assert!(!ran.is_empty() && ran.iter().all(|&i| i == 2), "{ran:?}");
        assert!(open.iter().all(|&n| n == 1), "{open:?}");
        let names: Vec<&str> = out.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["cpuid", "hlt"], "the empty loop is no target");
        assert!(out.tests.iter().all(|t| t.reached), "{out:?}");
        let hlt = &out.tests[1];
        assert_eq!(hlt.rounds as usize, 6 + ran.len());
        assert!(hlt.half_width_pct.unwrap() <= 1.0);
        // It stopped as soon as hlt reached the target, long before the budget.
        assert_eq!(out.seconds, ran.len() as f64);
        assert!(out.seconds < 100.0);
        assert_eq!(out.rounds, hlt.rounds);
    }

    #[test]
    fn precision_rounds_take_k_and_j_s_samples_per_round_within_bounds() {
        // Rounds whose figures differ by ~2 % (between-round variance) while each
        // round's samples agree (no within-round scatter): n* is 0, so the floor.
        let done = rounds_of(&[1000, 1020, 980, 1010, 990, 1000]);
        assert_eq!(optimal_share(&done, true, 100), MIN_ROUND_SAMPLES);
        assert_eq!(
            optimal_share(&done, true, 20),
            20,
            "never more than a share"
        );
        // Too few rounds for the components, or no clock to cost a sample with: a
        // planned round's share.
        assert_eq!(optimal_share(&done[..1], true, 100), 100);
        let mut untimed = done.clone();
        untimed.iter_mut().for_each(|r| r.m.tsc_khz = None);
        assert_eq!(optimal_share(&untimed, true, 100), 100);
    }

    #[test]
    fn precision_rounds_stop_at_the_budget_and_name_the_tests_short_of_the_target() {
        // Three seconds left: three rounds of hlt (a second each), then the next would
        // overrun the budget.
        let (out, ran, _) = precise(3);
        assert_eq!(ran, [2, 2, 2]);
        assert_eq!(out.seconds, 3.0);
        let missed: Vec<&PrecisionTest> = out.unreached().collect();
        assert_eq!(missed.len(), 1, "{out:?}");
        assert_eq!((missed[0].name.as_str(), missed[0].rounds), ("hlt", 9));
        assert!(missed[0].half_width_pct.unwrap() > 1.0);
        assert!(out.tests[0].reached);
    }

    #[test]
    fn a_test_with_an_outlier_round_gets_an_extra_round() {
        let cpuid = catalogue::find("cpuid").unwrap();
        let clean: Vec<Stored> = [1000, 1010, 990, 1005, 995, 1000]
            .iter()
            .map(|&n| round_of_net(n))
            .collect();
        let mut disturbed = clean.clone();
        disturbed[3] = round_of_net(1250);
        let per_test = vec![clean.clone(), disturbed.clone()];
        let nets: Vec<Option<f64>> = stored_rounds(&per_test[1], true)
            .iter()
            .map(|f| f.net_median)
            .collect();
        assert_eq!(
            nets,
            [1000.0, 1010.0, 990.0, 1250.0, 995.0, 1000.0].map(Some)
        );
        assert_eq!(
            short_of_clean_rounds(&[cpuid, cpuid], &per_test, 6),
            vec![1]
        );
        // Once replaced, six rounds are kept again.
        disturbed.push(round_of_net(1002));
        let per_test = vec![clean, disturbed];
        assert!(short_of_clean_rounds(&[cpuid, cpuid], &per_test, 6).is_empty());
    }
}
