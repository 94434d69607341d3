//! `exitlab run`: boot a kernel on the PC test platform and turn how it ended into the
//! process exit code.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use exitlab_boot::ImageFormat;
use exitlab_vmm::machine::{self, MachineConfig, MachineError, PlatformOptions, RunEnd, SerialOut};

use crate::exit::{usage_error, EXIT_KVM_FAILURE, EXIT_NO_KVM, EXIT_TIMEOUT, EXIT_TRIPLE_FAULT};

/// Options of `exitlab run`.
#[derive(Debug)]
pub struct RunOptions {
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub cmdline: String,
    pub cpus: u32,
    pub mem_mib: u64,
    pub timeout: f64,
    pub serial: String,
    pub exit_stats: bool,
    pub prefer_pvh: bool,
    pub verbose: bool,
    /// Platform choices (set by the QEMU-style command line, `crate::qemu`).
    pub platform: PlatformOptions,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Kernel image.
    kernel: PathBuf,
    /// Initial ramdisk (multiboot module 0, PVH module 0, Linux initrd), or
    /// `builtin:hackbench` for exitlab's Linux workload (a hackbench-style messaging load
    /// run as /init; set it with `HB_GROUPS=`, `HB_FDS=`, `HB_LOOPS=`, `HB_MODE=socket|pipe`
    /// on the command line; it ends the VM through the debug-exit port).
    #[arg(long)]
    initrd: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, visible_alias = "append", default_value = "")]
    cmdline: String,
    /// Number of vCPUs.
    #[arg(long, visible_alias = "smp", default_value_t = 1)]
    cpus: u32,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 128)]
    mem: u64,
    /// Stop the guest after this many seconds (exit code 124); 0 = no limit.
    #[arg(long, default_value_t = 0.0)]
    timeout: f64,
    /// Serial console: stdio, file:PATH or none.
    #[arg(long, default_value = "stdio")]
    serial: String,
    /// Print the exits by reason at the end.
    #[arg(long)]
    exit_stats: bool,
    /// Enter an ELF vmlinux at its 64-bit entry point instead of its PVH entry.
    #[arg(long)]
    no_pvh: bool,
    /// Say what was detected and how long setup took.
    #[arg(short, long)]
    verbose: bool,
}

impl From<RunArgs> for RunOptions {
    fn from(a: RunArgs) -> Self {
        RunOptions {
            kernel: a.kernel,
            initrd: a.initrd,
            cmdline: a.cmdline,
            cpus: a.cpus,
            mem_mib: a.mem,
            timeout: a.timeout,
            serial: a.serial,
            exit_stats: a.exit_stats,
            prefer_pvh: !a.no_pvh,
            verbose: a.verbose,
            platform: PlatformOptions::default(),
        }
    }
}

/// The `--initrd` value that selects exitlab's built-in Linux workload.
const BUILTIN_HACKBENCH: &str = "builtin:hackbench";

/// Userspace exits by reason, in all and per vCPU, then KVM's own count of all exits;
/// every row starts with its name and the total.
fn exit_table(report: &machine::RunReport) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "exits by reason (userspace), guest ran {:.3} s:\n  {:<12} {:>10}",
        report.run_time.as_secs_f64(),
        "reason",
        "total"
    );
    for v in &report.per_vcpu {
        let _ = write!(s, " {:>10}", format!("vCPU {}", v.vcpu));
    }
    s.push('\n');
    let totals = std::iter::once(("total", report.exits.total()));
    for (i, (name, n)) in report.exits.entries().into_iter().chain(totals).enumerate() {
        let _ = write!(s, "  {name:<12} {n:>10}");
        for v in &report.per_vcpu {
            let e = v.exits.entries();
            let own = e.get(i).map_or(v.exits.total(), |x| x.1);
            let _ = write!(s, " {own:>10}");
        }
        s.push('\n');
    }
    match report.kvm_exits {
        Some(k) => {
            let _ = write!(s, "  {:<12} {k:>10}", "kvm_exits");
            for v in &report.per_vcpu {
                let own = v.kvm_exits.map_or("-".to_string(), |n| n.to_string());
                let _ = write!(s, " {own:>10}");
            }
            s.push_str("  (KVM's count of all exits, in-kernel ones included)\n");
        }
        None => s.push_str("  kvm_exits    unavailable (no KVM binary stats on this host)\n"),
    }
    s
}

fn format_name(f: ImageFormat) -> &'static str {
    match f {
        ImageFormat::Multiboot => "multiboot",
        ImageFormat::Pvh => "PVH ELF",
        ImageFormat::BzImage => "Linux bzImage",
        ImageFormat::LinuxElf => "Linux ELF (vmlinux, 64-bit entry)",
    }
}

fn mib(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        None => "unknown".into(),
    }
}

fn parse_serial(s: &str) -> Result<SerialOut, String> {
    match s {
        "stdio" => Ok(SerialOut::Stdio),
        "none" => Ok(SerialOut::None),
        _ => match s.strip_prefix("file:") {
            Some(p) if !p.is_empty() => Ok(SerialOut::File(PathBuf::from(p))),
            _ => Err(format!("--serial {s}: use stdio, file:PATH or none")),
        },
    }
}

/// Runs `exitlab run`; returns the process exit code.
pub fn run_cmd(o: RunOptions) -> i32 {
    let process_start = crate::started();
    let kernel = match std::fs::read(&o.kernel) {
        Ok(k) => k,
        Err(e) => {
            return usage_error(format!(
                "cannot read the kernel image {}: {e}",
                o.kernel.display()
            ))
        }
    };
    let initrd = match &o.initrd {
        Some(p) if p.as_os_str() == BUILTIN_HACKBENCH => {
            Some(exitlab_guest::hackbench::INITRD.to_vec())
        }
        Some(p) => match std::fs::read(p) {
            Ok(b) => Some(b),
            Err(e) => return usage_error(format!("cannot read the initrd {}: {e}", p.display())),
        },
        None => None,
    };
    if o.mem_mib == 0 || o.mem_mib > (1 << 20) {
        return usage_error(format!(
            "--mem {} MiB is out of range: use 2..=1048576",
            o.mem_mib
        ));
    }
    if !(o.timeout.is_finite() && o.timeout >= 0.0) {
        return usage_error(format!(
            "--timeout {} must be a number of seconds, 0 for none",
            o.timeout
        ));
    }
    let serial = match parse_serial(&o.serial) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let serial_input = matches!(serial, SerialOut::Stdio);
    let kvm = match exitlab_vmm::open_kvm() {
        Ok(k) => Arc::new(k),
        Err(e) => {
            eprintln!("exitlab: {e}");
            return EXIT_NO_KVM;
        }
    };
    if o.verbose {
        match exitlab_boot::detect(&kernel) {
            Ok(f) => eprintln!(
                "exitlab: {} is a {} image",
                o.kernel.display(),
                format_name(f)
            ),
            Err(e) => return usage_error(format!("cannot boot {}: {e}", o.kernel.display())),
        }
    }
    let cfg = MachineConfig {
        kernel,
        kernel_path: o.kernel.display().to_string(),
        cmdline: o.cmdline.clone(),
        initrd,
        cpus: o.cpus,
        ram_bytes: o.mem_mib << 20,
        timeout: (o.timeout > 0.0).then(|| Duration::from_secs_f64(o.timeout)),
        serial,
        serial_input,
        prefer_pvh: o.prefer_pvh,
        cancel: None,
        platform: o.platform.clone(),
    };
    let report = match machine::run(kvm, cfg) {
        Ok(r) => r,
        Err(MachineError::Vmm(e)) => {
            eprintln!("exitlab: {e}");
            return 1;
        }
        Err(e) => return usage_error(e),
    };
    let _ = std::io::stdout().flush();
    if o.verbose {
        eprintln!(
            "exitlab: booted as {}; first guest instruction {:.1} ms after start (setup {:.1} ms), guest ran {:.3} s; {} resident outside guest RAM (peak RSS {})",
            format_name(report.format),
            (process_start.elapsed() - report.run_time).as_secs_f64() * 1e3,
            report.setup_time.as_secs_f64() * 1e3,
            report.run_time.as_secs_f64(),
            mib(report.vmm_rss_bytes),
            mib(exitlab_vmm::sys::peak_rss()),
        );
    }
    if o.exit_stats {
        eprint!("{}", exit_table(&report));
    }
    match report.end {
        RunEnd::DebugExit(v) => {
            if o.verbose {
                eprintln!("exitlab: the guest wrote {v:#x} to the debug-exit port");
            }
            ((v << 1) | 1) as i32 & 0xff
        }
        RunEnd::Reset => {
            eprintln!("exitlab: the guest reset or shut down the machine");
            0
        }
        RunEnd::TripleFault { vcpu, registers } => {
            eprintln!("exitlab: vCPU {vcpu} triple-faulted (the machine shut down)\n{registers}");
            EXIT_TRIPLE_FAULT
        }
        RunEnd::Timeout { registers } => {
            eprintln!("exitlab: the guest did not finish within {} s", o.timeout);
            for (id, r) in registers {
                eprintln!("vCPU {id}:\n{r}");
            }
            EXIT_TIMEOUT
        }
        RunEnd::Failure {
            vcpu,
            what,
            registers,
        } => {
            eprintln!("exitlab: vCPU {vcpu}: {what}\n{registers}");
            EXIT_KVM_FAILURE
        }
        RunEnd::Cancelled => {
            eprintln!("exitlab: the run was cancelled");
            1
        }
        RunEnd::Stopped(why) => {
            eprintln!("exitlab: every vCPU stopped without the guest ending the run ({why})");
            EXIT_KVM_FAILURE
        }
    }
}
