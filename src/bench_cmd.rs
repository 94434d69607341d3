//! `exitlab bench`: run the exit test suite (or an A/B experiment) and print (and
//! optionally save) its results.
//!
//! [`bench_cmd`] reads like the procedure: check the options, open KVM, survey the
//! host, arm the signal handlers, run with a progress display, print, save, and map
//! the outcome to an exit code.

use std::io::{IsTerminal, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use exitlab_lab::bench::{self, BenchOptions, Progress};
use exitlab_lab::catalogue::{self, TestDef, Where};
use exitlab_lab::host_survey;
use exitlab_lab::knobs::{self, AbSpec};
use exitlab_lab::runner::{RunParams, BATCH_PER_TEST};
use exitlab_lab::smp::{self, IrqKnobs};
use exitlab_results::results::{Results, TestStatus};
use exitlab_results::stats::model;
use exitlab_results::{compare, host_report, report};

use crate::status::{
    usage_error, EXIT_INTERRUPTED, EXIT_NO_KVM, EXIT_TEST_FAILED, EXIT_TIMEOUT, EXIT_VMM_FAILED,
};

/// Rounds of a bench run by default ([`model::DEFAULT_ROUNDS`]), with
/// [`DEFAULT_SAMPLES`] samples spread over them (50 a round).
const DEFAULT_ROUNDS: u32 = model::DEFAULT_ROUNDS;
/// Samples per test of a bench run by default.
const DEFAULT_SAMPLES: u64 = 1200;
/// Rounds of a `--workload` run by default (each round boots Linux).
const WORKLOAD_ROUNDS: u32 = 6;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// List the tests and exit.
    #[arg(long)]
    list: bool,
    /// Tests to run, comma-separated (names from --list); default: the whole suite.
    #[arg(long, value_delimiter = ',')]
    tests: Vec<String>,
    /// Samples per test.
    #[arg(long, default_value_t = DEFAULT_SAMPLES, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    samples: u64,
    /// Iterations of the measured instruction per sample [default: each test's own: 4 for
    /// instructions KVM handles in the kernel, 1 for the rest (bench --list)]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    batch: Option<u64>,
    /// Unmeasured iterations before the first sample.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    warmup: u64,
    /// Guest privilege level of the measured loop: 0 or 3 (instructions that need ring 0 are skipped at ring 3).
    #[arg(long, default_value = "0", value_parser = clap::builder::TypedValueParser::try_map(clap::builder::PossibleValuesParser::new(["0", "3"]), |s| s.parse::<u8>()))]
    ring: u8,
    #[command(flatten)]
    json: crate::common::JsonArg,
    /// Keep every sample in the JSON.
    #[arg(long)]
    raw: bool,
    /// Pin the vCPU threads to these host CPUs (vCPU 0 first, one CPU per vCPU).
    #[arg(long, value_delimiter = ',')]
    pin: Vec<usize>,
    /// Stop a test whose guest makes no progress for this many seconds.
    #[arg(long, default_value_t = 3.0)]
    stall_timeout: f64,
    /// Stop the whole run after this many seconds, at the end of the test then running,
    /// keeping the rounds that completed (marked incomplete), with exit code 124; 0 = no
    /// limit.
    #[arg(long, default_value_t = 0.0)]
    timeout: f64,
    /// Run the VMM overhead experiment (`exitlab run` against the independent bare
    /// KVM_RUN loop `exitlab-floor`, traced from the kernel's side; and the in-process
    /// stamps) even with --tests; it runs by default with the default suite only.
    #[arg(long, conflicts_with = "no_overhead")]
    overhead: bool,
    /// Skip the VMM overhead experiment.
    #[arg(long)]
    no_overhead: bool,
    /// Spread each test's samples over this many rounds of the whole suite (each test in
    /// a fresh VM every round), so that host drift affects all tests alike [default: 24;
    /// 6 with --workload]. With --ab, the pairs of rounds the run takes (instead of its
    /// default planned design).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: Option<u32>,
    /// Known-answer control: the VMM adds this many host TSC cycles to its handling of
    /// every measured userspace exit, by a busy-wait calibrated with its clock reads, in a
    /// warm loop and on the first exits, which the guest does not measure (every other one
    /// of the first 64 left without a wait; none with a --warmup under 16) (0: off).
    /// `--ab inject-cycles=0,N` shows whether exitlab sees a change of N cycles on this
    /// host.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=exitlab_vmm::vcpu::MAX_INJECT_CYCLES))]
    inject_cycles: u64,
    /// Known-answer control for kernel-handled tests: the lab kernel busy-waits this many
    /// guest TSC cycles after the measured instruction in every iteration of the measured
    /// loop, not in the empty loop it is net of (0: off); `loop_overhead` with the same
    /// work is its calibration. `--ab guest-cycles=0,N` shows whether exitlab sees it.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=exitlab_abi::MAX_WORK_CYCLES))]
    guest_cycles: u64,
    /// A planned design (docs/model.md): a pilot of 10 rounds (pairs with --ab), then each
    /// test gets the rounds its pilot's spread needs for a 95% interval within +-PCT
    /// percent (at least 20), within --budget, and the run takes exactly those. bench
    /// --ab without --rounds or --precision plans for +-1.2% within 25 s, which finds a
    /// 2.5% change 80% of the time.
    #[arg(long, value_name = "PCT", conflicts_with = "rounds")]
    precision: Option<f64>,
    /// Wall-time budget of a planned design, seconds, the pilot included [default: 60;
    /// 25 for --ab's default design].
    #[arg(long, value_name = "SECONDS")]
    budget: Option<f64>,
    /// Run the suite N times, one results file per run into the directory --json DIR
    /// (run-01.json, ...), and print each test's figure per run and over the runs: the
    /// input of `exitlab compare DIR_A DIR_B` (runs as units; 3 or more a side). The VMM
    /// overhead experiment is off unless --overhead.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100), conflicts_with = "ab")]
    runs: Option<u32>,
    /// A/B experiment: KNOB at value A and at value B, interleaved round by round in
    /// fresh VMs, with the change B vs A per test and a verdict; without --tests, the
    /// tests KNOB can affect (--help: the knobs and what each can affect).
    #[arg(long, value_name = "KNOB=A,B", long_help = ab_long_help())]
    ab: Option<String>,
    /// With --ab: the tests the gate judges, comma-separated [default: every test but the
    /// empty loop]. The gate (exit 4) fires when a slower test survives Holm's correction
    /// over them (docs/model.md).
    #[arg(long, value_delimiter = ',', requires = "ab")]
    gate: Vec<String>,
    /// With --ab: exit 0 rather than 12 when a test the gate judges has no verdict.
    #[arg(long, requires = "ab")]
    accept_no_verdict: bool,
    /// Output format: `table`, or with --ab also `seed` (run by run, with averages and
    /// %Reduction, as patch cover letters show them).
    #[arg(long, default_value = "table", value_parser = ["table", "seed"])]
    format: String,
    #[command(flatten)]
    irq: IrqArgs,
    #[command(flatten)]
    workload: crate::workload_cmd::WorkloadArgs,
}

/// `--ab`'s long help: what it does, then each knob with the tests it can affect.
fn ab_long_help() -> String {
    format!(
        "A/B experiment: run the suite with KNOB at value A and at value B, interleaved round \
         by round (A B, then B A, ...), each in fresh VMs, and give per test the change B vs A \
         with a 95% interval and a verdict. Without --tests it runs the default suite's tests \
         KNOB can affect (else the interrupt tests it can affect), and says which; tests named \
         by --tests that it cannot affect run with a warning (an A/A control).\n\n{}",
        knobs::ab_knobs_help()
    )
}

/// The interrupt knobs (issue 9); each also settable by name (`IrqKnobs::set`, `--ab`).
#[derive(clap::Args, Debug)]
pub struct IrqArgs {
    /// APIC mode of the interrupt tests: xapic or x2apic (x2apic_* tests always x2apic).
    #[arg(long, default_value = "xapic")]
    apic: String,
    /// vCPUs per VM (default: as each test needs, 2 for the IPI tests, else 1).
    #[arg(long)]
    cpus: Option<String>,
    /// What waiting vCPUs do: poll, hlt or mwait (mwait only where the guest CPUID offers it).
    #[arg(long, default_value = "poll")]
    idle: String,
    /// Exits to disable (KVM_CAP_X86_DISABLE_EXITS): comma-separated hlt, mwait, pause, cstate.
    #[arg(long)]
    disable_exits: Option<String>,
    /// Per-VM halt-polling window in ns (KVM_CAP_HALT_POLL).
    #[arg(long)]
    halt_poll_ns: Option<String>,
    /// KVM's PV send-IPI feature in the guest CPUID: on or off (default: as KVM offers).
    #[arg(long)]
    pv_ipi: Option<String>,
    /// Where the I/O APIC and PIC are emulated: kernel (KVM_CREATE_IRQCHIP) or split
    /// (KVM_CAP_SPLIT_IRQCHIP: exitlab's own in userspace, no PIT).
    #[arg(long, default_value = "kernel")]
    irqchip: String,
}

impl IrqArgs {
    fn knobs(&self, pins: &[usize]) -> Result<IrqKnobs, String> {
        let mut k = IrqKnobs::default();
        k.set("apic", &self.apic)?;
        k.set("idle", &self.idle)?;
        k.set("irqchip", &self.irqchip)?;
        let opt = [
            ("cpus", &self.cpus),
            ("disable-exits", &self.disable_exits),
            ("halt-poll-ns", &self.halt_poll_ns),
            ("pv-ipi", &self.pv_ipi),
        ];
        for (name, v) in opt {
            if let Some(v) = v {
                k.set(name, v)?;
            }
        }
        k.set_ap_pins(pins.get(1..).unwrap_or(&[]))?;
        Ok(k)
    }
}

/// How long bench watches the host's CPUs for idle ones before a run of several vCPUs.
const IDLE_WATCH: Duration = Duration::from_millis(200);

/// Warnings about the vCPUs' host CPUs: IPI figures mean little when vCPUs share one, or
/// when fewer host CPUs are idle than the VM has vCPUs (`idle`: the host's idle CPUs,
/// asked only for a run of several vCPUs).
fn irq_notes(opts: &BenchOptions, idle: impl FnOnce() -> Option<smp::IdleCpus>) -> Vec<String> {
    irq_notes_on(
        opts,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        idle,
    )
}

/// [`irq_notes`] on a host of `host_cpus` CPUs.
fn irq_notes_on(
    opts: &BenchOptions,
    host_cpus: usize,
    idle: impl FnOnce() -> Option<smp::IdleCpus>,
) -> Vec<String> {
    let irq = &opts.params.irq;
    let most = opts
        .tests
        .iter()
        .map(|t| irq.cpus_for(t))
        .max()
        .unwrap_or(1);
    let mut notes = Vec::new();
    if most < 2 {
        return notes;
    }
    let shared = smp::shared_host_cpus(opts.params.pin, irq, most);
    if !shared.is_empty() {
        let s: Vec<String> = shared.iter().map(usize::to_string).collect();
        notes.push(format!(
            "several vCPUs are pinned to host CPU(s) {}: IPI figures mean little when vCPUs share a host CPU",
            s.join(", ")
        ));
    } else if most as usize > host_cpus {
        notes.push(format!(
            "{most} vCPUs on {host_cpus} host CPU(s): vCPUs share host CPUs, and IPI figures mean little then"
        ));
    } else if let Some(i) = idle().filter(|i| most as usize > i.idle) {
        notes.push(format!(
            "{most} vCPUs, but {} of the {} host CPUs were idle when the run started (/proc/stat over {} ms): a vCPU's thread may wait to be scheduled, and IPI figures then fall far apart",
            i.idle,
            i.cpus,
            IDLE_WATCH.as_millis()
        ));
    }
    notes
}

/// `bench --list`: every test with where its exit is expected to be handled, whether
/// the default suite runs it, whether it runs in ring 3, and what it does. The name
/// column is as wide as the longest name.
fn list_tests() {
    let all: Vec<&TestDef> = catalogue::TESTS
        .iter()
        .chain(catalogue::IRQ_TESTS)
        .collect();
    let width = all.iter().map(|t| t.name.len()).max().unwrap_or(4);
    println!(
        "{:<width$}  {:<8}  {:<7}  {:<5}  {:<5}  what",
        "test", "expected", "default", "ring3", "batch"
    );
    for t in all {
        let w = match t.expected {
            Where::Kernel => "kernel",
            Where::User => "user",
            Where::Nowhere => "none",
        };
        println!(
            "{:<width$}  {:<8}  {:<7}  {:<5}  {:<5}  {}",
            t.name,
            w,
            if t.default { "yes" } else { "no" },
            if t.ring3 { "yes" } else { "no" },
            t.batch,
            t.what
        );
    }
    println!(
        "\nexpected: where the exit is expected to be handled (bench's table shows where it was \
         observed); default: run by `exitlab bench` without --tests; ring3: also runs with \
         --ring 3; batch: iterations per sample unless --batch is given"
    );
}

fn select_tests(names: &[String]) -> Result<Vec<&'static TestDef>, String> {
    if names.is_empty() {
        return Ok(catalogue::default_suite());
    }
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            continue;
        }
        match catalogue::TESTS
            .iter()
            .chain(catalogue::IRQ_TESTS)
            .find(|t| t.name == n)
        {
            Some(t) if !out.contains(&t) => out.push(t),
            Some(_) => {}
            None => {
                let valid: Vec<&str> = catalogue::TESTS
                    .iter()
                    .chain(catalogue::IRQ_TESTS)
                    .map(|t| t.name)
                    .collect();
                return Err(match exitlab_lab::names::closest(n, valid.iter().copied()) {
                    Some(near) => format!(
                        "unknown test '{n}' (did you mean '{near}'?); `exitlab bench --list` lists the tests"
                    ),
                    None => format!("unknown test '{n}'; valid tests: {}", valid.join(", ")),
                });
            }
        }
    }
    if out.is_empty() {
        return Err("--tests names no test".into());
    }
    Ok(out)
}

/// Checks the options and turns them into what the lab runs; with `--ab`, also what
/// to say about the tests it runs ([`knobs::ab_tests`]).
fn options(
    a: &BenchArgs,
) -> Result<(BenchOptions, Option<AbSpec>, Option<knobs::AbTests>), String> {
    let tests = select_tests(&a.tests)?;
    if a.ring != 0 && a.ring != 3 {
        return Err(format!("--ring {} is not supported: use 0 or 3", a.ring));
    }
    if !(a.stall_timeout.is_finite() && a.stall_timeout > 0.0 && a.stall_timeout <= 3600.0) {
        return Err(format!(
            "--stall-timeout {} must be a number of seconds in (0, 3600]",
            a.stall_timeout
        ));
    }
    crate::common::check_timeout(a.timeout)?;
    let most_batch = a.batch.unwrap_or_else(|| {
        catalogue::TESTS
            .iter()
            .chain(catalogue::IRQ_TESTS)
            .map(|t| t.batch)
            .max()
            .unwrap_or(1)
    });
    if a.samples
        .checked_mul(most_batch)
        .is_none_or(|n| n > 1 << 32)
    {
        return Err("--samples times --batch must not exceed 2^32 iterations".into());
    }
    for &cpu in &a.pin {
        crate::input::check_pin(cpu)?;
    }
    match a.runs {
        Some(_) => check_runs_dir(&a.json)?,
        None => a.json.check()?,
    }
    let precision = precision(a)?;
    let mut opts = BenchOptions {
        tests,
        params: RunParams {
            ring: a.ring,
            samples: a.samples,
            batch: a.batch.unwrap_or(BATCH_PER_TEST),
            warmup: a.warmup,
            timeout: Duration::from_secs_f64(a.stall_timeout),
            pin: a.pin.first().copied(),
            bare: false,
            irq: a.irq.knobs(&a.pin)?,
            inject_cycles: a.inject_cycles,
            guest_cycles: a.guest_cycles,
        },
        raw: a.raw,
        overhead: a.overhead
            || (a.tests.is_empty() && !a.no_overhead && precision.is_none() && a.runs.is_none()),
        floor: std::env::current_exe()
            .ok()
            .map(exitlab_lab::floor::FloorSetup::new),
        rounds: a.rounds.unwrap_or(DEFAULT_ROUNDS),
        precision,
        cancel: None,
        knobs: Default::default(),
        phases_off: None,
    };
    opts.knobs = knobs::values(&opts);
    let ab =
        a.ab.as_deref()
            .map(|spec| knobs::parse_ab(spec, &opts))
            .transpose()?;
    if a.format == "seed" && ab.is_none() {
        return Err("--format seed needs --ab (it prints the two sides run by run)".into());
    }
    // An A/B run takes the tests its knob can affect (or warns about those asked for
    // that it cannot).
    let chosen = ab.as_ref().map(|spec| {
        let asked = (!a.tests.is_empty()).then_some(opts.tests.as_slice());
        knobs::ab_tests(spec, asked, &opts.params)
    });
    if let Some(c) = &chosen {
        opts.tests = c.tests.clone();
    }
    Ok((opts, ab, chosen))
}

/// `--runs N` writes its runs into the directory `--json DIR`: it must be given and not
/// standard output (it is created if missing; runs already in it are checked by
/// [`runs_in_dir`] once the host is surveyed).
fn check_runs_dir(json: &crate::common::JsonArg) -> Result<(), String> {
    let dir =
        match &json.json {
            Some(p) if !json.to_stdout() => p,
            _ => return Err(
                "--runs N writes one results file per run: give --json DIR, a directory for them"
                    .into(),
            ),
        };
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "--runs: --json {} is a file; give a directory for the runs' results files",
            dir.display()
        ));
    }
    Ok(())
}

/// The runs already in `dir` (`--runs` adds to them): each `*.json` must be a results
/// file of one run (not an A/B run) taken on the kernel and KVM modules that `host` (this
/// host now) has, since `compare` reads every file in a directory as one build's runs.
/// Returns them with their paths, in name order.
fn runs_in_dir(
    dir: &std::path::Path,
    host: &serde_json::Value,
) -> Result<Vec<(String, Results)>, String> {
    let mut paths: Vec<std::path::PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(_) => return Ok(Vec::new()),
    };
    paths.sort();
    let now = exitlab_results::differences::host_build_ids(host);
    let mut out = Vec::new();
    for p in paths {
        let r = exitlab_results::results::read(&p).map_err(|e| {
            format!(
                "--runs: {} is in {} but is not a results file ({e}); a directory of runs holds only runs",
                p.display(),
                dir.display()
            )
        })?;
        if r.ab.is_some() {
            return Err(format!(
                "--runs: {} is an A/B run; a directory of runs holds one build's runs only",
                p.display()
            ));
        }
        let then = exitlab_results::differences::host_build_ids(&r.host);
        let differs: Vec<String> = now
            .iter()
            .filter_map(|(name, id)| match then.get(name) {
                Some(old) if old != id => Some(format!("{name} {old} there, {id} now")),
                _ => None,
            })
            .chain(
                then.keys()
                    .chain(now.keys())
                    .filter(|k| now.contains_key(*k) != then.contains_key(*k))
                    .map(|k| format!("{k} in one of them only")),
            )
            .collect();
        if !differs.is_empty() {
            return Err(format!(
                "--runs: {} holds runs of another build ({}: {}); compare reads every *.json in a directory as one build's runs: give an empty or new directory",
                dir.display(),
                p.display(),
                differs.join("; ")
            ));
        }
        out.push((p.display().to_string(), r));
    }
    Ok(out)
}

/// `--precision PCT [--budget SECONDS]`, checked; without `--precision`, an `--ab` run's
/// default planned design ([`bench::Precision::ab_default`]) unless rounds are given.
fn precision(a: &BenchArgs) -> Result<Option<bench::Precision>, String> {
    let budget = a
        .budget
        .map(|s| crate::common::check_seconds("--budget", s).map(|()| Duration::from_secs_f64(s)))
        .transpose()?;
    let Some(pct) = a.precision else {
        if !(a.ab.is_some() && a.rounds.is_none()) {
            return match budget {
                Some(_) => Err("--budget bounds a planned design: give --precision PCT (or --ab without --rounds)".into()),
                None => Ok(None),
            };
        }
        let d = bench::Precision::ab_default();
        return Ok(Some(bench::Precision {
            budget: budget.unwrap_or(d.budget),
            ..d
        }));
    };
    if !(pct.is_finite() && pct > 0.0 && pct <= 100.0) {
        return Err(format!(
            "--precision {pct} must be a percentage in (0, 100]: the half-width of the 95% interval each test should reach"
        ));
    }
    Ok(Some(bench::Precision {
        target_pct: pct,
        budget: budget.unwrap_or(bench::DEFAULT_BUDGET),
        by_default: false,
    }))
}

/// Surveys the host (KVM's answers from the VMM's capabilities); returns it as JSON, the
/// notes every report carries, and why phase figures are off, if they are.
fn host_context() -> (serde_json::Value, Vec<String>, Option<String>) {
    let host = host_survey::survey(None);
    (
        host_report::to_json(&host),
        host_report::notes(&host),
        host_report::phases_off_reason(&host),
    )
}

/// SIGINT and SIGTERM set the returned flag, which the run checks between tests (the VM
/// running then finishes or times out, and is torn down normally); a second signal ends
/// the process at once with 128 + the signal number.
fn arm_signals() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // The conditional shutdown is registered first, so it sees the flag as the
        // previous signal left it.
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, flag.clone());
        let _ = signal_hook::flag::register(sig, flag.clone());
    }
    flag
}

/// How progress is shown: a bar on a terminal (one line, updated in place), plain lines
/// otherwise, nothing with --quiet.
enum Display {
    Quiet,
    Bar(indicatif::ProgressBar),
    Lines(Lines),
}

/// The state of the plain progress lines: a line per round with a mark per test; the
/// rounds a planned design adds after its pilot, which may run by the hundred, share
/// lines, [`Lines::ROUNDS_A_LINE`] a line while the number of tests they run stays the
/// same.
#[derive(Default)]
struct Lines {
    /// A round's line is open (its marks are being written).
    in_rounds: bool,
    /// The planned rounds the open line holds.
    shared: Option<SharedLine>,
}

/// Planned rounds on one line.
struct SharedLine {
    tests: u32,
    rounds: u32,
    /// Characters on the line so far, and the marks of its last round.
    len: usize,
    last_round: usize,
}

impl Display {
    fn new(quiet: bool, steps: u64) -> Self {
        if quiet {
            Display::Quiet
        } else if std::io::stderr().is_terminal() {
            Display::Bar(crate::common::progress_bar(
                steps,
                "{prefix} [{bar:30}] {pos}/{len}",
            ))
        } else {
            Display::Lines(Lines::default())
        }
    }

    fn event(&mut self, p: Progress<'_>) {
        match self {
            Display::Quiet => {}
            Display::Bar(bar) => match p {
                Progress::Round(r, n) => bar.set_prefix(format!("round {r}/{n}")),
                Progress::PrecisionRound(r, n) => {
                    bar.set_prefix(format!("planned round {r}"));
                    bar.inc_length(u64::from(n));
                }
                Progress::AbPrecisionRound(r, n) => {
                    bar.set_prefix(format!("planned pair {r}"));
                    bar.inc_length(2 * (u64::from(n) + 1));
                }
                Progress::Start(name) => bar.set_message(name.to_string()),
                Progress::Done(_, _) => bar.inc(1),
            },
            Display::Lines(lines) => {
                let mut stderr = std::io::stderr().lock();
                lines.event(p, &mut stderr);
                let _ = stderr.flush();
            }
        }
    }

    fn finish(self) {
        match self {
            Display::Bar(bar) => bar.finish_and_clear(),
            Display::Lines(Lines {
                in_rounds: true, ..
            }) => eprintln!(),
            _ => {}
        }
    }
}

impl Lines {
    /// Planned rounds a shared line holds at most.
    const ROUNDS_A_LINE: u32 = 10;

    /// The legend of the round lines' marks, printed before the first round.
    const LEGEND: &'static str =
        "  (one mark per test: . done, T did not complete (stalled or timed out), F failed, s skipped)";

    /// One line per round with a mark per test (planned rounds shared, see
    /// [`Lines`]), then one line per overhead step.
    fn event(&mut self, p: Progress<'_>, out: &mut dyn Write) {
        let open = if self.in_rounds { "\n" } else { "" };
        match p {
            Progress::Round(r, n) => {
                if r == 1 {
                    let _ = writeln!(out, "{}", Self::LEGEND);
                }
                let _ = write!(out, "{open}  round {r}/{n} ");
                self.in_rounds = true;
                self.shared = None;
            }
            Progress::PrecisionRound(r, n) | Progress::AbPrecisionRound(r, n) => {
                self.shared_round(out, r, n)
            }
            Progress::Start(name) if !self.in_rounds || name.contains('(') => {
                if self.in_rounds {
                    let _ = writeln!(out);
                    self.in_rounds = false;
                    self.shared = None;
                }
                let _ = write!(out, "  {name:<40} ");
            }
            Progress::Start(_) => {}
            Progress::Done(name, status) if !self.in_rounds || name.contains('(') => {
                let _ = writeln!(out, "{}", status.word());
            }
            Progress::Done(_, status) => {
                if let Some(l) = &mut self.shared {
                    l.len += 1;
                    l.last_round += 1;
                }
                let mark = match status {
                    TestStatus::Ok => ".",
                    TestStatus::Skipped { .. } => "s",
                    TestStatus::DidNotComplete { .. } => "T",
                    TestStatus::Failed { .. } => "F",
                };
                let _ = write!(out, "{mark}");
            }
        }
    }

    /// Extra round `r` (or precision round, `precision`) of `tests` tests: on the open
    /// shared line after a space when it holds rounds of the same kind and tests and has
    /// room, else on a new line that says what its rounds are.
    fn shared_round(&mut self, out: &mut dyn Write, r: u32, tests: u32) {
        match &mut self.shared {
            // Room for one more round as wide as the last, within a terminal report's
            // line (an A/B round marks both sides of every test).
            Some(l)
                if l.tests == tests
                    && l.rounds < Self::ROUNDS_A_LINE
                    && l.len + 1 + l.last_round <= exitlab_results::format::MAX_LINE =>
            {
                l.rounds += 1;
                l.len += 1;
                l.last_round = 0;
                let _ = write!(out, " ");
            }
            _ => {
                let head = format!(
                    "  planned rounds from {r} ({tests} test{} planned beyond the pilot) ",
                    if tests == 1 { "" } else { "s" }
                );
                let _ = write!(out, "{}{head}", if self.in_rounds { "\n" } else { "" });
                self.shared = Some(SharedLine {
                    tests,
                    rounds: 1,
                    len: head.chars().count(),
                    last_round: 0,
                });
            }
        }
        self.in_rounds = true;
    }
}

/// Steps the progress display counts: a test per round (and side), plus one for the
/// overhead experiment.
fn progress_steps(opts: &BenchOptions, ab: Option<&AbSpec>) -> u64 {
    // The baseline (the empty loop) is always run, first.
    let tests = opts.tests.len() as u64 + u64::from(!opts.tests.iter().any(|t| t.baseline));
    let rounds = u64::from(opts.rounds);
    match ab {
        Some(_) => 2 * tests * rounds,
        None => tests * rounds + u64::from(opts.overhead),
    }
}

/// `--runs N`: the suite `n` times, each run's results written into the directory
/// `json` as `run-01.json`, ..., then each test's figure per run and over the runs. The
/// exit status is the worst run's (interrupted, --timeout, a failed test).
fn run_many(
    opts: &BenchOptions,
    n: u32,
    json: &crate::common::JsonArg,
    host: serde_json::Value,
    notes: Vec<String>,
    display: &mut Display,
    limit: &crate::common::TimeoutWatch,
) -> i32 {
    let Some(dir) = json.json.as_deref() else {
        return usage_error("--runs N needs --json DIR");
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("exitlab: cannot create {}: {e}", dir.display());
        return crate::status::EXIT_CANT_WRITE;
    }
    let mut all = match runs_in_dir(dir, &host) {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("exitlab: {e}");
            return crate::status::EXIT_USAGE;
        }
    };
    let first = all.len() as u32 + 1;
    if !all.is_empty() && crate::verbosity::level() >= 0 {
        eprintln!(
            "exitlab: {} holds {} runs of this kernel and these KVM modules; adding runs {first} to {}",
            dir.display(),
            all.len(),
            first + n - 1
        );
    }
    let mut code = 0;
    for k in first..first + n {
        let res = match run(opts, None, host.clone(), notes.clone(), display, None) {
            Ok(r) => r,
            Err(c) => return c,
        };
        let mut path = dir.join(format!("run-{k:02}.json"));
        let mut extra = 0;
        while path.exists() {
            extra += 1;
            path = dir.join(format!("run-{k:02}-{extra}.json"));
        }
        if let Err(e) = exitlab_results::results::write_atomic(&path, &res) {
            eprintln!("exitlab: {e}");
            return crate::status::EXIT_CANT_WRITE;
        }
        if crate::verbosity::level() >= 0 {
            eprintln!(
                "run {k} of {}: {:.1} s, results in {}",
                first + n - 1,
                res.wall_seconds,
                path.display()
            );
        }
        let incomplete = res.incomplete.clone();
        code = code.max(exit_code(&res, &crate::report_cmd::GateArgs::default()));
        all.push((path.display().to_string(), res));
        if let Some(why) = incomplete {
            print!("{}", report::render_runs(&all));
            println!("incomplete: run {k} of {}: {why}", first + n - 1);
            return if limit.expired() {
                EXIT_TIMEOUT
            } else {
                EXIT_INTERRUPTED
            };
        }
    }
    print!("{}", report::render_runs(&all));
    code
}

/// Runs the suite or the A/B experiment.
fn run(
    opts: &BenchOptions,
    ab: Option<&AbSpec>,
    host: serde_json::Value,
    notes: Vec<String>,
    display: &mut Display,
    host_switch: Option<&mut dyn exitlab_lab::host_knob::HostSwitch>,
) -> Result<Results, i32> {
    let kvm = match exitlab_vmm::open_kvm() {
        Ok(k) => Arc::new(k),
        Err(e) => return Err(crate::common::kvm_unusable(&e)),
    };
    let mut progress = |p: Progress<'_>| display.event(p);
    let image = exitlab_guest::IMAGE;
    let outcome = match ab {
        Some(spec) => exitlab_lab::ab::run(
            kvm,
            image,
            opts,
            spec,
            opts.rounds,
            host,
            notes,
            host_switch,
            &mut progress,
        )
        .map_err(|e| {
            // Interrupted before a round completed: an interruption, not a host failure.
            let code = match e {
                exitlab_lab::ab::AbError::NothingCompleted => EXIT_INTERRUPTED,
                exitlab_lab::ab::AbError::Run(_) => EXIT_VMM_FAILED,
            };
            (e.to_string(), code)
        }),
        None => bench::run(&kvm, image, opts, host, notes, &mut progress)
            .map_err(|e| (e.to_string(), EXIT_VMM_FAILED)),
    };
    outcome.map_err(|(e, code)| {
        eprintln!("exitlab: {e}");
        code
    })
}

/// Prints the results: the A/B table (or the seeds' table), else the suite's table.
fn print_results(res: &Results, format: &str, gate: &crate::report_cmd::GateArgs) {
    let ab_text = match format {
        "seed" => report::render_seed(res),
        _ => report::render_ab(res),
    };
    match ab_text {
        Some(text) => print!("{text}"),
        None => print!("{}", report::render_table(res)),
    }
    if let Some(cmp) = compare::compare_ab_run(res, model::THRESHOLD_PCT) {
        for line in crate::report_cmd::gate_status(&cmp, gate).0 {
            println!("{line}");
        }
    }
    if let Some(why) = &res.incomplete {
        println!("incomplete: {why}");
    }
}

/// The exit code: interrupted, a failed test or exit check, the A/B gate (4 when it
/// fires, 12 without a verdict it needs), or success.
fn exit_code(res: &Results, gate: &crate::report_cmd::GateArgs) -> i32 {
    let all_tests = res
        .tests
        .iter()
        .chain(res.ab.iter().flat_map(|ab| ab.b_tests.iter()));
    let failed = all_tests
        .clone()
        .any(|t| matches!(t.status, TestStatus::Failed { .. }))
        || all_tests
            .clone()
            .any(|t| t.exit_check.as_ref().is_some_and(|c| !c.passed));
    if res.incomplete.is_some() {
        EXIT_INTERRUPTED
    } else if failed {
        EXIT_TEST_FAILED
    } else if let Some(cmp) = compare::compare_ab_run(res, model::THRESHOLD_PCT) {
        crate::report_cmd::gate_status(&cmp, gate).1
    } else {
        0
    }
}

pub fn bench_cmd(a: BenchArgs) -> i32 {
    if a.list {
        list_tests();
        return 0;
    }
    if a.workload.workload.is_some() {
        if a.precision.is_some() || a.budget.is_some() {
            return usage_error(
                "--precision and --budget apply to the exit tests (a plain run or their --ab runs), not to --workload; give --workload more --rounds instead",
            );
        }
        let shared = crate::workload_cmd::Shared {
            cpus: a.irq.cpus.as_deref(),
            apic: &a.irq.apic,
            pv_ipi: a.irq.pv_ipi.as_deref(),
            rounds: a.rounds.unwrap_or(WORKLOAD_ROUNDS),
            ab: a.ab.as_deref(),
            json: &a.json,
            timeout: a.timeout,
        };
        return crate::workload_cmd::workload_cmd(&a.workload, shared);
    }
    let (mut opts, ab, chosen) = match options(&a) {
        Ok(o) => o,
        Err(e) => return usage_error(e),
    };
    let (host, mut notes, phases_off) = host_context();
    if let Some(c) = chosen {
        if crate::verbosity::level() >= 0 {
            c.chosen.iter().for_each(|l| eprintln!("exitlab: {l}"));
            c.warning
                .iter()
                .for_each(|w| eprintln!("exitlab: warning: {w}"));
        }
        // A reader of the file should know which tests were A/A controls.
        notes.extend(c.warning);
    }
    opts.phases_off = phases_off;
    if let Ok(kvm) = exitlab_vmm::open_kvm() {
        // Both sides of an A/B run are probed: a knob the host lacks is refused before
        // anything runs, whichever side asks for it.
        let mut sides = vec![opts.clone()];
        if let Some(ab) = &ab {
            for v in [&ab.a, &ab.b] {
                let mut o = opts.clone();
                if ab.knob.set(&mut o, v).is_ok() {
                    sides.push(o);
                }
            }
        }
        for o in &sides {
            if let Err(e) = o.params.irq.probe(&kvm) {
                eprintln!("exitlab: {e}");
                return EXIT_NO_KVM;
            }
        }
    }
    notes.extend(irq_notes(&opts, || smp::host_idle_cpus(IDLE_WATCH)));
    notes.extend(crate::trace_cmd::remove_stale_instances());
    let stop = arm_signals();
    let limit = crate::common::TimeoutWatch::start(a.timeout, stop.clone());
    opts.cancel = Some(stop);
    // -q/--quiet is global (every subcommand takes it).
    let quiet = crate::verbosity::level() < 0;
    let mut display = Display::new(
        quiet,
        progress_steps(&opts, ab.as_ref()) * u64::from(a.runs.unwrap_or(1)),
    );
    if !quiet {
        eprintln!(
            "exitlab bench: {} test(s), ring {}, {} samples x {} iteration(s), {} round(s){}{}",
            opts.tests.len(),
            a.ring,
            a.samples,
            a.batch
                .map_or_else(|| "each test's own".to_string(), |b| b.to_string()),
            u64::from(opts.rounds).min(a.samples),
            if u64::from(opts.rounds) > a.samples {
                " (at most one per sample)"
            } else {
                ""
            },
            ab.as_ref()
                .map(|s| format!(", A/B {}={} vs {}", s.knob.name(), s.a, s.b))
                .unwrap_or_default()
        );
    }
    if let Some(n) = a.runs {
        let code = run_many(&opts, n, &a.json, host, notes, &mut display, &limit);
        display.finish();
        return code;
    }
    // A knob that changes the host: opened (refused before anything changes), each value
    // tried once and read back, then restored; the run switches it between side-runs, and
    // dropping the session at the end puts every original value back.
    let mut session = match ab.as_ref().and_then(|s| s.knob.module()) {
        Some(spec) => match crate::host_cmd::open_host_knob(
            spec,
            ab.as_ref().map(|s| [s.a.as_str(), s.b.as_str()]),
        ) {
            Ok(s) => Some(s),
            Err(code) => return code,
        },
        None => None,
    };
    if let Some(s) = &session {
        notes.extend(s.notes().iter().cloned());
    }
    let res = run(
        &opts,
        ab.as_ref(),
        host,
        notes,
        &mut display,
        session
            .as_mut()
            .map(|s| s as &mut dyn exitlab_lab::host_knob::HostSwitch),
    );
    display.finish();
    if let Some(s) = session.take() {
        if let Err(e) = s.restore() {
            eprintln!("exitlab: {e}");
            return crate::status::EXIT_HOST_NOT_RESTORED;
        }
    }
    let mut res = match res {
        Ok(r) => r,
        Err(code) => return code,
    };
    let timed_out = limit.expired() && res.incomplete.is_some();
    if timed_out {
        res.incomplete = res
            .incomplete
            .take()
            .map(|why| format!("--timeout {} s expired: {why}", a.timeout));
    }
    let gate = crate::report_cmd::GateArgs {
        only: a.gate.clone(),
        accept_no_verdict: a.accept_no_verdict,
    };
    if !a.json.to_stdout() {
        print_results(&res, &a.format, &gate);
    } else if let Some(why) = &res.incomplete {
        eprintln!("incomplete: {why}");
    }
    let details = report::reason_details(&res);
    if crate::verbosity::level() > 0 && !details.is_empty() {
        eprint!("{details}");
    }
    let what = if res.incomplete.is_some() {
        "results (marked incomplete)"
    } else {
        "results"
    };
    if let Err(code) = a.json.write(&res, what) {
        return code;
    }
    if timed_out {
        EXIT_TIMEOUT
    } else {
        exit_code(&res, &gate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `exitlab bench ARGS`'s options, checked.
    fn bench_options(
        args: &[&str],
    ) -> Result<(BenchOptions, Option<AbSpec>, Option<knobs::AbTests>), String> {
        #[derive(clap::Parser)]
        struct Bench {
            #[command(flatten)]
            args: BenchArgs,
        }
        let a = Bench::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        options(&a.args)
    }

    fn test_names(o: &BenchOptions) -> Vec<&'static str> {
        o.tests.iter().map(|t| t.name).collect()
    }

    #[test]
    fn an_ab_run_without_tests_takes_the_tests_its_knob_can_affect() {
        let (o, ab, chosen) =
            bench_options(&["--ab", "halt-poll-ns=0,200000", "--rounds", "2"]).unwrap();
        assert!(ab.is_some());
        assert_eq!(test_names(&o), ["ipi_halt", "hlt_wake"]);
        let chosen = chosen.unwrap();
        assert_eq!(
            chosen.chosen.as_deref(),
            Some("--ab halt-poll-ns: runs the 2 tests it can affect (none of the default suite's): ipi_halt, hlt_wake (--tests to choose)")
        );
        // The rule sees the other options: --idle hlt makes every IPI target halt.
        let (o, _, _) = bench_options(&["--ab", "halt-poll-ns=0,1", "--idle", "hlt"]).unwrap();
        let names = test_names(&o);
        assert!(
            names.contains(&"ipi") && names.contains(&"ipi_halt") && !names.contains(&"eoi"),
            "{names:?}"
        );
        // Tests asked for run as asked, with a warning for those it cannot affect.
        let (o, _, chosen) =
            bench_options(&["--tests", "cpuid,ipi_halt", "--ab", "halt-poll-ns=0,1"]).unwrap();
        assert_eq!(test_names(&o), ["cpuid", "ipi_halt"]);
        let warning = chosen.unwrap().warning.unwrap();
        assert!(
            warning.starts_with("--ab halt-poll-ns cannot affect cpuid (halt-poll-ns affects "),
            "{warning}"
        );
        // Without --ab, the default suite.
        let (o, _, chosen) = bench_options(&[]).unwrap();
        assert_eq!(o.tests, catalogue::default_suite());
        assert!(chosen.is_none());
    }

    #[test]
    fn vcpus_outnumbering_the_idle_host_cpus_are_noted() {
        let (ipi, _, _) = bench_options(&["--tests", "ipi"]).unwrap();
        let idle = |idle| move || Some(smp::IdleCpus { idle, cpus: 4 });
        assert_eq!(
            irq_notes_on(&ipi, 4, idle(1)),
            ["2 vCPUs, but 1 of the 4 host CPUs were idle when the run started (/proc/stat over 200 ms): a vCPU's thread may wait to be scheduled, and IPI figures then fall far apart"]
        );
        assert!(irq_notes_on(&ipi, 4, idle(2)).is_empty());
        assert!(irq_notes_on(&ipi, 4, || None).is_empty());
        // More vCPUs than host CPUs says that instead; one vCPU never asks.
        let notes = irq_notes_on(&ipi, 1, idle(0));
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("2 vCPUs on 1 host CPU(s)"),
            "{notes:?}"
        );
        let (cpuid, _, _) = bench_options(&["--tests", "cpuid"]).unwrap();
        assert!(irq_notes_on(&cpuid, 4, || -> Option<smp::IdleCpus> {
            panic!("a run of one vCPU does not watch the host")
        })
        .is_empty());
    }

    /// What the plain progress lines show for `rounds` planned rounds of `tests` tests,
    /// then the planned rounds `precision` gives (round, tests), then one overhead step.
    fn lines_for(rounds: u32, tests: u32, precision: &[(u32, u32)]) -> String {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        let ok = TestStatus::Ok;
        let test_marks = |lines: &mut Lines, out: &mut Vec<u8>, n: u32| {
            for _ in 0..n {
                lines.event(Progress::Start("cpuid"), out);
                lines.event(Progress::Done("cpuid", &ok), out);
            }
        };
        for r in 1..=rounds {
            lines.event(Progress::Round(r, rounds), &mut out);
            test_marks(&mut lines, &mut out, tests);
        }
        for &(r, n) in precision {
            lines.event(Progress::PrecisionRound(r, n), &mut out);
            test_marks(&mut lines, &mut out, n);
        }
        lines.event(Progress::Start("overhead (exitlab vs the floor)"), &mut out);
        lines.event(
            Progress::Done("overhead (exitlab vs the floor)", &ok),
            &mut out,
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn planned_rounds_of_many_marks_keep_their_lines_within_a_terminal_report_s_width() {
        // An A/B round marks both sides of every test: 12 marks a round here, so ten
        // rounds would make a line of about 190 characters.
        let precision: Vec<(u32, u32)> = (1..=40).map(|r| (r, 12)).collect();
        let text = lines_for(1, 3, &precision);
        let shared: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("planned rounds"))
            .collect();
        assert!(shared.len() > 4, "{text}");
        for l in &shared {
            assert!(
                l.chars().count() <= exitlab_results::format::MAX_LINE,
                "{l}"
            );
        }
        let marks: usize = shared.iter().map(|l| l.matches('.').count()).sum();
        assert_eq!(marks, 40 * 12, "every round's marks are there\n{text}");
    }

    #[test]
    fn planned_rounds_share_lines_ten_a_line_while_their_tests_stay_the_same() {
        // 109 planned rounds: 49 of two tests, then 60 of one.
        let precision: Vec<(u32, u32)> =
            (1..=109).map(|r| (r, if r < 50 { 2 } else { 1 })).collect();
        let text = lines_for(2, 3, &precision);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], Lines::LEGEND, "{text}");
        assert_eq!(lines[1], "  round 1/2 ...", "{text}");
        assert_eq!(lines[2], "  round 2/2 ...", "{text}");
        let shared: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.contains("planned rounds"))
            .collect();
        // ceil(49 / 10) + ceil(60 / 10) lines, not 109.
        assert_eq!(shared.len(), 5 + 6, "{text}");
        assert_eq!(
            shared[0],
            "  planned rounds from 1 (2 tests planned beyond the pilot) .. .. .. .. .. .. .. .. .. ..",
            "{text}"
        );
        assert!(
            shared[4].starts_with("  planned rounds from 41 (2 tests"),
            "{text}"
        );
        assert!(
            shared[5].starts_with("  planned rounds from 50 (1 test planned"),
            "{text}"
        );
        assert!(
            shared[10].starts_with("  planned rounds from 100 (1 test planned"),
            "{text}"
        );
        // Every round's marks are there, and the overhead step has its own line.
        let marks: usize = lines[1..].iter().map(|l| l.matches('.').count()).sum();
        assert_eq!(marks, 2 * 3 + 49 * 2 + 60, "{text}");
        assert_eq!(
            lines.last().unwrap().split_whitespace().collect::<Vec<_>>(),
            ["overhead", "(exitlab", "vs", "the", "floor)", "ok"],
            "{text}"
        );
        assert_eq!(lines.len(), 1 + 2 + 11 + 1, "{text}");
    }
}
