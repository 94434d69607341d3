//! `exitlab bench`: runs a suite of exit tests, each in a fresh VM, and assembles the
//! results: statistics, exit-count checks, the loop-subtracted figures, and the VMM
//! overhead experiment (the full exit loop against a bare KVM_RUN loop).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use exitlab_vmm::Kvm;

use crate::analysis::{self, Baseline};
use crate::catalogue::{self, TestDef};
use crate::results::{BenchConfig, Overhead, ProcessStats, Results, TestStatus, Tool};
use crate::runner::{self, Measurement, Outcome, RunError, RunParams};
use crate::stats::summarize;

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
    let mut tests: Vec<&'static TestDef> = opts.tests.clone();
    if !tests.iter().any(|t| t.name == "loop_overhead") {
        if let Some(l) = catalogue::find("loop_overhead") {
            tests.insert(0, l);
        }
    } else {
        // The loop overhead runs first: every other figure is reported net of it.
        tests.sort_by_key(|t| t.name != "loop_overhead");
    }
    let mut measurements: Vec<Measurement> = Vec::with_capacity(tests.len());
    let mut results = Vec::with_capacity(tests.len());
    let mut base = Baseline::default();
    let mut tsc_khz: Option<(u64, String)> = None;
    let mut uncounted = Vec::new();
    let rounds = u64::from(opts.rounds.max(1)).min(opts.params.samples.max(1));
    let mut per_test: Vec<Vec<Measurement>> = tests.iter().map(|_| Vec::new()).collect();
    let cancelled = || {
        opts.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    };
    let mut interrupted = None;
    'rounds: for round in 0..rounds {
        progress(Progress::Round(round as u32 + 1, rounds as u32));
        let share = opts.params.samples / rounds + u64::from(round < opts.params.samples % rounds);
        for (i, def) in tests.iter().enumerate() {
            // A test that did not complete, failed or was skipped is not run again.
            if per_test[i]
                .last()
                .is_some_and(|m| m.outcome != Outcome::Completed)
            {
                continue;
            }
            if cancelled() {
                interrupted = Some(round as u32 + 1);
                break 'rounds;
            }
            progress(Progress::Start(def.name));
            let m = runner::run_test(
                kvm,
                image,
                def,
                RunParams {
                    samples: share,
                    ..opts.params
                },
            )?;
            progress(Progress::Done(def.name, &status_of(&m.outcome)));
            per_test[i].push(m);
        }
    }
    for (def, rounds) in tests.iter().zip(per_test) {
        let figures = crate::figures::round_figures(&rounds);
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
        let mut r = analysis::analyse(&m, &base, khz, opts.raw);
        r.rounds = figures;
        r.net_percentiles = crate::figures::net_percentiles(&m);
        if opts.phases_off.is_some() {
            r.phases = None;
        }
        if m.outcome != Outcome::Completed {
            // Not run to the end: report what was asked for, not one round's share.
            r.samples = opts.params.samples;
        }
        if def.name == "loop_overhead" && m.outcome == Outcome::Completed {
            let p = &m.params;
            let iterations = (p.warmup + p.samples * p.batch).max(1) as f64;
            base.loop_kvm_exits_per_iter = m.kvm_exits.map(|k| k as f64 / iterations);
        }
        if m.outcome == Outcome::Completed && analysis::kernel_exits_uncounted(&m, &base) {
            uncounted.push(def.name);
        }
        results.push(r);
        measurements.push(m);
    }
    let mut notes = notes;
    if let Some(e) = measurements.iter().find_map(|m| m.pin_error.as_ref()) {
        notes.push(format!(
            "pinning the vCPU thread failed: {e}; the vCPU ran unpinned"
        ));
    }
    if !uncounted.is_empty() {
        notes.push(format!(
            "KVM's exit counter did not count the exits of {} ({}): KVM handled them without a counted VM exit (a host that emulates guest ring 0, or handles these instructions on a fast path, does this); no userspace exit happened",
            uncounted.join(", "),
            if opts.params.ring == 0 { "ring 0" } else { "ring 3" }
        ));
    }
    let incomplete = interrupted.map(|round| {
        format!(
            "interrupted during round {round} of {rounds}: kept the {} test(s) with at least one completed round (each with the rounds it completed); the VMM overhead experiment was not run",
            results.len()
        )
    });
    let vmm_overhead = if opts.overhead && incomplete.is_none() {
        let mut kernel_view = crate::trace_report::OverheadView::new();
        let r = overhead(kvm, image, opts, &mut kernel_view, progress)?;
        if let Err(why) = &r {
            notes.push(format!("VMM overhead not measured: {why}"));
        } else {
            notes.push(kernel_view.note());
        }
        r.ok()
    } else {
        None
    };
    let (tsc_khz, tsc_khz_source) = tsc_khz
        .or_else(|| tsc_from_host(&host))
        .unwrap_or((0, "unknown".into()));
    Ok(Results {
        schema_version: crate::results::SCHEMA_VERSION,
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
        notes,
        process: measurements
            .iter()
            .filter_map(|m| m.vmm_rss_bytes)
            .max()
            .map(|outside| ProcessStats {
                vmm_rss_outside_guest_bytes: outside,
                peak_rss_bytes: exitlab_vmm::sys::peak_rss().unwrap_or(0),
            }),
        provenance: Some(crate::results::Provenance::current()),
        incomplete,
        ab: None,
    })
}

/// The VMM overhead experiment: the userspace share of `inl_from_user` exits with the
/// full loop (bus lookup, device, accounting) against the bare loop, alternating rounds
/// so that host drift affects both alike.
fn overhead(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &BenchOptions,
    kernel_view: &mut crate::trace_report::OverheadView,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Result<Overhead, String>, RunError> {
    let Some(def) = catalogue::find(OVERHEAD_TEST) else {
        return Ok(Err("the test is missing from the catalogue".into()));
    };
    let mut params = opts.params;
    params.batch = 1;
    if runner::skip_reason(kvm, def, params.ring).is_some() {
        params.ring = 0;
    }
    let mut full = Vec::new();
    let mut bare = Vec::new();
    for _ in 0..OVERHEAD_ROUNDS {
        for is_bare in [true, false] {
            let label = if is_bare {
                "inl_from_user (bare KVM_RUN loop)"
            } else {
                "inl_from_user (full VMM loop)"
            };
            progress(Progress::Start(label));
            let traced = kernel_view.start();
            let m = runner::run_test(
                kvm,
                image,
                def,
                RunParams {
                    bare: is_bare,
                    ..params
                },
            )?;
            kernel_view.finish(traced, is_bare, exitlab_guest::abi::USER_PORT);
            let status = status_of(&m.outcome);
            progress(Progress::Done(label, &status));
            if m.outcome != Outcome::Completed {
                return Ok(Err(format!(
                    "{label}: {}",
                    status.reason().unwrap_or("failed")
                )));
            }
            let values = analysis::host_values(&m.samples).0;
            if is_bare {
                bare.extend(values);
            } else {
                full.extend(values);
            }
        }
    }
    match (summarize(&full), summarize(&bare)) {
        (Ok(f), Ok(b)) => Ok(Ok(Overhead::new(OVERHEAD_TEST, f, b))),
        _ => Ok(Err("no userspace-share samples were collected".into())),
    }
}
