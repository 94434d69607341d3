//! `exitlab run --builtin chaos`: checks the options, runs the lab's chaos experiment
//! ([`exitlab_lab::chaos`]) and prints its account.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use exitlab_lab::chaos::{self, Boot, ChaosAccount, ChaosConfig, LAB_MEM_MIB};
use exitlab_vmm::machine;

use crate::status::{usage_error, EXIT_INTERRUPTED, EXIT_OK, EXIT_VMM_FAILED};

/// Options of a chaos run.
#[derive(Debug)]
pub struct ChaosOptions {
    /// How long to keep booting, in seconds.
    pub seconds: f64,
    /// The seed; boot `k` of the run uses a seed derived from it and `k`.
    pub seed: u64,
    /// vCPUs (INIT/SIPI storms need 2 or more).
    pub cpus: u32,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// Where the guest's serial output goes (default: nowhere; it is garbage).
    pub serial: Option<PathBuf>,
    /// Print one line per boot.
    pub verbose: bool,
}

/// The options as the lab's chaos run takes them, or the usage error.
fn config(o: &ChaosOptions) -> Result<ChaosConfig, String> {
    crate::common::check_seconds("--seconds", o.seconds)?;
    if o.cpus == 0 || o.cpus > machine::MAX_CPUS {
        return Err(format!(
            "--cpus {} is out of range: use 1..={}",
            o.cpus,
            machine::MAX_CPUS
        ));
    }
    if o.mem_mib < 8 || o.mem_mib > 4096 {
        return Err(format!(
            "--mem {} MiB is out of range for the chaos kernel: use 8..=4096",
            o.mem_mib
        ));
    }
    let serial_copy = match &o.serial {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| {
            format!(
                "--serial file:{}: cannot create it ({e}); choose a writable path",
                p.display()
            )
        })?),
        None => None,
    };
    Ok(ChaosConfig {
        duration: Duration::from_secs_f64(o.seconds),
        seed: o.seed,
        cpus: o.cpus,
        mem_mib: o.mem_mib,
        serial_copy,
    })
}

/// One line per boot, for `--verbose`.
fn boot_line(b: &Boot) -> String {
    if b.lab {
        format!(
            "  boot {} (seed {}, lab protocol): {}; {} doorbells, {} exits",
            b.number, b.seed, b.ended, b.doorbells, b.exits
        )
    } else {
        format!(
            "  boot {} (seed {}): {}; guest ops {} faults {}; {} exits",
            b.number, b.seed, b.ended, b.guest_ops, b.guest_faults, b.exits
        )
    }
}

/// How a chaos run shows its progress on standard error, as bench does: a bar on a
/// terminal, a line every few seconds otherwise (and with -v, beside the per-boot
/// lines), nothing with --quiet.
enum Progress {
    Quiet,
    Bar(indicatif::ProgressBar),
    Lines { next: Duration },
}

/// Seconds between two progress lines when standard error is not a terminal.
const PROGRESS_LINE_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    fn new(seconds: f64, verbose: bool) -> Progress {
        use std::io::IsTerminal;
        if crate::verbosity::level() < 0 {
            Progress::Quiet
        } else if std::io::stderr().is_terminal() && !verbose {
            Progress::Bar(crate::common::progress_bar(
                seconds.ceil() as u64,
                "chaos [{bar:30}] {pos}/{len} s",
            ))
        } else {
            Progress::Lines {
                next: PROGRESS_LINE_EVERY,
            }
        }
    }

    fn update(&mut self, elapsed: Duration, seconds: f64, boots: u64, exits: u64) {
        let what = format!("{boots} boots, {exits} userspace exits");
        match self {
            Progress::Quiet => {}
            Progress::Bar(bar) => {
                bar.set_position(elapsed.as_secs());
                bar.set_message(what);
            }
            Progress::Lines { next } => {
                if elapsed >= *next {
                    eprintln!("  chaos {:.0}/{seconds} s: {what}", elapsed.as_secs_f64());
                    *next = elapsed + PROGRESS_LINE_EVERY;
                }
            }
        }
    }

    fn finish(self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Runs the chaos mode; returns the process exit code.
pub fn chaos_cmd(o: ChaosOptions) -> i32 {
    let cfg = match config(&o) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let (kvm, cancel) = match crate::signals::open_kvm_cancellable() {
        Ok(k) => k,
        Err(code) => return code,
    };
    if crate::verbosity::level() >= 0 {
        eprintln!(
            "exitlab chaos: seed {}, {} s, {} vCPU(s), {} MiB",
            o.seed, o.seconds, o.cpus, o.mem_mib
        );
    }
    let start = std::time::Instant::now();
    let mut progress = Progress::new(o.seconds, o.verbose);
    let mut exits = 0;
    let mut on_boot = |b: &Boot| {
        if o.verbose {
            eprintln!("{}", boot_line(b));
        }
        exits += b.exits;
        progress.update(start.elapsed(), o.seconds, b.number, exits);
    };
    let outcome = chaos::run(&kvm, &cancel, cfg, &mut on_boot);
    progress.finish();
    let account = match outcome {
        Ok(a) => a,
        Err(e) => {
            eprintln!("exitlab: {e}");
            return EXIT_VMM_FAILED;
        }
    };
    print_account(&mut std::io::stdout().lock(), &o, &account);
    if cancel.load(Ordering::Acquire) {
        crate::signals::restore_terminal();
        return EXIT_INTERRUPTED;
    }
    EXIT_OK
}

/// The account of a run, as `run --builtin chaos` prints it.
fn print_account(out: &mut impl Write, o: &ChaosOptions, a: &ChaosAccount) {
    let _ = writeln!(
        out,
        "chaos: seed {}, {:.1} s, {} boot(s) of the chaos kernel ({} vCPU(s), {} MiB on the PC platform; 1 vCPU, {} MiB under the lab protocol)",
        o.seed,
        a.elapsed.as_secs_f64(),
        a.boots,
        o.cpus,
        o.mem_mib,
        LAB_MEM_MIB
    );
    let _ = writeln!(out, "how each PC-platform boot ended:");
    for (k, n) in &a.ends {
        let _ = writeln!(out, "  {n:>8}  {k}");
    }
    let lab = &a.lab;
    let _ = writeln!(
        out,
        "lab protocol boots: {} ({} doorbells rung, {} sample records taken); how they ended:",
        lab.boots, lab.doorbells, lab.samples
    );
    for (k, n) in &lab.ends {
        let _ = writeln!(out, "  {n:>8}  {k}");
        if let Some(e) = lab.examples.get(k).filter(|e| *e != k) {
            let first = e.lines().next().unwrap_or(e);
            let _ = writeln!(out, "            e.g. {first}");
        }
    }
    let _ = writeln!(out, "exits by reason (userspace, all boots):");
    for (name, n) in a.exits.entries() {
        let _ = writeln!(out, "  {name:<12} {n}");
    }
    let _ = writeln!(out, "  {:<12} {}", "total", a.exits.total());
    match a.kvm_exits {
        Some(k) => {
            let _ = writeln!(
                out,
                "  {:<12} {k} (KVM's count of all exits, in-kernel ones included)",
                "kvm_exits"
            );
        }
        None => {
            let _ = writeln!(out, "  kvm_exits    unavailable (no KVM binary stats)");
        }
    }
    let _ = writeln!(
        out,
        "faults seen: {} exceptions taken by the guest (as last reported per PC-platform \
         boot, over {} guest operations), {} triple fault(s), {} boot(s) KVM could not go on with",
        a.guest_faults,
        a.guest_ops,
        a.triple_faults(),
        a.kvm_failures()
    );
    if !a.vectors.is_empty() {
        let v: Vec<String> = a.vectors.iter().map(|(v, n)| format!("{v}: {n}")).collect();
        let _ = writeln!(
            out,
            "last fault vector per boot (vector: boots): {}",
            v.join(", ")
        );
    }
    let _ = writeln!(out, "serial output: {} bytes", a.serial_bytes);
    let _ = writeln!(
        out,
        "memory: peak RSS {:.1} MiB, RSS {:.1} MiB after the first boot and {:.1} MiB at the end",
        a.peak_rss_kib as f64 / 1024.0,
        a.rss_after_first_kib as f64 / 1024.0,
        a.rss_kib as f64 / 1024.0
    );
}
