//! `exitlab run`: boot a kernel on the PC test platform and turn how it ended into the
//! process exit code.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use exitlab_boot::ImageFormat;
use exitlab_devices::pci::PciError;
use exitlab_vmm::machine::{
    self, IrqChip, MachineConfig, MachineError, PlatformOptions, RunEnd, SerialOut,
};

use crate::status::{
    guest_exit_code, usage_error, EXIT_CANT_WRITE, EXIT_INTERRUPTED, EXIT_KVM_FAILURE, EXIT_NO_KVM,
    EXIT_OK, EXIT_TIMEOUT, EXIT_TRIPLE_FAULT, EXIT_VMM_FAILED,
};

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
    pub quiet: bool,
    /// Platform choices (set by the QEMU-style command line, `crate::qemu`).
    pub platform: PlatformOptions,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Kernel image (multiboot, PVH ELF, Linux bzImage or vmlinux).
    #[arg(required_unless_present_any = ["builtin", "qemu_args"])]
    kernel: Option<PathBuf>,
    /// Take QEMU's options instead of exitlab's, as the binary named `exitlab-qemu`
    /// does: `exitlab run --qemu-args -- QEMU-OPTIONS...` (e.g. `-kernel FILE -smp 2
    /// -append STR`). Everything after it is QEMU's, so no other option of run goes with
    /// it; `exitlab run --qemu-args -- -help` lists the QEMU options exitlab takes.
    #[arg(
        long,
        value_name = "QEMU-OPTIONS",
        num_args = 0..,
        allow_hyphen_values = true,
        conflicts_with_all = [
            "kernel", "builtin", "seconds", "seed", "initrd", "cmdline", "cpus", "mem",
            "timeout", "serial", "exit_stats", "no_pvh", "irqchip", "no_seccomp", "strict_ioctl"
        ]
    )]
    qemu_args: Option<Vec<std::ffi::OsString>>,
    /// Boot a kernel built into exitlab instead of a file (e.g. `exitlab run --builtin
    /// conformance`); `chaos` is booted again and again for --seconds.
    #[arg(long, value_name = "NAME", value_parser = builtin_names(), conflicts_with = "kernel")]
    builtin: Option<String>,
    /// With --builtin chaos: how long to run, in seconds [default: 30].
    #[arg(long, requires = "builtin")]
    seconds: Option<f64>,
    /// With --builtin chaos: the seed (the same seed gives the same guest behaviour)
    /// [default: 1].
    #[arg(long, requires = "builtin")]
    seed: Option<u64>,
    /// Initial ramdisk (multiboot module 0, PVH module 0, Linux initrd), or
    /// `builtin:hackbench` for exitlab's Linux workload (a hackbench-style messaging load
    /// run as /init; set it with `HB_GROUPS=`, `HB_FDS=`, `HB_LOOPS=`, `HB_MODE=socket|pipe`
    /// on the command line; it ends the VM through the debug-exit port).
    #[arg(long)]
    initrd: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, visible_alias = "append", default_value = "")]
    cmdline: String,
    /// Number of vCPUs [default: 1; 2 for --builtin chaos].
    #[arg(long, visible_alias = "smp")]
    cpus: Option<u32>,
    /// Guest RAM in MiB [default: 128; 64 for --builtin chaos].
    #[arg(long)]
    mem: Option<u64>,
    /// Stop the guest after this many seconds (exit code 124); 0 = no limit.
    #[arg(long, default_value_t = 0.0)]
    timeout: f64,
    /// Serial console: stdio, file:PATH or none [default: stdio; none for --builtin chaos].
    #[arg(long)]
    serial: Option<String>,
    /// Print the exits by reason at the end.
    #[arg(long)]
    exit_stats: bool,
    /// Enter an ELF vmlinux at its 64-bit entry point instead of its PVH entry.
    #[arg(long)]
    no_pvh: bool,
    /// Where the I/O APIC and PIC are emulated: kernel (KVM_CREATE_IRQCHIP, with KVM's
    /// PIT) or split (KVM_CAP_SPLIT_IRQCHIP: exitlab's own in userspace, no PIT).
    #[arg(long, default_value = "kernel", value_parser = parse_irqchip)]
    irqchip: IrqChip,
    #[command(flatten)]
    filter: crate::common::VcpuFilter,
}

fn parse_irqchip(s: &str) -> Result<IrqChip, String> {
    IrqChip::parse(s)
}

/// `--builtin`'s values, each with its line of help, from the guest crate's table.
fn builtin_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        exitlab_guest::BUILTINS
            .iter()
            .map(|b| clap::builder::PossibleValue::new(b.name).help(b.about)),
    )
}

/// The prefix of a kernel path that names a built-in kernel (`builtin:conformance`):
/// `--builtin NAME` is `run builtin:NAME`, and QEMU-style `-kernel builtin:NAME` works too.
const BUILTIN_PREFIX: &str = "builtin:";

/// The options `--builtin chaos` decides itself (it boots its kernel many times).
fn chaos_conflicts(a: &RunArgs) -> Option<&'static str> {
    [
        (a.initrd.is_some(), "--initrd"),
        (!a.cmdline.is_empty(), "--cmdline"),
        (a.timeout != 0.0, "--timeout (use --seconds)"),
        (a.exit_stats, "--exit-stats"),
        (a.no_pvh, "--no-pvh"),
        (a.irqchip != IrqChip::default(), "--irqchip"),
    ]
    .into_iter()
    .find_map(|(given, name)| given.then_some(name))
}

impl RunArgs {
    /// The QEMU-style command line `--qemu-args` gave, for the QEMU front end. `run
    /// --qemu-args` right after `exitlab` is taken by `crate::qemu::qemu_style` before
    /// the parser runs; this is the option after a global one (`exitlab -v run
    /// --qemu-args -- ...`), whose `--` the parser kept among its values.
    pub fn qemu_args(&self) -> Option<Vec<std::ffi::OsString>> {
        let args = self.qemu_args.as_ref()?;
        let skip = usize::from(args.first().is_some_and(|x| x == "--"));
        Some(args[skip..].to_vec())
    }
}

/// Runs `exitlab run` as the arguments say (a kernel, or a built-in one; a QEMU-style
/// command line is the QEMU front end's, [`RunArgs::qemu_args`]).
pub fn run_main(a: RunArgs) -> i32 {
    a.filter.apply();
    if a.builtin.as_deref() == Some("chaos") {
        if let Some(option) = chaos_conflicts(&a) {
            return usage_error(format!(
                "--builtin chaos takes no {option}: it sets up each of its boots itself"
            ));
        }
        let serial = match a.serial.as_deref().map(crate::input::parse_serial) {
            None | Some(Ok(SerialOut::None)) => None,
            Some(Ok(SerialOut::File(p))) => Some(p),
            Some(Ok(_)) => {
                return usage_error("--builtin chaos writes its serial output to none or file:PATH")
            }
            Some(Err(e)) => return usage_error(e),
        };
        return crate::chaos_cmd::chaos_cmd(crate::chaos_cmd::ChaosOptions {
            seconds: a.seconds.unwrap_or(30.0),
            seed: a.seed.unwrap_or(1),
            cpus: a.cpus.unwrap_or(2),
            mem_mib: a.mem.unwrap_or(64),
            serial,
            verbose: crate::verbosity::level() > 0,
        });
    }
    if a.seconds.is_some() || a.seed.is_some() {
        return usage_error(
            "--seconds and --seed are for --builtin chaos; bound other kernels with --timeout",
        );
    }
    let kernel = match &a.builtin {
        Some(name) => PathBuf::from(format!("{BUILTIN_PREFIX}{name}")),
        None => a.kernel.unwrap_or_default(),
    };
    run_cmd(RunOptions {
        kernel,
        initrd: a.initrd,
        cmdline: a.cmdline,
        cpus: a.cpus.unwrap_or(1),
        mem_mib: a.mem.unwrap_or(128),
        timeout: a.timeout,
        serial: a.serial.unwrap_or_else(|| "stdio".into()),
        exit_stats: a.exit_stats,
        prefer_pvh: !a.no_pvh,
        verbose: crate::verbosity::level() > 0,
        quiet: crate::verbosity::level() < 0,
        platform: PlatformOptions {
            irqchip: a.irqchip,
            ..PlatformOptions::default()
        },
    })
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
            let e = v.user.entries();
            let own = e.get(i).map_or(v.user.total(), |x| x.1);
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
    if let Some(io) = report.ioapic {
        let _ = writeln!(
            s,
            "  {:<12} {:>10}  (MMIO accesses to the userspace I/O APIC: {} reads, {} writes)",
            "ioapic",
            io.total(),
            io.reads,
            io.writes
        );
    }
    if let Some(n) = report.kvm_mmio_exits {
        let _ = writeln!(
            s,
            "  {:<12} {n:>10}  (KVM's count of MMIO exits, in-kernel ones included)",
            "kvm_mmio_exits"
        );
    }
    s
}

fn mib(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        None => "unknown".into(),
    }
}

fn format_name(f: ImageFormat) -> &'static str {
    match f {
        ImageFormat::Multiboot => "multiboot",
        ImageFormat::Pvh => "PVH ELF",
        ImageFormat::BzImage => "Linux bzImage",
        ImageFormat::LinuxElf => "Linux ELF (vmlinux, 64-bit entry)",
    }
}

/// Prints why the machine could not be set up, with what to do, and returns the exit
/// code of its class: the host refused (a KVM or OS call, e.g. out of file descriptors:
/// 8), the serial output file cannot be created (10), or the input was refused (2).
fn setup_failure(e: MachineError) -> i32 {
    let code = match &e {
        MachineError::Vmm(_) | MachineError::Pci(PciError::EventFd(_)) => EXIT_VMM_FAILED,
        MachineError::SerialFile { .. } => EXIT_CANT_WRITE,
        _ => return usage_error(e),
    };
    let text = e.to_string();
    // EMFILE/ENFILE: the limit is the user's to raise (a 255-vCPU VM needs a few hundred).
    let hint = if text.contains("(os error 24)") || text.contains("(os error 23)") {
        "; raise the open-files limit (`ulimit -n`) or give fewer --cpus"
    } else {
        ""
    };
    eprintln!("exitlab: {text}{hint}");
    code
}

/// Largest kernel image or initrd exitlab reads.
pub const MAX_IMAGE_BYTES: u64 = 1 << 30;
/// Largest `--mem`, in MiB (1 TiB).
pub const MAX_MEM_MIB: u64 = 1 << 20;

/// Everything `run` needs, checked: nothing here has touched KVM.
struct Checked {
    kernel: Vec<u8>,
    initrd: Option<Vec<u8>>,
    serial: SerialOut,
    format: ImageFormat,
    /// The kernel is Linux (a bzImage, or a vmlinux however it is entered).
    linux: bool,
}

/// The line `run` prints before it boots Linux on a kvm_pvm host, where Linux cannot
/// reach userspace (docs/host-and-l1.md) and would otherwise run silently until it stops.
const LINUX_ON_PVM: &str = "this host's KVM is kvm_pvm (no VT-x/AMD-V): it emulates guest ring 0, \
     and its emulator lacks instructions Linux uses (lock cmpxchg16b, xrstor, int3, ...), so \
     Linux stops in early boot here and cannot reach userspace; boot it on a host with \
     hardware virtualization (docs/host-and-l1.md)";

/// The line that leads the summary of a run ended by an emulation failure (`insn`: the
/// instruction's bytes, possibly none): its likely cause, on a kvm_pvm host (`pvm`),
/// whose emulator runs all guest ring-0 code and lacks instructions; `None` elsewhere,
/// where the failure's own line says what is known.
fn emulation_failure_cause(insn: &[u8], linux: bool, pvm: bool) -> Option<String> {
    if !pvm {
        return None;
    }
    let what = match exitlab_vmm::hook::instruction_name(insn) {
        Some(name) => format!("`{name}`"),
        None => "the instruction at RIP".to_string(),
    };
    Some(format!(
        "likely cause: this host's KVM is kvm_pvm, which emulates guest ring 0, and its \
         emulator cannot run {what}{}; the registers follow",
        if linux {
            ": Linux cannot get past early boot on this host (docs/host-and-l1.md)"
        } else {
            " (run it on a host with VT-x/AMD-V, or avoid that instruction in ring 0)"
        }
    ))
}

/// Checks every option and input of `run` before KVM is opened: the numbers, the serial
/// target, the files (regular files, bounded sizes), and the image itself, which is
/// loaded into a scratch copy of the guest's address space (not a VM) so that every
/// loader check runs: nothing is mapped into KVM or run when this fails.
fn check(o: &RunOptions) -> Result<Checked, String> {
    if o.cpus == 0 || o.cpus > machine::MAX_CPUS {
        return Err(format!(
            "--cpus {} is out of range: use 1..={}",
            o.cpus,
            machine::MAX_CPUS
        ));
    }
    if o.mem_mib < 2 || o.mem_mib > MAX_MEM_MIB {
        return Err(format!(
            "--mem {} MiB is out of range: use 2..={MAX_MEM_MIB}",
            o.mem_mib
        ));
    }
    let ram_bytes = o.mem_mib << 20;
    if let Some(limit) = crate::input::host_memory_limit() {
        if ram_bytes > limit {
            return Err(format!(
                "--mem {} MiB is more than this host can back ({} MiB of RAM and swap): the \
                 guest would be killed for lack of memory halfway; give less",
                o.mem_mib,
                limit >> 20
            ));
        }
    }
    crate::common::check_timeout(o.timeout)?;
    let serial = crate::input::parse_serial(&o.serial)?;
    let builtin = o
        .kernel
        .to_str()
        .and_then(|p| p.strip_prefix(BUILTIN_PREFIX))
        .map(|name| {
            exitlab_guest::builtin(name).ok_or_else(|| {
                let names: Vec<&str> = exitlab_guest::BUILTINS.iter().map(|b| b.name).collect();
                format!(
                    "there is no built-in kernel {name:?}{}: choose one of {}",
                    exitlab_lab::names::did_you_mean(name, names.iter().copied()),
                    names.join(", ")
                )
            })
        })
        .transpose()?;
    let kernel_len = match builtin {
        Some(b) => b.image.len() as u64,
        None => crate::input::open_regular(&o.kernel, "the kernel image", MAX_IMAGE_BYTES)?.1,
    };
    if kernel_len > ram_bytes {
        return Err(format!(
            "the kernel image {} ({kernel_len} bytes) is bigger than guest RAM ({} MiB): give \
             --mem more",
            o.kernel.display(),
            o.mem_mib
        ));
    }
    let kernel = match builtin {
        Some(b) => b.image.to_vec(),
        None => crate::input::read_bounded(&o.kernel, "the kernel image", MAX_IMAGE_BYTES)?,
    };
    let initrd = match &o.initrd {
        Some(p) if p.as_os_str() == BUILTIN_HACKBENCH => {
            Some(exitlab_guest::hackbench::INITRD.to_vec())
        }
        Some(p) => {
            let (_, len) = crate::input::open_regular(p, "the initrd", MAX_IMAGE_BYTES)?;
            if len > ram_bytes {
                return Err(format!(
                    "the initrd {} ({len} bytes) does not fit in guest RAM ({} MiB): give \
                     --mem more",
                    p.display(),
                    o.mem_mib
                ));
            }
            Some(crate::input::read_bounded(
                p,
                "the initrd",
                MAX_IMAGE_BYTES,
            )?)
        }
        None => None,
    };
    let format = exitlab_boot::detect(&kernel)
        .map_err(|e| format!("cannot boot {}: {e}", o.kernel.display()))?;
    dry_load(o, &kernel, &initrd, ram_bytes)?;
    if let SerialOut::File(p) = &serial {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .map_err(|e| {
                format!(
                    "--serial file:{}: cannot create it ({e}); choose a writable path",
                    p.display()
                )
            })?;
    }
    Ok(Checked {
        linux: exitlab_boot::linux::is_linux(&kernel),
        kernel,
        initrd,
        serial,
        format,
    })
}

/// Loads the image as `run` will, into anonymous memory laid out as the guest's RAM
/// (reserved, not committed: only what the loader writes is touched).
fn dry_load(
    o: &RunOptions,
    kernel: &[u8],
    initrd: &Option<Vec<u8>>,
    ram_bytes: u64,
) -> Result<(), String> {
    let ranges = exitlab_boot::layout::ram_regions(ram_bytes);
    let mem = vm_memory::GuestMemoryMmap::<()>::from_ranges(&ranges).map_err(|e| {
        format!(
            "cannot reserve {} MiB of address space for guest RAM: {e}",
            o.mem_mib
        )
    })?;
    let opts = exitlab_boot::BootOptions {
        kernel_path: o.kernel.display().to_string(),
        cmdline: o.cmdline.clone(),
        initrd: initrd.clone(),
        cpus: o.cpus,
        ram_bytes,
        acpi: true,
        pm_timer_32bit: true,
        prefer_pvh: o.prefer_pvh,
    };
    exitlab_boot::load(&mem, kernel, &opts)
        .map(drop)
        .map_err(|e| format!("cannot boot {}: {e}", o.kernel.display()))
}

/// Runs `exitlab run`; returns the process exit code.
pub fn run_cmd(o: RunOptions) -> i32 {
    let process_start = crate::started();
    let checked = match check(&o) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if o.verbose {
        eprintln!(
            "exitlab: {} is a {} image",
            o.kernel.display(),
            format_name(checked.format)
        );
    }
    let linux = checked.linux;
    let pvm = exitlab_host::kvm_is_pvm();
    if linux && pvm && !o.quiet {
        eprintln!("exitlab: {LINUX_ON_PVM}");
    }
    let serial_input = matches!(checked.serial, SerialOut::Stdio);
    if o.verbose {
        eprintln!("exitlab: every input checked; opening /dev/kvm");
    }
    let (kvm, cancel) = match crate::signals::open_kvm_cancellable() {
        Ok(k) => k,
        Err(code) => return code,
    };
    if let Err(e) = exitlab_vmm::irqchip::probe_host(o.platform.irqchip, &kvm) {
        eprintln!("exitlab: {e}");
        return EXIT_NO_KVM;
    }
    let cfg = MachineConfig {
        kernel: checked.kernel,
        kernel_path: o.kernel.display().to_string(),
        cmdline: o.cmdline.clone(),
        initrd: checked.initrd,
        cpus: o.cpus,
        ram_bytes: o.mem_mib << 20,
        timeout: (o.timeout > 0.0).then(|| Duration::from_secs_f64(o.timeout)),
        serial: checked.serial,
        serial_input,
        prefer_pvh: o.prefer_pvh,
        cancel: Some(cancel),
        platform: o.platform.clone(),
    };
    let report = match machine::run(kvm, cfg) {
        Ok(r) => r,
        Err(e) => return setup_failure(e),
    };
    let _ = std::io::stdout().flush();
    if o.verbose {
        eprintln!(
            "exitlab: booted as {}; first guest instruction {} after start (setup {:.1} ms), guest ran {:.3} s; {} resident outside guest RAM, {} of it private (peak RSS {})",
            format_name(report.format),
            report.first_entry.map_or("never (vCPU 0 did not run)".to_string(), |t| format!(
                "{:.1} ms",
                t.duration_since(process_start).as_secs_f64() * 1e3
            )),
            report.setup_time.as_secs_f64() * 1e3,
            report.run_time.as_secs_f64(),
            mib(report.vmm_memory.map(|m| m.resident)),
            mib(report.vmm_memory.map(|m| m.private)),
            mib(exitlab_vmm::sys::peak_rss()),
        );
    }
    if o.exit_stats {
        eprint!("{}", exit_table(&report));
    }
    match report.end {
        RunEnd::DebugExit(v) => {
            let code = guest_exit_code(v);
            if !o.quiet {
                eprintln!("exitlab: {}", crate::status::debug_exit_note(v));
            }
            code
        }
        RunEnd::Reset => {
            if !o.quiet {
                eprintln!("exitlab: the guest reset or shut down the machine");
            }
            EXIT_OK
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
            emulation_failure,
        } => {
            if let Some(cause) =
                emulation_failure.and_then(|insn| emulation_failure_cause(&insn, linux, pvm))
            {
                eprintln!("exitlab: {cause}");
            }
            eprintln!("exitlab: vCPU {vcpu}: {what}\n{registers}");
            EXIT_KVM_FAILURE
        }
        RunEnd::Cancelled => {
            crate::signals::restore_terminal();
            eprintln!("exitlab: interrupted: the vCPUs were stopped and the VM torn down");
            EXIT_INTERRUPTED
        }
        RunEnd::Stopped(why) => {
            eprintln!("exitlab: every vCPU stopped without the guest ending the run ({why})");
            EXIT_KVM_FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emulation_failure_on_kvm_pvm_leads_with_its_likely_cause() {
        let cmpxchg16b = [0xf0, 0x48, 0x0f, 0xc7, 0x0e];
        let linux = emulation_failure_cause(&cmpxchg16b, true, true).unwrap();
        assert!(
            linux.starts_with("likely cause: this host's KVM is kvm_pvm")
                && linux.contains("cannot run `lock cmpxchg16b`: Linux cannot get past early boot")
                && linux.contains("docs/host-and-l1.md"),
            "{linux}"
        );
        assert!(!linux.contains('\n'), "one line: {linux}");
        let other = emulation_failure_cause(&[0x0f, 0x0b], false, true).unwrap();
        assert!(
            other.contains("cannot run the instruction at RIP (run it on a host with VT-x/AMD-V"),
            "{other}"
        );
        // A host with hardware virtualization: the failure's own line says it.
        assert_eq!(emulation_failure_cause(&cmpxchg16b, true, false), None);
        assert!(!LINUX_ON_PVM.contains('\n') && LINUX_ON_PVM.contains("cannot reach userspace"));
    }
}
