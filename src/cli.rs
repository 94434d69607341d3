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
    /// Compare two results files (before, after).
    Compare {
        /// Results file of the baseline run.
        before: PathBuf,
        /// Results file of the run to compare with it.
        after: PathBuf,
    },
    /// Profile the exits of a KVM process (QEMU, exitlab, ...) from the kernel's side
    /// (tracefs; needs root).
    Trace(TraceArgs),
    /// Compare exitlab's bench figures with the second, independent harness kernel.
    Agree(AgreeArgs),
    /// Print a results file as a table (or Markdown).
    Report {
        /// Results file written by `exitlab bench --json`.
        file: PathBuf,
        /// Print a Markdown table for a patch cover letter.
        #[arg(long)]
        markdown: bool,
    },
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
        Command::Compare { before, after } => crate::report_cmd::compare_cmd(&before, &after),
        Command::Agree(a) => crate::agree_cmd::agree_cmd(a),
        Command::Trace(a) => crate::trace_cmd::trace_cmd(a),
        Command::Report { file, markdown } => crate::report_cmd::report_cmd(&file, markdown),
    }
}
