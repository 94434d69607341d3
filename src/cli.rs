//! Command-line interface: the `exitlab` command and its subcommands. Each subcommand
//! lives in a module of its own (`bench_cmd`, `run`, `host_cmd`, `report_cmd`); exit codes
//! are in `exit`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::agree_cmd::AgreeArgs;
use crate::bench_cmd::BenchArgs;
use crate::exit::EXIT_USAGE;
use crate::run::RunArgs;
use crate::trace_cmd::TraceArgs;

#[derive(Parser, Debug)]
#[command(
    name = "exitlab",
    version,
    about = "A KVM VMM built to make VM exits cheap and to measure them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure what each kind of VM exit costs on this host.
    Bench(BenchArgs),
    /// Show what matters for exit cost on this host (CPU, kernel, KVM capabilities and parameters).
    Host {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Boot a kernel (multiboot, PVH ELF, Linux bzImage or vmlinux) on exitlab's PC platform.
    /// `exitlab run --qemu-args -- QEMU-OPTIONS...` (or the binary named `exitlab-qemu`)
    /// takes a QEMU-style command line instead.
    Run(RunArgs),
    /// Compare two results files (before, after): per test, the change of the net
    /// figures with a 95% interval from a bootstrap over rounds, and a verdict.
    #[command(after_help = "\
Verdicts: `slower` / `faster` when the whole 95% interval of the change lies beyond
±threshold, `no detectable change` otherwise, `no conclusion` (with the reason) when a
side has fewer rounds than needed. Differences of host (CPU model, microcode, kernel,
KVM module parameters), exitlab revision and configuration are printed as warnings.

Exit status: 0 when no test is slower beyond the threshold with confidence; 1 when some
test is (the tests are named on the last line); 2 when a file cannot be read.")]
    Compare {
        /// Results file of the baseline run.
        before: PathBuf,
        /// Results file of the run to compare with it.
        after: PathBuf,
        /// Smallest change, in percent, that counts as slower or faster (the whole 95%
        /// interval must lie beyond it).
        #[arg(long, default_value_t = exitlab_lab::compare::DEFAULT_THRESHOLD_PCT)]
        threshold: f64,
    },
    /// Profile the exits of a KVM process (QEMU, exitlab, ...) from the kernel's side
    /// (tracefs; needs root).
    Trace(TraceArgs),
    /// Compare exitlab's bench figures with the second, independent harness kernel.
    Agree(AgreeArgs),
    /// Render one or more results files: terminal table, Markdown, CSV, OpenMetrics, or
    /// one self-contained HTML page with CDF plots.
    Report(crate::report_cmd::ReportArgs),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(qemu_args) = crate::qemu::qemu_style(&args) {
        return crate::qemu::qemu_cmd(qemu_args);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match cli.command {
        Command::Bench(a) => crate::bench_cmd::bench_cmd(a),
        Command::Host { json } => crate::host_cmd::host_cmd(json),
        Command::Run(a) => crate::run::run_cmd(a.into()),
        Command::Compare {
            before,
            after,
            threshold,
        } => crate::report_cmd::compare_cmd(&before, &after, threshold),
        Command::Agree(a) => crate::agree_cmd::agree_cmd(a),
        Command::Trace(a) => crate::trace_cmd::trace_cmd(a),
        Command::Report(a) => crate::report_cmd::report_cmd(a),
    }
}
