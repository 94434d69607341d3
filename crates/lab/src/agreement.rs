//! Agreement with an independent harness: exitlab's bench figures against the second
//! harness kernel (`exitlab_guest::HARNESS`), which times the same instructions another
//! way, on the same host, in interleaved rounds.
//!
//! The two methods differ on purpose:
//! - exitlab's lab kernel (64-bit) times every iteration on its own between
//!   `lfence; rdtsc; lfence` stamps; its figure is the median over samples minus the
//!   median of its empty loop (`net median`);
//! - the harness (32-bit protected mode, no paging, its own code) times a block of
//!   2^k iterations with one unfenced `rdtsc` pair and prints the total on COM1; its
//!   figure per block is (block − the median empty `dec; jnz` block) / 2^k, a **mean**
//!   over the block, and the table shows the median over blocks.
//!
//! A test agrees when the harness figure is within ±[`TOLERANCE`] of exitlab's net
//! median. Otherwise the table says which measured difference accounts for it:
//! - **operand reloads**: exitlab's timed loop loads the operands its `rdtsc` clobbers
//!   again in every iteration (one `mov` each); the harness times `<test>_reload`
//!   variants with exactly exitlab's instructions, and when that variant agrees the
//!   reloads are the difference;
//! - **guest mode**: where the host emulates guest ring 0, every emulated instruction
//!   costs what the emulator spends on it, and that depends on the guest's mode (the
//!   harness runs 32-bit with paging off, the lab kernel 64-bit with four-level
//!   paging). Both sides time their own two-instruction empty loop per iteration (the
//!   harness with 2^k and 2^(k+1) iterations, exitlab with batch 1 and
//!   [`LOOP_BATCH`]); the ratio of the two is the *mode factor*. When the harness's
//!   figure for exitlab's instructions lies between the mode factor and 1 (each
//!   ±[`TOLERANCE`]), the cheaper instructions of the harness's guest account for it;
//! - **batch**: when the harness figure agrees with exitlab's net **mean** instead (the
//!   test mean minus the loop mean), the gap is a mean over 2^k iterations, rare slow
//!   iterations included, against a median of single iterations.
//!
//! Anything else is reported as unexplained, with both empty loops beside it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Mutex};

use exitlab_vmm::machine::{self, MachineConfig, RunEnd, SerialOut};
use exitlab_vmm::Kvm;
use serde::Serialize;

use crate::bench::{self, BenchOptions, Progress};
use crate::catalogue::{self, TestDef};
use crate::rounds::{self, Flow, Order, Step};
use crate::runner::{RunError, RunParams};
use exitlab_results::format::{fmt_cycles, layout, Align};
use exitlab_results::results::{Results, TestStatus};
use exitlab_results::stats::describe::{summarize, Summary};

/// Largest relative difference that counts as agreement.
pub const TOLERANCE: f64 = 0.10;

/// The harness tests, named as exitlab's tests of the same instruction.
pub const HARNESS_TESTS: &[&str] = &[
    "cpuid",
    "inl_from_kernel",
    "outl_to_kernel",
    "inl_from_user",
    "outl_to_user",
    "rd_tsc_adjust_msr",
    "wr_tsc_adjust_msr",
];

/// The harness's empty-loop test.
pub const HARNESS_LOOP: &str = "loop";

/// The harness's empty loop with twice the iterations.
pub const HARNESS_LOOP_X2: &str = "loop_x2";

/// The batch of exitlab's second `loop_overhead` run, which with the batch-1 run gives
/// the cost of one iteration of its empty loop.
pub const LOOP_BATCH: u64 = 16;

/// What one harness run printed.
#[derive(Debug, Clone, PartialEq)]
pub struct HarnessRun {
    /// log2 of the iterations per block.
    pub k: u32,
    /// Blocks per test.
    pub reps: u32,
    /// Cycles of each block, by test, in rep order.
    pub blocks: BTreeMap<String, Vec<u64>>,
    /// Tests the harness skipped, with its reason.
    pub skipped: Vec<(String, String)>,
}

/// Parses the harness's serial output (see `crates/guest/harness/harness.c`), checking
/// that every test has one block per rep, in order.
pub fn parse_harness_output(text: &str) -> Result<HarnessRun, String> {
    let mut head = None;
    let mut blocks: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut ended = false;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["EXITLAB-HARNESS", "1", k, reps] => {
                let k = k.strip_prefix("k=").and_then(|v| v.parse().ok());
                let r = reps.strip_prefix("reps=").and_then(|v| v.parse().ok());
                match (k, r) {
                    (Some(k), Some(r)) if k <= 20 => head = Some((k, r)),
                    _ => return Err(format!("bad harness banner: {line}")),
                }
            }
            ["EXITLAB-HARNESS", ..] => return Err(format!("the harness refused: {line}")),
            ["T", name, rep, cycles] => {
                let rep: usize = rep.parse().map_err(|_| format!("bad rep in: {line}"))?;
                let c = cycles
                    .strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad cycle count in: {line}"))?;
                let v = blocks.entry(name.to_string()).or_default();
                if v.len() != rep {
                    return Err(format!(
                        "block {rep} of {name} out of order (expected {})",
                        v.len()
                    ));
                }
                v.push(c);
            }
            ["SKIP", name, why] => skipped.push((name.to_string(), why.replace('-', " "))),
            ["END"] => ended = true,
            _ => {}
        }
    }
    let (k, reps) = head.ok_or("no harness banner in the output")?;
    if !ended {
        return Err("the harness output has no END line (it stopped early)".into());
    }
    if let Some((name, v)) = blocks.iter().find(|(_, v)| v.len() != reps as usize) {
        return Err(format!("{name}: {} blocks, {reps} expected", v.len()));
    }
    if !blocks.contains_key(HARNESS_LOOP) {
        return Err("the harness output has no empty-loop blocks".into());
    }
    Ok(HarnessRun {
        k,
        reps,
        blocks,
        skipped,
    })
}

impl HarnessRun {
    /// Per-iteration cycles of `test` net of the empty loop, one value per block: the
    /// block minus the median empty-loop block of the same run (a median, so that a
    /// loop block the host interrupted does not drag the figures of its rep with it).
    pub fn net(&self, test: &str) -> Vec<f64> {
        let (Some(t), Some(l)) = (self.blocks.get(test), self.blocks.get(HARNESS_LOOP)) else {
            return Vec::new();
        };
        let loops: Vec<f64> = l.iter().map(|&c| c as f64).collect();
        let Ok(lm) = summarize(&loops) else {
            return Vec::new();
        };
        let n = (1u64 << self.k) as f64;
        t.iter().map(|&t| (t as f64 - lm.median) / n).collect()
    }

    /// Cycles of one iteration of the empty loop without the block's fixed cost (the
    /// `rdtsc` pair and the dispatch around it), one value per rep: (the `loop_x2`
    /// block − the `loop` block of the same rep) / 2^k. Empty when the harness did not
    /// time `loop_x2`.
    pub fn loop_step(&self) -> Vec<f64> {
        let (Some(l), Some(l2)) = (
            self.blocks.get(HARNESS_LOOP),
            self.blocks.get(HARNESS_LOOP_X2),
        ) else {
            return Vec::new();
        };
        let n = (1u64 << self.k) as f64;
        l.iter()
            .zip(l2)
            .map(|(&a, &b)| (b as f64 - a as f64) / n)
            .collect()
    }

    /// Per-iteration cycles of the empty loop, one value per block.
    pub fn loop_cycles(&self) -> Vec<f64> {
        let n = (1u64 << self.k) as f64;
        self.blocks
            .get(HARNESS_LOOP)
            .map(|v| v.iter().map(|&c| c as f64 / n).collect())
            .unwrap_or_default()
    }
}

/// Output sink shared with the serial device.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        exitlab_devices::lock(&self.0).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Boots the harness on exitlab's PC platform (as `exitlab run` does) with `cmdline`
/// and returns what it printed on COM1.
pub fn run_harness(kvm: &Arc<Kvm>, cmdline: &str, timeout_s: u64) -> Result<String, String> {
    let out = Captured::default();
    let cfg = MachineConfig {
        kernel: exitlab_guest::HARNESS.to_vec(),
        kernel_path: "exitlab-harness".into(),
        cmdline: cmdline.into(),
        initrd: None,
        cpus: 1,
        ram_bytes: 64 << 20,
        timeout: Some(std::time::Duration::from_secs(timeout_s)),
        serial: SerialOut::Writer(Box::new(out.clone())),
        serial_input: false,
        prefer_pvh: false,
        cancel: None,
        platform: Default::default(),
    };
    let report = machine::run(kvm.clone(), cfg).map_err(|e| format!("the harness: {e}"))?;
    let text = String::from_utf8_lossy(&exitlab_devices::lock(&out.0)).into_owned();
    match report.end {
        RunEnd::DebugExit(0) => Ok(text),
        other => Err(format!(
            "the harness did not end cleanly ({other:?}); it printed:\n{text}"
        )),
    }
}

/// Boots the harness with `cmdline` under the bare KVM_RUN loop (the floor of a
/// userspace exit: no bus and no device; port reads answer all ones, writes, the
/// harness's serial output included, are dropped) and waits until it halts after its
/// last write. For `exitlab trace` to measure the floor on the same guest as
/// `exitlab run` and other VMMs. The VM has no in-kernel irqchip, so that the final
/// HLT comes to userspace and ends the run (ports the in-kernel PIC would answer, such
/// as 0x4D0, come to userspace too).
pub fn run_harness_bare(kvm: &Arc<Kvm>, cmdline: &str, timeout_s: u64) -> Result<(), String> {
    use exitlab_vmm::builder::{MachineBuilder, VcpuSpec};
    use exitlab_vmm::vcpu::{Handler, HltPolicy, NoHook, VcpuConfig, VcpuStop};
    use exitlab_vmm::vm::VmConfig;
    const RAM: u64 = 64 << 20;
    let mut b = MachineBuilder::new(
        kvm.clone(),
        VmConfig {
            ram: exitlab_boot::layout::ram_regions(RAM)
                .into_iter()
                .map(|(a, l)| (a.0, l as u64))
                .collect(),
            irqchip: exitlab_vmm::vm::IrqChip::None,
            pit: false,
            ..VmConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let opts = exitlab_boot::BootOptions {
        kernel_path: "exitlab-harness".into(),
        cmdline: cmdline.into(),
        initrd: None,
        cpus: 1,
        ram_bytes: RAM,
        acpi: false,
        pm_timer_32bit: true,
        prefer_pvh: false,
    };
    let loaded = exitlab_boot::load(b.vm().memory().as_ref(), exitlab_guest::HARNESS, &opts)
        .map_err(|e| format!("cannot load the harness: {e}"))?;
    let spec = VcpuSpec {
        entry: Some(&loaded.entry),
        handler: Handler::Bare,
        ..VcpuSpec::new(VcpuConfig {
            id: 0,
            stamp_gpa: None,
            run_log: 0,
            doorbell_port: None,
            hlt: HltPolicy::Stop,
        })
    };
    b.add_vcpu(spec, NoHook).map_err(|e| e.to_string())?;
    let mut machine = b.start().map_err(|e| e.to_string())?;
    match machine.wait_for(0, std::time::Duration::from_secs(timeout_s)) {
        // The bare loop stops on any exit but port and MMIO accesses: here, the HLT.
        Some(f) if matches!(&f.stop, VcpuStop::Unexpected(w) if w.starts_with("Hlt")) => Ok(()),
        Some(f) => Err(format!("the harness stopped: {}", f.stop.describe())),
        // Dropping the machine stops the vCPU.
        None => Err(format!("the harness did not halt within {timeout_s} s")),
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct AgreeOptions {
    /// Interleaved rounds (harness, then exitlab's bench, per round).
    pub rounds: u32,
    /// log2 of the harness's iterations per block.
    pub k: u32,
    /// Harness blocks per test per round.
    pub reps: u32,
    /// exitlab bench parameters per round (samples per test per round, ...).
    pub params: RunParams,
    /// Stop a harness run after this many seconds.
    pub harness_timeout_s: u64,
}

/// One row of the agreement table.
#[derive(Debug, Clone, Serialize)]
pub struct AgreementRow {
    /// The test.
    pub test: String,
    /// Harness: net cycles per iteration, over all blocks of all rounds.
    pub harness: Option<Summary>,
    /// exitlab: the median over rounds of each round's net median.
    pub exitlab_net_median: Option<f64>,
    /// exitlab: the median over rounds of (test mean − loop mean).
    pub exitlab_net_mean: Option<f64>,
    /// Harness, the variant that reloads the operands in every iteration as exitlab's
    /// timed loop does (`<test>_reload`), where the harness has one.
    pub harness_reload: Option<Summary>,
    /// harness median / exitlab net median.
    pub ratio: Option<f64>,
    /// harness reload-variant median / exitlab net median.
    pub ratio_reload: Option<f64>,
    /// harness median / exitlab net mean.
    pub ratio_mean: Option<f64>,
    /// "agrees", "differs: ..." with the reason, or why there is no figure.
    pub verdict: String,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    /// One row per test.
    pub rows: Vec<AgreementRow>,
    /// The harness's empty loop, cycles per iteration.
    pub harness_loop: Option<Summary>,
    /// exitlab's loop_overhead median, over rounds.
    pub exitlab_loop: Option<f64>,
    /// The harness's empty loop per iteration without the block's fixed cost (from
    /// `loop_x2` − `loop`, one value per rep).
    pub harness_loop_step: Option<Summary>,
    /// exitlab's empty loop per iteration without the sample's brackets (from its
    /// batch-1 and batch-[`LOOP_BATCH`] runs), the median over rounds.
    pub exitlab_loop_step: Option<f64>,
    /// harness loop step / exitlab loop step: what the same instructions cost in the
    /// harness's guest against exitlab's.
    pub mode_factor: Option<f64>,
    /// Rounds, k, reps, samples.
    pub rounds: u32,
    /// log2 of the harness iterations per block.
    pub k: u32,
    /// Harness blocks per test per round.
    pub reps: u32,
    /// exitlab samples per test per round.
    pub samples: u64,
    /// Anything the reader must know.
    pub notes: Vec<String>,
}

fn within(ratio: Option<f64>) -> bool {
    // The epsilon keeps an exact 10 % (1.1 in binary is slightly above) inside.
    ratio.is_some_and(|r| (r - 1.0).abs() <= TOLERANCE + 1e-9)
}

/// Whether `ratio` lies between `factor` and 1 (either way round), each widened by the
/// tolerance.
fn between(ratio: Option<f64>, factor: Option<f64>) -> bool {
    match (ratio, factor) {
        (Some(r), Some(f)) => {
            r >= f.min(1.0) - TOLERANCE - 1e-9 && r <= f.max(1.0) + TOLERANCE + 1e-9
        }
        _ => false,
    }
}

/// The figures one row is decided from, cycles per iteration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// The harness's figure for the test.
    pub harness: Option<f64>,
    /// The harness's `<test>_reload` variant (exitlab's instructions), where the plain
    /// test's instructions differ from exitlab's.
    pub harness_reload: Option<f64>,
    /// exitlab's net median.
    pub net_median: Option<f64>,
    /// exitlab's net mean.
    pub net_mean: Option<f64>,
    /// The mode factor: harness empty-loop iteration / exitlab empty-loop iteration.
    pub mode_factor: Option<f64>,
    /// The harness's empty loop per iteration, block cost included.
    pub harness_loop: Option<f64>,
    /// exitlab's loop_overhead median.
    pub exitlab_loop: Option<f64>,
}

/// Decides a row from the figures: (harness / net median, harness / net mean, verdict).
pub fn verdict(f: &Figures) -> (Option<f64>, Option<f64>, String) {
    let r = ratio(f.harness, f.net_median);
    // The harness's figure for exitlab's own instructions.
    let same = ratio(f.harness_reload.or(f.harness), f.net_median);
    let rm = ratio(f.harness, f.net_mean);
    let reloads = if f.harness_reload.is_some() {
        "; exitlab's timed loop also loads the operands its rdtsc clobbers again in every iteration, so the harness's variant with exitlab's instructions is the one compared"
    } else {
        ""
    };
    let v = if f.harness.is_none() {
        "no harness figure".to_string()
    } else if f.net_median.is_none() {
        "no exitlab figure".to_string()
    } else if within(r) {
        "agrees".to_string()
    } else if f.harness_reload.is_some() && within(same) {
        "differs: operand reloads (exitlab's timed loop loads the instruction's operands again in every iteration, because its rdtsc clobbers them; the harness's variant that does the same agrees; each is one more instruction, emulated where the host emulates guest ring 0)".to_string()
    } else if between(same, f.mode_factor) {
        format!(
            "differs: guest mode (the harness's guest, 32-bit with paging off, runs the same empty loop at {:.2}x the cost per iteration of exitlab's 64-bit guest with paging on, and its figure for exitlab's instructions lies between that factor and 1: where the host emulates guest ring 0, each instruction costs what its emulation costs in the guest's mode{reloads})",
            f.mode_factor.unwrap_or(f64::NAN)
        )
    } else if within(rm) {
        "differs: batch (the harness's mean over 2^k iterations agrees with exitlab's net mean; exitlab's median of single iterations leaves out the slow ones)".to_string()
    } else {
        format!(
            "differs, unexplained: neither exitlab's instructions in the harness, nor the mode factor ({}), nor the batch account for it; the empty loops each side subtracts are {} cycles per iteration in the harness (unfenced dec/jnz, 32-bit, paging off) and {} in exitlab (fenced rdtsc pairs, 64-bit, paging on)",
            f.mode_factor.map_or("-".into(), |m| format!("{m:.2}")),
            f.harness_loop.map_or("-".into(), fmt_cycles),
            f.exitlab_loop.map_or("-".into(), fmt_cycles)
        )
    };
    (r, rm, v)
}

/// `a / b`, when both exist and `b` is positive.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// exitlab's `loop_overhead` median per iteration in one run.
fn loop_median(res: &Results) -> Option<f64> {
    res.tests
        .iter()
        .find(|t| t.name == catalogue::baseline().name && t.status == TestStatus::Ok)
        .and_then(|t| t.cycles.as_ref())
        .map(|s| s.median)
}

/// One iteration of an empty loop without the fixed cost around it, from its median
/// per iteration at batch 1 (`one`) and at `batch` (`many`): the sample at `batch`
/// holds `batch` iterations and the same brackets as the sample at 1.
pub fn loop_step(one: f64, many: f64, batch: u64) -> Option<f64> {
    (batch > 1).then(|| (many * batch as f64 - one) / (batch - 1) as f64)
}

fn net_mean(res: &Results, test: &str) -> Option<f64> {
    let mean = |name: &str| {
        res.tests
            .iter()
            .find(|t| t.name == name && t.status == TestStatus::Ok)
            .and_then(|t| t.cycles.as_ref())
            .map(|s| s.mean)
    };
    Some(mean(test)? - mean(catalogue::baseline().name)?)
}

/// exitlab's side of one round: the bench on `tests` (one round), and the empty loop
/// alone again at [`LOOP_BATCH`] iterations per sample.
fn exitlab_round(
    kvm: &Arc<Kvm>,
    image: &[u8],
    tests: &[&'static TestDef],
    params: RunParams,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(Results, Results), RunError> {
    let opts = |tests: Vec<&'static TestDef>, params: RunParams| BenchOptions {
        tests,
        params,
        raw: false,
        overhead: false,
        floor: None,
        rounds: 1,
        precision: None,
        cancel: None,
        knobs: Default::default(),
        // Only totals are compared here; phases are not reported.
        phases_off: None,
    };
    let one = bench::run(
        kvm,
        image,
        &opts(tests.to_vec(), params),
        serde_json::Value::Null,
        Vec::new(),
        progress,
    )?;
    let many = bench::run(
        kvm,
        image,
        &opts(
            tests[..1].to_vec(),
            RunParams {
                batch: LOOP_BATCH,
                ..params
            },
        ),
        serde_json::Value::Null,
        Vec::new(),
        progress,
    )?;
    Ok((one, many))
}

/// Runs the comparison: per round, the harness once (all tests interleaved inside it),
/// then exitlab's bench on the same tests (one round each).
pub fn run(
    kvm: &Arc<Kvm>,
    image: &[u8],
    opts: &AgreeOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Agreement, RunError> {
    let mut c = Collected::default();
    let tests: Vec<_> = std::iter::once(catalogue::baseline())
        .chain(HARNESS_TESTS.iter().filter_map(|t| catalogue::find(t)))
        .collect();
    let cmdline = format!("k={} reps={}", opts.k, opts.reps);
    // Per round, the harness (side 0), then exitlab's bench (side 1), in that order.
    let total = opts.rounds.max(1);
    rounds::run(
        total,
        2,
        Order::Fixed,
        None,
        |step| -> Result<Flow, RunError> {
            match step {
                Step::Round(round) => progress(Progress::Round(round, total)),
                Step::Side { round, side: 0 } => {
                    progress(Progress::Start("second harness"));
                    match run_harness(kvm, &cmdline, opts.harness_timeout_s)
                        .and_then(|t| parse_harness_output(&t))
                    {
                        Ok(h) => {
                            progress(Progress::Done("second harness", &TestStatus::Ok));
                            c.harness.push(h);
                        }
                        Err(e) => {
                            let st = TestStatus::Failed { reason: e.clone() };
                            progress(Progress::Done("second harness", &st));
                            c.notes.push(format!("round {round}: {e}"));
                        }
                    }
                }
                Step::Side { .. } => {
                    let (one, many) = exitlab_round(kvm, image, &tests, opts.params, progress)?;
                    c.bench.push(one);
                    c.loop_batch.push(many);
                }
            }
            Ok(Flow::Continue)
        },
    )?;
    Ok(c.agreement(opts))
}

/// What the rounds of [`run`] collected.
#[derive(Default)]
struct Collected {
    /// The second harness's runs, one per round that it completed.
    harness: Vec<HarnessRun>,
    /// exitlab's bench, one per round.
    bench: Vec<Results>,
    /// exitlab's empty loop at [`LOOP_BATCH`] iterations per sample, one per round.
    loop_batch: Vec<Results>,
    /// What went wrong in which round.
    notes: Vec<String>,
}

impl Collected {
    /// The harness's samples of `f`, pooled over its runs.
    fn pooled(&self, f: &dyn Fn(&HarnessRun) -> Vec<f64>) -> Vec<f64> {
        self.harness.iter().flat_map(f).collect()
    }

    /// The median over exitlab's rounds of `f`, the rounds that have it.
    fn over_rounds(&self, f: &dyn Fn(&Results) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.bench.iter().filter_map(f).collect();
        summarize(&v).ok().map(|s| s.median)
    }

    /// The agreement of the rounds: both empty loops, the guest-mode factor between
    /// them, and one row per test.
    fn agreement(self, opts: &AgreeOptions) -> Agreement {
        let harness_loop = summarize(&self.pooled(&|h| h.loop_cycles())).ok();
        let exitlab_loop = self.over_rounds(&|r| loop_median(r));
        let harness_loop_step = summarize(&self.pooled(&|h| h.loop_step())).ok();
        let steps: Vec<f64> = self
            .bench
            .iter()
            .zip(&self.loop_batch)
            .filter_map(|(one, many)| loop_step(loop_median(one)?, loop_median(many)?, LOOP_BATCH))
            .collect();
        let exitlab_loop_step = summarize(&steps).ok().map(|s| s.median);
        let mode_factor = ratio(
            harness_loop_step.as_ref().map(|s| s.median),
            exitlab_loop_step,
        );
        let h_loop = harness_loop.as_ref().map(|s| s.median);
        Agreement {
            rows: HARNESS_TESTS
                .iter()
                .map(|t| self.row(t, h_loop, exitlab_loop, mode_factor))
                .collect(),
            harness_loop,
            exitlab_loop,
            harness_loop_step,
            exitlab_loop_step,
            mode_factor,
            rounds: opts.rounds.max(1),
            k: opts.k,
            reps: opts.reps,
            samples: opts.params.samples,
            notes: self.notes,
        }
    }

    /// Test `test`'s row, given the medians of the harness's and exitlab's empty loops
    /// and the guest-mode factor between them.
    fn row(
        &self,
        test: &str,
        harness_loop: Option<f64>,
        exitlab_loop: Option<f64>,
        mode_factor: Option<f64>,
    ) -> AgreementRow {
        let harness = summarize(&self.pooled(&|h| h.net(test))).ok();
        let reload_name = format!("{test}_reload");
        let harness_reload = summarize(&self.pooled(&|h| h.net(&reload_name))).ok();
        let net_median = self.over_rounds(&|r| {
            r.tests
                .iter()
                .find(|t| t.name == test && t.status == TestStatus::Ok)
                .and_then(|t| t.net_median_cycles)
        });
        let nm = self.over_rounds(&|r| net_mean(r, test));
        let (ratio_median, ratio_mean, mut v) = verdict(&Figures {
            harness: harness.as_ref().map(|s| s.median),
            harness_reload: harness_reload.as_ref().map(|s| s.median),
            net_median,
            net_mean: nm,
            mode_factor,
            harness_loop,
            exitlab_loop,
        });
        if let Some((_, why)) = self
            .harness
            .iter()
            .flat_map(|h| &h.skipped)
            .find(|(n, _)| n == test)
        {
            v = format!("{v} (harness skipped it: {why})");
        }
        if let Some(t) = self
            .bench
            .iter()
            .flat_map(|r| &r.tests)
            .find(|t| t.name == test && !matches!(t.status, TestStatus::Ok))
        {
            v = format!("{v} (exitlab: {})", t.status.word());
        }
        AgreementRow {
            test: test.into(),
            harness,
            exitlab_net_median: net_median,
            exitlab_net_mean: nm,
            ratio: ratio_median,
            ratio_reload: ratio(harness_reload.as_ref().map(|s| s.median), net_median),
            harness_reload,
            ratio_mean,
            verdict: v,
        }
    }
}

impl Agreement {
    /// Renders the agreement table.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "agreement with the second harness: {} rounds interleaved; harness 2^{} iterations x {} blocks, exitlab {} samples, per test and round; net cycles per iteration",
            self.rounds, self.k, self.reps, self.samples
        );
        let fmt = |v: Option<f64>| v.map_or("-".into(), fmt_cycles);
        let ratio = |v: Option<f64>| v.map_or("-".into(), |r| format!("{r:.2}"));
        // A verdict's first words in its cell, the whole of a longer one under the table.
        let mut footnotes: Vec<String> = Vec::new();
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                let short = r.verdict.split([':', '(', ';']).next().unwrap_or("").trim();
                let cell = if short == r.verdict {
                    short.to_string()
                } else {
                    footnotes.push(format!(
                        "[{}] {}: {}",
                        footnotes.len() + 1,
                        r.test,
                        r.verdict
                    ));
                    format!("{short} [{}]", footnotes.len())
                };
                vec![
                    r.test.clone(),
                    fmt(r.harness.as_ref().map(|h| h.median)),
                    fmt(r.harness.as_ref().map(|h| h.p10)),
                    fmt(r.harness.as_ref().map(|h| h.p90)),
                    fmt(r.harness_reload.as_ref().map(|h| h.median)),
                    fmt(r.exitlab_net_median),
                    fmt(r.exitlab_net_mean),
                    ratio(r.ratio),
                    ratio(r.ratio_reload),
                    ratio(r.ratio_mean),
                    cell,
                ]
            })
            .collect();
        s.push_str(&layout(
            &[
                "test",
                "harness med",
                "harness p10",
                "harness p90",
                "harness reload med",
                "exitlab net med",
                "exitlab net mean",
                "ratio",
                "ratio (reload)",
                "ratio (mean)",
                "verdict",
            ],
            &[
                Align::Left,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Left,
            ],
            &rows,
        ));
        for f in &footnotes {
            let _ = writeln!(s, "{f}");
        }
        let _ = writeln!(
            s,
            "empty loop per iteration: harness {} (median over blocks), exitlab loop_overhead {} (median)",
            fmt(self.harness_loop.as_ref().map(|h| h.median)),
            fmt(self.exitlab_loop)
        );
        let _ = writeln!(
            s,
            "one iteration of the empty loop (two instructions, without the rdtsc brackets): harness {} (median over reps of (loop_x2 - loop) / 2^k), exitlab {} (batch {} against batch 1); mode factor (harness / exitlab) {}",
            fmt(self.harness_loop_step.as_ref().map(|h| h.median)),
            fmt(self.exitlab_loop_step),
            LOOP_BATCH,
            ratio(self.mode_factor)
        );
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        exitlab_results::format::wrap(&s, exitlab_results::format::MAX_LINE)
    }

    /// Whether every test with figures on both sides agrees within the tolerance.
    pub fn all_agree(&self) -> bool {
        self.rows.iter().all(|r| r.verdict == "agrees")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "EXITLAB-HARNESS 1 k=2 reps=2
SKIP wr_tsc_adjust_msr no-IA32_TSC_ADJUST-in-CPUID
T loop 0 0x10
T cpuid 0 0x50
T loop 1 0x14
T cpuid 1 0x64
END
";

    #[test]
    fn parses_harness_output_and_nets_per_rep() {
        let h = parse_harness_output(OUTPUT).expect("parses");
        assert_eq!((h.k, h.reps), (2, 2));
        assert_eq!(h.blocks["cpuid"], vec![0x50, 0x64]);
        // The median loop block is 0x12: (0x50 - 0x12) / 4 = 15.5, (0x64 - 0x12) / 4 = 20.5.
        assert_eq!(h.net("cpuid"), vec![15.5, 20.5]);
        assert_eq!(h.loop_cycles(), vec![4.0, 5.0]);
        assert!(h.net("inl_from_user").is_empty());
        assert_eq!(
            h.skipped,
            vec![(
                "wr_tsc_adjust_msr".to_string(),
                "no IA32_TSC_ADJUST in CPUID".to_string()
            )]
        );
    }

    #[test]
    fn refuses_truncated_or_disordered_output() {
        let no_end = OUTPUT.replace("END\n", "");
        assert!(parse_harness_output(&no_end)
            .unwrap_err()
            .contains("no END"));
        let missing = OUTPUT.replace("T cpuid 1 0x64\n", "");
        assert!(parse_harness_output(&missing)
            .unwrap_err()
            .contains("1 blocks, 2 expected"));
        let swapped = OUTPUT.replace("T cpuid 0", "T cpuid 1");
        assert!(parse_harness_output(&swapped)
            .unwrap_err()
            .contains("out of order"));
        assert!(
            parse_harness_output("EXITLAB-HARNESS error: k must be 0..20\nEND\n")
                .unwrap_err()
                .contains("refused")
        );
        assert!(parse_harness_output("T loop 0 zz\n").is_err());
    }

    #[test]
    fn loop_step_takes_the_fixed_cost_out() {
        let out = "EXITLAB-HARNESS 1 k=2 reps=2
T loop 0 0x64
T loop_x2 0 0x78
T loop 1 0x6e
T loop_x2 1 0x8c
END
";
        let h = parse_harness_output(out).expect("parses");
        // (120 - 100) / 4 and (140 - 110) / 4: the 4 extra iterations of each rep.
        assert_eq!(h.loop_step(), vec![5.0, 7.5]);
        assert!(parse_harness_output(OUTPUT)
            .expect("parses")
            .loop_step()
            .is_empty());
        // 1,000 cycles at batch 1, 250 per iteration at batch 16 (4,000 in all):
        // 15 more iterations cost 3,000, 200 each.
        assert_eq!(loop_step(1000.0, 250.0, 16), Some(200.0));
        assert_eq!(loop_step(1000.0, 1000.0, 1), None);
    }

    fn figs(harness: f64, net_median: f64) -> Figures {
        Figures {
            harness: Some(harness),
            net_median: Some(net_median),
            ..Figures::default()
        }
    }

    #[test]
    fn verdicts_follow_the_tolerance_and_name_the_difference() {
        let (r, _, v) = verdict(&Figures {
            net_mean: Some(130.0),
            ..figs(105.0, 100.0)
        });
        assert_eq!(v, "agrees");
        assert!((r.unwrap_or(0.0) - 1.05).abs() < 1e-12);
        // 10 % exactly still agrees; just above does not.
        assert_eq!(verdict(&figs(110.0, 100.0)).2, "agrees");
        assert!(verdict(&figs(110.5, 100.0))
            .2
            .starts_with("differs, unexplained"));
        let (_, rm, v) = verdict(&Figures {
            net_mean: Some(120.0),
            ..figs(125.0, 100.0)
        });
        assert!(v.starts_with("differs: batch"), "{v}");
        assert!((rm.unwrap_or(0.0) - 125.0 / 120.0).abs() < 1e-12);
        let v = verdict(&Figures {
            net_mean: Some(110.0),
            harness_loop: Some(2.0),
            exitlab_loop: Some(39.0),
            mode_factor: Some(0.8),
            ..figs(300.0, 100.0)
        })
        .2;
        assert!(v.starts_with("differs, unexplained"), "{v}");
        assert!(
            v.contains("(0.80)") && v.contains("are 2 cycles") && v.contains("and 39 in exitlab"),
            "{v}"
        );
        assert_eq!(
            verdict(&Figures {
                net_median: Some(1.0),
                ..Figures::default()
            })
            .2,
            "no harness figure"
        );
        assert_eq!(
            verdict(&Figures {
                harness: Some(1.0),
                ..Figures::default()
            })
            .2,
            "no exitlab figure"
        );
        // The reload variant agreeing names the operand reloads, ahead of the batch.
        let v = verdict(&Figures {
            harness_reload: Some(98.0),
            net_mean: Some(55.0),
            ..figs(50.0, 100.0)
        })
        .2;
        assert!(v.starts_with("differs: operand reloads"), "{v}");
        // A non-positive exitlab figure gives no ratio rather than a wrong sign.
        let (r, _, v) = verdict(&figs(5.0, -3.0));
        assert!(r.is_none() && v.starts_with("differs"));
    }

    #[test]
    fn the_mode_factor_explains_what_lies_between_it_and_one() {
        // The harness's guest runs the empty loop at 0.8x: 75 for exitlab's 100 lies
        // within 0.8 - 10 %; its reload variant is the figure compared.
        let m = |harness: f64, reload: Option<f64>| {
            verdict(&Figures {
                harness_reload: reload,
                mode_factor: Some(0.8),
                ..figs(harness, 100.0)
            })
            .2
        };
        let v = m(75.0, None);
        assert!(
            v.starts_with("differs: guest mode") && v.contains("0.80x"),
            "{v}"
        );
        assert!(!v.contains("operand"), "{v}");
        let v = m(50.0, Some(72.0));
        assert!(
            v.starts_with("differs: guest mode") && v.contains("operands"),
            "{v}"
        );
        // Below the factor's reach, or above 1 + 10 %, the mode does not explain it.
        assert!(m(69.0, None).starts_with("differs, unexplained"));
        assert!(m(50.0, Some(69.0)).starts_with("differs, unexplained"));
        assert!(m(111.0, None).starts_with("differs, unexplained"));
        // Without a factor there is no mode verdict.
        assert!(verdict(&figs(75.0, 100.0))
            .2
            .starts_with("differs, unexplained"));
        // A factor above 1 explains a harness figure between 1 and it.
        let v = verdict(&Figures {
            mode_factor: Some(1.3),
            ..figs(125.0, 100.0)
        })
        .2;
        assert!(v.starts_with("differs: guest mode"), "{v}");
    }
}
