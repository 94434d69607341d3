//! A private tracefs instance: set up, stream, tear down. An instance a killed process
//! could not remove is removed by the next session.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::parse::{parse_line, Event, Line, Record};

/// Where tracefs is mounted, or is mounted by [`Session::start`] when it is not.
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// The older path under debugfs, used when it already exists.
pub const TRACEFS_DEBUGFS: &str = "/sys/kernel/debug/tracing";
/// The trace clock every session uses: the TSC, so that timestamps are cycles.
pub const CLOCK: &str = "x86-tsc";

/// The tracepoints a session enables, as `system/event`, and whether a session cannot
/// do without them.
pub const EVENTS: &[(&str, bool)] = &[
    ("kvm/kvm_userspace_exit", true),
    ("kvm/kvm_exit", false),
    ("kvm/kvm_entry", false),
    ("kvm/kvm_pio", false),
    ("kvm/kvm_mmio", false),
    ("kvm/kvm_msr", false),
    ("raw_syscalls/sys_enter", false),
];

/// Why tracing could not be set up or read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// No tracefs, and mounting one failed.
    #[error("tracefs is not available: {0}; mount it with `mount -t tracefs nodev {TRACEFS}` (as root) on a kernel built with CONFIG_FTRACE")]
    NoTracefs(String),
    /// Not allowed to create an instance.
    #[error("cannot create a tracefs instance in {path}: {source}; exitlab trace needs root (CAP_SYS_ADMIN): run it as root")]
    Permission {
        /// The instance directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The x86-tsc trace clock is missing.
    #[error("the trace clock {CLOCK} is not offered by this kernel (it offers: {0}); exitlab trace reports cycles and needs it (x86 only)")]
    NoClock(String),
    /// A required event is missing.
    #[error("the tracepoint {0} is absent; load the kvm module (modprobe kvm) or use a kernel with KVM tracepoints")]
    MissingEvent(String),
    /// The reader did not reach a checkpoint in time.
    #[error("tracefs: the trace reader did not reach checkpoint {0}: it read nothing for {1} s, or stopped (was the instance removed, or its trace_pipe closed?)")]
    Checkpoint(u64, u64),
    /// The reader kept reading but did not reach a checkpoint within the ceiling.
    #[error("tracefs: the trace reader did not reach checkpoint {0} within {1} s, though it kept reading (was tracing turned off from outside?)")]
    CheckpointCeiling(u64, u64),
    /// Reading or writing a tracefs file failed.
    #[error("tracefs: cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One event of [`EVENTS`] and whether this kernel has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventStatus {
    /// `system/event`.
    pub name: &'static str,
    /// Whether a session needs it.
    pub required: bool,
    /// Whether the kernel offers it.
    pub available: bool,
}

/// What to trace.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Threads to trace (empty: every task).
    pub pids: Vec<u32>,
    /// Also trace the children the listed threads fork from now on (and theirs).
    pub follow_forks: bool,
    /// Ring-buffer size per CPU, KiB.
    pub buffer_kb: u32,
    /// Keep only `sys_enter` events of this system call number (16: ioctl on x86-64).
    pub syscall: Option<i64>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            pids: Vec::new(),
            follow_forks: true,
            buffer_kb: 16 << 10,
            syscall: Some(SYS_IOCTL),
        }
    }
}

/// The ioctl system call number on x86-64.
pub const SYS_IOCTL: i64 = 16;

/// What a finished session collected.
#[derive(Debug, Default)]
pub struct Capture {
    /// The events, in the order `trace_pipe` gave them (time order across CPUs).
    pub records: Vec<Record>,
    /// Events the kernel dropped (LOST notices and the buffers' overrun counters).
    pub lost: u64,
    /// Lines that could not be parsed, and the first few of them.
    pub unparsed: u64,
    /// Examples of unparsed lines (at most 5).
    pub unparsed_examples: Vec<String>,
    /// Which events were available.
    pub events: Vec<EventStatus>,
}

/// A running tracefs instance. Dropping it (or [`Session::finish`]) removes the instance.
/// [`Session::checkpoint`] takes what was traced so far and goes on tracing.
pub struct Session {
    dir: PathBuf,
    events: Vec<EventStatus>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Capture>>,
    handover: Arc<Handover>,
    /// Checkpoints asked for so far.
    checkpoints: u64,
    /// The buffers' overrun counters at the last checkpoint (counted in its capture).
    overruns_taken: u64,
}

/// What a session's reader hands over at each checkpoint: the records it parsed up to
/// the checkpoint's marker.
#[derive(Default)]
struct Handover {
    state: Mutex<Passed>,
    passed: Condvar,
    /// Bytes the reader has taken from `trace_pipe` so far: a checkpoint waits as long as
    /// this grows (a slow host, an emulated CPU, formats and parses the text slowly).
    read: AtomicU64,
}

/// The last checkpoint the reader passed, and what it collected up to it (until taken).
#[derive(Default)]
struct Passed {
    checkpoint: u64,
    capture: Option<Capture>,
}

/// The text a checkpoint writes to the instance's `trace_marker`, before its number.
const CHECKPOINT: &str = "exitlab-checkpoint";

/// The most a checkpoint waits for the reader to reach its marker while the reader takes
/// nothing more from `trace_pipe`.
const CHECKPOINT_STALL: Duration = Duration::from_secs(10);

/// The most a checkpoint waits in all, however much the reader takes (traced tasks that go
/// on writing events while the marker never comes, say after `tracing_on` was turned off
/// from outside).
const CHECKPOINT_CEILING: Duration = Duration::from_secs(600);

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> TraceError + 'a {
    move |source| TraceError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), TraceError> {
    fs::write(path, text).map_err(io("write", path))
}

/// Finds tracefs, mounting it at [`TRACEFS`] when it is nowhere.
pub fn tracefs_root() -> Result<PathBuf, TraceError> {
    if let Some(p) = mounted_tracefs() {
        return Ok(p);
    }
    let out = Command::new("mount")
        .args(["-t", "tracefs", "nodev", TRACEFS])
        .output()
        .map_err(|e| TraceError::NoTracefs(format!("running mount failed: {e}")))?;
    if Path::new(TRACEFS).join("instances").is_dir() {
        return Ok(PathBuf::from(TRACEFS));
    }
    Err(TraceError::NoTracefs(format!(
        "{TRACEFS} is not mounted and `mount -t tracefs` failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Which of [`EVENTS`] this kernel offers, under tracefs root `root`.
pub fn probe_events(root: &Path) -> Vec<EventStatus> {
    EVENTS
        .iter()
        .map(|&(name, required)| EventStatus {
            name,
            required,
            available: root.join("events").join(name).is_dir(),
        })
        .collect()
}

static INSTANCE_SEQ: AtomicU32 = AtomicU32::new(0);

/// The prefix of every instance exitlab creates: `exitlab-<pid>-<start>-<n>`, where
/// `<pid>` is the owning process, `<start>` its start time (clock ticks after boot, field
/// 22 of `/proc/<pid>/stat`, so that a later process given the same PID is not taken for
/// the owner) and `<n>` a sequence number within the process.
pub const INSTANCE_PREFIX: &str = "exitlab-";

/// The start time of process `pid` (clock ticks after boot), if it exists.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields after it are
    // counted from its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The name of this process's next instance.
fn instance_name() -> String {
    let pid = std::process::id();
    format!(
        "{INSTANCE_PREFIX}{pid}-{}-{}",
        start_time(pid).unwrap_or(0),
        INSTANCE_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Who owns an instance, read from its name: the PID and, in names written since the
/// start time was added, the owner's start time. `None` for a name exitlab did not write.
pub fn instance_owner(name: &str) -> Option<(u32, Option<u64>)> {
    let mut parts = name.strip_prefix(INSTANCE_PREFIX)?.split('-');
    let pid = parts.next()?.parse().ok()?;
    let a: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        // exitlab-<pid>-<n> (older names): no start time.
        None => Some((pid, None)),
        Some(n) => {
            n.parse::<u64>().ok()?;
            parts.next().is_none().then_some((pid, Some(a)))
        }
    }
}

/// Whether an instance named `name` was left by a process that is gone: no process has
/// its PID, or the process that has it started at another time (the PID was reused).
/// `false` for names exitlab did not write, and for instances of running processes.
pub fn is_stale(name: &str) -> bool {
    match instance_owner(name) {
        None => false,
        Some((pid, start)) => match (start_time(pid), start) {
            (None, _) => true,
            (Some(now), Some(then)) => now != then,
            (Some(_), None) => false,
        },
    }
}

/// exitlab's instances under tracefs root `root`, by name, stale or not.
pub fn exitlab_instances(root: &Path) -> Vec<String> {
    let Ok(dir) = fs::read_dir(root.join("instances")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| instance_owner(n).is_some())
        .collect();
    names.sort();
    names
}

/// Removes the instances earlier exitlab processes left behind (killed before they
/// could clean up, e.g. by `kill -9`: see [`is_stale`]); returns the names removed.
/// An instance of a running exitlab is left alone.
pub fn remove_stale_instances(root: &Path) -> Vec<String> {
    exitlab_instances(root)
        .into_iter()
        .filter(|n| is_stale(n))
        .filter(|n| fs::remove_dir(root.join("instances").join(n)).is_ok())
        .collect()
}

/// Where tracefs is mounted now, without mounting it.
pub fn mounted_tracefs() -> Option<PathBuf> {
    [TRACEFS, TRACEFS_DEBUGFS]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.join("instances").is_dir())
}

impl Session {
    /// Creates the instance, enables the events and starts streaming.
    pub fn start(cfg: &SessionConfig) -> Result<Session, TraceError> {
        let root = tracefs_root()?;
        remove_stale_instances(&root);
        let events = probe_events(&root);
        if let Some(e) = events.iter().find(|e| e.required && !e.available) {
            return Err(TraceError::MissingEvent(e.name.replace('/', ":")));
        }
        let dir = root.join("instances").join(instance_name());
        fs::create_dir(&dir).map_err(|source| TraceError::Permission {
            path: dir.clone(),
            source,
        })?;
        // From here on, dropping the session removes the instance.
        let mut s = Session {
            dir,
            events,
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
            handover: Arc::new(Handover::default()),
            checkpoints: 0,
            overruns_taken: 0,
        };
        s.configure(cfg)?;
        let pipe_path = s.dir.join("trace_pipe");
        let pipe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe_path)
            .map_err(io("open", &pipe_path))?;
        let stop = s.stop.clone();
        let events = s.events.clone();
        let handover = s.handover.clone();
        s.reader = Some(
            std::thread::Builder::new()
                .name("trace-reader".into())
                .spawn(move || read_pipe(pipe, &stop, events, &handover))
                .map_err(io("start a reader thread for", &pipe_path))?,
        );
        write_file(&s.dir.join("tracing_on"), "1")?;
        Ok(s)
    }

    fn configure(&self, cfg: &SessionConfig) -> Result<(), TraceError> {
        let d = &self.dir;
        write_file(&d.join("tracing_on"), "0")?;
        let clocks_path = d.join("trace_clock");
        let clocks = fs::read_to_string(&clocks_path).map_err(io("read", &clocks_path))?;
        if !clocks
            .split_whitespace()
            .any(|c| c.trim_matches(|x| x == '[' || x == ']') == CLOCK)
        {
            return Err(TraceError::NoClock(clocks.trim().to_string()));
        }
        write_file(&clocks_path, CLOCK)?;
        write_file(
            &d.join("buffer_size_kb"),
            &cfg.buffer_kb.max(64).to_string(),
        )?;
        write_file(&d.join("options/record-tgid"), "1")?;
        write_file(
            &d.join("options/event-fork"),
            if cfg.follow_forks { "1" } else { "0" },
        )?;
        if !cfg.pids.is_empty() {
            let list: Vec<String> = cfg.pids.iter().map(|p| p.to_string()).collect();
            write_file(&d.join("set_event_pid"), &list.join(" "))?;
        }
        for e in self.events.iter().filter(|e| e.available) {
            let ev = d.join("events").join(e.name);
            if e.name == "raw_syscalls/sys_enter" {
                if let Some(nr) = cfg.syscall {
                    write_file(&ev.join("filter"), &format!("id == {nr}"))?;
                }
            }
            write_file(&ev.join("enable"), "1")?;
        }
        Ok(())
    }

    /// The events and whether this kernel has them.
    pub fn events(&self) -> &[EventStatus] {
        &self.events
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops tracing, reads what is left, removes the instance and returns the capture
    /// (what was traced since the last [`Session::checkpoint`]).
    pub fn finish(mut self) -> Result<Capture, TraceError> {
        let _ = write_file(&self.dir.join("tracing_on"), "0");
        self.stop.store(true, Ordering::Release);
        let mut cap = match self.reader.take().map(|h| h.join()) {
            Some(Ok(c)) => c,
            _ => Capture::default(),
        };
        cap.lost += overruns(&self.dir).saturating_sub(self.overruns_taken);
        cap.events = self.events.clone();
        Ok(cap)
    }

    /// Returns what was traced since the session started or since the last checkpoint,
    /// and goes on tracing: a numbered marker is written to the instance's
    /// `trace_marker`, and the records the reader parsed before it are taken once it
    /// reaches it. Whatever the traced tasks did before this call (a child that was
    /// waited for, say) is in the capture, since the marker is stamped after it. One
    /// session across several traced runs costs one instance's set-up and removal
    /// (~0.2 s on this project's host) instead of one per run. After an error, finish the
    /// session rather than checkpoint it again: a late hand-over would be replaced by the
    /// next.
    pub fn checkpoint(&mut self) -> Result<Capture, TraceError> {
        self.checkpoints += 1;
        let n = self.checkpoints;
        write_file(
            &self.dir.join("trace_marker"),
            &format!("{CHECKPOINT} {n}\n"),
        )?;
        let mut read = self.handover.read.load(Ordering::Acquire);
        let started = Instant::now();
        let mut since = started;
        let mut passed = self
            .handover
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while passed.checkpoint < n {
            let now = self.handover.read.load(Ordering::Acquire);
            if now != read {
                (read, since) = (now, Instant::now());
            } else if since.elapsed() >= CHECKPOINT_STALL
                || self.reader.as_ref().is_none_or(|h| h.is_finished())
            {
                return Err(TraceError::Checkpoint(n, CHECKPOINT_STALL.as_secs()));
            }
            if started.elapsed() >= CHECKPOINT_CEILING {
                return Err(TraceError::CheckpointCeiling(
                    n,
                    CHECKPOINT_CEILING.as_secs(),
                ));
            }
            passed = self
                .handover
                .passed
                .wait_timeout(passed, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        let mut cap = passed.capture.take().unwrap_or_default();
        drop(passed);
        let overruns = overruns(&self.dir);
        cap.lost += overruns.saturating_sub(self.overruns_taken);
        self.overruns_taken = overruns;
        cap.events = self.events.clone();
        Ok(cap)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("tracing_on"), "0");
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Events the per-CPU buffers overwrote or dropped.
fn overruns(dir: &Path) -> u64 {
    let Ok(cpus) = fs::read_dir(dir.join("per_cpu")) else {
        return 0;
    };
    let mut n = 0;
    for c in cpus.flatten() {
        if let Ok(s) = fs::read_to_string(c.path().join("stats")) {
            for line in s.lines() {
                if let Some(v) = line
                    .strip_prefix("overrun:")
                    .or_else(|| line.strip_prefix("dropped events:"))
                {
                    n += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    n
}

/// The checkpoint a record marks, if it is one of [`Session::checkpoint`]'s markers.
fn checkpoint_of(r: &Record) -> Option<u64> {
    match &r.event {
        Event::Marker { text } => text.strip_prefix(CHECKPOINT)?.trim().parse().ok(),
        _ => None,
    }
}

/// Streams `trace_pipe` into records until `stop` is set and the pipe is empty; at each
/// checkpoint's marker, hands what it has over (`handover`) and starts a new capture.
fn read_pipe(
    mut pipe: fs::File,
    stop: &AtomicBool,
    events: Vec<EventStatus>,
    handover: &Handover,
) -> Capture {
    let mut cap = Capture {
        events,
        ..Capture::default()
    };
    let mut buf = vec![0u8; 1 << 16];
    let mut pending: Vec<u8> = Vec::new();
    let take = |pending: &mut Vec<u8>, cap: &mut Capture, flush: bool| {
        let end = if flush {
            pending.len()
        } else {
            match pending.iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => return,
            }
        };
        for line in String::from_utf8_lossy(&pending[..end]).lines() {
            match parse_line(line) {
                Ok(Line::Record(r)) => match checkpoint_of(&r) {
                    Some(n) => {
                        let fresh = Capture {
                            events: cap.events.clone(),
                            ..Capture::default()
                        };
                        let mut passed = handover
                            .state
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        passed.capture = Some(std::mem::replace(cap, fresh));
                        passed.checkpoint = n;
                        handover.passed.notify_all();
                    }
                    None => cap.records.push(r),
                },
                Ok(Line::Lost(n)) => cap.lost += n,
                Ok(Line::Blank) => {}
                Err(e) => {
                    cap.unparsed += 1;
                    if cap.unparsed_examples.len() < 5 {
                        cap.unparsed_examples.push(e.line);
                    }
                }
            }
        }
        pending.drain(..end);
    };
    loop {
        let stopping = stop.load(Ordering::Acquire);
        match pipe.read(&mut buf) {
            Ok(n) if n > 0 => {
                handover.read.fetch_add(n as u64, Ordering::Release);
                pending.extend_from_slice(&buf[..n]);
                take(&mut pending, &mut cap, false);
                continue;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
        // Empty: the stop flag was read before this read, so nothing is left behind.
        if stopping {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    take(&mut pending, &mut cap, true);
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_names_its_owner_and_is_stale_only_when_the_owner_is_gone() {
        let me = std::process::id();
        let name = instance_name();
        assert_eq!(instance_owner(&name).map(|o| o.0), Some(me));
        assert!(!is_stale(&name), "this process is running: {name}");
        // The same PID with another start time: a later process was given the PID.
        let start = start_time(me).unwrap();
        assert!(is_stale(&format!("exitlab-{me}-{}-0", start + 1)));
        // No process can have a PID beyond pid_max (at most 2^22).
        assert!(is_stale("exitlab-4294967295-5-0"));
        assert!(
            is_stale("exitlab-4294967295-0"),
            "older names, no start time"
        );
        assert!(
            !is_stale(&format!("exitlab-{me}-0")),
            "older name of a live PID"
        );
        for other in [
            "exitlab",
            "exitlab-x-1",
            "someone-else-1-2",
            "exitlab-1-2-3-4",
        ] {
            assert_eq!(instance_owner(other), None, "{other}");
            assert!(!is_stale(other));
        }
    }

    #[test]
    fn stale_instances_are_removed_and_live_ones_kept() {
        // A directory laid out as tracefs's root, standing in for it.
        let root = std::env::temp_dir().join(format!("exitlab-tracefs-{}", std::process::id()));
        let inst = root.join("instances");
        fs::create_dir_all(&inst).unwrap();
        let live = instance_name();
        for n in [live.as_str(), "exitlab-4294967295-7-0", "other-tool"] {
            fs::create_dir_all(inst.join(n)).unwrap();
        }
        assert_eq!(
            remove_stale_instances(&root),
            vec!["exitlab-4294967295-7-0"]
        );
        assert_eq!(exitlab_instances(&root), vec![live.clone()]);
        assert!(inst.join("other-tool").is_dir(), "not exitlab's: kept");
        fs::remove_dir_all(&root).unwrap();
    }
}
