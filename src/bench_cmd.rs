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
use exitlab_results::{host_report, report};

use crate::status::{
    usage_error, EXIT_INTERRUPTED, EXIT_NO_KVM, EXIT_TEST_FAILED, EXIT_TIMEOUT, EXIT_VMM_FAILED,
};

/// Rounds of a bench run by default, with [`DEFAULT_SAMPLES`] samples spread over them
/// (50 a round): the variance components say a round's figure varies between rounds far
/// more than its samples explain, so rounds, not samples, narrow the interval; since a
/// round's VM is closed with others between rounds, a round costs half what it did, and
/// 24 rounds take about what 12 took (`docs/statistics.md`).
const DEFAULT_ROUNDS: u32 = 24;
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
    /// 6 with --workload]. With --ab, given rounds are all the run takes (no default
    /// precision target).
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
    /// After the planned rounds, run more rounds (of the tests not there yet) until every
    /// test's 95% interval of its central figure is within +-PCT percent, or --budget
    /// ends; the report says which tests reached it. The VMM overhead experiment is then
    /// off unless --overhead. With --ab, the interval of each test's change B vs A: more
    /// A/B rounds (pairs) until it is within +-PCT, so that a change of about 1.43 x PCT
    /// is found 80% of the time (`--ab inject-cycles=0,N --precision PCT` shows it); a
    /// narrower interval is shown widened to +-PCT (an interval within the target when
    /// its test stopped is often narrow by chance). An --ab run without --precision,
    /// --rounds or --per-loop has a target by default: +-1.4%, so that a 2% change is
    /// found 80% of the time, within 20 s.
    #[arg(long, value_name = "PCT")]
    precision: Option<f64>,
    /// Wall-time budget of --precision, seconds, the planned rounds included [default: 60;
    /// 20 for --ab's default target].
    #[arg(long, value_name = "SECONDS")]
    budget: Option<f64>,
    /// A/B experiment: run the suite with KNOB at value A and at value B, interleaved
    /// round by round (A B, then B A, ...), each in fresh VMs, and give per test the
    /// change B vs A with a 95% interval and a verdict. Knobs: ring, batch, warmup, pin,
    /// apic, cpus, idle, disable-exits, halt-poll-ns, pv-ipi, irqchip, inject-cycles,
    /// guest-cycles.
    #[arg(long, value_name = "KNOB=A,B")]
    ab: Option<String>,
    /// With --ab: take each pair's change from its two rounds' figures each divided by its
    /// own empty loop, which takes out a change of the host's speed between them. For hosts
    /// whose empty loop itself runs host code (paravirtual KVM, ~20,000 cycles a pass);
    /// on one whose loop is a few native cycles it only adds the loop's jitter. Not for the
    /// knobs ring, batch and pin, which change the loop or the speed it measures. Recorded
    /// in the results file, so bench's table, `report` and the HTML page judge alike.
    #[arg(long, requires = "ab")]
    per_loop: bool,
    /// Output format: `table`, or with --ab also `seed` (run by run, with averages and
    /// %Reduction, as patch cover letters show them).
    #[arg(long, default_value = "table", value_parser = ["table", "seed"])]
    format: String,
    #[command(flatten)]
    irq: IrqArgs,
    #[command(flatten)]
    workload: crate::workload_cmd::WorkloadArgs,
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

/// Warnings about the vCPUs' host CPUs: IPI figures mean little when vCPUs share one.
fn irq_notes(opts: &BenchOptions) -> Vec<String> {
    let irq = &opts.params.irq;
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
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

/// Checks the options and turns them into what the lab runs.
fn options(a: &BenchArgs) -> Result<(BenchOptions, Option<AbSpec>), String> {
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
    a.json.check()?;
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
        overhead: a.overhead || (a.tests.is_empty() && !a.no_overhead && precision.is_none()),
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
    Ok((opts, ab))
}

/// `--precision PCT [--budget SECONDS]`, checked; without `--precision`, an `--ab` run's
/// default target ([`bench::Precision::ab_default`]: more pairs of rounds, of the tests
/// not there yet, until each test's change could be found at 2 %, or the budget ends),
/// unless rounds are given (the user's design) or `--per-loop` (which judges by the
/// loops, as the target does not).
fn precision(a: &BenchArgs) -> Result<Option<bench::Precision>, String> {
    let budget = a
        .budget
        .map(|s| crate::common::check_seconds("--budget", s).map(|()| Duration::from_secs_f64(s)))
        .transpose()?;
    let Some(pct) = a.precision else {
        let default = a.ab.is_some() && a.rounds.is_none() && !a.per_loop;
        if !default {
            return match budget {
                Some(_) => Err("--budget bounds --precision's rounds (or those of an --ab run's default target, without --rounds or --per-loop); give --precision PCT".into()),
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
    if a.ab.is_some() && a.per_loop {
        return Err(
            "--precision with --ab judges each test's change in cycles; it cannot be combined with --per-loop"
                .into(),
        );
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

/// The state of the plain progress lines: a line per planned round with a mark per
/// test; the extra and precision rounds, which may run by the hundred, share lines,
/// [`Lines::ROUNDS_A_LINE`] a line while the number of tests they run stays the same.
#[derive(Default)]
struct Lines {
    /// A round's line is open (its marks are being written).
    in_rounds: bool,
    /// The extra or precision rounds the open line holds.
    shared: Option<SharedLine>,
}

/// Extra or precision rounds on one line.
struct SharedLine {
    precision: bool,
    tests: u32,
    rounds: u32,
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
                Progress::ExtraRound(r, n) => {
                    bar.set_prefix(format!("extra round {r}"));
                    bar.inc_length(u64::from(n));
                }
                Progress::PrecisionRound(r, n) => {
                    bar.set_prefix(format!("precision round {r}"));
                    bar.inc_length(u64::from(n));
                }
                Progress::AbPrecisionRound(r, n) => {
                    bar.set_prefix(format!("precision round {r}"));
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
    /// Extra or precision rounds a shared line holds at most.
    const ROUNDS_A_LINE: u32 = 10;

    /// The legend of the round lines' marks, printed before the first round.
    const LEGEND: &'static str =
        "  (one mark per test: . done, T did not complete (stalled or timed out), F failed, s skipped)";

    /// One line per round with a mark per test (extra and precision rounds shared, see
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
            Progress::ExtraRound(r, n) => self.shared_round(out, false, r, n),
            Progress::PrecisionRound(r, n) | Progress::AbPrecisionRound(r, n) => {
                self.shared_round(out, true, r, n)
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
    fn shared_round(&mut self, out: &mut dyn Write, precision: bool, r: u32, tests: u32) {
        match &mut self.shared {
            Some(l)
                if l.precision == precision
                    && l.tests == tests
                    && l.rounds < Self::ROUNDS_A_LINE =>
            {
                l.rounds += 1;
                let _ = write!(out, " ");
            }
            _ => {
                let (what, why) = if precision {
                    ("precision", "not yet within the target")
                } else {
                    ("extra", "replacing outlier rounds")
                };
                let _ = write!(
                    out,
                    "{}  {what} rounds from {r} ({tests} test{} {why}) ",
                    if self.in_rounds { "\n" } else { "" },
                    if tests == 1 { "" } else { "s" }
                );
                self.shared = Some(SharedLine {
                    precision,
                    tests,
                    rounds: 1,
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

/// Runs the suite or the A/B experiment.
fn run(
    opts: &BenchOptions,
    ab: Option<&AbSpec>,
    host: serde_json::Value,
    notes: Vec<String>,
    display: &mut Display,
) -> Result<Results, i32> {
    let kvm = match exitlab_vmm::open_kvm() {
        Ok(k) => Arc::new(k),
        Err(e) => return Err(crate::common::kvm_unusable(&e)),
    };
    let mut progress = |p: Progress<'_>| display.event(p);
    let image = exitlab_guest::IMAGE;
    let outcome = match ab {
        Some(spec) => exitlab_lab::ab::run(
            &kvm,
            image,
            opts,
            spec,
            opts.rounds,
            host,
            notes,
            &mut progress,
        )
        .map_err(|e| e.to_string()),
        None => {
            bench::run(&kvm, image, opts, host, notes, &mut progress).map_err(|e| e.to_string())
        }
    };
    outcome.map_err(|e| {
        eprintln!("exitlab: {e}");
        EXIT_VMM_FAILED
    })
}

/// Prints the results: the A/B table (or the seeds' table), else the suite's table.
fn print_results(res: &Results, format: &str) {
    let ab_text = match format {
        "seed" => report::render_seed(res),
        _ => report::render_ab(res),
    };
    match ab_text {
        Some(text) => print!("{text}"),
        None => print!("{}", report::render_table(res)),
    }
    if crate::verbosity::level() > 0 {
        if let Some(v) = exitlab_results::variance::render_components(res) {
            print!("\n{v}");
        }
    }
    if let Some(why) = &res.incomplete {
        println!("incomplete: {why}");
    }
}

/// The exit code: interrupted, a failed test or exit check, or success.
fn exit_code(res: &Results) -> i32 {
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
        if a.per_loop {
            return usage_error(
                "--per-loop applies to the exit tests' --ab runs, not to --workload",
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
    let (mut opts, ab) = match options(&a) {
        Ok(o) => o,
        Err(e) => return usage_error(e),
    };
    if let (true, Some(spec)) = (a.per_loop, &ab) {
        if matches!(spec.knob.name, "ring" | "batch" | "pin") {
            return usage_error(format!(
                "--per-loop cannot judge --ab {}: the knob changes the empty loop itself (ring, batch) or the host speed it measures (pin); run the A/B without --per-loop",
                spec.knob.name
            ));
        }
    }
    let (host, mut notes, phases_off) = host_context();
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
    notes.extend(irq_notes(&opts));
    notes.extend(crate::trace_cmd::remove_stale_instances());
    let stop = arm_signals();
    let limit = crate::common::TimeoutWatch::start(a.timeout, stop.clone());
    opts.cancel = Some(stop);
    // -q/--quiet is global (every subcommand takes it).
    let quiet = crate::verbosity::level() < 0;
    let mut display = Display::new(quiet, progress_steps(&opts, ab.as_ref()));
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
                .map(|s| format!(", A/B {}={} vs {}", s.knob.name, s.a, s.b))
                .unwrap_or_default()
        );
    }
    let res = run(&opts, ab.as_ref(), host, notes, &mut display);
    display.finish();
    let mut res = match res {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let Some(ab) = &mut res.ab {
        ab.per_loop = a.per_loop;
    }
    let timed_out = limit.expired() && res.incomplete.is_some();
    if timed_out {
        res.incomplete = res
            .incomplete
            .take()
            .map(|why| format!("--timeout {} s expired: {why}", a.timeout));
    }
    if !a.json.to_stdout() {
        print_results(&res, &a.format);
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
        exit_code(&res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the plain progress lines show for `rounds` planned rounds of `tests` tests,
    /// then the precision rounds `precision` gives (round, tests), then one overhead step.
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
    fn precision_rounds_share_lines_ten_a_line_while_their_tests_stay_the_same() {
        // 109 precision rounds: 49 of two tests, then 60 of one.
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
            .filter(|l| l.contains("precision"))
            .collect();
        // ceil(49 / 10) + ceil(60 / 10) lines, not 109.
        assert_eq!(shared.len(), 5 + 6, "{text}");
        assert_eq!(
            shared[0],
            "  precision rounds from 1 (2 tests not yet within the target) .. .. .. .. .. .. .. .. .. ..",
            "{text}"
        );
        assert!(
            shared[4].starts_with("  precision rounds from 41 (2 tests"),
            "{text}"
        );
        assert!(
            shared[5].starts_with("  precision rounds from 50 (1 test not"),
            "{text}"
        );
        assert!(
            shared[10].starts_with("  precision rounds from 100 (1 test not"),
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
