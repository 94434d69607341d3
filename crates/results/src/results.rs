//! The results file written by `exitlab bench --json` and read by
//! `exitlab compare` and `exitlab report`.
//!
//! The file is pretty-printed JSON carrying a [`SCHEMA_VERSION`]. Floating
//! point fields that are not finite cannot be represented in JSON: they are
//! written as `null`, read back as `None` for optional fields and as NaN for
//! the others.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Deserializer, Serialize};
use thiserror::Error;

use crate::stats::describe::Summary;

/// Version of the results file format. Bumped on any incompatible change.
///
/// Version 2 added per-round figures ([`TestResult::rounds`]), the net CDF, provenance
/// (git revision, command line), knobs, the incomplete marker and A/B runs. Version 3
/// (the one statistical model, `docs/model.md`) dropped what set data aside or claimed
/// an interval over samples: a summary's `median_ci95`, a test's variance components, a
/// round spread's dropped samples and outlier rounds, and `precision` (now [`Plan`]).
/// Older files are still read: the fields they have that this version lacks are
/// ignored, and a version 1 file, without per-round figures, gives no verdict and says
/// why.
pub const SCHEMA_VERSION: u32 = 3;

/// Oldest schema version this program reads.
pub const OLDEST_READABLE_SCHEMA: u32 = 1;

/// One benchmark run: configuration, host, and one entry per test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Always [`SCHEMA_VERSION`] when written by this program.
    pub schema_version: u32,
    /// The program that wrote the file.
    pub tool: Tool,
    /// When the run started, in seconds since the Unix epoch.
    pub started_at_unix: u64,
    /// Duration of the whole run in seconds.
    #[serde(deserialize_with = "f64_or_nan")]
    pub wall_seconds: f64,
    /// Description of the host (CPU, kernel, virtualization); free-form.
    pub host: serde_json::Value,
    /// The benchmark configuration.
    pub config: BenchConfig,
    /// One entry per requested test, in the order they were run.
    pub tests: Vec<TestResult>,
    /// Cost of the VMM's own userspace exit handling as the in-process stamps see it
    /// (the full loop against the same loop with the bare handler, in this process): a
    /// diagnostic, coarse on hosts whose TSC advances in steps; see `floor` for the
    /// overhead experiment's headline figures.
    pub vmm_overhead: Option<Overhead>,
    /// exitlab as users run it (`exitlab run`, seccomp filters on) against the
    /// independent bare loop (`exitlab-floor`, a C program), on the same guest, in
    /// interleaved rounds, traced from the kernel's side; `None` when the overhead
    /// experiment did not run.
    #[serde(default)]
    pub floor: Option<FloorView>,
    /// Remarks about the run, e.g. that the host is nested or paravirtual.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Memory of the exitlab process during the run.
    #[serde(default)]
    pub process: Option<ProcessStats>,
    /// Where the figures came from: program revision and command line.
    #[serde(default)]
    pub provenance: Option<Provenance>,
    /// Set when the run was interrupted: what happened and what was kept. Only the tests
    /// listed in [`Results::tests`] completed.
    #[serde(default)]
    pub incomplete: Option<String>,
    /// For an A/B run (`bench --ab`): the knob, its two values and side B's tests (side
    /// A's are [`Results::tests`], with [`Results::config`] the common configuration).
    #[serde(default)]
    pub ab: Option<AbRun>,
    /// With a planned design (`bench --precision`, or `bench --ab`'s default): the
    /// target, the budget, the pilot and each test's units. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
}

/// The program revision and command line that produced a results file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `git describe`-style revision of the source the program was built from, when the
    /// build could tell (`unknown` otherwise).
    pub git_revision: String,
    /// The full command line, program name first.
    pub command_line: Vec<String>,
    /// The host's name (`/proc/sys/kernel/hostname`), when readable.
    #[serde(default)]
    pub hostname: Option<String>,
}

impl Provenance {
    /// This process: its build's git revision and its command line.
    pub fn current() -> Self {
        Self {
            git_revision: option_env!("EXITLAB_GIT_REVISION")
                .unwrap_or("unknown")
                .to_string(),
            command_line: std::env::args().collect(),
            hostname: fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty()),
        }
    }
}

/// An A/B experiment: one knob at two values, sides interleaved round by round (A B,
/// then B A, ...), each side of each round in fresh VMs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbRun {
    /// The knob's name (as `bench --ab` takes it).
    pub knob: String,
    /// Value of side A.
    pub a: String,
    /// Value of side B.
    pub b: String,
    /// Side B's per-test results (side A's are the file's `tests`).
    pub b_tests: Vec<TestResult>,
    /// Order of the sides in each round, e.g. `["a", "b"]` then `["b", "a"]`.
    pub order: Vec<[String; 2]>,
    /// With a knob that changes the host (a KVM module parameter, `MODULE.PARAM`): what
    /// was in force for each side-run, in the order they ran, and each switch. Empty
    /// for exitlab's own knobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<HostSide>,
}

/// One side-run of an A/B run whose knob changes the host: the value asked and in
/// force, the switch made before it (if the value changed), and the provenance of what
/// ran: the parameters of the modules involved and the build IDs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSide {
    /// Round, 1-based.
    pub round: u32,
    /// `a` or `b`.
    pub side: String,
    /// The value asked.
    pub asked: String,
    /// The value in force, read back from sysfs.
    pub in_force: String,
    /// Whether the value was switched before this side-run (not when the side before
    /// had the same value).
    pub switched: bool,
    /// Whether the switch reloaded the module (the parameter is read-only at run time).
    pub reloaded: bool,
    /// Seconds the switch took, measured (0 without one).
    pub seconds: f64,
    /// `MODULE.PARAM` -> value of every parameter of the modules involved.
    pub params: BTreeMap<String, String>,
    /// GNU build IDs: `kernel` and each module involved.
    pub build_ids: BTreeMap<String, String>,
    /// What the switch changed besides the knob (another parameter, the taint flags).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Results {
    /// The run's notes a report prints, less one that only repeats the host's
    /// virtualization summary (a nested or paravirtual host's note): every report shows
    /// that summary already, in its host line or row.
    pub fn notes_beyond_host(&self) -> impl Iterator<Item = &String> {
        let virtualization = crate::format::host_str(&self.host, "/virtualization/summary");
        self.notes
            .iter()
            .filter(move |n| Some(n.as_str()) != virtualization)
    }
}

/// The planned design of a run (`bench --precision`, or `bench --ab`'s default): a pilot
/// of `pilot_units` units, then a fixed number of units per test chosen from it
/// (`crate::stats::plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The target: each test's 95 % interval within `±target_pct` percent.
    pub target_pct: f64,
    /// Whether the target was `bench --ab`'s default rather than asked for.
    #[serde(default)]
    pub by_default: bool,
    /// The wall-time budget, seconds.
    pub budget_seconds: f64,
    /// Units (rounds, or pairs) of the pilot.
    pub pilot_units: u32,
    /// Seconds the run's rounds took, the pilot's included.
    pub seconds: f64,
    /// Per test (the empty loop excluded), in the suite's order.
    pub tests: Vec<PlanTest>,
}

/// One test's part of a planned design.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanTest {
    /// The test.
    pub name: String,
    /// The units the plan gave it, the pilot's included.
    pub planned: u32,
    /// The units its target needed, by its pilot's spread.
    pub needed: u32,
    /// The units it ran (fewer than planned only when the run was interrupted).
    pub units: u32,
    /// The half-width of its final interval, percent; `None` without one.
    pub half_width_pct: Option<f64>,
}

/// One round of one test: the figures of one fresh VM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundFigure {
    /// Samples taken in this round.
    pub samples: u64,
    /// Median cycles per iteration (loop not subtracted).
    #[serde(deserialize_with = "f64_or_nan")]
    pub median: f64,
    /// Median of the paired net cycles per iteration (sample minus the empty loop
    /// measured just before it), the figure comparisons resample; `None` when the
    /// test has no net figure (`loop_overhead`, but for a run with guest work, where it
    /// is the work's calibrated cost: `bench --guest-cycles`).
    pub net_median: Option<f64>,
    /// Wall seconds of the round, VM creation to teardown (boot, warm-up, samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Seconds of the round spent taking samples: from the first sample's start to the
    /// last one's end by the guest's TSC (doorbell exits included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_seconds: Option<f64>,
    /// Median cycles per iteration of the empty loop the guest timed before each sample
    /// of the round: how fast the host ran the guest then. A round whose loop ran far
    /// slower than the test's quick rounds ran in a slower host state
    /// ([`crate::central::other_state_rounds`]). Absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_median: Option<f64>,
    /// The exit-path probes the guest took just before the round's test (before its
    /// warm-up) and just after its last sample. A round whose probes ran far slower than
    /// the test's quick rounds' ran in a host state that slows the exit path but not the
    /// guest's own code, which the empty loop cannot see
    /// ([`crate::central::other_state_of`]). Absent in older files and where the host
    /// has no ioeventfds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<Probes>,
}

/// A round's exit-path probes: cycles per exit of the median block of each (port
/// writes an ioeventfd absorbs in the kernel; doorbell writes the VMM answers in userspace),
/// before the test and after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Probes {
    /// Kernel-absorbed writes, before the test.
    pub kernel_before: f64,
    /// Doorbells the VMM answers, before the test.
    pub user_before: f64,
    /// Kernel-absorbed writes, after the test's last sample.
    pub kernel_after: f64,
    /// Doorbells the VMM answers, after the test's last sample.
    pub user_after: f64,
}

/// Memory of the exitlab process during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Largest resident memory outside guest RAM, sampled at the end of each test while
    /// its VM was alive, the VMM overhead experiment's VMs included (bytes): the VMM's
    /// own footprint.
    pub vmm_rss_outside_guest_bytes: u64,
    /// The private part of that memory at the same samples (its largest): anonymous
    /// pages (heap, stacks, relocated pages); the rest are file pages of the binary and
    /// the C libraries mapped from the page cache. Absent in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_private_outside_guest_bytes: Option<u64>,
    /// Peak resident memory of the process, guest RAM included (VmHWM, bytes).
    pub peak_rss_bytes: u64,
}

impl Results {
    /// The result of the test called `name`, if it is in the file.
    pub fn test(&self, name: &str) -> Option<&TestResult> {
        self.tests.iter().find(|t| t.name == name)
    }
}

/// Name and version of the program that wrote a results file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tool {
    /// Program name, `exitlab`.
    pub name: String,
    /// Program version.
    pub version: String,
}

impl Tool {
    /// This program: name `exitlab` and the crate's version.
    pub fn current() -> Self {
        Self {
            name: "exitlab".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Parameters of a benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Names of the requested tests.
    pub tests: Vec<String>,
    /// Samples per test.
    pub samples: u64,
    /// Iterations per sample: `--batch`, or 0 where each test ran at its own (bench's
    /// default; each test's is its [`TestResult::batch`]).
    pub batch: u64,
    /// Unmeasured warm-up iterations per test.
    pub warmup: u64,
    /// Guest privilege ring the tests run in (0 or 3).
    pub ring: u8,
    /// Host CPU the vCPU thread was pinned to.
    pub pin: Option<u32>,
    /// Per-test time limit in seconds.
    #[serde(deserialize_with = "f64_or_nan")]
    pub timeout_seconds: f64,
    /// Whether every sample is kept in the file.
    pub raw: bool,
    /// TSC frequency in kHz used to convert cycles to nanoseconds.
    pub tsc_khz: u64,
    /// Where the TSC frequency came from (e.g. `KVM_GET_TSC_KHZ`, `cpuid 0x15`).
    pub tsc_khz_source: String,
    /// Rounds of the whole suite each test's samples were spread over.
    #[serde(default = "one")]
    pub rounds: u32,
    /// Every other knob the run was made with, by name (as `bench --ab` names them), e.g.
    /// `apic`, `halt-poll-ns`; knobs at their defaults are recorded too.
    #[serde(default)]
    pub knobs: BTreeMap<String, String>,
    /// The interrupt knobs of the run (APIC mode, vCPUs, idle, disabled exits, ...).
    #[serde(default)]
    pub irq: Option<crate::irq::IrqConfig>,
}

impl BenchConfig {
    /// [`BenchConfig::batch`] as a configuration value.
    pub fn batch_str(&self) -> String {
        match self.batch {
            0 => "each test's own".to_string(),
            b => b.to_string(),
        }
    }
}

/// The iterations per sample of a run's tests as a report's header says them: the one
/// `--batch` gave, or the tests' own ones ("1 or 4 (each test's own)").
pub fn batch_header(r: &Results) -> String {
    if r.config.batch != 0 {
        return crate::format::fmt_cycles(r.config.batch as f64);
    }
    format!(
        "{} (each test's own)",
        distinct_batches(r.tests.iter().map(|t| t.batch), " or ")
    )
}

/// The distinct `batches`, ascending, joined by `sep` ("1 or 4").
pub(crate) fn distinct_batches(batches: impl IntoIterator<Item = u64>, sep: &str) -> String {
    let mut v: Vec<u64> = batches.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(sep)
}

fn one() -> u32 {
    1
}

/// Where a VM exit was handled: expected (from the catalogue) or observed (from the
/// run's own counts; an observation never falls back to the expectation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handling {
    /// Inside the host kernel (KVM), without returning to the VMM.
    Kernel,
    /// In the VMM's userspace exit loop.
    User,
    /// No exit happens (the operation runs natively in the guest); expectation only.
    None,
    /// Observed: neither the VMM nor KVM's counters saw the exits (a host whose KVM
    /// counts no exit for them, or a test that causes none).
    NotObserved,
    /// Observed: some iterations exited to userspace and some were handled in the kernel.
    Mixed {
        /// Userspace exits of the test's kind.
        user: u64,
        /// Exits KVM counted beyond the userspace ones and the empty loop's.
        kernel: u64,
    },
}

impl Handling {
    /// The word used in files and reports ("mixed" without its counts).
    pub fn as_str(self) -> &'static str {
        match self {
            Handling::Kernel => "kernel",
            Handling::User => "user",
            Handling::None => "none",
            Handling::NotObserved => "not observed",
            Handling::Mixed { .. } => "mixed",
        }
    }

    /// The report's label: the word, with the counts for "mixed".
    pub fn label(self) -> String {
        match self {
            Handling::Mixed { user, kernel } => format!("mixed (user {user}, kernel {kernel})"),
            other => other.as_str().to_string(),
        }
    }

    /// Whether an observation agrees with the expectation `expected` (observing no exit
    /// agrees with expecting none).
    pub fn agrees_with(self, expected: Handling) -> bool {
        self == expected || (self == Handling::NotObserved && expected == Handling::None)
    }
}

/// KVM's own counters over a test's measured part, compared with the exits exitlab saw.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvmCounters {
    /// Every cumulative KVM event count that grew, by KVM's name ("exits", "io_exits",
    /// "mmio_exits", "halt_exits", "insn_emulation", ...).
    pub deltas: BTreeMap<String, u64>,
    /// The comparisons of the counters that have an exitlab counterpart.
    pub checks: Vec<CounterCheck>,
}

/// How far a test's rounds (each in its own VM, spread over the run) agreed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundSpread {
    /// Rounds that completed.
    pub rounds: u32,
    /// max / min − 1 of the rounds' raw medians (cycles per iteration, rounds with
    /// enough samples); NaN with fewer than two such rounds.
    #[serde(deserialize_with = "f64_or_nan")]
    pub spread: f64,
}

/// One KVM counter against exitlab's count of the same exits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterCheck {
    /// KVM's name of the counter.
    pub counter: String,
    /// KVM's count.
    pub kvm: u64,
    /// exitlab's count of the userspace exits the counter also counts.
    pub exitlab: u64,
    /// What the two say together.
    pub verdict: CounterVerdict,
}

/// How a KVM counter relates to exitlab's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterVerdict {
    /// Equal.
    Agree,
    /// KVM counted more: the difference was handled in the kernel.
    KernelHandled,
    /// KVM counted none of the exits exitlab saw: the host does not count them.
    NotCounted,
    /// The counts contradict each other (KVM counted some but fewer than exitlab saw, or
    /// counted exits of the test's own userspace kind that never reached the VMM).
    Mismatch,
}

/// Outcome of one test.
///
/// In the JSON it is flattened into the test's object: `"status": "ok"` or
/// e.g. `"status": "skipped", "reason": "..."`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TestStatus {
    /// The test ran and all its samples were taken.
    Ok,
    /// The test was not run.
    Skipped {
        /// Why it was not run.
        reason: String,
    },
    /// The test started but did not finish (timeout, guest stopped responding).
    DidNotComplete {
        /// What happened.
        reason: String,
    },
    /// The test failed (guest fault, emulation failure, VMM error).
    Failed {
        /// What happened.
        reason: String,
    },
}

impl TestStatus {
    /// Short word for reports: `ok`, `skipped`, `did-not-complete`, `failed`.
    pub fn word(&self) -> &'static str {
        match self {
            TestStatus::Ok => "ok",
            TestStatus::Skipped { .. } => "skipped",
            TestStatus::DidNotComplete { .. } => "did-not-complete",
            TestStatus::Failed { .. } => "failed",
        }
    }

    /// The reason, for every status but [`TestStatus::Ok`].
    pub fn reason(&self) -> Option<&str> {
        match self {
            TestStatus::Ok => None,
            TestStatus::Skipped { reason }
            | TestStatus::DidNotComplete { reason }
            | TestStatus::Failed { reason } => Some(reason),
        }
    }

    /// Whether the status is [`TestStatus::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, TestStatus::Ok)
    }
}

/// The result of one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// Test name (kvm-unit-tests vocabulary where the test is the same).
    pub name: String,
    /// Guest ring the test ran in.
    pub ring: u8,
    /// Outcome; flattened into this object (see [`TestStatus`]).
    #[serde(flatten)]
    pub status: TestStatus,
    /// Where the exit was handled, as observed (`None` if not run).
    pub handled: Option<Handling>,
    /// Where the exit is expected to be handled.
    pub expected_handling: Handling,
    /// This test is the empty loop every sample is paired with (its catalogue row's
    /// `baseline`): it has no net figure, only raw cycles, and is no row of an A/B table.
    /// Absent (false) in files written before it existed, whose empty loop has no net
    /// figure either, which is what the renderers go by for them.
    #[serde(default)]
    pub baseline: bool,
    /// Number of samples taken.
    pub samples: u64,
    /// Iterations per sample.
    pub batch: u64,
    /// Cycles per iteration (sample / batch); the loop overhead is NOT subtracted.
    pub cycles: Option<Summary>,
    /// Median cycles minus the `loop_overhead` test's median in the same
    /// ring; `None` for `loop_overhead` itself or when it is unavailable.
    pub net_median_cycles: Option<f64>,
    /// Median in nanoseconds: of the net median when available, else of
    /// the raw median (see [`TestResult::median_ns_is_net`]).
    pub median_ns: Option<f64>,
    /// Whether [`TestResult::median_ns`] is derived from the net median.
    #[serde(default)]
    pub median_ns_is_net: bool,
    /// Userspace exits by reason during the measured part.
    #[serde(default)]
    pub exits: BTreeMap<String, u64>,
    /// In-kernel exits from KVM's binary statistics, when available.
    pub kvm_exits: Option<u64>,
    /// KVM's counters and their cross-check with exitlab's counts, when available.
    #[serde(default)]
    pub kvm_counters: Option<KvmCounters>,
    /// The test's rounds: how many ran, how many samples the host-noise detector left
    /// out, and the spread of the rounds' medians.
    #[serde(default)]
    pub round_spread: Option<RoundSpread>,
    /// Check of the observed userspace exits against the expected count.
    pub exit_check: Option<ExitCheck>,
    /// Per-phase cycle breakdown of a userspace round trip.
    pub phases: Option<Phases>,
    /// Cycles of one `KVM_RUN` as seen from the VMM.
    pub kvm_run_cycles: Option<Summary>,
    /// VMM userspace cycles per userspace exit.
    pub userspace_share: Option<Summary>,
    /// With `--raw`: each sample's cycles (for `batch` iterations).
    pub raw_samples: Option<Vec<u64>>,
    /// Figures of each round (fresh VM) in the order they ran: the unit comparisons
    /// resample.
    #[serde(default)]
    pub rounds: Vec<RoundFigure>,
    /// The distribution of the paired net cycles per iteration over all rounds, as its
    /// 0th, 1st, ..., 100th percentiles (what the report's CDFs draw).
    #[serde(default)]
    pub net_percentiles: Option<Vec<f64>>,
    /// APIC mode, vCPUs and exits per vCPU of the test's VM.
    #[serde(default)]
    pub irq: Option<crate::irq::IrqResult>,
    /// With `inject-cycles` on: the waits the VMM added to the test's userspace exits over
    /// all its rounds, warm-up included, as it measured them. Their mean is the change the
    /// exits got on average (the nominal value is the knob's; a wait overshoots it when the
    /// VMM's thread loses its CPU while it spins, and a median figure then gets less than
    /// the mean). Absent with the knob off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<exitlab_counts::InjectedWaits>,
}

/// Comparison of the userspace exits observed with the number expected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitCheck {
    /// Userspace exits the measured part should cause.
    pub expected_user_exits: u64,
    /// Userspace exits actually observed.
    pub observed_user_exits: u64,
    /// Whether the observation matches the expectation.
    pub passed: bool,
    /// Human-readable explanation.
    pub detail: String,
}

/// Per-phase cycle summaries of a userspace exit round trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// From the guest's exiting instruction to the VMM seeing the exit.
    pub exit_leg: Summary,
    /// The VMM handling the exit in userspace.
    pub handling: Summary,
    /// From the VMM re-entering `KVM_RUN` to the guest resuming.
    pub entry_leg: Summary,
}

/// VMM userspace cost per exit with the full VMM compared with a bare loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// The test used for the measurement.
    pub test: String,
    /// Userspace share per exit with the full VMM.
    pub full: Summary,
    /// Userspace share per exit with a bare exit loop.
    pub bare: Summary,
    /// `full.p10 / bare.p10`.
    #[serde(deserialize_with = "f64_or_nan")]
    pub ratio_p10: f64,
    /// `full.median / bare.median`.
    #[serde(deserialize_with = "f64_or_nan")]
    pub ratio_median: f64,
    /// Devices on the VM's buses during the experiment (the PC platform `exitlab run`
    /// builds, with the measured port claimed); `None` in files from before it was
    /// measured on a populated bus.
    #[serde(default)]
    pub bus_devices: Option<u64>,
    /// The resolution at which the host read these stamps: the smallest positive
    /// difference between two of the experiment's values (cycles). On a host whose TSC
    /// advances in steps (26 cycles on this project's machines) a userspace share of a
    /// few steps gives a ratio that moves by whole steps; `None` in older files, or
    /// when every value was the same.
    #[serde(default)]
    pub stamp_step_cycles: Option<u64>,
}

impl Overhead {
    /// Builds the comparison, computing both ratios; a ratio whose
    /// denominator is not positive is NaN.
    pub fn new(test: impl Into<String>, full: Summary, bare: Summary) -> Self {
        Self {
            test: test.into(),
            ratio_p10: ratio(full.p10, bare.p10),
            ratio_median: ratio(full.median, bare.median),
            full,
            bare,
            bus_devices: None,
            stamp_step_cycles: None,
        }
    }
}

/// The overhead experiment's kernel-side comparison, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FloorView {
    /// Both sides were traced.
    Measured(Box<FloorComparison>),
    /// The kernel view was not available (no tracefs, not root, ...) or a side failed.
    NotMeasured {
        /// Why, and what to do about it.
        reason: String,
    },
}

/// exitlab's userspace share per exit against the independent bare loop, each traced
/// from the kernel's side: from `kvm_userspace_exit` to the same thread's next
/// `ioctl(KVM_RUN)` entry, in cycles of the x86-tsc trace clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloorComparison {
    /// What was measured and how, in words.
    pub method: String,
    /// The guest both sides ran (kernel and command line).
    pub guest: String,
    /// Rounds; each ran both sides once, alternating which went first.
    pub rounds: u32,
    /// Userspace exits (`in` from the measured port) the guest makes per run.
    pub exits_per_run: u64,
    /// exitlab (`exitlab run ...`).
    pub exitlab: FloorSide,
    /// The bare loop (`exitlab-floor`).
    pub floor: FloorSide,
    /// `exitlab.user.p10 / floor.user.p10`.
    #[serde(deserialize_with = "f64_or_nan")]
    pub ratio_p10: f64,
    /// `exitlab.user.median / floor.user.median`.
    #[serde(deserialize_with = "f64_or_nan")]
    pub ratio_median: f64,
    /// The bare loop under the cheapest seccomp filter there is, one rule that allows
    /// everything (`exitlab-floor --seccomp`), run in the same rounds: what the kernel
    /// charges a filtered thread per exit on this host, which no filter can go below
    /// and exitlab's vCPU filter pays too (absent in files from before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered_floor: Option<FloorSide>,
    /// `exitlab.user.p10 / filtered_floor.user.p10` and the same of the medians.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_filtered: Option<(f64, f64)>,
    /// Events the kernel dropped over all runs (0 when the figures are complete).
    pub lost_events: u64,
}

/// One side of a [`FloorComparison`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloorSide {
    /// The command line run (the guest's path shortened to its file name).
    pub command: String,
    /// Userspace cycles per exit, pooled over all rounds.
    pub user: Summary,
    /// Exits of the measured kind the trace saw, over all rounds.
    pub exits: u64,
    /// Exits the guest made by construction, over all rounds.
    pub exits_expected: u64,
    /// The median of each round, in the order they ran.
    pub round_medians: Vec<f64>,
}

impl FloorComparison {
    /// Builds the comparison, computing both ratios (NaN over a non-positive floor).
    pub fn new(
        method: String,
        guest: String,
        rounds: u32,
        exits_per_run: u64,
        exitlab: FloorSide,
        floor: FloorSide,
        lost_events: u64,
    ) -> Self {
        FloorComparison {
            method,
            guest,
            rounds,
            exits_per_run,
            ratio_p10: ratio(exitlab.user.p10, floor.user.p10),
            ratio_median: ratio(exitlab.user.median, floor.user.median),
            exitlab,
            floor,
            filtered_floor: None,
            ratio_filtered: None,
            lost_events,
        }
    }

    /// Adds the bare loop under the one-rule allow-all filter, and exitlab's ratios to it.
    pub fn with_filtered_floor(mut self, side: FloorSide) -> Self {
        self.ratio_filtered = Some((
            ratio(self.exitlab.user.p10, side.user.p10),
            ratio(self.exitlab.user.median, side.user.median),
        ));
        self.filtered_floor = Some(side);
        self
    }

    /// What any seccomp filter costs the bare loop per exit on this host, cycles at p10
    /// and at the median (the filtered floor less the bare one), when it was measured.
    pub fn filter_cost(&self) -> Option<(f64, f64)> {
        let f = self.filtered_floor.as_ref()?;
        Some((
            f.user.p10 - self.floor.user.p10,
            f.user.median - self.floor.user.median,
        ))
    }

    /// Whether every run made exactly the exits the guest makes by construction, and
    /// the kernel dropped nothing.
    pub fn counts_agree(&self) -> bool {
        self.lost_events == 0
            && [&self.exitlab, &self.floor]
                .into_iter()
                .chain(&self.filtered_floor)
                .all(|s| s.exits == s.exits_expected)
    }
}

/// `a / b`, NaN over a non-positive `b`.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// Reads a number that may have been written as `null` (non-finite) as NaN.
fn f64_or_nan<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// Why a results file could not be written or read.
#[derive(Debug, Error)]
pub enum ResultsError {
    /// The target's directory does not exist.
    #[error("cannot write results to {}: directory {} does not exist; create it or choose another --json path", path.display(), dir.display())]
    DirectoryMissing {
        /// The requested results path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// The target's parent exists but is not a directory.
    #[error("cannot write results to {}: {} is not a directory; choose another --json path", path.display(), dir.display())]
    ParentNotDirectory {
        /// The requested results path.
        path: PathBuf,
        /// Its parent.
        dir: PathBuf,
    },
    /// The target is a directory.
    #[error("cannot write results to {}: it is a directory; give a file name, e.g. {}", path.display(), path.join("results.json").display())]
    IsDirectory {
        /// The requested results path.
        path: PathBuf,
    },
    /// The target exists but is not a regular file (device, FIFO, socket).
    #[error("cannot write results to {}: it exists and is not a regular file; choose another --json path", path.display())]
    NotRegularFile {
        /// The requested results path.
        path: PathBuf,
    },
    /// Creating, writing, syncing or renaming the file failed.
    #[error("cannot write results to {}: {source}; check that the directory is writable and has free space, or choose another --json path", path.display())]
    Write {
        /// The requested results path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The results could not be encoded as JSON.
    #[error("cannot write results to {}: encoding them as JSON failed: {source}", path.display())]
    Encode {
        /// The requested results path.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// The file to read does not exist.
    #[error("cannot read results from {}: no such file; check the path (results files are written by `exitlab bench --json PATH`)", path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read results from {}: {source}", path.display())]
    Read {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not valid JSON or not shaped like a results file.
    #[error("{} is not a valid exitlab results file: {message} at line {line}, column {column}", path.display())]
    Parse {
        /// The path given.
        path: PathBuf,
        /// What is wrong.
        message: String,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
    },
    /// The file is JSON but has no usable `schema_version`.
    #[error("{} is not an exitlab results file: it has no numeric \"schema_version\" field", path.display())]
    NoSchemaVersion {
        /// The path given.
        path: PathBuf,
    },
    /// The file was written by a newer exitlab.
    #[error("cannot read {}: it was written by a newer exitlab (results schema version {found}; this exitlab reads version {expected}); use a newer exitlab to read it", path.display())]
    SchemaNewer {
        /// The path given.
        path: PathBuf,
        /// Schema version in the file.
        found: u64,
        /// Schema version this program reads.
        expected: u32,
    },
    /// The file was written by an older exitlab.
    #[error("cannot read {}: it was written by an older exitlab (results schema version {found}; this exitlab reads versions 1 to {expected}); re-run the benchmark with this exitlab", path.display())]
    SchemaOlder {
        /// The path given.
        path: PathBuf,
        /// Schema version in the file.
        found: u64,
        /// Schema version this program reads.
        expected: u32,
    },
}

/// The directory a results path lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Checks the target path and its directory; returns the directory.
fn check_target(path: &Path) -> Result<PathBuf, ResultsError> {
    let dir = parent_dir(path);
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(ResultsError::IsDirectory {
                path: path.to_path_buf(),
            })
        }
        Ok(meta) if !meta.is_file() => {
            return Err(ResultsError::NotRegularFile {
                path: path.to_path_buf(),
            })
        }
        _ => {}
    }
    // A path ending in a separator names a directory even if it does not exist yet.
    if path
        .as_os_str()
        .to_string_lossy()
        .ends_with(std::path::MAIN_SEPARATOR)
    {
        return Err(ResultsError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    match fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(ResultsError::ParentNotDirectory {
            path: path.to_path_buf(),
            dir,
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(ResultsError::DirectoryMissing {
            path: path.to_path_buf(),
            dir,
        }),
        // Typically ENOTDIR: a component of the directory is a file.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            Err(ResultsError::ParentNotDirectory {
                path: path.to_path_buf(),
                dir,
            })
        }
        Err(source) => Err(ResultsError::Write {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Creates a new, uniquely named temporary file next to `path`.
fn create_temp(dir: &Path, path: &Path) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut last_err = None;
    for _ in 0..16 {
        let seq = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(".{base}.tmp.{}.{seq}.{nanos}", std::process::id());
        let tmp = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no unique temporary file name found")))
}

/// Checks, before a long run, that results can later be written to `path`:
/// the path is not a directory or special file, its directory exists, and a
/// file can be created there (a probe file is created and removed).
pub fn check_writable(path: &Path) -> Result<(), ResultsError> {
    let dir = check_target(path)?;
    let (tmp, file) = create_temp(&dir, path).map_err(|source| ResultsError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    drop(file);
    // The probe is empty; failing to remove it is harmless.
    let _ = fs::remove_file(&tmp);
    Ok(())
}

/// Writes `results` (a results file, or any other JSON document exitlab writes) to
/// `path` atomically: pretty JSON into a uniquely named temporary file in the same
/// directory, flushed to disk, then renamed over `path`. Readers see either the old
/// file or the complete new one; on any failure the temporary file is removed and
/// `path` is left untouched.
pub fn write_atomic<T: Serialize + ?Sized>(path: &Path, results: &T) -> Result<(), ResultsError> {
    let dir = check_target(path)?;
    let write_err = |source| ResultsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let (tmp, file) = create_temp(&dir, path).map_err(write_err)?;
    let outcome = write_and_sync(file, results)
        .and_then(|()| fs::rename(&tmp, path).map_err(WriteFailure::Io));
    match outcome {
        Ok(()) => {
            // Make the rename durable; a failure here does not lose data
            // already visible to readers, so it is not reported.
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
            Ok(())
        }
        Err(failure) => {
            let _ = fs::remove_file(&tmp);
            Err(match failure {
                WriteFailure::Io(source) => write_err(source),
                WriteFailure::Encode(source) => ResultsError::Encode {
                    path: path.to_path_buf(),
                    source,
                },
            })
        }
    }
}

/// Failure while filling the temporary file.
enum WriteFailure {
    Io(io::Error),
    Encode(serde_json::Error),
}

fn write_and_sync<T: Serialize + ?Sized>(file: File, results: &T) -> Result<(), WriteFailure> {
    let mut out = BufWriter::new(file);
    serde_json::to_writer_pretty(&mut out, results).map_err(|e| {
        if e.is_io() {
            WriteFailure::Io(io::Error::from(e))
        } else {
            WriteFailure::Encode(e)
        }
    })?;
    out.write_all(b"\n").map_err(WriteFailure::Io)?;
    let file = out
        .into_inner()
        .map_err(|e| WriteFailure::Io(e.into_error()))?;
    file.sync_all().map_err(WriteFailure::Io)
}

/// Just enough of a results file to check its schema version.
#[derive(Deserialize)]
struct Probe {
    schema_version: Option<serde_json::Value>,
}

/// Reads a results file, checking its schema version first.
pub fn read(path: &Path) -> Result<Results, ResultsError> {
    let bytes = fs::read(path).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            ResultsError::NotFound {
                path: path.to_path_buf(),
            }
        } else {
            ResultsError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    parse(path, &bytes)
}

/// Parses the bytes of a results file; `path` is used in error messages.
fn parse(path: &Path, bytes: &[u8]) -> Result<Results, ResultsError> {
    let parse_err = |e: serde_json::Error| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        ResultsError::Parse {
            path: path.to_path_buf(),
            message,
            line: e.line(),
            column: e.column(),
        }
    };
    let probe: Probe = serde_json::from_slice(bytes).map_err(parse_err)?;
    let version = probe
        .schema_version
        .as_ref()
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| ResultsError::NoSchemaVersion {
            path: path.to_path_buf(),
        })?;
    if version > u64::from(SCHEMA_VERSION) {
        return Err(ResultsError::SchemaNewer {
            path: path.to_path_buf(),
            found: version,
            expected: SCHEMA_VERSION,
        });
    }
    if version < u64::from(OLDEST_READABLE_SCHEMA) {
        return Err(ResultsError::SchemaOlder {
            path: path.to_path_buf(),
            found: version,
            expected: SCHEMA_VERSION,
        });
    }
    serde_json::from_slice(bytes).map_err(parse_err)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stats::describe::summarize;

    /// A unique scratch directory under the system temporary directory.
    pub(crate) struct Scratch(pub PathBuf);

    impl Scratch {
        pub(crate) fn new(tag: &str) -> Self {
            static N: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "exitlab-lab-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn summary(base: f64) -> Summary {
        let v: Vec<f64> = (0..101).map(|i| base + f64::from(i)).collect();
        summarize(&v).unwrap()
    }

    pub(crate) fn ok_test(name: &str, base: f64) -> TestResult {
        TestResult {
            name: name.to_string(),
            ring: 3,
            status: TestStatus::Ok,
            handled: Some(Handling::User),
            expected_handling: Handling::User,
            baseline: false,
            samples: 101,
            batch: 100,
            cycles: Some(summary(base)),
            net_median_cycles: Some(base + 50.0 - 10.0),
            median_ns: Some((base + 40.0) / 3.0),
            median_ns_is_net: true,
            exits: BTreeMap::new(),
            kvm_exits: None,
            kvm_counters: None,
            round_spread: None,
            exit_check: None,
            phases: None,
            kvm_run_cycles: None,
            userspace_share: None,
            raw_samples: None,
            rounds: (0..6)
                .map(|i| RoundFigure {
                    samples: 17,
                    median: base + 50.0,
                    net_median: Some(base + 40.0 + f64::from(i % 3) - 1.0),
                    ..Default::default()
                })
                .collect(),
            net_percentiles: Some((0..=100).map(|i| base + f64::from(i)).collect()),
            irq: None,
            injected: None,
        }
    }

    pub(crate) fn sample_results() -> Results {
        let mut full = ok_test("inl_from_qemu", 5000.0);
        full.exits.insert("io".to_string(), 10_100);
        full.kvm_exits = Some(10_200);
        full.exit_check = Some(ExitCheck {
            expected_user_exits: 10_100,
            observed_user_exits: 10_100,
            passed: true,
            detail: "one io exit per iteration".to_string(),
        });
        full.phases = Some(Phases {
            exit_leg: summary(1000.0),
            handling: summary(2000.0),
            entry_leg: summary(1500.0),
        });
        full.kvm_run_cycles = Some(summary(4000.0));
        full.userspace_share = Some(summary(1800.0));
        full.raw_samples = Some(vec![500_000, 501_234, u64::MAX]);
        let mut kernel = ok_test("cpuid", 1200.0);
        kernel.handled = Some(Handling::Kernel);
        kernel.expected_handling = Handling::Kernel;
        let mut lo = ok_test("loop_overhead", 10.0);
        lo.handled = Some(Handling::NotObserved);
        lo.expected_handling = Handling::None;
        lo.baseline = true;
        lo.net_median_cycles = None;
        lo.median_ns_is_net = false;
        let skipped = TestResult {
            name: "vmcall".to_string(),
            status: TestStatus::Skipped {
                reason: "vmcall never completes on this host".to_string(),
            },
            handled: None,
            cycles: None,
            net_median_cycles: None,
            median_ns: None,
            samples: 0,
            ..ok_test("vmcall", 0.0)
        };
        let dnc = TestResult {
            name: "ipi".to_string(),
            status: TestStatus::DidNotComplete {
                reason: "timed out after 10 s".to_string(),
            },
            handled: None,
            cycles: None,
            net_median_cycles: None,
            median_ns: None,
            ..ok_test("ipi", 0.0)
        };
        let failed = TestResult {
            name: "wr_tsc_adjust_msr".to_string(),
            status: TestStatus::Failed {
                reason: "emulation failure".to_string(),
            },
            handled: None,
            cycles: None,
            net_median_cycles: None,
            median_ns: None,
            ..ok_test("wr_tsc_adjust_msr", 0.0)
        };
        Results {
            schema_version: SCHEMA_VERSION,
            tool: Tool::current(),
            started_at_unix: 1_700_000_000,
            wall_seconds: 12.5,
            host: serde_json::json!({
                "cpu": { "model_name": "Test CPU @ 3.00GHz" },
                "kernel": { "release": "6.8.0-test" },
                "virtualization": { "summary": "nested, paravirtual" }
            }),
            config: BenchConfig {
                tests: vec![
                    "loop_overhead".into(),
                    "cpuid".into(),
                    "inl_from_qemu".into(),
                ],
                samples: 101,
                batch: 100,
                warmup: 1000,
                ring: 3,
                pin: Some(1),
                timeout_seconds: 10.0,
                raw: true,
                tsc_khz: 3_000_000,
                tsc_khz_source: "KVM_GET_TSC_KHZ".to_string(),
                rounds: 6,
                knobs: BTreeMap::from([("ring".to_string(), "3".to_string())]),
                irq: Some(crate::irq::IrqConfig {
                    apic: crate::irq::ApicMode::Xapic,
                    cpus: 0,
                    idle: crate::irq::Idle::Poll,
                    disable_exits: "none".into(),
                    halt_poll_ns: None,
                    pv_ipi: None,
                    irqchip: "kernel".into(),
                    pins: vec![Some(1)],
                }),
            },
            tests: vec![lo, kernel, full, skipped, dnc, failed],
            vmm_overhead: Some(Overhead::new(
                "inl_from_qemu",
                summary(1800.0),
                summary(900.0),
            )),
            floor: None,
            notes: vec!["this host is nested/paravirtual".to_string()],
            process: Some(ProcessStats {
                vmm_rss_outside_guest_bytes: 6 << 20,
                vmm_private_outside_guest_bytes: Some(1 << 20),
                peak_rss_bytes: 7 << 20,
            }),
            provenance: Some(Provenance {
                git_revision: "abc1234".to_string(),
                command_line: vec!["exitlab".into(), "bench".into()],
                hostname: Some("testhost".into()),
            }),
            incomplete: None,
            ab: None,
            plan: None,
        }
    }

    #[test]
    fn the_header_gives_the_batch_given_or_each_tests_own() {
        let mut r = sample_results();
        r.config.batch = 0;
        r.tests.iter_mut().for_each(|t| t.batch = 1);
        r.tests[1].batch = 4;
        assert_eq!(batch_header(&r), "1 or 4 (each test's own)");
        r.config.batch = 1_000;
        assert_eq!(batch_header(&r), "1,000");
        assert_eq!(r.config.batch_str(), "1000");
    }

    #[test]
    fn round_trip_through_file() {
        let dir = Scratch::new("roundtrip");
        let path = dir.0.join("results.json");
        let results = sample_results();
        write_atomic(&path, &results).unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back, results);
        // Overwriting works and leaves no temporary files behind.
        write_atomic(&path, &back).unwrap();
        let names: Vec<_> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("results.json")]);
    }

    #[test]
    fn json_shape() {
        let results = sample_results();
        let v = serde_json::to_value(&results).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        let t = &v["tests"];
        assert_eq!(t[0]["status"], "ok");
        assert_eq!(t[0]["handled"], "not_observed");
        assert_eq!(t[0]["expected_handling"], "none");
        assert_eq!(t[1]["handled"], "kernel");
        assert_eq!(t[2]["expected_handling"], "user");
        assert_eq!(t[3]["status"], "skipped");
        assert_eq!(t[3]["reason"], "vmcall never completes on this host");
        assert_eq!(t[3]["handled"], serde_json::Value::Null);
        assert_eq!(t[4]["status"], "did_not_complete");
        assert_eq!(t[5]["status"], "failed");
        assert_eq!(t[2]["raw_samples"][2], u64::MAX);
        assert_eq!(results.test("cpuid").map(|t| t.ring), Some(3));
        assert!(results.test("nonexistent").is_none());
    }

    #[test]
    fn non_finite_numbers_survive_as_nan_or_none() {
        let dir = Scratch::new("nan");
        let path = dir.0.join("r.json");
        let mut results = sample_results();
        results.wall_seconds = f64::NAN;
        results.config.timeout_seconds = f64::INFINITY;
        results.tests[0].median_ns = Some(f64::NAN);
        let mut zero = summary(0.0);
        zero.p10 = 0.0;
        results.vmm_overhead = Some(Overhead::new("x", summary(1.0), zero));
        write_atomic(&path, &results).unwrap();
        let back = read(&path).unwrap();
        assert!(back.wall_seconds.is_nan());
        assert!(back.config.timeout_seconds.is_nan());
        assert_eq!(back.tests[0].median_ns, None);
        let o = back.vmm_overhead.unwrap();
        assert!(o.ratio_p10.is_nan());
        assert!(o.ratio_median.is_finite());
    }

    #[test]
    fn overhead_ratios() {
        let o = Overhead::new("t", summary(200.0), summary(100.0));
        assert!((o.ratio_median - 250.0 / 150.0).abs() < 1e-12);
        assert!((o.ratio_p10 - 210.0 / 110.0).abs() < 1e-12);
        let mut zero = summary(0.0);
        zero.p10 = 0.0;
        zero.median = -1.0;
        let o = Overhead::new("t", summary(200.0), zero);
        assert!(o.ratio_p10.is_nan() && o.ratio_median.is_nan());
    }

    #[test]
    fn write_to_missing_directory_fails_clearly() {
        let dir = Scratch::new("missing");
        let path = dir.0.join("no").join("such").join("r.json");
        let err = write_atomic(&path, &sample_results()).unwrap_err();
        assert!(
            matches!(err, ResultsError::DirectoryMissing { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("does not exist") && msg.contains("--json"),
            "{msg}"
        );
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(matches!(
            check_writable(&path),
            Err(ResultsError::DirectoryMissing { .. })
        ));
        assert!(!path.exists());
    }

    #[test]
    fn write_under_a_file_fails_clearly() {
        let dir = Scratch::new("underfile");
        let file = dir.0.join("plain");
        fs::write(&file, b"x").unwrap();
        let path = file.join("r.json");
        let err = check_writable(&path).unwrap_err();
        assert!(
            matches!(err, ResultsError::ParentNotDirectory { .. }),
            "{err:?}"
        );
        let err = write_atomic(&path, &sample_results()).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
        let nested = file.join("a").join("r.json");
        let err = check_writable(&nested).unwrap_err();
        assert!(
            matches!(err, ResultsError::ParentNotDirectory { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn unwritable_directory_fails() {
        // /proc accepts no new files, even for root.
        let path = Path::new("/proc/exitlab-results.json");
        if !Path::new("/proc/self").exists() {
            return;
        }
        let err = check_writable(path).unwrap_err();
        assert!(matches!(err, ResultsError::Write { .. }), "{err:?}");
        assert!(err.to_string().contains("--json"), "{err}");
        let err = write_atomic(path, &sample_results()).unwrap_err();
        assert!(matches!(err, ResultsError::Write { .. }), "{err:?}");
    }

    #[test]
    fn directory_path_is_rejected() {
        let dir = Scratch::new("isdir");
        let err = write_atomic(&dir.0, &sample_results()).unwrap_err();
        assert!(matches!(err, ResultsError::IsDirectory { .. }), "{err:?}");
        assert!(err.to_string().contains("results.json"), "{err}");
        assert!(matches!(
            check_writable(&dir.0),
            Err(ResultsError::IsDirectory { .. })
        ));
        let trailing = PathBuf::from(format!("{}/new/", dir.0.display()));
        assert!(matches!(
            check_writable(&trailing),
            Err(ResultsError::IsDirectory { .. })
        ));
        assert!(matches!(
            check_writable(Path::new("/dev/null")),
            Err(ResultsError::NotRegularFile { .. })
        ));
    }

    #[test]
    fn check_writable_accepts_good_paths_and_leaves_nothing() {
        let dir = Scratch::new("ok");
        let path = dir.0.join("r.json");
        check_writable(&path).unwrap();
        assert_eq!(fs::read_dir(&dir.0).unwrap().count(), 0);
        fs::write(&path, b"old").unwrap();
        check_writable(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"old");
    }

    #[test]
    fn missing_file() {
        let dir = Scratch::new("nofile");
        let err = read(&dir.0.join("absent.json")).unwrap_err();
        assert!(matches!(err, ResultsError::NotFound { .. }), "{err:?}");
        assert!(err.to_string().contains("no such file"), "{err}");
    }

    #[test]
    fn garbage_file() {
        let dir = Scratch::new("garbage");
        let path = dir.0.join("g.json");
        fs::write(&path, b"{\n  \"schema_version\": 1,\n  oops\n}").unwrap();
        match read(&path).unwrap_err() {
            ResultsError::Parse {
                line,
                column,
                message,
                ..
            } => {
                assert_eq!(line, 3);
                assert!(column > 0);
                assert!(!message.contains("at line"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        fs::write(&path, b"\x00\x01binary").unwrap();
        assert!(matches!(read(&path), Err(ResultsError::Parse { .. })));
        fs::write(&path, b"").unwrap();
        assert!(matches!(read(&path), Err(ResultsError::Parse { .. })));
        fs::write(&path, b"[1, 2]").unwrap();
        assert!(matches!(read(&path), Err(ResultsError::Parse { .. })));
        fs::write(&path, b"{\"hello\": 1}").unwrap();
        assert!(matches!(
            read(&path),
            Err(ResultsError::NoSchemaVersion { .. })
        ));
        fs::write(&path, b"{\"schema_version\": \"1\"}").unwrap();
        assert!(matches!(
            read(&path),
            Err(ResultsError::NoSchemaVersion { .. })
        ));
        // Right version, wrong shape: a field error with its position.
        fs::write(&path, b"{\"schema_version\": 1, \"tool\": 5}").unwrap();
        let err = read(&path).unwrap_err();
        assert!(
            matches!(err, ResultsError::Parse { line: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("line 1, column"), "{err}");
    }

    #[test]
    fn schema_mismatch() {
        let dir = Scratch::new("schema");
        let path = dir.0.join("s.json");
        let mut v = serde_json::to_value(sample_results()).unwrap();
        v["schema_version"] = serde_json::json!(SCHEMA_VERSION + 1);
        fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        let err = read(&path).unwrap_err();
        assert!(
            matches!(err, ResultsError::SchemaNewer { found, .. } if found == u64::from(SCHEMA_VERSION) + 1),
            "{err:?}"
        );
        assert!(err.to_string().contains("newer exitlab"), "{err}");
        // A newer file may have any shape; the version is still reported.
        fs::write(&path, b"{\"schema_version\": 7, \"tests\": \"elsewhere\"}").unwrap();
        assert!(matches!(
            read(&path),
            Err(ResultsError::SchemaNewer { found: 7, .. })
        ));
        // Version 1 (no per-round figures) is still read.
        let mut v1 = serde_json::to_value(sample_results()).unwrap();
        v1["schema_version"] = serde_json::json!(1);
        for t in v1["tests"].as_array_mut().unwrap() {
            let t = t.as_object_mut().unwrap();
            t.remove("rounds");
            t.remove("net_percentiles");
        }
        for key in ["provenance", "incomplete", "ab"] {
            v1.as_object_mut().unwrap().remove(key);
        }
        v1["config"].as_object_mut().unwrap().remove("knobs");
        fs::write(&path, serde_json::to_vec(&v1).unwrap()).unwrap();
        let old = read(&path).unwrap();
        assert_eq!(old.schema_version, 1);
        assert!(old.tests[0].rounds.is_empty() && old.provenance.is_none());
        fs::write(&path, b"{\"schema_version\": 0}").unwrap();
        let err = read(&path).unwrap_err();
        assert!(
            matches!(err, ResultsError::SchemaOlder { found: 0, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("older exitlab"), "{err}");
    }

    #[test]
    fn optional_fields_may_be_absent() {
        let mut v = serde_json::to_value(sample_results()).unwrap();
        let t = v["tests"][1].as_object_mut().unwrap();
        for key in [
            "exits",
            "median_ns_is_net",
            "phases",
            "raw_samples",
            "kvm_exits",
        ] {
            t.remove(key);
        }
        v.as_object_mut().unwrap().remove("notes");
        let r: Results = serde_json::from_value(v).unwrap();
        assert!(r.notes.is_empty());
        assert!(r.tests[1].exits.is_empty());
    }

    #[test]
    fn injected_waits_are_written_only_with_the_knob_on() {
        let off = serde_json::to_value(ok_test("inl_from_user", 100.0)).unwrap();
        assert!(off.get("injected").is_none(), "{off}");
        let waits = exitlab_counts::InjectedWaits {
            waits: 40,
            spun: 40 * 2_000_500,
            min: 2_000_010,
            max: 2_003_000,
            ..Default::default()
        };
        let on = TestResult {
            injected: Some(waits),
            ..ok_test("inl_from_user", 100.0)
        };
        let v = serde_json::to_value(&on).unwrap();
        assert_eq!(v["injected"]["waits"], 40);
        assert_eq!(v["injected"]["max"], 2_003_000);
        let back: TestResult = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back.injected, Some(waits));
        // A file written before exits were left without a wait to calibrate (and before
        // the calibrations were counted) still loads.
        let mut old = v;
        for field in ["unwaited", "in_situ", "in_situ_unused", "in_situ_cut"] {
            assert!(old["injected"].get(field).is_some(), "{field}");
            old["injected"].as_object_mut().unwrap().remove(field);
        }
        let back: TestResult = serde_json::from_value(old).unwrap();
        assert_eq!(back.injected, Some(waits));
    }
}
