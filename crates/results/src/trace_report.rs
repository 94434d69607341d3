//! `exitlab trace`: the exit profile of a KVM process from the kernel's side.
//!
//! The input is the event stream of [`exitlab_trace`] (kernel tracepoints with TSC
//! timestamps). Per vCPU thread, events are paired into exits:
//! - a **userspace exit** is a `kvm_userspace_exit`; its port comes from the `kvm_pio`
//!   write traced before it in the same KVM_RUN (an OUT) or from the `kvm_pio` read
//!   traced when the next KVM_RUN completes it (an IN); its MMIO page likewise from
//!   `kvm_mmio`. Its **userspace time** runs from `kvm_userspace_exit` to the thread's
//!   next `ioctl(KVM_RUN)` entry (`raw_syscalls:sys_enter`): the kernel's return to
//!   userspace, the VMM's handling and the next system call's entry. Its **KVM_RUN
//!   time** runs from that ioctl's entry to `kvm_userspace_exit`: guest and kernel time
//!   together, which is all a host without `kvm_exit` shows of the kernel side. Where
//!   `kvm_exit` fires, the **exit leg** (`kvm_exit` → `kvm_userspace_exit`) is the
//!   kernel's share of the exit;
//! - a **kernel exit** is a `kvm_exit` followed by `kvm_entry` without a userspace exit
//!   (its kernel time is the difference), or, on a host without `kvm_exit`, a
//!   `kvm_pio`/`kvm_mmio`/`kvm_msr` that no userspace exit claimed (counted, not timed).
//!
//! Exits are grouped by what they did (`out`, `in`, `mmio write`, `rdmsr`, `hlt`, the
//! `kvm_exit` reason, ...) and their port, MMIO page or MSR, per thread and per phase
//! (fixed time slices, or the stretches between writes to a marker port).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use exitlab_trace::{Capture, Event, MmioKind, Record};
use serde::Serialize;

use crate::format::{fmt_cycles, layout, Align};
use crate::stats::describe::{summarize, Summary};

/// The KVM_RUN ioctl request number.
pub const KVM_RUN: u64 = 0xae80;
/// The ioctl system call number on x86-64.
pub const SYS_IOCTL: i64 = 16;

/// How to split a run into phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseSplit {
    /// One phase.
    None,
    /// A new phase every so many trace-clock cycles from the first event.
    Every(u64),
    /// A new phase at every write to this port (by any thread).
    MarkerPort(u16),
}

/// Who handled an exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Handled {
    /// KVM_RUN returned to the VMM's userspace.
    User,
    /// The kernel handled it and re-entered the guest.
    Kernel,
}

/// What an exit touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Nothing traced (HLT, a userspace MSR exit whose index is not traced, ...).
    None,
    /// An I/O port.
    Port(u16),
    /// The 4 KiB guest-physical page of an MMIO access.
    Page(u64),
    /// An MSR.
    Msr(u32),
}

impl Target {
    fn label(&self) -> String {
        match self {
            Target::None => "-".into(),
            Target::Port(p) => format!("port {p:#x}"),
            Target::Page(a) => format!("page {a:#x}"),
            Target::Msr(m) => format!("msr {m:#x}"),
        }
    }
}

/// One class of exits: what they did, where, and who handled them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ExitKey {
    /// Who handled it.
    pub handled: Handled,
    /// What it did: `out`, `in`, `mmio read`, `mmio write`, `rdmsr`, `wrmsr`, `hlt`,
    /// `interrupted (EINTR)`, a kvm_exit reason, ...
    pub what: String,
    /// Its port, MMIO page or MSR.
    pub target: Target,
}

/// One exit as paired from the events.
#[derive(Debug, Clone)]
struct ExitRec {
    ts: u64,
    phase: usize,
    key: ExitKey,
    user: Option<u64>,
    run: Option<u64>,
    exit_leg: Option<u64>,
    kernel: Option<u64>,
}

/// The statistics of one exit class in one phase of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct ClassSummary {
    /// The class.
    pub key: ExitKey,
    /// Exits counted.
    pub count: u64,
    /// Userspace time (kvm_userspace_exit → next KVM_RUN entry), cycles.
    pub user: Option<Summary>,
    /// KVM_RUN time (ioctl entry → kvm_userspace_exit: guest and kernel), cycles.
    pub run: Option<Summary>,
    /// Exit leg (kvm_exit → kvm_userspace_exit), cycles, where kvm_exit fires.
    pub exit_leg: Option<Summary>,
    /// Kernel time of a kernel-handled exit (kvm_exit → kvm_entry), cycles.
    pub kernel: Option<Summary>,
}

/// One phase of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// 0-based phase index.
    pub index: usize,
    /// Exit classes, ordered by handler, then count (largest first).
    pub classes: Vec<ClassSummary>,
    /// All userspace exits of the phase together.
    pub all_user: Option<ClassSummary>,
}

/// One vCPU thread.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    /// Its command name.
    pub comm: String,
    /// Thread id.
    pub tid: u32,
    /// Process id, when recorded.
    pub tgid: Option<u32>,
    /// Phases with at least one exit.
    pub phases: Vec<PhaseReport>,
}

/// The whole profile.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    /// vCPU threads, by thread id.
    pub threads: Vec<ThreadReport>,
    /// Events parsed.
    pub events: u64,
    /// Events the kernel dropped.
    pub lost: u64,
    /// Whether kvm_exit fired at all.
    pub kvm_exit_seen: bool,
    /// Phase boundaries (trace-clock cycles since the first event).
    pub phase_starts: Vec<u64>,
    /// What the trace cannot show and why.
    pub notes: Vec<String>,
}

#[derive(Default)]
struct ThreadState {
    comm: String,
    tgid: Option<u32>,
    run_start: Option<u64>,
    kvm_exit: Option<(u64, String)>,
    /// A pio/mmio/msr event not yet claimed: (direction word, target).
    pending: Option<(&'static str, Target)>,
    /// The last userspace exit, waiting for the next KVM_RUN entry.
    gap_open: Option<usize>,
    /// An IN or MMIO read exit, waiting for the completion event that names its target.
    await_target: Option<usize>,
    exits: Vec<ExitRec>,
}

impl ThreadState {
    /// Counts an unclaimed pio/mmio/msr event as a kernel-handled exit (no kvm_exit).
    fn flush_pending(&mut self, ts: u64, phase: usize) {
        if let Some((what, target)) = self.pending.take() {
            self.exits.push(ExitRec {
                ts,
                phase,
                key: ExitKey {
                    handled: Handled::Kernel,
                    what: what.into(),
                    target,
                },
                user: None,
                run: None,
                exit_leg: None,
                kernel: None,
            });
        }
    }
}

fn user_what(reason: &str, code: i64, pending: Option<&(&'static str, Target)>) -> String {
    match reason {
        "IO" => pending.map_or("in", |p| p.0).into(),
        "MMIO" => pending.map_or("mmio read", |p| p.0).into(),
        "X86_RDMSR" => "rdmsr".into(),
        "X86_WRMSR" => "wrmsr".into(),
        "restart" => "interrupted (EINTR)".into(),
        "error" => format!("KVM_RUN error (errno {code})"),
        r => r.to_ascii_lowercase(),
    }
}

/// The exits of every thread, as paired from the events.
struct Paired {
    threads: BTreeMap<u32, ThreadState>,
    phase_starts: Vec<u64>,
    kvm_exit_seen: bool,
    sys_enter_seen: bool,
}

/// Which phase each event falls in: a new one every `Every` cycles, or after each write
/// to the marker port.
struct PhaseClock {
    split: PhaseSplit,
    t0: u64,
    current: usize,
    starts: Vec<u64>,
}

impl PhaseClock {
    fn new(split: PhaseSplit, t0: u64) -> Self {
        PhaseClock {
            split,
            t0,
            current: 0,
            starts: vec![0],
        }
    }

    /// Moves on to the phase of `r`.
    fn advance(&mut self, r: &Record) {
        match self.split {
            PhaseSplit::Every(c) if c > 0 => {
                let p = (r.ts.saturating_sub(self.t0) / c) as usize;
                while self.current < p {
                    self.current += 1;
                    self.starts.push(self.current as u64 * c);
                }
            }
            PhaseSplit::MarkerPort(m) => {
                if let Event::Pio {
                    write: true, port, ..
                } = r.event
                {
                    if port == m {
                        self.current += 1;
                        self.starts.push(r.ts.saturating_sub(self.t0));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether an event takes part in the exits: KVM's events and the KVM_RUN ioctl.
fn kvm_related(event: &Event) -> bool {
    match event {
        Event::SysEnter { nr, args } => *nr == SYS_IOCTL && args[1] == KVM_RUN,
        Event::Other { .. } | Event::Marker { .. } => false,
        _ => true,
    }
}

impl ThreadState {
    /// Takes one KVM-related event of this thread, at `ts` in phase `phase`.
    fn take(&mut self, ts: u64, event: &Event, phase: usize) {
        match event {
            Event::SysEnter { .. } => {
                if let Some(i) = self.gap_open.take() {
                    let e = &mut self.exits[i];
                    e.user = Some(ts.saturating_sub(e.ts));
                }
                self.run_start = Some(ts);
            }
            Event::KvmExit { reason, .. } => {
                self.pending = None;
                self.kvm_exit = Some((ts, reason.clone()));
            }
            Event::KvmEntry { .. } => self.kernel_exit_done(ts, phase),
            Event::Pio { write, port, .. } => {
                let what = if *write { "out" } else { "in" };
                self.access(ts, phase, !write, what, Target::Port(*port));
            }
            Event::Mmio { kind, gpa, .. } => {
                let what = match kind {
                    MmioKind::Write => "mmio write",
                    _ => "mmio read",
                };
                let read = *kind == MmioKind::Read;
                self.access(ts, phase, read, what, Target::Page(gpa & !0xfff));
            }
            Event::Msr { write, index, .. } => {
                let what = if *write { "wrmsr" } else { "rdmsr" };
                self.access(ts, phase, false, what, Target::Msr(*index));
            }
            Event::UserspaceExit { reason, code } => self.userspace_exit(ts, phase, reason, *code),
            Event::Other { .. } | Event::Marker { .. } => {}
        }
    }

    /// KVM re-entered the guest after an exit it handled itself.
    fn kernel_exit_done(&mut self, ts: u64, phase: usize) {
        if let Some((t, reason)) = self.kvm_exit.take() {
            let target = self.pending.take().map_or(Target::None, |p| p.1);
            self.exits.push(ExitRec {
                ts,
                phase,
                key: ExitKey {
                    handled: Handled::Kernel,
                    what: reason,
                    target,
                },
                user: None,
                run: None,
                exit_leg: None,
                kernel: Some(ts.saturating_sub(t)),
            });
        }
    }

    /// A port, MMIO or MSR access event. A read's completion (`completes_read`) names
    /// the target of the userspace exit waiting for one; any other access is pending
    /// until an exit claims it.
    fn access(
        &mut self,
        ts: u64,
        phase: usize,
        completes_read: bool,
        what: &'static str,
        target: Target,
    ) {
        if completes_read {
            if let Some(i) = self.await_target.take() {
                self.exits[i].key.target = target;
                return;
            }
        }
        if self.kvm_exit.is_none() {
            self.flush_pending(ts, phase);
        }
        self.pending = Some((what, target));
    }

    /// KVM_RUN returned to the VMM.
    fn userspace_exit(&mut self, ts: u64, phase: usize, reason: &str, code: i64) {
        self.await_target = None;
        // An OUT (or unsatisfied MMIO read, or MMIO write) is traced before its
        // exit; anything else pending was handled in the kernel.
        let claims = match (reason, &self.pending) {
            ("IO", Some((w, Target::Port(_)))) => *w == "out",
            ("MMIO", Some((_, Target::Page(_)))) => true,
            _ => false,
        };
        let claimed = if claims { self.pending.take() } else { None };
        if self.kvm_exit.is_none() {
            self.flush_pending(ts, phase);
        }
        let what = user_what(reason, code, claimed.as_ref());
        let target = claimed.map_or(Target::None, |p| p.1);
        let exit_leg = self.kvm_exit.take().map(|(t, _)| ts.saturating_sub(t));
        self.pending = None;
        self.exits.push(ExitRec {
            ts,
            phase,
            key: ExitKey {
                handled: Handled::User,
                what,
                target,
            },
            user: None,
            run: self.run_start.take().map(|s| ts.saturating_sub(s)),
            exit_leg,
            kernel: None,
        });
        let i = self.exits.len() - 1;
        self.gap_open = Some(i);
        if target == Target::None && (reason == "IO" || reason == "MMIO") {
            self.await_target = Some(i);
        }
    }
}

/// Pairs the events of `records` into exits, per thread. `tgids`, when given, keeps
/// only those processes.
fn pair(records: &[Record], split: PhaseSplit, tgids: Option<&[u32]>) -> Paired {
    let mut threads: BTreeMap<u32, ThreadState> = BTreeMap::new();
    let mut phases = PhaseClock::new(split, records.first().map_or(0, |r| r.ts));
    let mut kvm_exit_seen = false;
    let mut sys_enter_seen = false;
    for r in records {
        if let (Some(keep), Some(tg)) = (tgids, r.tgid) {
            if !keep.contains(&tg) {
                continue;
            }
        }
        phases.advance(r);
        if !kvm_related(&r.event) {
            continue;
        }
        kvm_exit_seen |= matches!(r.event, Event::KvmExit { .. });
        sys_enter_seen |= matches!(r.event, Event::SysEnter { .. });
        let st = threads.entry(r.tid).or_default();
        if st.comm.is_empty() {
            st.comm = r.comm.clone();
        }
        st.tgid = st.tgid.or(r.tgid);
        st.take(r.ts, &r.event, phases.current);
    }
    let end_ts = records.last().map_or(0, |r| r.ts);
    for st in threads.values_mut() {
        st.flush_pending(end_ts, phases.current);
    }
    Paired {
        threads,
        phase_starts: phases.starts,
        kvm_exit_seen,
        sys_enter_seen,
    }
}

/// Userspace times (cycles) of the userspace exits that did `what` to `target`, over
/// every thread, in trace order.
pub fn user_times(records: &[Record], what: &str, target: Target) -> Vec<u64> {
    user_exits(records, what, target).1
}

/// How many userspace exits of `what` to `target` the records hold, and the userspace
/// time of each that was followed by a KVM_RUN entry (see [`user_times`]).
pub fn user_exits(records: &[Record], what: &str, target: Target) -> (u64, Vec<u64>) {
    let paired = pair(records, PhaseSplit::None, None);
    let exits: Vec<&ExitRec> = paired
        .threads
        .values()
        .flat_map(|t| &t.exits)
        .filter(|e| e.key.handled == Handled::User && e.key.what == what && e.key.target == target)
        .collect();
    (
        exits.len() as u64,
        exits.iter().filter_map(|e| e.user).collect(),
    )
}

/// Pairs the events of `records` into exits and summarises them. `tgids`, when given,
/// keeps only those processes.
pub fn analyse(records: &[Record], split: PhaseSplit, tgids: Option<&[u32]>) -> TraceReport {
    let Paired {
        threads,
        phase_starts,
        kvm_exit_seen,
        sys_enter_seen,
    } = pair(records, split, tgids);
    let mut out = Vec::new();
    for (tid, st) in threads {
        if st.exits.is_empty() {
            continue;
        }
        out.push(ThreadReport {
            comm: st.comm.clone(),
            tid,
            tgid: st.tgid,
            phases: summarise_phases(&st.exits),
        });
    }
    let mut notes = Vec::new();
    if !kvm_exit_seen && out.iter().any(|t| !t.phases.is_empty()) {
        notes.push("kvm_exit/kvm_entry did not fire on this host (a paravirtual or nested KVM may not trace them): the kernel's own share of each exit is not visible; \"KVM_RUN\" is the whole ioctl up to kvm_userspace_exit, guest time included, and kernel-handled exits are counted from kvm_pio/kvm_mmio/kvm_msr without a time".into());
    }
    if !sys_enter_seen && !out.is_empty() {
        notes.push("no ioctl(KVM_RUN) entries were traced (raw_syscalls:sys_enter absent or filtered out): the VMM's userspace time per exit is not measurable".into());
    }
    TraceReport {
        threads: out,
        events: records.len() as u64,
        lost: 0,
        kvm_exit_seen,
        phase_starts,
        notes,
    }
}

fn summary_of(values: &[f64]) -> Option<Summary> {
    summarize(values).ok()
}

fn class_summary(key: ExitKey, exits: &[&ExitRec]) -> ClassSummary {
    let col = |f: &dyn Fn(&ExitRec) -> Option<u64>| -> Vec<f64> {
        exits
            .iter()
            .filter_map(|e| f(e))
            .map(|v| v as f64)
            .collect()
    };
    ClassSummary {
        key,
        count: exits.len() as u64,
        user: summary_of(&col(&|e| e.user)),
        run: summary_of(&col(&|e| e.run)),
        exit_leg: summary_of(&col(&|e| e.exit_leg)),
        kernel: summary_of(&col(&|e| e.kernel)),
    }
}

fn summarise_phases(exits: &[ExitRec]) -> Vec<PhaseReport> {
    let mut by_phase: BTreeMap<usize, BTreeMap<&ExitKey, Vec<&ExitRec>>> = BTreeMap::new();
    for e in exits {
        by_phase
            .entry(e.phase)
            .or_default()
            .entry(&e.key)
            .or_default()
            .push(e);
    }
    by_phase
        .into_iter()
        .map(|(index, classes)| {
            let users: Vec<&ExitRec> = classes
                .iter()
                .filter(|(k, _)| k.handled == Handled::User)
                .flat_map(|(_, v)| v.iter().copied())
                .collect();
            let mut classes: Vec<ClassSummary> = classes
                .into_iter()
                .map(|(k, v)| class_summary(k.clone(), &v))
                .collect();
            classes.sort_by(|a, b| {
                (a.key.handled, std::cmp::Reverse(a.count), &a.key).cmp(&(
                    b.key.handled,
                    std::cmp::Reverse(b.count),
                    &b.key,
                ))
            });
            let all_user = (!users.is_empty()).then(|| {
                class_summary(
                    ExitKey {
                        handled: Handled::User,
                        what: "all userspace exits".into(),
                        target: Target::None,
                    },
                    &users,
                )
            });
            PhaseReport {
                index,
                classes,
                all_user,
            }
        })
        .collect()
}

impl TraceReport {
    /// Analyses a finished capture, adding what the capture itself says is missing.
    pub fn from_capture(cap: &Capture, split: PhaseSplit, tgids: Option<&[u32]>) -> TraceReport {
        let mut r = analyse(&cap.records, split, tgids);
        r.lost = cap.lost;
        for e in &cap.events {
            if !e.available {
                let what = match e.name {
                    "kvm/kvm_exit" | "kvm/kvm_entry" => {
                        "the kernel's share of each exit is not visible"
                    }
                    "raw_syscalls/sys_enter" => {
                        "the VMM's userspace time per exit is not measurable"
                    }
                    _ => "exits of that kind are not attributed to their port, page or MSR",
                };
                r.notes.push(format!(
                    "tracepoint {} is absent on this kernel: {what}",
                    e.name.replace('/', ":")
                ));
            }
        }
        if cap.lost > 0 {
            r.notes.insert(
                0,
                format!(
                    "the kernel dropped {} events (trace buffer overrun): counts and pairings are incomplete; raise --buffer-kb",
                    cap.lost
                ),
            );
        }
        if cap.unparsed > 0 {
            r.notes.push(format!(
                "{} trace lines could not be parsed (first: {})",
                cap.unparsed,
                cap.unparsed_examples.first().map_or("", String::as_str)
            ));
        }
        r
    }

    /// Exits of the classes matching `handled`, `what` and `target`, over every thread
    /// and phase.
    pub fn exit_counts(&self, handled: Handled, what: &str, target: Target) -> u64 {
        self.classes()
            .filter(|c| c.key.handled == handled && c.key.what == what && c.key.target == target)
            .map(|c| c.count)
            .sum()
    }

    fn classes(&self) -> impl Iterator<Item = &ClassSummary> {
        self.threads
            .iter()
            .flat_map(|t| t.phases.iter())
            .flat_map(|p| p.classes.iter())
    }

    /// Renders the profile as text tables.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} events; times in TSC cycles (x86-tsc trace clock); user = kvm_userspace_exit -> next ioctl(KVM_RUN) entry on the thread; KVM_RUN = that ioctl's entry -> kvm_userspace_exit",
            self.events
        );
        if self.threads.is_empty() {
            s.push_str("no vCPU thread was seen (no KVM_RUN and no KVM exit events from the traced processes)\n");
        }
        for t in &self.threads {
            let n: u64 = t
                .phases
                .iter()
                .flat_map(|p| &p.classes)
                .map(|c| c.count)
                .sum();
            let _ = writeln!(
                s,
                "\nthread {} (tid {}{}): {} exits",
                t.comm,
                t.tid,
                t.tgid.map(|p| format!(", pid {p}")).unwrap_or_default(),
                group(n)
            );
            for p in &t.phases {
                if self.phase_starts.len() > 1 {
                    let start = self.phase_starts.get(p.index).copied().unwrap_or(0);
                    let _ = writeln!(s, "  phase {} (from +{} cycles)", p.index + 1, group(start));
                }
                for line in phase_table(p).lines() {
                    let _ = writeln!(s, "  {line}");
                }
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

/// The table of one phase: a row per exit class, then all userspace exits together.
fn phase_table(p: &PhaseReport) -> String {
    let rows: Vec<Vec<String>> = p
        .classes
        .iter()
        .chain(p.all_user.iter())
        .map(|c| {
            let med = |x: &Option<Summary>| x.as_ref().map_or("-".into(), |s| fmt_cycles(s.median));
            let u = c.user.as_ref();
            vec![
                c.key.what.clone(),
                c.key.target.label(),
                match c.key.handled {
                    Handled::User => "user".into(),
                    Handled::Kernel => "kernel".into(),
                },
                group(c.count),
                med(&c.run),
                med(&c.exit_leg),
                med(&c.kernel),
                u.map_or("-".into(), |s| fmt_cycles(s.p10)),
                u.map_or("-".into(), |s| fmt_cycles(s.median)),
                u.map_or("-".into(), |s| fmt_cycles(s.p90)),
                u.map_or("-".into(), |s| fmt_cycles(s.p99)),
            ]
        })
        .collect();
    layout(
        &[
            "exit",
            "target",
            "handled",
            "count",
            "KVM_RUN med",
            "exit leg med",
            "kernel med",
            "user p10",
            "user med",
            "user p90",
            "user p99",
        ],
        &[
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
        ],
        &rows,
    )
}

fn group(n: u64) -> String {
    fmt_cycles(n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use exitlab_trace::{parse_line, Line};

    fn records(text: &str) -> Vec<Record> {
        text.lines()
            .filter_map(|l| match parse_line(l) {
                Ok(Line::Record(r)) => Some(r),
                Ok(_) => None,
                Err(e) => panic!("{e}"),
            })
            .collect()
    }

    fn class<'a>(r: &'a TraceReport, tid: u32, what: &str, target: Target) -> &'a ClassSummary {
        r.threads
            .iter()
            .find(|t| t.tid == tid)
            .and_then(|t| {
                t.phases
                    .iter()
                    .flat_map(|p| &p.classes)
                    .find(|c| c.key.what == what && c.key.target == target)
            })
            .unwrap_or_else(|| panic!("no {what} {target:?} in {r:#?}"))
    }

    // Recorded on this host (exitlab bench, outl_to_user then inl_from_user), shortened
    // and with one thread's timestamps rewritten to round numbers.
    const OUTS_AND_INS: &str = "\
 vcpu0-7 (     5) [001] ..... 1000: sys_enter: NR 16 (5, ae80, 0, f10, 0, 0)
 vcpu0-7 (     5) [001] ..... 1100: kvm_pio: pio_write at 0x4d0 size 1 count 1 val 0x0
 vcpu0-7 (     5) [001] ..... 1200: kvm_pio: pio_write at 0x1234 size 4 count 1 val 0x0
 vcpu0-7 (     5) [001] ..... 1300: kvm_userspace_exit: reason KVM_EXIT_IO (2)
 vcpu0-7 (     5) [001] ..... 1500: sys_enter: NR 16 (5, ae80, 0, f10, 0, 0)
 vcpu0-7 (     5) [001] ..... 1600: kvm_pio: pio_write at 0x1234 size 4 count 1 val 0x1
 vcpu0-7 (     5) [001] ..... 1700: kvm_userspace_exit: reason KVM_EXIT_IO (2)
 other-9 (     9) [000] ..... 1750: sys_enter: NR 16 (3, 5401, 0, 0, 0, 0)
 vcpu0-7 (     5) [001] ..... 2000: sys_enter: NR 16 (5, ae80, 0, f10, 0, 0)
 vcpu0-7 (     5) [001] ..... 2100: kvm_userspace_exit: reason KVM_EXIT_IO (2)
 vcpu0-7 (     5) [001] ..... 2400: sys_enter: NR 16 (5, ae80, 0, f10, 0, 0)
 vcpu0-7 (     5) [001] ..... 2410: kvm_pio: pio_read at 0x1234 size 4 count 1 val 0xffffffff
 vcpu0-7 (     5) [001] ..... 2500: kvm_userspace_exit: reason KVM_EXIT_IO (2)
 vcpu0-7 (     5) [001] ..... 2900: sys_enter: NR 16 (5, ae80, 0, f10, 0, 0)
 vcpu0-7 (     5) [001] ..... 2910: kvm_pio: pio_read at 0x1234 size 4 count 1 val 0xffffffff
 vcpu0-7 (     5) [001] ..... 3000: kvm_userspace_exit: reason KVM_EXIT_X86_RDMSR (29)
 vcpu0-7 (     5) [001] ..... 3050: kvm_msr: msr_read 3b = 0x0
 vcpu0-7 (     5) [001] ..... 3060: kvm_userspace_exit: reason KVM_EXIT_HLT (5)
";

    #[test]
    fn pairs_outs_and_ins_with_their_ports_and_times() {
        let r = analyse(&records(OUTS_AND_INS), PhaseSplit::None, None);
        assert_eq!(
            r.threads.len(),
            1,
            "the tty ioctl of another thread is no vCPU"
        );
        let out = class(&r, 7, "out", Target::Port(0x1234));
        assert_eq!(out.count, 2);
        let user = out.user.as_ref().expect("user times");
        // 1300 -> 1500 and 1700 -> 2000.
        assert_eq!((user.n, user.min, user.max), (2, 200.0, 300.0));
        let run = out.run.as_ref().expect("KVM_RUN times");
        assert_eq!((run.min, run.max), (200.0, 300.0));
        // The IN exits learn their port when the next KVM_RUN completes them.
        let inn = class(&r, 7, "in", Target::Port(0x1234));
        assert_eq!(inn.count, 2);
        let user = inn.user.as_ref().expect("user times");
        assert_eq!((user.min, user.max), (300.0, 400.0));
        // The OUT to 0x4d0 never reached userspace: the kernel handled it.
        let k = class(&r, 7, "out", Target::Port(0x4d0));
        assert_eq!((k.key.handled, k.count), (Handled::Kernel, 1));
        assert!(k.user.is_none() && k.kernel.is_none());
        let m = class(&r, 7, "rdmsr", Target::None);
        assert_eq!((m.key.handled, m.count), (Handled::User, 1));
        // The HLT exit had no KVM_RUN entry of its own (the trace has none after the
        // rdmsr exit): it has no KVM_RUN time, and the rdmsr exit no userspace time.
        assert!(m.user.is_none());
        let hlt = class(&r, 7, "hlt", Target::None);
        assert!(hlt.run.is_none());
        assert_eq!(
            class(&r, 7, "rdmsr", Target::Msr(0x3b)).key.handled,
            Handled::Kernel
        );
        assert!(!r.kvm_exit_seen);
        assert!(r
            .notes
            .iter()
            .any(|n| n.contains("kvm_exit/kvm_entry did not fire")));
        assert_eq!(r.exit_counts(Handled::User, "out", Target::Port(0x1234)), 2);
        // The raw times behind the summaries, in trace order.
        let rec = records(OUTS_AND_INS);
        assert_eq!(
            user_times(&rec, "out", Target::Port(0x1234)),
            vec![200, 300]
        );
        assert_eq!(user_times(&rec, "in", Target::Port(0x1234)), vec![300, 400]);
        assert!(user_times(&rec, "in", Target::Port(0x4d0)).is_empty());
        let all = r.threads[0].phases[0].all_user.as_ref().expect("all");
        assert_eq!(all.count, 6);
    }

    #[test]
    fn kvm_exit_and_entry_give_kernel_times_where_they_fire() {
        let text = "\
 CPU 0/KVM-40 (    30) [000] ..... 100: sys_enter: NR 16 (c, ae80, 0, 0, 0, 0)
 CPU 0/KVM-40 (    30) [000] d..1. 200: kvm_exit: vcpu 0 reason CPUID rip 0x1 info1 0x0 info2 0x0 intr_info 0x00000000 error_code 0x00000000
 CPU 0/KVM-40 (    30) [000] d..1. 260: kvm_entry: vcpu 0, rip 0x3 intr_info 0x00000000 error_code 0x00000000
 CPU 0/KVM-40 (    30) [000] d..1. 300: kvm_exit: vcpu 0 reason IO_INSTRUCTION rip 0x3 info1 0x0 info2 0x0 intr_info 0x00000000 error_code 0x00000000
 CPU 0/KVM-40 (    30) [000] ..... 310: kvm_pio: pio_write at 0x70 size 1 count 1 val 0x0
 CPU 0/KVM-40 (    30) [000] ..... 350: kvm_userspace_exit: reason KVM_EXIT_IO (2)
 CPU 0/KVM-40 (    30) [000] ..... 900: sys_enter: NR 16 (c, ae80, 0, 0, 0, 0)
 CPU 0/KVM-40 (    30) [000] d..1. 950: kvm_entry: vcpu 0, rip 0x4 intr_info 0x00000000 error_code 0x00000000
 CPU 0/KVM-40 (    30) [000] d..1. 1000: kvm_exit: vcpu 0 reason IO_INSTRUCTION rip 0x3 info1 0x0 info2 0x0 intr_info 0x00000000 error_code 0x00000000
 CPU 0/KVM-40 (    30) [000] ..... 1010: kvm_pio: pio_read at 0x4d0 size 1 count 1 val 0x0
 CPU 0/KVM-40 (    30) [000] d..1. 1090: kvm_entry: vcpu 0, rip 0x4 intr_info 0x00000000 error_code 0x00000000
";
        let r = analyse(&records(text), PhaseSplit::None, Some(&[30]));
        assert!(r.kvm_exit_seen);
        let c = class(&r, 40, "CPUID", Target::None);
        assert_eq!(c.kernel.as_ref().map(|s| s.median), Some(60.0));
        let io = class(&r, 40, "out", Target::Port(0x70));
        assert_eq!(io.exit_leg.as_ref().map(|s| s.median), Some(50.0));
        assert_eq!(io.user.as_ref().map(|s| s.median), Some(550.0));
        let k = class(&r, 40, "IO_INSTRUCTION", Target::Port(0x4d0));
        assert_eq!(
            (k.count, k.kernel.as_ref().map(|s| s.median)),
            (1, Some(90.0))
        );
        // A process filter that excludes it leaves nothing.
        assert!(analyse(&records(text), PhaseSplit::None, Some(&[31]))
            .threads
            .is_empty());
    }

    #[test]
    fn phases_split_at_marker_writes_and_by_time() {
        let mut text = String::new();
        let mut ts = 1000;
        let mut line = |t: &mut u64, ev: &str| {
            *t += 100;
            text.push_str(&format!(" v-1 (1) [000] ..... {t}: {ev}\n"));
        };
        for phase in 0..3u32 {
            line(&mut ts, "kvm_pio: pio_write at 0x80 size 1 count 1 val 0x1");
            line(&mut ts, "kvm_userspace_exit: reason KVM_EXIT_IO (2)");
            line(&mut ts, "sys_enter: NR 16 (5, ae80, 0, 0, 0, 0)");
            for _ in 0..(phase + 1) * 2 {
                line(
                    &mut ts,
                    "kvm_pio: pio_write at 0x1234 size 4 count 1 val 0x0",
                );
                line(&mut ts, "kvm_userspace_exit: reason KVM_EXIT_IO (2)");
                line(&mut ts, "sys_enter: NR 16 (5, ae80, 0, 0, 0, 0)");
            }
        }
        let rec = records(&text);
        let r = analyse(&rec, PhaseSplit::MarkerPort(0x80), None);
        let counts: Vec<u64> = r.threads[0]
            .phases
            .iter()
            .map(|p| {
                p.classes
                    .iter()
                    .filter(|c| c.key.target == Target::Port(0x1234))
                    .map(|c| c.count)
                    .sum()
            })
            .collect();
        // The first marker opens phase 1; phase 0 has no exit.
        assert_eq!(counts, vec![2, 4, 6]);
        // The marker writes are exits too, one in each phase.
        assert_eq!(r.exit_counts(Handled::User, "out", Target::Port(0x80)), 3);
        assert_eq!(r.phase_starts.len(), 4);
        // By time: 900 cycles per phase = 3 exits (of 300 cycles each) per phase.
        let r = analyse(&rec, PhaseSplit::Every(900), None);
        let total: u64 = r.threads[0]
            .phases
            .iter()
            .flat_map(|p| &p.classes)
            .map(|c| c.count)
            .sum();
        assert_eq!(total, 15, "12 exits to 0x1234 and 3 marker exits");
        assert!(r.threads[0]
            .phases
            .iter()
            .all(|p| p.classes.iter().map(|c| c.count).sum::<u64>() == 3));
    }

    #[test]
    fn mmio_and_msr_accesses_are_paired_and_other_processes_left_out() {
        let text = "\
 vcpu0-7 (     5) [001] ..... 100: sys_enter: NR 16 (5, ae80, 0, 0, 0, 0)
 vcpu0-7 (     5) [001] ..... 110: kvm_mmio: mmio write len 4 gpa 0xfee000b0 val 0x0
 vcpu0-7 (     5) [001] ..... 120: kvm_mmio: mmio write len 4 gpa 0xd0000010 val 0x1
 vcpu0-7 (     5) [001] ..... 130: kvm_userspace_exit: reason KVM_EXIT_MMIO (6)
 other-8 (     6) [000] ..... 140: sys_enter: NR 16 (5, ae80, 0, 0, 0, 0)
 other-8 (     6) [000] ..... 150: kvm_userspace_exit: reason KVM_EXIT_HLT (5)
 vcpu0-7 (     5) [001] ..... 200: sys_enter: NR 16 (5, ae80, 0, 0, 0, 0)
 vcpu0-7 (     5) [001] ..... 220: kvm_userspace_exit: reason KVM_EXIT_MMIO (6)
 vcpu0-7 (     5) [001] ..... 300: sys_enter: NR 16 (5, ae80, 0, 0, 0, 0)
 vcpu0-7 (     5) [001] ..... 310: kvm_mmio: mmio read len 4 gpa 0xd0000020 val 0x5
 vcpu0-7 (     5) [001] ..... 400: kvm_msr: msr_write c0000080 = 0x100
";
        let r = analyse(&records(text), PhaseSplit::None, Some(&[5]));
        assert_eq!(r.threads.len(), 1, "process 6 is left out");
        // The write to the APIC page was followed by another access before any exit:
        // the kernel handled it.
        let apic = class(&r, 7, "mmio write", Target::Page(0xfee0_0000));
        assert_eq!((apic.key.handled, apic.count), (Handled::Kernel, 1));
        // The next write is claimed by the MMIO exit that follows it.
        let w = class(&r, 7, "mmio write", Target::Page(0xd000_0000));
        assert_eq!((w.key.handled, w.count), (Handled::User, 1));
        assert_eq!(w.run.as_ref().map(|s| s.max), Some(30.0));
        assert_eq!(w.user.as_ref().map(|s| s.max), Some(70.0));
        // An MMIO exit with nothing traced before it is a read, and learns its page from
        // the read that completes it after the next KVM_RUN.
        let rd = class(&r, 7, "mmio read", Target::Page(0xd000_0000));
        assert_eq!((rd.key.handled, rd.count), (Handled::User, 1));
        assert_eq!(rd.user.as_ref().map(|s| s.max), Some(80.0));
        // An MSR access no exit claims, at the end of the trace: the kernel's.
        let m = class(&r, 7, "wrmsr", Target::Msr(0xc000_0080));
        assert_eq!((m.key.handled, m.count), (Handled::Kernel, 1));
        assert_eq!(
            analyse(&records(text), PhaseSplit::None, None)
                .threads
                .len(),
            2
        );
    }
}
