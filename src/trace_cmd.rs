//! `exitlab trace`: profile the exits of any KVM process (QEMU, exitlab, ...) from the
//! kernel's side, through tracefs.

use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use exitlab_results::trace_report::{PhaseSplit, TraceReport};
use exitlab_trace::{Session, SessionConfig};

use crate::status::{usage_error, EXIT_TEST_FAILED};

#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// Trace this running process (all its threads, and children it forks).
    #[arg(long, conflicts_with = "command")]
    pid: Option<u32>,
    /// Stop tracing after this many seconds (default: when the process or command ends).
    #[arg(long)]
    seconds: Option<f64>,
    /// Start a new phase every so many seconds.
    #[arg(long, conflicts_with = "marker_port")]
    phase_seconds: Option<f64>,
    /// Start a new phase at every guest write to this port (e.g. 0x80).
    #[arg(long, value_parser = parse_port)]
    marker_port: Option<u16>,
    /// Trace buffer per CPU, KiB.
    #[arg(long, default_value_t = 16384)]
    buffer_kb: u32,
    #[command(flatten)]
    json: crate::common::JsonArg,
    /// Remove the tracing instances exitlab processes left behind (killed, e.g. by
    /// `kill -9`, before they could: each instance is named after its owner's PID and
    /// start time), list those of running exitlab processes, and exit. Every `exitlab
    /// trace` and `exitlab bench` also removes stale ones when it starts.
    #[arg(long, conflicts_with_all = ["pid", "floor"])]
    cleanup: bool,
    /// Compare `exitlab run` (as users run it) against the independent bare KVM_RUN
    /// loop `exitlab-floor`, on the harness kernel in its exits mode, in interleaved
    /// rounds, each run traced: the userspace share per exit of each, and their ratio;
    /// also the bare loop under a one-rule allow-all seccomp filter, which tells what
    /// any filter costs on this host. Arguments after `--` are added to `exitlab run`
    /// (e.g. `-- --no-seccomp`).
    #[arg(long, conflicts_with = "pid")]
    floor: bool,
    /// With --floor: rounds (each runs every side once: exitlab, the bare loop, and the bare loop under an allow-all seccomp filter).
    #[arg(long, default_value_t = exitlab_lab::floor::ROUNDS, requires = "floor", value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// With --floor: `in` exits the guest makes per run.
    #[arg(long, default_value_t = exitlab_lab::floor::EXITS_PER_RUN, requires = "floor", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    exits: u64,
    /// The command to run and trace (after `--`). When it fails, `exitlab trace` exits
    /// with its exit status (128+N when signal N ended it), as `time` and `timeout` do,
    /// after printing the profile; 0 when it succeeds.
    #[arg(last = true)]
    command: Vec<String>,
}

/// The exit status `exitlab trace -- COMMAND` passes on: the command's own exit code when
/// it failed, 128+N when signal N ended it (as shells report it), `None` when it
/// succeeded or did not end while traced.
fn failed_status(status: Option<ExitStatus>) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    let s = status?;
    match (s.code(), s.signal()) {
        (Some(0), _) => None,
        (Some(code), _) => Some(code),
        (None, Some(sig)) => Some(128 + sig),
        (None, None) => None,
    }
}

/// Removes the tracing instances of exitlab processes that are gone; returns a note
/// naming them, if there were any. Leaves tracefs alone where it is not mounted.
pub fn remove_stale_instances() -> Option<String> {
    let root = exitlab_trace::tracefs::mounted_tracefs()?;
    let gone = exitlab_trace::tracefs::remove_stale_instances(&root);
    (!gone.is_empty()).then(|| {
        format!(
            "removed {} tracing instance(s) left by exitlab processes that no longer run: {}",
            gone.len(),
            gone.join(", ")
        )
    })
}

/// `exitlab trace --cleanup`.
fn cleanup() -> i32 {
    let root = match exitlab_trace::tracefs::tracefs_root() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("exitlab trace: {e}");
            return EXIT_TEST_FAILED;
        }
    };
    let mut gone = exitlab_trace::tracefs::remove_stale_instances(&root);
    let mut left = exitlab_trace::tracefs::exitlab_instances(&root);
    // A stale one listed now appeared after that pass (its owner ended meanwhile): one
    // more pass, so that only one that cannot be removed is reported as such.
    if left.iter().any(|n| exitlab_trace::tracefs::is_stale(n)) {
        gone.extend(exitlab_trace::tracefs::remove_stale_instances(&root));
        left = exitlab_trace::tracefs::exitlab_instances(&root);
    }
    println!(
        "removed {} stale tracing instance(s){}{}",
        gone.len(),
        if gone.is_empty() { "" } else { ": " },
        gone.join(", ")
    );
    for name in &left {
        let owner = exitlab_trace::tracefs::instance_owner(name).map_or(0, |o| o.0);
        let stale = exitlab_trace::tracefs::is_stale(name);
        println!(
            "{}: {}",
            root.join("instances").join(name).display(),
            if stale {
                "stale, but could not be removed".to_string()
            } else {
                format!("in use by running process {owner}")
            }
        );
    }
    if left.iter().any(|n| exitlab_trace::tracefs::is_stale(n)) {
        EXIT_TEST_FAILED
    } else {
        0
    }
}

/// `exitlab trace --floor`.
fn floor(a: &TraceArgs) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("exitlab trace: cannot find the exitlab executable to run: {e}");
            return EXIT_TEST_FAILED;
        }
    };
    let setup = exitlab_lab::floor::FloorSetup {
        exitlab_args: a.command.clone(),
        rounds: a.rounds,
        exits_per_run: a.exits,
        ..exitlab_lab::floor::FloorSetup::new(exe)
    };
    if crate::verbosity::level() >= 0 {
        eprintln!(
            "exitlab trace: exitlab run{} against exitlab-floor (bare, and under an allow-all seccomp filter), {} round(s) of {} exits each ...",
            if a.command.is_empty() {
                String::new()
            } else {
                format!(" {}", a.command.join(" "))
            },
            a.rounds,
            a.exits
        );
    }
    let Some(view) = exitlab_lab::floor::compare(&setup, &|| false) else {
        return EXIT_TEST_FAILED;
    };
    if !a.json.to_stdout() {
        for l in exitlab_results::report::render_floor(&view) {
            println!("{l}");
        }
    }
    if let Err(code) = a.json.write(&view, "comparison") {
        return code;
    }
    match view {
        exitlab_results::results::FloorView::Measured(c) if c.counts_agree() => 0,
        _ => EXIT_TEST_FAILED,
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    let v = match s.strip_prefix("0x") {
        Some(h) => u16::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("{s} is not a port number (0..=0xffff)"))
}

/// The thread ids of process `pid`.
fn threads_of(pid: u32) -> Result<Vec<u32>, String> {
    let dir = format!("/proc/{pid}/task");
    let rd = std::fs::read_dir(&dir).map_err(|e| format!("no process {pid} ({dir}: {e})"))?;
    Ok(rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect())
}

/// How the trace is cut into phases: every `--phase-seconds` (in TSC cycles), at each
/// write to `--marker-port`, or not at all.
fn phase_split(a: &TraceArgs) -> Result<PhaseSplit, String> {
    Ok(match (a.phase_seconds, a.marker_port) {
        (Some(s), _) => match exitlab_lab::host_survey::survey(None).tsc.khz {
            Some(khz) => PhaseSplit::Every((s * khz as f64 * 1000.0) as u64),
            None => {
                return Err(
                    "--phase-seconds needs the TSC frequency, which this host does not report; use --marker-port"
                        .into(),
                )
            }
        },
        (None, Some(p)) => PhaseSplit::MarkerPort(p),
        (None, None) => PhaseSplit::None,
    })
}

/// While the session traces: waits for the process `--pid` names to end, or runs the
/// command and waits for it, either for at most `--seconds`. The command's exit status,
/// if it ended; an error if it could not be started.
fn wait_for_target(a: &TraceArgs) -> Result<Option<ExitStatus>, String> {
    let deadline = a
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    if let Some(pid) = a.pid {
        let alive = PathBuf::from(format!("/proc/{pid}"));
        while alive.exists() && deadline.is_none_or(|d| Instant::now() < d) {
            std::thread::sleep(Duration::from_millis(50));
        }
        return Ok(None);
    }
    let mut child = Command::new(&a.command[0])
        .args(&a.command[1..])
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", a.command[0]))?;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Ok(Some(s)),
            Ok(None) if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                eprintln!("exitlab trace: waiting for the command failed: {e}");
                return Ok(None);
            }
        }
    }
}

/// The line that says how the traced command ended (none for `--pid`).
fn command_line(a: &TraceArgs, status: Option<ExitStatus>) -> Option<String> {
    if let Some(s) = status {
        Some(format!("command: {} ({s})", a.command.join(" ")))
    } else if a.pid.is_none() {
        Some(format!(
            "command: {} (still running when tracing stopped after --seconds)",
            a.command.join(" ")
        ))
    } else {
        None
    }
}

/// Starts tracing the threads of `--pid`, or this process's (the command is forked from
/// it and followed), once stale instances are removed, and says where and which events
/// this kernel lacks. The exit code if it cannot.
fn start_session(a: &TraceArgs) -> Result<Session, i32> {
    let pids = match a.pid {
        Some(p) => threads_of(p).map_err(usage_error)?,
        // Our own process: the command is forked from it and followed.
        None => vec![std::process::id()],
    };
    let cfg = SessionConfig {
        pids,
        follow_forks: true,
        buffer_kb: a.buffer_kb,
        ..SessionConfig::default()
    };
    if let Some(note) = remove_stale_instances() {
        eprintln!("exitlab trace: {note}");
    }
    let session = match Session::start(&cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("exitlab trace: {e}");
            return Err(EXIT_TEST_FAILED);
        }
    };
    let missing: Vec<String> = session
        .events()
        .iter()
        .filter(|e| !e.available)
        .map(|e| e.name.replace('/', ":"))
        .collect();
    eprintln!(
        "exitlab trace: tracing through {} (clock x86-tsc){}",
        session.dir().display(),
        if missing.is_empty() {
            String::new()
        } else {
            format!("; absent on this kernel: {}", missing.join(", "))
        }
    );
    Ok(session)
}

/// Runs `exitlab trace`; returns the process exit code.
pub fn trace_cmd(a: TraceArgs) -> i32 {
    if a.cleanup {
        return cleanup();
    }
    if let Err(e) = a.json.check() {
        return usage_error(e);
    }
    if a.floor {
        return floor(&a);
    }
    if a.pid.is_none() && a.command.is_empty() {
        return usage_error("exitlab trace needs --pid PID or a command after `--`");
    }
    for (option, value) in [
        ("--seconds", a.seconds),
        ("--phase-seconds", a.phase_seconds),
    ] {
        if let Some(Err(e)) = value.map(|s| crate::common::check_seconds(option, s)) {
            return usage_error(e);
        }
    }
    let split = match phase_split(&a) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let session = match start_session(&a) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let command_status = match wait_for_target(&a) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let cap = match session.finish() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("exitlab trace: {e}");
            return EXIT_TEST_FAILED;
        }
    };
    let report = TraceReport::from_capture(&cap, split, None);
    let command_line = command_line(&a, command_status);
    if a.json.to_stdout() {
        if let Some(l) = &command_line {
            eprintln!("{l}");
        }
    } else {
        print!("{}", report.render());
        if let Some(l) = &command_line {
            println!("{l}");
        }
    }
    if let Err(code) = a.json.write(&report, "trace profile") {
        return code;
    }
    match failed_status(command_status) {
        Some(code) => {
            if crate::verbosity::level() >= 0 {
                eprintln!(
                    "exitlab trace: the traced command failed: exit status {code}, which exitlab trace exits with"
                );
            }
            code
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(script: &str) -> Option<ExitStatus> {
        Some(Command::new("sh").args(["-c", script]).status().unwrap())
    }

    #[test]
    fn a_failed_command_passes_its_status_on_and_a_signal_gives_128_plus_its_number() {
        assert_eq!(failed_status(status_of("exit 0")), None);
        assert_eq!(failed_status(status_of("exit 7")), Some(7));
        assert_eq!(failed_status(status_of("exit 1")), Some(1));
        assert_eq!(failed_status(status_of("kill -TERM $$")), Some(128 + 15));
        // Still running when tracing stopped (--seconds), or --pid: nothing to pass on.
        assert_eq!(failed_status(None), None);
    }
}
