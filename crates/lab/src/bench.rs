//! `exitlab bench`: runs a suite of exit tests, each in a fresh VM, and assembles the
//! results: statistics, exit-count checks, the loop-subtracted figures, and the VMM
//! overhead experiment (the full exit loop against a bare KVM_RUN loop).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use exitlab_vmm::Kvm;

use crate::analysis::{self, Baseline};
use crate::catalogue::{self, TestDef};
use crate::runner::{self, Measurement, Outcome, RunError, RunParams};
use exitlab_guest::abi::Sample;
use exitlab_results::central;
use exitlab_results::figures;
use exitlab_results::packed::PackedSamples;
use exitlab_results::results::RoundFigure;
use exitlab_results::results::{
    BenchConfig, Overhead, ProcessStats, Results, TestResult, TestStatus, Tool,
};
use exitlab_results::stats::summarize;

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
    /// An extra round (1-based) for this many tests short of quiet samples is starting.
    ExtraRound(u32, u32),
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

/// How much slower than the run's quietest rounds a round's empty loop may run before
/// the host-noise detector flags the round. On a quiet host the loop's round medians
/// agree within about 1 %; a busy host slows the guest by 10-50 % for a while.
pub const NOISE_TOLERANCE: f64 = 0.03;

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
    let (mut per_test, mut interrupted) = run_rounds(kvm, image, &tests, opts, rounds, progress)?;
    // A one-round run is one step of a design that interleaves runs (A/B): it gets no
    // extra rounds, which would break the interleaving.
    let extra = if interrupted.is_none() && rounds > 1 {
        let (extra, stopped) =
            top_up_quiet_samples(kvm, image, &tests, opts, rounds, &mut per_test, progress)?;
        interrupted = stopped;
        extra
    } else {
        Vec::new()
    };
    let mut base = Baseline {
        quiet_loop_limit: quiet_loop_limit(&per_test),
        ..Baseline::default()
    };
    // What the report needs of the measurements once each is analysed (their samples
    // are dropped then): the first pinning failure and the largest resident memory
    // outside guest RAM, which the VMM overhead experiment's VMs add to.
    let mut pin_error: Option<String> = None;
    let mut rss_outside_guest: Option<u64> = None;
    let mut results = Vec::with_capacity(tests.len());
    let mut tsc_khz: Option<(u64, String)> = None;
    for (def, rounds) in tests.iter().zip(per_test) {
        let rounds: Vec<Measurement> = rounds.into_iter().map(Stored::into_measurement).collect();
        // The baseline has no net figure: it is the empty loop itself.
        let net = !def.baseline;
        let (figures, kept_samples) = round_figures(&rounds, net);
        let Some(m) = Measurement::merge(rounds) else {
            continue;
        };
        if tsc_khz.is_none() {
            if let Some(k) = m.tsc_khz {
                tsc_khz = Some((k.into(), "KVM_GET_TSC_KHZ".into()));
            }
        }
        let khz = tsc_khz
            .as_ref()
            .map(|t| t.0)
            .or_else(|| tsc_from_host(&host).map(|t| t.0))
            .unwrap_or(0);
        if def.baseline && m.outcome == Outcome::Completed {
            // Set before the loop's own analysis: the exits KVM counts during the empty
            // loop (a busy host's interrupts) are no test's, the loop's included.
            let p = &m.params;
            let iterations = (p.warmup + p.samples * p.batch).max(1) as f64;
            base.loop_kvm_exits_per_iter = m.kvm_exits().map(|k| k as f64 / iterations);
        }
        let mut r = analysis::analyse(&m, &base, khz, opts.raw);
        r.rounds = figures;
        // The CDF is drawn from the rounds the central figure rests on.
        r.net_percentiles = (m.outcome == Outcome::Completed)
            .then(|| figures::net_percentiles(&kept_samples, m.params.batch, net))
            .flatten();
        central::store(&mut r, khz);
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
        results.push(r);
        pin_error = pin_error.or(m.pin_error);
        rss_outside_guest = rss_outside_guest.max(m.vmm_rss_bytes);
    }
    let mut notes = notes;
    if let Some(e) = &pin_error {
        notes.push(format!(
            "pinning the vCPU thread failed: {e}; the vCPU ran unpinned"
        ));
    }
    notes.extend(noise_note(&results, base.quiet_loop_limit, &extra));
    let mut incomplete = interrupted.map(|round| {
        let when = match u64::from(round).checked_sub(rounds) {
            Some(extra) if extra > 0 => {
                format!("extra round {extra} (after the {rounds} planned ones)")
            }
            _ => format!("round {round} of {rounds}"),
        };
        format!(
            "interrupted during {when}: kept the {} test(s) with at least one completed round (each with the rounds it completed); the VMM overhead experiment was not run",
            results.iter().filter(|r| !r.rounds.is_empty()).count()
        )
    });
    let (mut vmm_overhead, mut floor) = (None, None);
    if opts.overhead && incomplete.is_none() {
        progress(Progress::Start(OVERHEAD_LABEL));
        let stamps = overhead(kvm, image, opts, &mut rss_outside_guest)?;
        let kernel = match (&stamps, &opts.floor) {
            (Some(_), Some(setup)) => crate::floor::compare(setup, &|| cancelled(opts)).map(Some),
            (Some(_), None) => Some(None),
            (None, _) => None,
        };
        let status = match (stamps, kernel) {
            (Some(stamps), Some(kernel)) => {
                match stamps {
                    Ok(o) => vmm_overhead = Some(o),
                    Err(why) => notes.push(format!(
                        "VMM overhead (in-process stamps) not measured: {why}"
                    )),
                }
                floor = kernel;
                TestStatus::Ok
            }
            _ => {
                let why = format!(
                    "interrupted during the VMM overhead experiment: the {} test(s) completed all their rounds; the experiment's figures were dropped",
                    results.len()
                );
                incomplete = Some(why.clone());
                TestStatus::DidNotComplete { reason: why }
            }
        };
        progress(Progress::Done(OVERHEAD_LABEL, &status));
    }
    let (tsc_khz, tsc_khz_source) = tsc_khz
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
        vmm_overhead,
        floor,
        notes,
        process: rss_outside_guest.map(|outside| ProcessStats {
            vmm_rss_outside_guest_bytes: outside,
            peak_rss_bytes: exitlab_vmm::sys::peak_rss().unwrap_or(0),
        }),
        provenance: Some(exitlab_results::results::Provenance::current()),
        incomplete,
        ab: None,
        precision: None,
    })
}

/// The figure of each completed round of a test (in order, up to the first round that
/// did not complete), and the samples of the rounds the central figure keeps (every
/// round but the outliers, see [`central::outlier_rounds`]).
fn round_figures(rounds: &[Measurement], net: bool) -> (Vec<RoundFigure>, Vec<Sample>) {
    let done: Vec<(RoundFigure, &Measurement)> = rounds
        .iter()
        .take_while(|m| m.outcome == Outcome::Completed)
        .filter_map(|m| Some((figures::round_figure(&m.samples, m.params.batch, net)?, m)))
        .collect();
    let values: Vec<f64> = done
        .iter()
        .map(|(f, _)| {
            if net {
                f.net_median.unwrap_or(f64::NAN)
            } else {
                f.median
            }
        })
        .collect();
    let kept = central::CHOSEN.kept(&values);
    let samples = done
        .iter()
        .zip(&kept)
        .filter(|(_, k)| **k)
        .flat_map(|((_, m), _)| m.samples.iter().copied())
        .collect();
    (done.into_iter().map(|(f, _)| f).collect(), samples)
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
}

impl Stored {
    fn new(mut m: Measurement) -> Stored {
        let samples = PackedSamples::pack(&m.samples);
        m.samples = Vec::new();
        Stored { m, samples }
    }

    /// The measurement with its samples unpacked.
    fn into_measurement(self) -> Measurement {
        let mut m = self.m;
        m.samples = self.samples.unpack();
        m
    }
}

/// Runs `rounds` rounds of the whole suite, each test in a fresh VM every round with its
/// share of the samples, so that slow drifts of the host spread over all tests alike.
/// A test that did not complete, failed or was skipped is not run again. Also returns
/// the round (1-based) during which the user interrupted the run, if they did.
fn run_rounds(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(Vec<Vec<Stored>>, Option<u32>), RunError> {
    let mut per_test: Vec<Vec<Stored>> = tests.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        progress(Progress::Round(round as u32 + 1, rounds as u32));
        let share = opts.params.samples / rounds + u64::from(round < opts.params.samples % rounds);
        for (def, done) in tests.iter().zip(per_test.iter_mut()) {
            if done
                .last()
                .is_some_and(|r| r.m.outcome != Outcome::Completed)
            {
                continue;
            }
            if cancelled(opts) {
                return Ok((per_test, Some(round as u32 + 1)));
            }
            done.push(Stored::new(one_round(
                kvm, image, def, opts, share, progress,
            )?));
        }
    }
    Ok((per_test, None))
}

/// One round of `def` with `samples` samples, in a fresh VM, shown as it starts and ends.
fn one_round(
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    opts: &BenchOptions,
    samples: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Measurement, RunError> {
    progress(Progress::Start(def.name));
    let m = runner::run_test(
        kvm,
        image,
        def,
        RunParams {
            samples,
            ..opts.params
        },
    )?;
    progress(Progress::Done(def.name, &status_of(&m.outcome)));
    Ok(m)
}

/// Share of a test's samples that should come from quiet moments of the host; a test
/// with fewer gets extra rounds (see [`top_up_quiet_samples`]).
pub const QUIET_SHARE_WANTED: f64 = 0.5;

/// Samples of `rounds` taken while the host was quiet (paired loop within `limit`).
fn quiet_count(rounds: &[Stored], limit: f64) -> u64 {
    rounds
        .iter()
        .flat_map(|r| r.samples.iter())
        .filter(|s| s.g_loop as f64 <= limit)
        .count() as u64
}

/// Tests that got extra rounds, with how many each.
type ExtraRounds = Vec<(&'static str, u32)>;

/// The tests (indices) whose completed rounds hold fewer than `wanted` samples taken
/// while the host was quiet; a test with a round that did not complete is not run again.
fn short_of_quiet_samples(per_test: &[Vec<Stored>], limit: f64, wanted: u64) -> Vec<usize> {
    per_test
        .iter()
        .enumerate()
        .filter(|(_, done)| done.iter().all(|r| r.m.outcome == Outcome::Completed))
        .filter(|(_, done)| quiet_count(done, limit) < wanted)
        .map(|(i, _)| i)
        .collect()
}

/// The tests (indices) with fewer than `planned` rounds the central figure keeps: a
/// round whose figure lies far from the test's other rounds (host interference on the
/// exit path, which the empty loop before each sample does not see) is set aside
/// ([`central::outlier_rounds`]) and replaced by an extra round. A test with a round
/// that did not complete is not run again.
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
            let values = stored_round_figures(done, !def.baseline);
            let kept = central::CHOSEN.kept(&values).iter().filter(|k| **k).count();
            (kept as u64) < planned
        })
        .map(|(i, _)| i)
        .collect()
}

/// The figure of each stored round (net median, raw for the empty loop; NaN for a round
/// without plausible samples).
fn stored_round_figures(done: &[Stored], net: bool) -> Vec<f64> {
    done.iter()
        .map(|r| {
            let samples = r.samples.unpack();
            figures::round_figure(&samples, r.m.params.batch, net)
                .and_then(|f| if net { f.net_median } else { Some(f.median) })
                .unwrap_or(f64::NAN)
        })
        .collect()
}

/// After the planned rounds, runs extra rounds of the tests that have fewer than
/// [`QUIET_SHARE_WANTED`] of the samples asked for from quiet moments of the host, or
/// fewer than the planned rounds once outlier rounds are set aside, one
/// extra round at a time, each with one round's share of samples, at most as many extra
/// rounds as planned ones. A quiet host needs none, so the default run is not longer
/// there; a busy host spends more time instead of reporting its busy moments. Returns
/// the tests that got extra rounds, with how many, and the round during which the user
/// interrupted the run, if they did.
fn top_up_quiet_samples(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    opts: &BenchOptions,
    rounds: u64,
    per_test: &mut [Vec<Stored>],
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(ExtraRounds, Option<u32>), RunError> {
    let share = (opts.params.samples / rounds).max(1);
    let wanted = (opts.params.samples as f64 * QUIET_SHARE_WANTED).ceil() as u64;
    let mut extra: Vec<(&'static str, u32)> = Vec::new();
    for round in 0..rounds {
        let Some(limit) = quiet_loop_limit(per_test) else {
            break;
        };
        let mut lacking = short_of_quiet_samples(per_test, limit, wanted);
        for i in short_of_clean_rounds(tests, per_test, rounds) {
            if !lacking.contains(&i) {
                lacking.push(i);
            }
        }
        lacking.sort_unstable();
        if lacking.is_empty() {
            break;
        }
        progress(Progress::ExtraRound(round as u32 + 1, lacking.len() as u32));
        for i in lacking {
            if cancelled(opts) {
                return Ok((extra, Some(rounds as u32 + round as u32 + 1)));
            }
            let def = tests[i];
            per_test[i].push(Stored::new(one_round(
                kvm, image, def, opts, share, progress,
            )?));
            match extra.iter_mut().find(|(n, _)| *n == def.name) {
                Some((_, k)) => *k += 1,
                None => extra.push((def.name, 1)),
            }
        }
    }
    Ok((extra, None))
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

/// The host-noise detector's limit for a run. Every sample is preceded by the same
/// empty loop, whatever the test, so the loop's median in each round tells how fast the
/// host ran the guest then; the quietest round of the whole run is the reference, and a
/// sample whose own loop ran more than [`NOISE_TOLERANCE`] slower was taken while the
/// host was busy (see [`analysis::quiet_samples`]).
fn quiet_loop_limit(per_test: &[Vec<Stored>]) -> Option<f64> {
    per_test
        .iter()
        .flatten()
        .filter_map(round_loop_median)
        .min_by(f64::total_cmp)
        .map(|reference| reference * (1.0 + NOISE_TOLERANCE))
}

/// The note that says how many samples the host-noise detector left out and which
/// tests got extra rounds, if any.
fn noise_note(results: &[TestResult], limit: Option<f64>, extra: &[(&str, u32)]) -> Option<String> {
    let (mut dropped, mut total) = (0, 0);
    for t in results.iter().filter(|t| t.status.is_ok()) {
        if let Some(s) = &t.round_spread {
            dropped += s.dropped_samples;
            total += t.samples;
        }
    }
    let limit = limit?;
    if dropped == 0 && extra.is_empty() {
        return None;
    }
    let mut note = format!(
        "host noise: {dropped} of {total} samples left out of the figures (exit checks count them): the empty loop measured just before them took more than {limit:.0} cycles, {:.0}% above the run's quietest round; every test kept at least {:.0}% of its samples",
        NOISE_TOLERANCE * 100.0,
        exitlab_results::samples::MIN_KEPT_SHARE * 100.0
    );
    if !extra.is_empty() {
        // The same number for every test that ran is said once.
        let ran = results.iter().filter(|t| t.status.is_ok()).count();
        let list = match extra {
            [(_, k), rest @ ..] if extra.len() == ran && rest.iter().all(|(_, r)| r == k) => {
                format!("{k} for each of the {ran} tests")
            }
            _ => {
                let each: Vec<String> = extra.iter().map(|(n, k)| format!("{n} {k}")).collect();
                each.join(", ")
            }
        };
        let _ = write!(
            note,
            "; extra rounds for tests short of quiet samples or of rounds once outlier rounds were set aside: {list}"
        );
    }
    Some(note)
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
    rss_outside_guest: &mut Option<u64>,
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
            *rss_outside_guest = (*rss_outside_guest).max(m.vmm_rss_bytes);
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

    use exitlab_guest::abi::Sample;

    use super::*;

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
    fn the_noise_note_says_an_equal_number_of_extra_rounds_once() {
        let mut r = analysis::analyse(&round(&[10, 10, 10]), &Default::default(), 1_000_000, false);
        r.round_spread = Some(exitlab_results::results::RoundSpread {
            rounds: 2,
            dropped_samples: 1,
            spread: 0.0,
            outlier_rounds: 0,
        });
        let mut other = r.clone();
        other.name = "hlt".into();
        let tests = [r, other];
        let note = noise_note(&tests, Some(100.0), &[("cpuid", 6), ("hlt", 6)]).unwrap();
        assert!(
            note.ends_with(
                "extra rounds for tests short of quiet samples or of rounds once outlier rounds were set aside: 6 for each of the 2 tests"
            ),
            "{note}"
        );
        let note = noise_note(&tests, Some(100.0), &[("cpuid", 6), ("hlt", 2)]).unwrap();
        assert!(note.ends_with("set aside: cpuid 6, hlt 2"), "{note}");
        let note = noise_note(&tests, Some(100.0), &[("cpuid", 6)]).unwrap();
        assert!(note.ends_with("set aside: cpuid 6"), "{note}");
    }

    fn stored(loops: &[u64]) -> Stored {
        Stored::new(round(loops))
    }

    #[test]
    fn a_stored_round_gives_back_its_samples() {
        let m = round(&[1000, 1010, 1020]);
        let s = Stored::new(m.clone());
        assert!(s.m.samples.is_empty());
        assert_eq!(s.samples.len(), 3);
        assert_eq!(s.into_measurement().samples, m.samples);
    }

    #[test]
    fn the_quietest_round_of_the_run_sets_the_noise_limit() {
        let per_test = vec![
            vec![stored(&[1000, 1010, 1020]), stored(&[1500, 1500, 1600])],
            vec![stored(&[990, 1000, 1005])],
        ];
        // Quietest round median 1000 (second test), plus 3 %.
        assert_eq!(quiet_loop_limit(&per_test), Some(1030.0));
        let mut stuck = round(&[10, 10, 10]);
        stuck.outcome = Outcome::DidNotComplete("stuck".into());
        let mut with_stuck = per_test.clone();
        with_stuck.push(vec![Stored::new(stuck)]);
        assert_eq!(
            quiet_loop_limit(&with_stuck),
            Some(1030.0),
            "a round that did not complete says nothing about the host"
        );
    }

    /// A completed round of `cpuid` whose 30 samples all have the net figure `net`.
    fn round_of_net(net: u64) -> Stored {
        let mut m = round(&[100; 30]);
        for s in &mut m.samples {
            s.g_end = s.g_start + 100 + net;
        }
        Stored::new(m)
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
        assert_eq!(
            stored_round_figures(&per_test[1], true),
            vec![1000.0, 1010.0, 990.0, 1250.0, 995.0, 1000.0]
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

    #[test]
    fn tests_short_of_quiet_samples_get_extra_rounds() {
        let mut stuck = round(&[2000]);
        stuck.outcome = Outcome::DidNotComplete("stuck".into());
        let per_test = vec![
            // 4 quiet samples of 6.
            vec![stored(&[1000, 1000, 1000]), stored(&[1000, 1500, 1500])],
            // 2 quiet of 6.
            vec![stored(&[1000, 1000, 1500]), stored(&[1500, 1500, 1500])],
            // Not completed: never run again.
            vec![Stored::new(stuck)],
        ];
        assert_eq!(quiet_count(&per_test[0], 1030.0), 4);
        assert_eq!(short_of_quiet_samples(&per_test, 1030.0, 3), vec![1]);
        assert_eq!(short_of_quiet_samples(&per_test, 1030.0, 5), vec![0, 1]);
    }
}
