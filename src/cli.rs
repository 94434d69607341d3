//! Command-line interface: the `exitlab` command and its subcommands. Each subcommand
//! lives in a module of its own (`bench_cmd`, `run`, `host_cmd`, `report_cmd`); process
//! exit codes are in `status`, and how much to say is `verbosity`.

use std::path::PathBuf;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::agree_cmd::AgreeArgs;
use crate::bench_cmd::BenchArgs;
use crate::run::RunArgs;
use crate::status::{exit_codes_help, EXIT_INTERNAL, EXIT_USAGE};
use crate::trace_cmd::TraceArgs;

#[derive(Parser, Debug)]
#[command(
    name = "exitlab",
    version,
    about = "A KVM VMM built to make VM exits cheap and to measure them",
    after_help = exit_codes_help(),
    after_long_help = exit_codes_help()
)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

// The options every subcommand takes (`global`). A plain comment: a doc comment here
// would become the about text of the commands it is flattened into.
#[derive(Args, Debug)]
struct Globals {
    /// Say more about what is done (repeat for more).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    verbose: u8,
    /// Say only what was asked for: no progress or notes on stderr (errors still are).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure what each kind of VM exit costs on this host.
    Bench {
        #[command(flatten)]
        args: Box<BenchArgs>,
        #[command(flatten)]
        filter: crate::common::VcpuFilter,
    },
    /// Show what matters for exit cost on this host (CPU, kernel, KVM capabilities and parameters).
    Host {
        #[command(flatten)]
        json: crate::common::JsonArg,
    },
    /// Boot a kernel (multiboot, PVH ELF, Linux bzImage or vmlinux) on exitlab's PC platform.
    /// `exitlab run --qemu-args -- QEMU-OPTIONS...` (or the binary named `exitlab-qemu`)
    /// takes a QEMU-style command line instead.
    Run(RunArgs),
    /// Compare two directories of runs (`bench --runs N --json DIR`, one per build or
    /// kernel), or two results files as a screen: per test, the change with its 95%
    /// interval and a verdict (docs/model.md). Directories gate: exit 4 when a test is
    /// slower.
    #[command(after_help = "\
Verdicts (one threshold δ, docs/model.md): slower/faster when the change is beyond ±δ and
its 95% interval excludes no change; equivalent when the interval lies within ±δ;
inconclusive otherwise; no verdict when the data cannot support one (fewer than 3 runs a
side, a test missing or failed on a side, another --batch).

Two directories (every *.json in each): the runs are the units. The gate (exit 4) fires
when a slower test's p-value survives Holm's correction over the tests it judges
(--gate names them; default: all but the empty loop).

Two files: a screen. One run a side cannot show how runs differ, so its interval is
within one run and it cannot gate: exit 12 (no verdict) unless --accept-no-verdict.

Exit status: 0 the gate passes; 4 a test is slower (named on the last lines); 12 no
verdict (a test the gate judges has none, or two single files); 2 a file cannot be
read or an argument is refused.")]
    Compare {
        /// A directory of results files of the baseline runs (or one results file: a
        /// screen).
        before: PathBuf,
        /// A directory of results files of the runs to compare with them (or one file).
        after: PathBuf,
        /// δ in percent: slower/faster beyond it, equivalent within it [default: 2].
        #[arg(long)]
        threshold: Option<f64>,
        /// The tests the gate judges, comma-separated [default: every test but the empty
        /// loop].
        #[arg(long, value_delimiter = ',')]
        gate: Vec<String>,
        /// Exit 0 rather than 12 when some test the gate judges has no verdict, or when
        /// comparing two single files.
        #[arg(long)]
        accept_no_verdict: bool,
        /// What the sides are meant to differ in, comma-separated: `kernel` and KVM module
        /// names (e.g. kernel,kvm_amd). Builds whose GNU build IDs differ are warned about
        /// unless named here; a build named here whose ID is the same on both sides is warned
        /// about too (the change you meant to test is not in the runs).
        #[arg(long, value_delimiter = ',', value_name = "BUILDS")]
        changed: Vec<String>,
    },
    /// Profile the exits of a KVM process (QEMU, exitlab, ...) from the kernel's side
    /// (tracefs; needs root). With `-- COMMAND`, exits with the command's exit status
    /// when the command fails.
    Trace(TraceArgs),
    /// Compare exitlab's bench figures with the second, independent harness kernel.
    Agree(AgreeArgs),
    /// Render one or more results files: terminal table, Markdown, CSV, OpenMetrics, or
    /// one self-contained HTML page with CDF plots.
    Report(crate::report_cmd::ReportArgs),
    /// Print the JSON Schema of results files (what `bench --json` writes and `report`
    /// and `compare` read), generated from exitlab's own types; its `$id` and title carry
    /// the schema version (docs/results.schema.json is a copy).
    #[command(after_help = "\
Versioning: a change that removes, renames or retypes a field, or lets it hold a value
the schema did not allow, bumps the schema version (and the schema's $id); adding an
optional field does not, so a reader must ignore fields it does not know.")]
    Schema {
        /// Write the schema to this file instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Print a shell completion script (e.g. `exitlab completions bash > /etc/bash_completion.d/exitlab`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page in roff (e.g. `exitlab man | man -l -`).
    Man,
}

/// The command-line definition, for completions and the man page.
pub fn command() -> clap::Command {
    Cli::command()
}

/// Runs the command line; returns the process exit code. See [`catching`] for panics.
pub fn main() -> i32 {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // Standard output closed or full is the reader's doing, not a bug: `catching`
        // says so in one line (nothing for a closed pipe, as `cmd | head` expects).
        if stdout_failure(panic_message(info.payload())).is_none() {
            default_hook(info);
        }
    }));
    catching(parse_and_run)
}

/// Runs `f`, turning a panic into an exit code: writing to standard output failed (a
/// closed pipe, a full disk: Rust's `print!` panics then) is [`EXIT_CANT_WRITE`], any
/// other panic (a bug: exitlab must not panic on any input) [`EXIT_INTERNAL`] rather than
/// Rust's 101, which is odd and so belongs to the guest's debug-exit codes.
fn catching(f: impl FnOnce() -> i32 + std::panic::UnwindSafe) -> i32 {
    std::panic::catch_unwind(f).unwrap_or_else(|payload| {
        match stdout_failure(panic_message(payload.as_ref())) {
            Some(why) => {
                if !why.contains("Broken pipe") {
                    eprintln!("exitlab: cannot write to standard output: {why}");
                }
                crate::status::EXIT_CANT_WRITE
            }
            None => {
                eprintln!(
                    "exitlab: internal error (a bug); please report it with the command line"
                );
                EXIT_INTERNAL
            }
        }
    })
}

/// The text of a panic, when it has one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

/// The reason, when a panic is `print!`'s failure to write to standard output.
fn stdout_failure(message: &str) -> Option<&str> {
    message.strip_prefix("failed printing to stdout: ")
}

/// A clap error message in exitlab's style: `exitlab: ...` for clap's `error: ...`.
fn clap_error_text(rendered: &str) -> String {
    match rendered.strip_prefix("error: ") {
        Some(rest) => format!("exitlab: {rest}"),
        None => rendered.to_string(),
    }
}

/// Whether a subcommand may open KVM or look at its module parameters: those start by
/// restoring what an exitlab killed with a module parameter switched left behind.
fn touches_kvm(command: &Command) -> bool {
    matches!(
        command,
        Command::Bench { .. }
            | Command::Host { .. }
            | Command::Run(_)
            | Command::Trace(_)
            | Command::Agree(_)
    )
}

/// `exitlab schema [-o FILE]`.
fn schema_cmd(output: Option<&std::path::Path>) -> i32 {
    let text = exitlab_results::results::schema_text();
    match output {
        Some(path) => match std::fs::write(path, text) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("exitlab: cannot write {}: {e}", path.display());
                crate::status::EXIT_CANT_WRITE
            }
        },
        None => {
            print!("{text}");
            0
        }
    }
}

/// An unknown subcommand's error with clap's tip naming the closest subcommand, where
/// clap gives none (`exitlab help benh`; `exitlab benh` has clap's own).
fn subcommand_tip(e: &clap::Error, text: String) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidSubcommand || text.contains("tip:") {
        return text;
    }
    let Some(ContextValue::String(name)) = e.get(ContextKind::InvalidSubcommand) else {
        return text;
    };
    let cmd = command();
    let names = cmd.get_subcommands().map(clap::Command::get_name);
    match (
        exitlab_lab::names::closest(name, names),
        text.split_once('\n'),
    ) {
        (Some(near), Some((first, rest))) => {
            format!("{first}\n\n  tip: a similar subcommand exists: '{near}'\n{rest}")
        }
        _ => text,
    }
}

/// `exitlab run ...` (`run` first) parsed by a command of `run`'s and the global
/// arguments alone, so that starting a VM does not build (and fault in the code of) every
/// other subcommand's arguments, which the derive's full command does: docs/memory.md,
/// 2026-11-27. `None` for any other command line and whenever this parse fails, help and
/// errors included: the full parser then says what it always said, word for word.
fn run_only(args: &[std::ffi::OsString]) -> Option<Cli> {
    if args.get(1)? != "run" {
        return None;
    }
    let command = Globals::augment_args(clap::Command::new("exitlab"))
        .subcommand(RunArgs::augment_args(clap::Command::new("run")))
        .subcommand_required(true);
    let mut matches = command.try_get_matches_from(args).ok()?;
    let globals = Globals::from_arg_matches_mut(&mut matches).ok()?;
    let (_, mut run) = matches.remove_subcommand()?;
    let run = RunArgs::from_arg_matches_mut(&mut run).ok()?;
    Some(Cli {
        globals,
        command: Command::Run(run),
    })
}

fn parse_and_run() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(qemu_args) = crate::qemu::qemu_style(&args) {
        crate::host_cmd::restore_pending_module_params();
        return crate::qemu::qemu_cmd(qemu_args);
    }
    let cli = match run_only(&args) {
        Some(cli) => cli,
        None => match Cli::try_parse_from(&args) {
            Ok(c) => c,
            Err(e) if e.use_stderr() => {
                // One style for every error: clap's `error: ...` becomes `exitlab: ...`, as
                // exitlab's own errors read.
                eprint!(
                    "{}",
                    subcommand_tip(&e, clap_error_text(&e.render().to_string()))
                );
                return EXIT_USAGE;
            }
            Err(e) => {
                // --help and --version: standard output, success.
                let _ = e.print();
                return 0;
            }
        },
    };
    let g = cli.globals;
    crate::verbosity::set(g.quiet, g.verbose);
    if touches_kvm(&cli.command) {
        crate::host_cmd::restore_pending_module_params();
    }
    match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut command(), "exitlab", &mut std::io::stdout());
            0
        }
        Command::Schema { output } => schema_cmd(output.as_deref()),
        Command::Man => match clap_mangen::Man::new(command()).render(&mut std::io::stdout()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("exitlab: cannot write the man page: {e}");
                crate::status::EXIT_CANT_WRITE
            }
        },
        Command::Bench { args, filter } => {
            filter.apply();
            crate::bench_cmd::bench_cmd(*args)
        }
        Command::Host { json } => crate::host_cmd::host_cmd(json),
        Command::Run(a) => match a.qemu_args() {
            Some(qemu_args) => crate::qemu::qemu_cmd(qemu_args),
            None => crate::run::run_main(a),
        },
        Command::Compare {
            before,
            after,
            threshold,
            gate,
            accept_no_verdict,
            changed,
        } => crate::report_cmd::compare_cmd(
            &before,
            &after,
            threshold,
            &crate::report_cmd::GateArgs {
                only: gate,
                accept_no_verdict,
            },
            &changed,
        ),
        Command::Agree(a) => crate::agree_cmd::agree_cmd(a),
        Command::Trace(a) => crate::trace_cmd::trace_cmd(a),
        Command::Report(a) => crate::report_cmd::report_cmd(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<std::ffi::OsString> {
        std::iter::once("exitlab")
            .chain(line.split_whitespace())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn run_parsed_alone_gives_what_the_full_parser_gives() {
        for line in [
            "run --builtin conformance",
            "run -vv --no-seccomp --builtin chaos --seconds 2 --seed 7 --cpus 2",
            "run -q --strict-ioctl kernel.elf --append console=ttyS0 --smp 2 --mem 64",
            "run kernel.elf --initrd builtin:hackbench -v",
        ] {
            let full = Cli::try_parse_from(argv(line)).expect(line);
            let alone = run_only(&argv(line)).expect(line);
            assert_eq!(format!("{alone:?}"), format!("{full:?}"), "{line}");
        }
    }

    #[test]
    fn help_errors_and_other_commands_go_to_the_full_parser() {
        for line in [
            "run --help",
            "run -h",
            "run",
            "run --bogus",
            "run --version",
            "run -v -q --builtin conformance",
            "run --builtin nope",
            "-v run --builtin conformance",
            "bench --list",
            "help run",
            "",
        ] {
            assert!(run_only(&argv(line)).is_none(), "{line}");
        }
    }

    #[test]
    fn the_commands_that_may_touch_kvm_restore_pending_module_parameters_first() {
        for (line, touches) in [
            ("bench --list", true),
            ("host", true),
            ("run --builtin conformance", true),
            ("trace --cleanup", true),
            ("agree", true),
            ("report x.json", false),
            ("compare a.json b.json", false),
            ("man", false),
        ] {
            let cli = Cli::try_parse_from(argv(line)).expect(line);
            assert_eq!(touches_kvm(&cli.command), touches, "{line}");
        }
    }

    #[test]
    fn a_panic_is_an_internal_error_and_a_failed_stdout_cannot_write() {
        assert_eq!(catching(|| 7), 7);
        assert_eq!(catching(|| panic!("index out of bounds")), EXIT_INTERNAL);
        assert_eq!(
            catching(|| panic!("failed printing to stdout: No space left on device (os error 28)")),
            crate::status::EXIT_CANT_WRITE
        );
        assert_eq!(
            catching(|| std::panic::panic_any(
                "failed printing to stdout: Broken pipe (os error 32)"
            )),
            crate::status::EXIT_CANT_WRITE
        );
    }
}
