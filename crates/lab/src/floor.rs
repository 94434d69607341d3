//! The overhead experiment's headline: exitlab as users run it against the independent
//! bare loop, each seen from the kernel's side.
//!
//! Both sides run the same guest, the harness kernel in its exits mode (`ins=N`: N
//! 32-bit `in` from port 0x1234, which nothing claims, so each is a userspace exit),
//! as separate processes: `exitlab run --serial none HARNESS --cmdline ins=N` (seccomp
//! filters on, as users run it) and `exitlab-floor HARNESS ins=N` (a C program that
//! shares no code with exitlab: see the `exitlab-floor` crate). Rounds alternate which
//! side goes first (A B, B A, ...), so that host drift affects both alike. Each run is
//! traced on its own tracefs instance (this process and what it forks), and the
//! userspace share of each `in` exit is the time from `kvm_userspace_exit` to the same
//! thread's next `ioctl(KVM_RUN)` entry, in cycles of the x86-tsc trace clock: the
//! method of `exitlab trace`. Each side's exits are checked against the count the guest
//! makes by construction.
//!
//! A third side, `exitlab-floor --seccomp HARNESS ins=N`, runs the bare loop under a
//! seccomp filter of one rule that allows everything, in the same rounds: what the
//! kernel charges any filtered thread per exit on the host, which exitlab's vCPU filter
//! pays too and no filter can avoid (docs/exit-path.md).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use exitlab_trace::{Capture, Session, SessionConfig};

use crate::rounds::{self, Ended, Flow, Order, Step};

use exitlab_results::results::{FloorComparison, FloorSide, FloorView};
use exitlab_results::stats::describe::{median, summarize};
use exitlab_results::trace_report::{user_exits, Target};

/// The port the harness's exits mode reads by default; nothing on exitlab's PC platform
/// claims it.
pub const PORT: u16 = 0x1234;
/// Rounds the overhead experiment runs by default.
pub const ROUNDS: u32 = 5;
/// `in` exits per run by default: 0.14-0.2 s a run on this project's hosts, where an
/// exit costs 20k-60k cycles, so that the three sides of five rounds take about as long
/// as two sides of 20,000 did; a side's figures pool 50,000 exits, whose p10 and median
/// the trace clock's steps (26 cycles here) resolve, not their number.
pub const EXITS_PER_RUN: u64 = 10_000;

/// How the comparison is measured, in words (recorded with the figures).
pub const METHOD: &str = "kernel view: kvm_userspace_exit -> the same thread's next ioctl(KVM_RUN) entry, x86-tsc trace clock";

/// What to run.
#[derive(Debug, Clone)]
pub struct FloorSetup {
    /// The exitlab executable (`exitlab run` is run as a separate process).
    pub exitlab: PathBuf,
    /// Options added after `exitlab run` (e.g. `--no-seccomp`).
    pub exitlab_args: Vec<String>,
    /// Rounds (each runs both sides once).
    pub rounds: u32,
    /// `in` exits the guest makes per run.
    pub exits_per_run: u64,
    /// Longest a single run may take before it is stopped and the comparison given up.
    pub run_timeout: Duration,
}

impl FloorSetup {
    /// The default experiment for the exitlab executable `exitlab`.
    pub fn new(exitlab: PathBuf) -> Self {
        FloorSetup {
            exitlab,
            exitlab_args: Vec::new(),
            rounds: ROUNDS,
            exits_per_run: EXITS_PER_RUN,
            run_timeout: Duration::from_secs(120),
        }
    }
}

/// One side of the experiment while it runs.
struct Side {
    label: &'static str,
    command: String,
    values: Vec<f64>,
    exits: u64,
    round_medians: Vec<f64>,
}

impl Side {
    fn new(label: &'static str, command: String) -> Self {
        Side {
            label,
            command,
            values: Vec::new(),
            exits: 0,
            round_medians: Vec::new(),
        }
    }

    /// One traced run of this side's `cmd`, checked and added to the side; returns the
    /// trace records lost. `floor`: the bare loop, which prints its own counts and the
    /// seccomp mode the kernel gave it (`Some(mode)`: the mode it must have run in).
    fn run(
        &mut self,
        cmd: &mut Command,
        floor: Option<u32>,
        setup: &FloorSetup,
        session: &mut Session,
    ) -> Result<u64, String> {
        let (cap, status, stderr) = traced_run(cmd, setup.run_timeout, session)
            .map_err(|e| format!("{}: {e}", self.label))?;
        let expected_status = if floor.is_some() { 0 } else { 1 };
        if status != Some(expected_status) {
            return Err(format!(
                "{} ended with {} instead of {expected_status} (the guest's debug-exit 0): {}",
                self.label,
                status.map_or("a signal".to_string(), |s| format!("exit status {s}")),
                stderr.trim()
            ));
        }
        if let Some(mode) = floor {
            let c = exitlab_floor::parse_counts(&stderr)
                .ok_or_else(|| format!("exitlab-floor printed no counts: {}", stderr.trim()))?;
            if c.seccomp != mode {
                return Err(format!(
                    "{} ran in seccomp mode {} where {mode} was asked",
                    self.label, c.seccomp
                ));
            }
            if c.ins != setup.exits_per_run {
                return Err(format!(
                    "exitlab-floor counted {} `in` exits where the guest makes {}",
                    c.ins, setup.exits_per_run
                ));
            }
        }
        let (n, times) = user_exits(&cap.records, "in", Target::Port(PORT));
        // Each run's own count, not only each side's total: a capture split in the wrong
        // place between two runs of one side would keep the total. Fewer with events lost
        // are the buffer's, counted in `lost`.
        if n > setup.exits_per_run || (n < setup.exits_per_run && cap.lost == 0) {
            return Err(format!(
                "{}: the trace of one run holds {n} `in` exits where the guest makes {}, and no event was lost: its capture was split in the wrong place",
                self.label, setup.exits_per_run
            ));
        }
        let values: Vec<f64> = times.into_iter().map(|c| c as f64).collect();
        self.exits += n;
        let m = median(&values);
        if m.is_finite() {
            self.round_medians.push(m);
        }
        self.values.extend(values);
        Ok(cap.lost)
    }

    fn finish(self, expected: u64) -> Result<FloorSide, String> {
        let user = summarize(&self.values).map_err(|e| {
            format!(
                "{}: no userspace time was traced ({e}); is raw_syscalls:sys_enter available?",
                self.label
            )
        })?;
        Ok(FloorSide {
            command: self.command,
            user,
            exits: self.exits,
            exits_expected: expected,
            round_medians: self.round_medians,
        })
    }
}

/// Runs the comparison. `cancelled` is asked between runs: `None` when it said stop.
/// A host without the kernel view (no tracefs, not root) or a side that failed gives
/// [`FloorView::NotMeasured`] with the reason.
pub fn compare(setup: &FloorSetup, cancelled: &dyn Fn() -> bool) -> Option<FloorView> {
    match compare_inner(setup, cancelled) {
        Ok(Some(c)) => Some(FloorView::Measured(Box::new(c))),
        Ok(None) => None,
        Err(reason) => Some(FloorView::NotMeasured { reason }),
    }
}

fn compare_inner(
    setup: &FloorSetup,
    cancelled: &dyn Fn() -> bool,
) -> Result<Option<FloorComparison>, String> {
    let floor = exitlab_floor::path()
        .map_err(|e| format!("cannot put the exitlab-floor program where it can run: {e}"))?;
    let guest = GuestFile::write()?;
    let cmdline = format!("ins={}", setup.exits_per_run);
    let mut exitlab_cmd = Command::new(&setup.exitlab);
    exitlab_cmd
        .arg("run")
        .args(&setup.exitlab_args)
        .args(["--serial", "none", "--timeout"])
        .arg(setup.run_timeout.as_secs().max(1).to_string())
        .arg(&guest.0)
        .arg("--cmdline")
        .arg(&cmdline);
    let mut floor_cmd = Command::new(&floor);
    floor_cmd.arg(&guest.0).arg(&cmdline);
    let mut filtered_cmd = Command::new(&floor);
    filtered_cmd.arg("--seccomp").arg(&guest.0).arg(&cmdline);
    let shown = |c: &Command| {
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| {
                let p = Path::new(a);
                if p == floor {
                    exitlab_floor::NAME.to_string()
                } else if p == guest.0 || p == setup.exitlab {
                    p.file_name().unwrap_or(a).to_string_lossy().into_owned()
                } else if a.to_string_lossy().contains(' ') {
                    format!("\"{}\"", a.to_string_lossy())
                } else {
                    a.to_string_lossy().into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut sides = [
        Side::new("exitlab-floor", shown(&floor_cmd)),
        Side::new("exitlab run", shown(&exitlab_cmd)),
        Side::new("exitlab-floor --seccomp", shown(&filtered_cmd)),
    ];
    let mut lost = 0;
    let rounds = setup.rounds.max(1);
    // One tracing session for every run, each run's capture taken at a checkpoint after
    // it ended: setting up and removing an instance took ~0.18 s, 2.7 s of the 15 runs.
    let mut session = Session::start(&SessionConfig {
        pids: own_threads(),
        follow_forks: true,
        buffer_kb: 8 << 10,
        ..SessionConfig::default()
    })
    .map_err(|e| format!("the kernel view is not available: {e}"))?;
    // A B C, then C B A, and so on (the driver of every interleaved experiment).
    let ended = rounds::run(
        rounds,
        sides.len(),
        Order::Alternate,
        None,
        |step| -> Result<Flow, String> {
            let Step::Side { side, .. } = step else {
                return Ok(Flow::Continue);
            };
            if cancelled() {
                return Ok(Flow::Stop);
            }
            let cmd = match side {
                0 => &mut floor_cmd,
                1 => &mut exitlab_cmd,
                _ => &mut filtered_cmd,
            };
            // The seccomp mode each floor must report: none, or a filter (2).
            let floor = [Some(0), None, Some(2)][side];
            lost += sides[side].run(cmd, floor, setup, &mut session)?;
            Ok(Flow::Continue)
        },
    )?;
    if ended != Ended::Completed {
        return Ok(None);
    }
    // What was traced after the last checkpoint is no run's.
    let _ = session.finish();
    let [f, e, filtered] = sides;
    let expected = setup.exits_per_run * u64::from(rounds);
    Ok(Some(
        FloorComparison::new(
            METHOD.to_string(),
            format!("harness (exits mode) {cmdline} port={PORT:#x}"),
            rounds,
            setup.exits_per_run,
            e.finish(expected)?,
            f.finish(expected)?,
            lost,
        )
        .with_filtered_floor(filtered.finish(expected)?),
    ))
}

/// The harness kernel written to a file both programs can load; removed when dropped.
struct GuestFile(PathBuf);

impl GuestFile {
    fn write() -> Result<GuestFile, String> {
        let p = std::env::temp_dir().join(format!("exitlab-harness-{}.elf", std::process::id()));
        std::fs::write(&p, exitlab_guest::HARNESS)
            .map_err(|e| format!("cannot write the harness kernel to {}: {e}", p.display()))?;
        Ok(GuestFile(p))
    }
}

impl Drop for GuestFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The threads of this process: a session on them that follows forks sees the children
/// this process starts.
fn own_threads() -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    if pids.is_empty() {
        pids.push(std::process::id());
    }
    pids
}

/// Runs `cmd` traced by `session` (whose threads include this one, so that it follows
/// the child); returns the run's capture (taken at a checkpoint after the child ended),
/// the exit status (`None` after a signal) and what the command wrote on standard error.
fn traced_run(
    cmd: &mut Command,
    timeout: Duration,
    session: &mut Session,
) -> Result<(Capture, Option<i32>, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    // What it writes on stderr is a few lines: read after it ends (a pipe holds 64 KiB).
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "did not end within {} s (stopped)",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for it failed: {e}")),
        }
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let cap = session
        .checkpoint()
        .map_err(|e| format!("reading the trace failed: {e}"))?;
    Ok((cap, status.code(), stderr))
}
