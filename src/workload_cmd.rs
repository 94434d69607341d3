//! `exitlab bench --workload hackbench --kernel LINUX`: a Linux workload as an experiment
//! (see `exitlab_lab::workload`). The options that say what is measured are checked
//! here, before KVM is opened.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use exitlab_guest::hackbench::{Channel, Params};
use exitlab_lab::workload::{self, Setup, WorkloadOptions};

use crate::common::{JsonArg, TimeoutWatch};
use crate::status::{usage_error, EXIT_TEST_FAILED, EXIT_TIMEOUT, EXIT_VMM_FAILED};

/// The options only a workload run takes.
#[derive(clap::Args, Debug, Default)]
pub struct WorkloadArgs {
    /// Run a Linux workload instead of the exit tests: `hackbench` (exitlab's
    /// hackbench-style messaging load as /init of a built-in initramfs), one fresh VM per
    /// round; needs --kernel. With --ab apic=xapic,x2apic (or cpus=N,M or pv-ipi=on,off)
    /// the two sides alternate round by round and the time's change gets a verdict.
    #[arg(long, value_parser = workload::WORKLOADS.to_vec(), requires = "kernel",
          conflicts_with_all = ["tests", "list", "batch", "warmup", "ring", "raw", "pin",
                                "samples", "no_overhead", "idle", "disable_exits",
                                "halt_poll_ns", "format"])]
    pub workload: Option<String>,
    /// With --workload: the Linux kernel (bzImage or vmlinux).
    #[arg(long, requires = "workload")]
    pub kernel: Option<PathBuf>,
    /// With --workload hackbench: the load, as groups=G,fds=F,loops=L,mode=socket|pipe
    /// (any subset) [default: groups=2,fds=5,loops=100,mode=socket].
    #[arg(long, requires = "workload", value_parser = parse_hackbench)]
    pub hackbench: Option<Params>,
    /// With --workload: guest RAM in MiB.
    #[arg(long, requires = "workload", default_value_t = 512)]
    pub mem: u64,
    /// With --workload: the longest one boot may take, in seconds.
    #[arg(long, requires = "workload", default_value_t = 600.0)]
    pub boot_timeout: f64,
    /// With --workload: words added to the kernel command line.
    #[arg(long, requires = "workload", default_value = "")]
    pub append: String,
}

/// Parses `groups=2,fds=5,loops=100,mode=pipe` (any subset, defaults for the rest).
fn parse_hackbench(s: &str) -> Result<Params, String> {
    let mut p = Params::default();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("{item}: write KEY=VALUE (groups, fds, loops, mode)"))?;
        let num = |max: u32| -> Result<u32, String> {
            match v.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(format!("{k}={v}: use 1..={max}")),
            }
        };
        match k {
            "groups" => p.groups = num(64)?,
            "fds" => p.fds = num(64)?,
            "loops" => p.loops = num(1_000_000)?,
            "mode" => {
                p.channel = match v {
                    "socket" => Channel::Socket,
                    "pipe" => Channel::Pipe,
                    _ => return Err(format!("mode={v}: use socket or pipe")),
                }
            }
            _ => return Err(format!("{k}: the keys are groups, fds, loops and mode")),
        }
    }
    Ok(p)
}

/// What `bench` hands over besides the workload's own options.
pub struct Shared<'a> {
    pub cpus: Option<&'a str>,
    pub apic: &'a str,
    pub pv_ipi: Option<&'a str>,
    pub rounds: u32,
    pub ab: Option<&'a str>,
    pub json: &'a JsonArg,
    pub timeout: f64,
}

/// Runs the workload experiment; returns the exit code.
pub fn workload_cmd(w: &WorkloadArgs, s: Shared<'_>) -> i32 {
    let opts = match options(w, &s) {
        Ok(o) => o,
        Err(e) => return usage_error(e),
    };
    // A knob that changes the host: opened, each value tried once and put back; the
    // original values come back when the session ends (or, after a kill, at the next
    // start).
    let mut session = match opts.ab.as_ref().filter(|ab| ab.knob.contains('.')) {
        Some(ab) => {
            let spec = match exitlab_host::ParamSpec::parse(&ab.knob) {
                Ok(s) => s,
                Err(e) => return usage_error(e.to_string()),
            };
            match crate::host_cmd::open_host_knob(&spec, Some([ab.a.as_str(), ab.b.as_str()])) {
                Ok(s) => Some(s),
                Err(code) => return code,
            }
        }
        None => None,
    };
    // /dev/kvm is opened after the session: a reload refuses while this process holds it.
    let (kvm, cancel) = match crate::signals::open_kvm_cancellable() {
        Ok(k) => k,
        Err(code) => return code,
    };
    let limit = TimeoutWatch::start(s.timeout, cancel.clone());
    let opts = WorkloadOptions {
        cancel: Some(cancel),
        ..opts
    };
    let quiet = crate::verbosity::level() < 0;
    if !quiet {
        eprintln!(
            "exitlab bench: workload hackbench ({}), {} round(s){}, each boot up to {} s",
            opts.params,
            opts.rounds,
            opts.ab
                .as_ref()
                .map(|ab| format!(" per side, A/B {}={} vs {}", ab.knob, ab.a, ab.b))
                .unwrap_or_default(),
            opts.boot_timeout.as_secs_f64()
        );
    }
    let mut progress = |r: &workload::WorkloadRun| {
        if !quiet {
            let _ = writeln!(
                std::io::stderr(),
                "  round {} {}: {} in {:.1} s wall",
                r.round,
                r.side,
                r.seconds
                    .map_or_else(|| r.ended.clone(), |t| format!("{t:.4} s")),
                r.wall_s
            );
        }
    };
    let switch = session
        .as_mut()
        .map(|s| s as &mut dyn exitlab_lab::host_knob::HostSwitch);
    let res = workload::run(kvm, &opts, switch, &mut progress);
    if let Some(s) = session.take() {
        if let Err(e) = s.restore() {
            eprintln!("exitlab: {e}");
            return crate::status::EXIT_HOST_NOT_RESTORED;
        }
    }
    let mut res = match res {
        Ok(r) => r,
        Err(e) => {
            eprintln!("exitlab: {e}");
            return EXIT_VMM_FAILED;
        }
    };
    let timed_out = limit.expired() && res.incomplete.is_some();
    if timed_out {
        res.incomplete = res
            .incomplete
            .take()
            .map(|why| format!("--timeout {} s expired: {why}", s.timeout));
    }
    if s.json.to_stdout() {
        if let Some(why) = &res.incomplete {
            eprintln!("incomplete: {why}");
        }
    } else {
        print!("{}", workload::render(&res));
    }
    if let Err(code) = s.json.write(&res, "workload results") {
        return code;
    }
    if timed_out {
        EXIT_TIMEOUT
    } else if res
        .incomplete
        .as_deref()
        .is_some_and(|w| w.starts_with("interrupted"))
    {
        crate::status::EXIT_INTERRUPTED
    } else if workload::all_completed(&res) {
        0
    } else {
        EXIT_TEST_FAILED
    }
}

/// Checks the options and reads the kernel; nothing touches KVM.
fn options(w: &WorkloadArgs, s: &Shared<'_>) -> Result<WorkloadOptions, String> {
    let kernel_path = w.kernel.clone().ok_or("--workload needs --kernel LINUX")?;
    let kernel = crate::input::read_bounded(
        &kernel_path,
        "the kernel image",
        crate::run::MAX_IMAGE_BYTES,
    )?;
    if !(16..=crate::run::MAX_MEM_MIB).contains(&w.mem) {
        return Err(format!(
            "--mem {} MiB is out of range for Linux: use 16..={}",
            w.mem,
            crate::run::MAX_MEM_MIB
        ));
    }
    if let Some(limit) = crate::input::host_memory_limit() {
        if w.mem << 20 > limit {
            return Err(format!(
                "--mem {} MiB is more than this host can back ({} MiB of RAM and swap)",
                w.mem,
                limit >> 20
            ));
        }
    }
    crate::common::check_seconds("--boot-timeout", w.boot_timeout)?;
    crate::common::check_timeout(s.timeout)?;
    s.json.check()?;
    let mut setup = Setup {
        cpus: 1,
        apic: "x2apic".into(),
        pv_ipi: true,
    }
    .with("apic", s.apic)?;
    if let Some(c) = s.cpus {
        setup = setup.with("cpus", c)?;
    }
    if let Some(p) = s.pv_ipi {
        setup = setup.with("pv-ipi", p)?;
    }
    let ab =
        s.ab.map(|spec| workload::parse_ab(spec, &setup))
            .transpose()?;
    Ok(WorkloadOptions {
        kernel,
        kernel_path,
        ram_bytes: w.mem << 20,
        params: w.hackbench.unwrap_or_default(),
        setup,
        ab,
        rounds: s.rounds,
        boot_timeout: Duration::from_secs_f64(w.boot_timeout),
        extra_cmdline: w.append.clone(),
        cancel: None,
        threshold_pct: exitlab_results::compare::DEFAULT_THRESHOLD_PCT,
    })
}
