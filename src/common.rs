//! Options that several subcommands take, defined once so that each means the same thing
//! wherever it appears:
//!
//! - `--json [FILE]` (bench, host, trace, agree): the command's output as JSON, written
//!   atomically to FILE, or to standard output when FILE is `-` or left out (standard
//!   output then carries only the JSON; notes and progress stay on standard error).
//! - `--timeout SECONDS` (bench, run): a limit on the command's wall-clock time; when it
//!   expires the command stops, keeps what it has (bench: the rounds that completed) and
//!   exits with 124, as `timeout(1)` does; 0 means no limit.
//! - `--seconds SECONDS` (trace, run --builtin chaos) is not a limit but the length of the
//!   activity asked for: reaching it is success.
//! - `--no-seccomp`, `--strict-ioctl` (bench, run, agree: the subcommands that run vCPU
//!   threads in this process): the vCPU threads' seccomp filter off, or tightened.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::status::{EXIT_CANT_WRITE, EXIT_INTERNAL};

/// The `--json [FILE]` option.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct JsonArg {
    /// Write the output as JSON to FILE (atomically), or to standard output when FILE is
    /// `-` or left out; standard output then carries only the JSON.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
}

impl JsonArg {
    /// Whether the JSON goes to standard output (and the text output is left out).
    pub fn to_stdout(&self) -> bool {
        self.json.as_deref() == Some(Path::new("-"))
    }

    /// Checks, before anything runs, that the JSON can later be written: FILE's directory
    /// exists and a file can be created there.
    pub fn check(&self) -> Result<(), String> {
        match &self.json {
            Some(p) if !self.to_stdout() => {
                exitlab_results::results::check_writable(p).map_err(|e| e.to_string())
            }
            _ => Ok(()),
        }
    }

    /// Writes `value` where `--json` says (nothing without `--json`); on failure prints why
    /// and returns the exit code. A file written is named on standard error unless quiet.
    pub fn write<T: Serialize + ?Sized>(&self, value: &T, what: &str) -> Result<(), i32> {
        let Some(path) = &self.json else {
            return Ok(());
        };
        if self.to_stdout() {
            let text = serde_json::to_string_pretty(value).map_err(|e| {
                eprintln!("exitlab: cannot encode the {what} as JSON: {e}");
                EXIT_INTERNAL
            })?;
            let mut out = std::io::stdout().lock();
            return writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .map_err(|e| {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        eprintln!("exitlab: cannot write the {what} to standard output: {e}");
                    }
                    EXIT_CANT_WRITE
                });
        }
        match exitlab_results::results::write_atomic(path, value) {
            Ok(()) => {
                if crate::verbosity::level() >= 0 {
                    eprintln!("{what} written to {}", path.display());
                }
                Ok(())
            }
            Err(e) => {
                eprintln!("exitlab: {e}");
                Err(EXIT_CANT_WRITE)
            }
        }
    }
}

/// `--no-seccomp` and `--strict-ioctl`: the seccomp filter of the vCPU threads, for the
/// subcommands that run VMs in this process (bench, run, agree); the others have no
/// vCPU threads for them to mean anything to.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct VcpuFilter {
    /// Run vCPU threads without their seccomp filter (for debugging).
    #[arg(long)]
    pub no_seccomp: bool,
    /// Also check that every ioctl of a vCPU thread is a KVM ioctl (type 0xAE). Off by
    /// default: with the check, the seccomp filter runs on every KVM_RUN (~150-200 cycles
    /// per exit on a host like this project's), without it the kernel's action cache
    /// skips the filter; see docs/exit-path.md.
    #[arg(long, conflicts_with = "no_seccomp")]
    pub strict_ioctl: bool,
}

impl VcpuFilter {
    /// Sets the filter of the vCPU threads this process starts from now on.
    pub fn apply(self) {
        exitlab_vmm::seccomp::set_enabled(!self.no_seccomp);
        exitlab_vmm::seccomp::set_strict_ioctl(self.strict_ioctl);
    }
}

/// Prints why KVM cannot be used, as `exitlab host` diagnoses it (the same reason and
/// advice: a missing device node is not a missing module), and returns the exit code.
/// Errors other than opening /dev/kvm are printed as they are.
pub fn kvm_unusable(e: &exitlab_vmm::VmmError) -> i32 {
    use exitlab_vmm::VmmError;
    let diagnosis = match e {
        VmmError::KvmMissing | VmmError::KvmPermission(_) | VmmError::KvmOpen(_) => {
            exitlab_host::kvm_diagnosis()
        }
        _ => None,
    };
    match diagnosis {
        Some(d) => eprintln!(
            "exitlab: KVM is not usable: {}
what to do: {}",
            d.reason, d.advice
        ),
        None => eprintln!("exitlab: {e}"),
    }
    crate::status::EXIT_NO_KVM
}

/// The progress bar bench and `run --builtin chaos` draw on a terminal's standard error:
/// elapsed time, `middle` (an indicatif template with the bar) and the message.
pub fn progress_bar(len: u64, middle: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template(&format!("{{elapsed_precise}} {middle} {{msg}}"))
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Largest `--timeout` (and `--seconds`), in seconds: 30 days.
pub const MAX_TIMEOUT_S: f64 = 30.0 * 86400.0;

/// Checks a `--timeout` value: a finite number of seconds in 0..=[`MAX_TIMEOUT_S`], 0
/// meaning no limit.
pub fn check_timeout(s: f64) -> Result<(), String> {
    if s.is_finite() && (0.0..=MAX_TIMEOUT_S).contains(&s) {
        Ok(())
    } else {
        Err(format!(
            "--timeout {} must be a number of seconds in 0..={MAX_TIMEOUT_S} (0 for no limit)",
            shown(s)
        ))
    }
}

/// Checks a duration option that is not a limit (`--seconds`, `--phase-seconds`): a finite
/// number of seconds in (0, [`MAX_TIMEOUT_S`]].
pub fn check_seconds(option: &str, s: f64) -> Result<(), String> {
    if s.is_finite() && s > 0.0 && s <= MAX_TIMEOUT_S {
        Ok(())
    } else {
        Err(format!(
            "{option} {} must be a number of seconds in (0, {MAX_TIMEOUT_S}]",
            shown(s)
        ))
    }
}

/// A number as a message shows it: huge ones in exponent form (1e99, not 100 digits).
fn shown(s: f64) -> String {
    if s.abs() >= 1e9 {
        format!("{s:e}")
    } else {
        s.to_string()
    }
}

/// A `--timeout` being watched by a thread: when it expires, the thread sets `expired` and
/// the command's stop flag, which the command checks as it does for SIGINT. Dropping the
/// watch ends the thread.
pub struct TimeoutWatch {
    expired: Arc<AtomicBool>,
    _stop: Option<mpsc::Sender<()>>,
}

impl TimeoutWatch {
    /// Watches `seconds` (0: no limit, nothing is started); `stop` is the flag to raise.
    pub fn start(seconds: f64, stop: Arc<AtomicBool>) -> TimeoutWatch {
        let expired = Arc::new(AtomicBool::new(false));
        if seconds <= 0.0 {
            return TimeoutWatch {
                expired,
                _stop: None,
            };
        }
        let (tx, rx) = mpsc::channel::<()>();
        let flag = expired.clone();
        let limit = Duration::from_secs_f64(seconds);
        let spawned = std::thread::Builder::new()
            .name("timeout".into())
            .spawn(move || {
                // Disconnected (the watch was dropped) ends the wait without a timeout.
                if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                    flag.store(true, Ordering::SeqCst);
                    stop.store(true, Ordering::SeqCst);
                }
            });
        if let Err(e) = spawned {
            eprintln!("exitlab: cannot start the --timeout watch ({e}); running without a limit");
        }
        TimeoutWatch {
            expired,
            _stop: Some(tx),
        }
    }

    /// Whether the limit expired.
    pub fn expired(&self) -> bool {
        self.expired.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_values() {
        assert!(check_timeout(0.0).is_ok());
        assert!(check_timeout(0.5).is_ok());
        assert!(check_timeout(MAX_TIMEOUT_S).is_ok());
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e99, MAX_TIMEOUT_S + 1.0] {
            let e = check_timeout(bad).unwrap_err();
            assert!(e.starts_with("--timeout "), "{e}");
        }
    }

    #[test]
    fn seconds_values() {
        assert!(check_seconds("--seconds", 0.001).is_ok());
        assert!(check_seconds("--seconds", MAX_TIMEOUT_S).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e99] {
            let e = check_seconds("--phase-seconds", bad).unwrap_err();
            assert!(e.starts_with("--phase-seconds "), "{e}");
        }
    }

    #[test]
    fn a_watch_raises_the_stop_flag_when_it_expires_and_not_before() {
        let stop = Arc::new(AtomicBool::new(false));
        let w = TimeoutWatch::start(0.3, stop.clone());
        assert!(!w.expired());
        for _ in 0..500 {
            if w.expired() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(w.expired());
        assert!(stop.load(Ordering::SeqCst));

        // No limit: nothing is raised.
        let stop = Arc::new(AtomicBool::new(false));
        let w = TimeoutWatch::start(0.0, stop.clone());
        std::thread::sleep(Duration::from_millis(20));
        assert!(!w.expired() && !stop.load(Ordering::SeqCst));

        // Dropped before it expires: nothing is raised afterwards (the limit is long
        // enough that a loaded host does not reach it before the drop).
        let stop = Arc::new(AtomicBool::new(false));
        drop(TimeoutWatch::start(0.3, stop.clone()));
        std::thread::sleep(Duration::from_millis(600));
        assert!(!stop.load(Ordering::SeqCst));
    }

    #[derive(clap::Parser)]
    struct T {
        #[command(flatten)]
        json: JsonArg,
    }

    #[test]
    fn json_without_a_file_means_standard_output() {
        use clap::Parser;
        let t = T::try_parse_from(["x", "--json"]).unwrap();
        assert!(t.json.to_stdout());
        let t = T::try_parse_from(["x", "--json", "-"]).unwrap();
        assert!(t.json.to_stdout());
        let t = T::try_parse_from(["x", "--json", "out.json"]).unwrap();
        assert_eq!(t.json.json.as_deref(), Some(Path::new("out.json")));
        assert!(!t.json.to_stdout());
        let t = T::try_parse_from(["x"]).unwrap();
        assert!(t.json.json.is_none() && !t.json.to_stdout());
    }
}
