//! Linux workloads as experiments (`exitlab bench --workload hackbench`): boots a Linux
//! kernel with exitlab's hackbench initramfs ([`exitlab_guest::hackbench`]) in a fresh VM
//! per round, and reports per run the time the guest measured, the wall time of the
//! boot, and the userspace exits by reason per vCPU. With an A/B knob (`apic`, `cpus`,
//! `pv-ipi`) the two sides alternate A B, B A, ... round by round, and the change of the
//! guest-measured time B vs A gets a 95 % interval and a verdict from
//! [`exitlab_results::verdict`], paired by round, as the seeds' hackbench tables ask for.
//!
//! A kernel that never reaches the workload (this host's KVM emulates guest ring 0 and
//! Linux dies early, for example) stops the experiment at its first boot, which says how
//! Linux ended and shows the console's last lines.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exitlab_guest::hackbench::{self, Params};
use exitlab_vmm::cpuid::CpuidBit;

use crate::knobs::{self, Setting};
use crate::rounds::{self, Ended, Flow, Order, Step};
use exitlab_vmm::machine::{self, MachineConfig, PlatformOptions, RunEnd, SerialOut};
use exitlab_vmm::vcpu::ExitCounts;
use exitlab_vmm::Kvm;
use serde::Serialize;

use exitlab_results::stats::{describe::median, interval, verdict};

/// The workloads `--workload` knows.
pub const WORKLOADS: &[&str] = &["hackbench"];

/// KVM_FEATURE_PV_SEND_IPI: CPUID 0x40000001 EAX bit 11.
const PV_SEND_IPI: CpuidBit = CpuidBit {
    function: 0x4000_0001,
    index: 0,
    reg: 0,
    bit: 11,
};

/// How a side of the experiment sets up the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setup {
    /// vCPUs.
    pub cpus: u32,
    /// `xapic` (x2APIC hidden from the guest's CPUID, so Linux drives the LAPIC through
    /// MMIO) or `x2apic` (offered, so Linux uses the MSRs).
    pub apic: String,
    /// Whether KVM's PV send-IPI feature is left in the guest CPUID (`false`: cleared).
    pub pv_ipi: bool,
}

impl Setup {
    /// `cpus=8 apic=x2apic pv-ipi=on`.
    pub fn describe(&self) -> String {
        format!(
            "cpus={} apic={} pv-ipi={}",
            self.cpus,
            self.apic,
            if self.pv_ipi { "on" } else { "off" }
        )
    }

    /// This setup with `knob` (`apic`, `cpus`, `pv-ipi`) set to `value`, parsed by the
    /// knob registry ([`crate::knobs`]): the same names, limits and messages as bench.
    /// A KVM module parameter (`MODULE.PARAM`) changes the host, not the setup: the same
    /// setup, once the value is one the kernel can take.
    pub fn with(&self, knob: &str, value: &str) -> Result<Setup, String> {
        let mut s = self.clone();
        if knob.contains('.') {
            let spec = exitlab_host::ParamSpec::parse(knob).map_err(|e| e.to_string())?;
            spec.check_value(value).map_err(|e| e.to_string())?;
            return Ok(s);
        }
        let refuse = || {
            format!("--ab {knob}: a workload can vary apic, cpus, pv-ipi or a KVM module parameter (MODULE.PARAM)")
        };
        if !WORKLOAD_KNOBS.contains(&knob) {
            return Err(refuse());
        }
        match knobs::parse(knob, value)? {
            Setting::Apic(a) => s.apic = a.name().to_string(),
            Setting::Cpus(n) => s.cpus = n,
            Setting::PvIpi(Some(on)) => s.pv_ipi = on,
            _ => return Err(refuse()),
        }
        Ok(s)
    }
}

/// The knobs a workload experiment can set.
pub const WORKLOAD_KNOBS: &[&str] = &["apic", "cpus", "pv-ipi"];

/// The A/B knob of a workload experiment: `KNOB=A,B`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadAb {
    /// `apic`, `cpus` or `pv-ipi`.
    pub knob: String,
    /// Side A's value.
    pub a: String,
    /// Side B's value.
    pub b: String,
}

/// Parses `KNOB=A,B` for a workload.
pub fn parse_ab(spec: &str, base: &Setup) -> Result<WorkloadAb, String> {
    let (knob, a, b) = crate::knobs::split_ab(spec, "apic=xapic,x2apic")?;
    base.with(knob, &a)?;
    base.with(knob, &b)?;
    Ok(WorkloadAb {
        knob: knob.to_string(),
        a,
        b,
    })
}

/// What to run.
pub struct WorkloadOptions {
    /// The Linux kernel image (bzImage or vmlinux) and its path, for messages.
    pub kernel: Vec<u8>,
    /// Its path.
    pub kernel_path: PathBuf,
    /// Guest RAM in bytes.
    pub ram_bytes: u64,
    /// The hackbench load.
    pub params: Params,
    /// The guest setup (side A's, and B's but for the A/B knob).
    pub setup: Setup,
    /// The A/B knob, if any.
    pub ab: Option<WorkloadAb>,
    /// Rounds (boots per side).
    pub rounds: u32,
    /// Longest one boot may take.
    pub boot_timeout: Duration,
    /// Words added to the kernel command line.
    pub extra_cmdline: String,
    /// Set from outside (SIGINT, --timeout) to stop after the boot running.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Threshold of the verdict, in percent.
    pub threshold_pct: f64,
}

/// Userspace exits of one vCPU of a boot.
#[derive(Debug, Clone, Serialize)]
pub struct VcpuRun {
    /// vCPU index.
    pub vcpu: u32,
    /// Userspace exits by reason.
    pub exits: ExitCounts,
    /// KVM's count of all exits of the vCPU, where the host has binary stats.
    pub kvm_exits: Option<u64>,
}

/// One boot.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadRun {
    /// Round, from 1.
    pub round: u32,
    /// `A` or `B` with an A/B knob, else `-`.
    pub side: char,
    /// The guest's setup.
    pub setup: Setup,
    /// Seconds the guest measured from releasing the senders to the last process ending.
    pub seconds: Option<f64>,
    /// Messages moved, CPUs hackbench ran on, processes that failed.
    pub messages: Option<u64>,
    /// CPUs the workload could run on inside the guest.
    pub guest_cpus: Option<u32>,
    /// Processes that did not finish their share.
    pub failed: Option<u64>,
    /// Why there is no result, when there is none.
    pub no_result: Option<String>,
    /// How the boot ended.
    pub ended: String,
    /// Wall time of the guest run, seconds.
    pub wall_s: f64,
    /// Userspace exits by reason, all vCPUs.
    pub exits: ExitCounts,
    /// The same per vCPU.
    pub per_vcpu: Vec<VcpuRun>,
    /// KVM's count of all exits, all vCPUs.
    pub kvm_exits: Option<u64>,
}

/// The experiment's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResults {
    /// Schema of this JSON document.
    pub schema_version: u32,
    /// `hackbench`.
    pub workload: String,
    /// The load, as the kernel command line gives it to the program.
    pub params: String,
    /// Messages one run moves.
    pub messages: u64,
    /// The kernel image booted.
    pub kernel: String,
    /// Guest RAM, MiB.
    pub mem_mib: u64,
    /// Side A's setup (and B's, but for the knob).
    pub setup: Setup,
    /// The A/B knob.
    pub ab: Option<WorkloadAb>,
    /// Every boot, in the order run.
    pub runs: Vec<WorkloadRun>,
    /// B vs A of the guest-measured time, paired by round.
    pub change: Option<verdict::Change>,
    /// With a knob that changes the host: what each boot ran with.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<exitlab_results::results::HostSide>,
    /// Why the experiment stopped early, if it did.
    pub incomplete: Option<String>,
}

/// A failed setup of a boot (the host refused the VM, the image could not be loaded).
#[derive(Debug, thiserror::Error)]
#[error("boot {round}{side}: {source}")]
pub struct WorkloadError {
    round: u32,
    side: String,
    #[source]
    source: BootFailure,
}

/// What stopped a boot from being set up.
#[derive(Debug, thiserror::Error)]
pub enum BootFailure {
    /// The machine could not be built.
    #[error(transparent)]
    Machine(#[from] machine::MachineError),
    /// A host knob's switch failed, or /dev/kvm could not be opened again after it.
    #[error(transparent)]
    Host(#[from] crate::runner::RunError),
}

/// The console of a boot: the workload's lines, and the last 4 KiB for the message when
/// the workload never ran (bounded: Linux may print a lot).
#[derive(Clone, Default)]
struct Console(Arc<Mutex<ConsoleState>>);

#[derive(Default)]
struct ConsoleState {
    line: Vec<u8>,
    workload_lines: String,
    tail: std::collections::VecDeque<u8>,
}

const TAIL_BYTES: usize = 4096;
const LINE_MAX: usize = 512;

impl Write for Console {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut st = exitlab_devices::lock(&self.0);
        for &c in b {
            if st.tail.len() == TAIL_BYTES {
                st.tail.pop_front();
            }
            st.tail.push_back(c);
            if c == b'\n' {
                let line = String::from_utf8_lossy(&st.line).into_owned();
                if line.contains("exitlab-hackbench: ") && st.workload_lines.len() < 64 * 1024 {
                    st.workload_lines.push_str(&line);
                    st.workload_lines.push('\n');
                }
                st.line.clear();
            } else if st.line.len() < LINE_MAX {
                st.line.push(c);
            }
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Console {
    fn workload_lines(&self) -> String {
        exitlab_devices::lock(&self.0).workload_lines.clone()
    }

    fn tail(&self) -> String {
        let st = exitlab_devices::lock(&self.0);
        let bytes: Vec<u8> = st.tail.iter().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// How a boot ended, in words.
fn ended(end: &RunEnd) -> String {
    match end {
        RunEnd::DebugExit(0) => "the workload powered off (debug-exit 0)".into(),
        RunEnd::DebugExit(v) => format!("the workload reported a failure (debug-exit {v})"),
        RunEnd::Reset => "the guest reset or shut down".into(),
        RunEnd::TripleFault { vcpu, .. } => format!("vCPU {vcpu} triple-faulted"),
        RunEnd::Timeout { .. } => "the boot time limit expired".into(),
        RunEnd::Cancelled => "interrupted".into(),
        RunEnd::Failure { vcpu, what, .. } => format!("vCPU {vcpu}: {what}"),
        RunEnd::Stopped(why) => format!("every vCPU stopped ({why})"),
    }
}

/// Boots the kernel once with `setup`.
fn one_boot(
    kvm: &Arc<Kvm>,
    opts: &WorkloadOptions,
    setup: &Setup,
    round: u32,
    side: char,
) -> Result<(WorkloadRun, String), WorkloadError> {
    let console = Console::default();
    let mut clear = Vec::new();
    if setup.apic == "xapic" {
        clear.extend(exitlab_vmm::cpuid::feature("x2apic"));
    }
    if !setup.pv_ipi {
        clear.push(PV_SEND_IPI);
    }
    let cfg = MachineConfig {
        kernel: opts.kernel.clone(),
        kernel_path: opts.kernel_path.display().to_string(),
        cmdline: format!("console=ttyS0 {} {}", opts.params, opts.extra_cmdline)
            .trim_end()
            .to_string(),
        initrd: Some(hackbench::INITRD.to_vec()),
        cpus: setup.cpus,
        ram_bytes: opts.ram_bytes,
        timeout: Some(opts.boot_timeout),
        serial: SerialOut::Writer(Box::new(console.clone())),
        serial_input: false,
        prefer_pvh: true,
        cancel: opts.cancel.clone(),
        platform: PlatformOptions {
            cpu: exitlab_vmm::cpuid::CpuTemplate {
                remove: clear,
                ..Default::default()
            },
            ..PlatformOptions::default()
        },
    };
    let report = machine::run(kvm.clone(), cfg).map_err(|source| WorkloadError {
        round,
        side: if side == '-' {
            String::new()
        } else {
            side.to_string()
        },
        source: source.into(),
    })?;
    let outcome = hackbench::parse(&console.workload_lines());
    let run = WorkloadRun {
        round,
        side,
        setup: setup.clone(),
        seconds: outcome.as_ref().ok().map(|o| o.seconds),
        messages: outcome.as_ref().ok().map(|o| o.messages),
        guest_cpus: outcome.as_ref().ok().map(|o| o.cpus),
        failed: outcome.as_ref().ok().map(|o| o.failed),
        no_result: outcome.as_ref().err().map(|e| e.to_string()),
        ended: ended(&report.end),
        wall_s: report.run_time.as_secs_f64(),
        exits: report.exits,
        per_vcpu: report
            .per_vcpu
            .iter()
            .map(|v| VcpuRun {
                vcpu: v.vcpu,
                exits: v.user,
                kvm_exits: v.kvm_exits,
            })
            .collect(),
        kvm_exits: report.kvm_exits,
    };
    Ok((run, console.tail()))
}

/// Runs the experiment. `progress` hears of each boot as it ends. With a knob that
/// changes the host (`host_switch`), its value is switched before each boot whose value
/// differs from the boot before, with `kvm` (the only handle this process holds) closed
/// around the switch; what each boot ran with is in `host`.
pub fn run(
    kvm: Arc<Kvm>,
    opts: &WorkloadOptions,
    mut host_switch: Option<&mut dyn crate::host_knob::HostSwitch>,
    progress: &mut dyn FnMut(&WorkloadRun),
) -> Result<WorkloadResults, WorkloadError> {
    let mut handle = crate::host_knob::KvmHandle::new(kvm);
    let mut in_force: Option<String> = None;
    let sides: Vec<(char, Setup)> = match &opts.ab {
        None => vec![('-', opts.setup.clone())],
        Some(ab) => vec![
            (
                'A',
                opts.setup
                    .with(&ab.knob, &ab.a)
                    .unwrap_or(opts.setup.clone()),
            ),
            (
                'B',
                opts.setup
                    .with(&ab.knob, &ab.b)
                    .unwrap_or(opts.setup.clone()),
            ),
        ],
    };
    let mut out = WorkloadResults {
        schema_version: 1,
        workload: "hackbench".into(),
        params: opts.params.to_string(),
        messages: opts.params.messages(),
        kernel: opts.kernel_path.display().to_string(),
        mem_mib: opts.ram_bytes >> 20,
        setup: opts.setup.clone(),
        ab: opts.ab.clone(),
        runs: Vec::new(),
        change: None,
        incomplete: None,
        host: Vec::new(),
    };
    // A B, then B A, ...: neither side always runs first.
    let ended = rounds::run(
        opts.rounds,
        sides.len(),
        Order::Alternate,
        opts.cancel.as_deref(),
        |step| -> Result<Flow, WorkloadError> {
            let Step::Side { round, side } = step else {
                return Ok(Flow::Continue);
            };
            let (side, setup) = &sides[side];
            if let (Some(sw), Some(ab)) = (host_switch.as_mut(), &opts.ab) {
                let value = if *side == 'A' { &ab.a } else { &ab.b };
                let switch = in_force.as_deref() != Some(value.as_str());
                let rec = handle
                    .switch(
                        &mut **sw,
                        value,
                        round,
                        &side.to_ascii_lowercase().to_string(),
                        switch,
                    )
                    .map_err(|e| WorkloadError {
                        round,
                        side: side.to_string(),
                        source: crate::runner::RunError::HostSwitch(e).into(),
                    })?;
                in_force = Some(value.clone());
                out.host.push(rec);
            }
            let kvm = handle.get().map_err(|e| WorkloadError {
                round,
                side: side.to_string(),
                source: e.into(),
            })?;
            let (r, tail) = one_boot(&kvm, opts, setup, round, *side)?;
            drop(kvm);
            progress(&r);
            let never_started = r.no_result.is_some() && r.seconds.is_none();
            let why = r.no_result.clone();
            let ended = r.ended.clone();
            out.runs.push(r);
            if !never_started {
                return Ok(Flow::Continue);
            }
            let console = if tail.trim().is_empty() {
                "Linux printed nothing on ttyS0 (its messages before the serial console \
                 registers are buffered: --append earlyprintk=ttyS0 shows them)"
                    .to_string()
            } else {
                format!("the last console lines were:\n{}", tail.trim_end())
            };
            out.incomplete = Some(format!(
                "stopped: {} ({ended}); {console}",
                why.unwrap_or_default()
            ));
            Ok(Flow::Stop)
        },
    )?;
    if let Ended::Cancelled { round } = ended {
        out.incomplete = Some(format!(
            "interrupted during round {round} of {}: kept the {} boot(s) that ended",
            opts.rounds,
            out.runs.len()
        ));
    }
    if out.ab.is_some() && out.incomplete.is_none() {
        let side = |s: char| -> Vec<f64> {
            out.runs
                .iter()
                .filter(|r| r.side == s)
                .map(|r| r.seconds.unwrap_or(f64::NAN))
                .collect()
        };
        out.change = Some(pair_change(&side('A'), &side('B'), opts.threshold_pct));
    }
    Ok(out)
}

/// B vs A of the workload's times, round by round (the pairs of boots).
fn pair_change(a: &[f64], b: &[f64], threshold_pct: f64) -> verdict::Change {
    verdict::judge(
        [median(a), median(b)],
        interval::pairs(a, b),
        interval::Unit::Pair,
        threshold_pct,
    )
}

/// Whether every boot ran the workload to the end with no failed process.
pub fn all_completed(r: &WorkloadResults) -> bool {
    !r.runs.is_empty()
        && r.incomplete.is_none()
        && r.runs
            .iter()
            .all(|x| x.seconds.is_some() && x.failed == Some(0))
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The text report: one line per boot, then per side the mean and median time, and with
/// an A/B knob the seeds' `Time` / `%Reduction` table and the verdict.
pub fn render(r: &WorkloadResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} ({} messages per run); kernel {}; {} MiB; {}{}",
        r.workload,
        r.params,
        r.messages,
        r.kernel,
        r.mem_mib,
        r.setup.describe(),
        r.ab.as_ref()
            .map(|ab| format!("; A/B {}: A={} B={}", ab.knob, ab.a, ab.b))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "{:>5}  {:>4}  {:<30}  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  ended",
        "round", "side", "setup", "time (s)", "wall (s)", "user exits", "io", "mmio"
    );
    for x in &r.runs {
        let _ = writeln!(
            s,
            "{:>5}  {:>4}  {:<30}  {:>10}  {:>8.2}  {:>10}  {:>10}  {:>10}  {}",
            x.round,
            x.side,
            x.setup.describe(),
            x.seconds.map_or("-".into(), |v| format!("{v:.4}")),
            x.wall_s,
            x.exits.total(),
            x.exits.io_in + x.exits.io_out,
            x.exits.mmio_read + x.exits.mmio_write,
            x.no_result
                .as_ref()
                .map_or(x.ended.clone(), |n| format!("{}; {n}", x.ended))
        );
    }
    let sides: &[char] = if r.ab.is_some() { &['A', 'B'] } else { &['-'] };
    let times = |side: char| -> Vec<f64> {
        r.runs
            .iter()
            .filter(|x| x.side == side)
            .filter_map(|x| x.seconds)
            .collect()
    };
    for &side in sides {
        let t = times(side);
        if let Some(m) = mean(&t) {
            let mut sorted = t.clone();
            sorted.sort_by(f64::total_cmp);
            let _ = writeln!(
                s,
                "{}: mean {m:.4} s, median {:.4} s over {} run(s)",
                if side == '-' {
                    "time".to_string()
                } else {
                    format!("side {side}")
                },
                exitlab_results::stats::describe::percentile(&sorted, 50.0),
                t.len()
            );
        }
    }
    if let (Some(ab), Some(a), Some(b)) = (&r.ab, mean(&times('A')), mean(&times('B'))) {
        let (label_a, label_b) = (
            format!("{}={}", ab.knob, ab.a),
            format!("{}={}", ab.knob, ab.b),
        );
        let _ = writeln!(s);
        let _ = writeln!(s, "{:<16}{label_a:<20}{label_b}", "");
        let _ = writeln!(s, "{:<16}{:<20.3}{:.3}", "Time:", a, b);
        let _ = writeln!(
            s,
            "{:<16}{:<20}{:.3}%",
            "%Reduction:",
            "",
            (b - a) / a * 100.0
        );
    }
    if let Some(c) = &r.change {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "B vs A (median of per-round ratios, paired): {}{}; verdict: {} (threshold ±{}%)",
            c.pct.map_or("-".into(), |p| format!("{p:+.1}%")),
            c.ci95_pct
                .map(|[lo, hi]| format!(" [95% interval {lo:+.1}%, {hi:+.1}%]"))
                .unwrap_or_default(),
            c.verdict.as_str(),
            c.threshold_pct
        );
    }
    if let Some(ab) = &r.ab {
        for line in exitlab_results::report::host_switch_lines(&ab.knob, &r.host) {
            let _ = writeln!(s, "{line}");
        }
    }
    if let Some(why) = &r.incomplete {
        let _ = writeln!(s, "incomplete: {why}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Setup {
        Setup {
            cpus: 2,
            apic: "x2apic".into(),
            pv_ipi: true,
        }
    }

    #[test]
    fn ab_knobs_are_parsed_and_bad_ones_refused() {
        let ab = parse_ab("apic=xapic,x2apic", &base()).unwrap();
        assert_eq!((ab.a.as_str(), ab.b.as_str()), ("xapic", "x2apic"));
        assert_eq!(base().with("cpus", "8").unwrap().cpus, 8);
        assert!(!base().with("pv-ipi", "off").unwrap().pv_ipi);
        // The same value twice is an A/A run; a module parameter keeps the setup.
        assert!(parse_ab("apic=xapic,xapic", &base()).is_ok());
        let m = parse_ab("kvm_amd.npt=0,1", &base()).unwrap();
        assert_eq!(m.knob, "kvm_amd.npt");
        assert_eq!(base().with("kvm_amd.npt", "0").unwrap(), base());
        for bad in [
            "apic",
            "apic=xapic",
            "apic=xapic,foo",
            "kvm_amd.npt=0,has space",
            ".npt=0,1",
            "cpus=1,0",
            "cpus=1,9999",
            "ring=0,3",
            "pv-ipi=on,maybe",
        ] {
            assert!(parse_ab(bad, &base()).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_console_keeps_the_workload_lines_and_a_bounded_tail() {
        let mut c = Console::default();
        c.write_all(&[b'x'; 100_000]).unwrap();
        c.write_all(
            b"\n[ 1.0] exitlab-hackbench: start mode=socket groups=1 fds=1 loops=1 cpus=2\n",
        )
        .unwrap();
        c.write_all(b"exitlab-hackbench: messages=1 time=0.5 s failed=0\n")
            .unwrap();
        let o = hackbench::parse(&c.workload_lines()).unwrap();
        assert_eq!((o.cpus, o.messages, o.failed), (2, 1, 0));
        assert!(c.tail().len() <= TAIL_BYTES);
        assert!(c.tail().ends_with("failed=0\n"));
    }

    fn run_with(side: char, round: u32, seconds: Option<f64>) -> WorkloadRun {
        WorkloadRun {
            round,
            side,
            setup: base(),
            seconds,
            messages: seconds.map(|_| 1000),
            guest_cpus: seconds.map(|_| 2),
            failed: seconds.map(|_| 0),
            no_result: seconds
                .is_none()
                .then(|| "the workload never started".into()),
            ended: "the workload powered off (debug-exit 0)".into(),
            wall_s: 1.0,
            exits: ExitCounts::default(),
            per_vcpu: Vec::new(),
            kvm_exits: None,
        }
    }

    #[test]
    fn the_report_gives_the_seed_table_and_the_verdict() {
        let runs: Vec<WorkloadRun> = (1..=6)
            .flat_map(|i| {
                [
                    run_with('A', i, Some(10.0 + f64::from(i) * 0.01)),
                    run_with('B', i, Some(8.0 + f64::from(i) * 0.01)),
                ]
            })
            .collect();
        let a: Vec<f64> = runs
            .iter()
            .filter(|r| r.side == 'A')
            .filter_map(|r| r.seconds)
            .collect();
        let b: Vec<f64> = runs
            .iter()
            .filter(|r| r.side == 'B')
            .filter_map(|r| r.seconds)
            .collect();
        let r = WorkloadResults {
            host: Vec::new(),
            schema_version: 1,
            workload: "hackbench".into(),
            params: Params::default().to_string(),
            messages: Params::default().messages(),
            kernel: "vmlinux".into(),
            mem_mib: 256,
            setup: base(),
            ab: Some(parse_ab("apic=xapic,x2apic", &base()).unwrap()),
            change: Some(pair_change(&a, &b, 2.0)),
            runs,
            incomplete: None,
        };
        assert!(all_completed(&r));
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.contains(&"                apic=xapic          apic=x2apic"),
            "{text}"
        );
        assert!(
            lines.contains(&"Time:           10.035              8.035"),
            "{text}"
        );
        // (8.035 - 10.035) / 10.035
        assert!(
            lines.contains(&"%Reduction:                         -19.930%"),
            "{text}"
        );
        assert!(text.contains("verdict: faster"), "{text}");
    }

    #[test]
    fn a_run_that_never_started_is_not_complete() {
        let r = WorkloadResults {
            host: Vec::new(),
            schema_version: 1,
            workload: "hackbench".into(),
            params: String::new(),
            messages: 0,
            kernel: String::new(),
            mem_mib: 0,
            setup: base(),
            ab: None,
            runs: vec![run_with('-', 1, None)],
            change: None,
            incomplete: Some("stopped: the workload never started".into()),
        };
        assert!(!all_completed(&r));
        assert!(render(&r).contains("incomplete: stopped"));
    }
}
