//! Parsing of tracefs text output (`trace` / `trace_pipe`), one line at a time.
//!
//! A line looks like
//! `           vcpu0-28566   (  28555) [001] ..... 3435655597230: kvm_pio: pio_read at 0x1234 size 4 count 1 val 0xffffffff`:
//! the task's command name (which may contain spaces and dashes), `-`, its thread id,
//! the thread group id in parentheses when the `record-tgid` option is on, the CPU in
//! brackets, the flags field, the timestamp (an integer with the `x86-tsc` clock), the
//! event name and the event's own text. Lost-event notices (`CPU:1 [LOST 42 EVENTS]`)
//! are reported as [`Line::Lost`].

/// What an MMIO trace event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmioKind {
    /// A read the kernel could not satisfy: it goes to userspace.
    UnsatisfiedRead,
    /// A completed read.
    Read,
    /// A write.
    Write,
}

/// One tracepoint, with the fields exitlab uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `kvm:kvm_exit`: the guest left guest mode (the reason as the kernel names it).
    KvmExit {
        /// Exit reason, e.g. `IO_INSTRUCTION` (VMX) or `io` (SVM).
        reason: String,
        /// vCPU index.
        vcpu: u32,
    },
    /// `kvm:kvm_entry`: the guest is entered.
    KvmEntry {
        /// vCPU index.
        vcpu: u32,
    },
    /// `kvm:kvm_userspace_exit`: KVM_RUN returns to userspace.
    UserspaceExit {
        /// The kvm_run exit reason without its `KVM_EXIT_` prefix (`IO`, `MMIO`, `HLT`,
        /// `X86_RDMSR`, ...), or `restart`/`error` when KVM_RUN returned an error.
        reason: String,
        /// The number in parentheses: the exit reason, or the errno for an error.
        code: i64,
    },
    /// `kvm:kvm_pio`: a port access (traced when the kernel sees its data).
    Pio {
        /// Whether it is an OUT.
        write: bool,
        /// The port.
        port: u16,
        /// Access size in bytes.
        size: u32,
        /// Repeat count (string I/O).
        count: u32,
    },
    /// `kvm:kvm_mmio`: an MMIO access.
    Mmio {
        /// Read, unsatisfied read or write.
        kind: MmioKind,
        /// Access size in bytes.
        len: u32,
        /// Guest-physical address.
        gpa: u64,
    },
    /// `kvm:kvm_msr`: an MSR access handled by the kernel.
    Msr {
        /// Whether it is a WRMSR.
        write: bool,
        /// The MSR index.
        index: u32,
        /// Whether it raised #GP in the guest.
        gp: bool,
    },
    /// `raw_syscalls:sys_enter`: a system call is entered.
    SysEnter {
        /// The system call number.
        nr: i64,
        /// Its six arguments.
        args: [u64; 6],
    },
    /// `ftrace:print` from a write to the instance's `trace_marker` (the line's event
    /// name is `tracing_mark_write`): the text written.
    Marker {
        /// What was written, without the trailing newline.
        text: String,
    },
    /// Any other event, by name.
    Other {
        /// The event's name.
        name: String,
    },
}

/// One event line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The task's command name.
    pub comm: String,
    /// The thread id.
    pub tid: u32,
    /// The thread group (process) id, when recorded.
    pub tgid: Option<u32>,
    /// The CPU the event was recorded on.
    pub cpu: u32,
    /// The timestamp, in trace-clock units (TSC cycles with `x86-tsc`).
    pub ts: u64,
    /// The event.
    pub event: Event,
}

/// What one line of trace text holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// An event.
    Record(Record),
    /// The kernel dropped this many events (the buffer overflowed).
    Lost(u64),
    /// A comment or an empty line.
    Blank,
}

/// Why a line could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unparsable trace line ({why}): {line}")]
pub struct ParseError {
    /// What was wrong.
    pub why: &'static str,
    /// The line (cut to 200 characters).
    pub line: String,
}

fn err(why: &'static str, line: &str) -> ParseError {
    ParseError {
        why,
        line: line.chars().take(200).collect(),
    }
}

/// A number in decimal or with a `0x` prefix in hexadecimal.
fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The word following `key ` in `text`.
fn after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = text;
    loop {
        let i = rest.find(key)?;
        let at_word = i == 0 || rest.as_bytes()[i - 1] == b' ';
        rest = &rest[i + key.len()..];
        if at_word {
            if let Some(r) = rest.strip_prefix(' ') {
                return r.split_whitespace().next();
            }
        }
    }
}

/// Parses one line of trace text.
pub fn parse_line(line: &str) -> Result<Line, ParseError> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(Line::Blank);
    }
    if let Some(i) = t.find("[LOST ") {
        let n = t[i + 6..]
            .split_whitespace()
            .next()
            .and_then(num)
            .ok_or_else(|| err("bad LOST count", line))?;
        return Ok(Line::Lost(n));
    }
    // The CPU field: the last "[digits]" that is followed by a flags word, a timestamp
    // and ": " (a command name could hold brackets, the rest of the header cannot).
    let mut found = None;
    for (i, _) in line.match_indices('[') {
        let Some(close) = line[i..].find(']').map(|c| i + c) else {
            continue;
        };
        let digits = &line[i + 1..close];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let mut words = line[close + 1..].split_whitespace();
        let (Some(_flags), Some(ts)) = (words.next(), words.next()) else {
            continue;
        };
        let Some(ts) = ts.strip_suffix(':') else {
            continue;
        };
        if ts.is_empty() || !ts.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        found = Some((i, close, digits, ts));
    }
    let (open, close, cpu, ts) = found.ok_or_else(|| err("no CPU field and timestamp", line))?;
    let cpu: u32 = cpu.parse().map_err(|_| err("bad CPU", line))?;
    let ts: u64 = ts.parse().map_err(|_| err("bad timestamp", line))?;
    // Task: "comm-tid" optionally followed by "(tgid)".
    let mut task = line[..open].trim();
    let mut tgid = None;
    if task.ends_with(')') {
        if let Some(p) = task.rfind('(') {
            tgid = task[p + 1..task.len() - 1].trim().parse().ok();
            task = task[..p].trim_end();
        }
    }
    let dash = task.rfind('-').ok_or_else(|| err("no task id", line))?;
    let tid: u32 = task[dash + 1..]
        .parse()
        .map_err(|_| err("bad task id", line))?;
    let comm = task[..dash].trim_start().to_string();
    // After the timestamp: "event: text".
    let rest = &line[close + 1..];
    let colon = rest.find(": ").ok_or_else(|| err("no event", line))?;
    let rest = rest[colon + 2..].trim_start();
    let (name, text) = match rest.find(": ") {
        Some(i) => (&rest[..i], rest[i + 2..].trim()),
        None => (rest.trim_end_matches(':'), ""),
    };
    let event = parse_event(name, text).ok_or_else(|| err("unexpected event text", line))?;
    Ok(Line::Record(Record {
        comm,
        tid,
        tgid,
        cpu,
        ts,
        event,
    }))
}

fn parse_event(name: &str, text: &str) -> Option<Event> {
    Some(match name {
        "kvm_exit" => Event::KvmExit {
            reason: after(text, "reason")?.to_string(),
            vcpu: after(text, "vcpu").and_then(num).unwrap_or(0) as u32,
        },
        "kvm_entry" => Event::KvmEntry {
            vcpu: after(text, "vcpu")
                .map(|v| v.trim_end_matches(','))
                .and_then(num)
                .unwrap_or(0) as u32,
        },
        "kvm_userspace_exit" => {
            // "reason KVM_EXIT_IO (2)", "reason restart (4)", "reason error (14)".
            let r = after(text, "reason")?;
            let open = text.rfind('(')?;
            let close = text.rfind(')')?;
            let code: i64 = text.get(open + 1..close)?.trim().parse().ok()?;
            Event::UserspaceExit {
                reason: r.strip_prefix("KVM_EXIT_").unwrap_or(r).to_string(),
                code,
            }
        }
        "kvm_pio" => {
            // "pio_read at 0x1234 size 4 count 1 val 0xffffffff"
            let write = text.starts_with("pio_write");
            if !write && !text.starts_with("pio_read") {
                return None;
            }
            Event::Pio {
                write,
                port: u16::try_from(num(after(text, "at")?)?).ok()?,
                size: num(after(text, "size")?)? as u32,
                count: num(after(text, "count")?)? as u32,
            }
        }
        "kvm_mmio" => {
            // "mmio write len 4 gpa 0xfee000b0 val 0x0"
            let kind = match text.split_whitespace().nth(1)? {
                "unsatisfied-read" => MmioKind::UnsatisfiedRead,
                "read" => MmioKind::Read,
                "write" => MmioKind::Write,
                _ => return None,
            };
            Event::Mmio {
                kind,
                len: num(after(text, "len")?)? as u32,
                gpa: num(after(text, "gpa")?)?,
            }
        }
        "kvm_msr" => {
            // "msr_write c0000080 = 0x100" / "msr_read 3b = 0x0 (#GP)"
            let mut w = text.split_whitespace();
            let write = match w.next()? {
                "msr_write" => true,
                "msr_read" => false,
                _ => return None,
            };
            Event::Msr {
                write,
                index: u32::from_str_radix(w.next()?, 16).ok()?,
                gp: text.ends_with("(#GP)"),
            }
        }
        "sys_enter" => {
            // "NR 16 (5, ae80, 0, 7f391fece000, 0, 4)"
            let nr = num(after(text, "NR")?)? as i64;
            let open = text.find('(')?;
            let close = text.rfind(')')?;
            let mut args = [0u64; 6];
            for (i, a) in text.get(open + 1..close)?.split(',').enumerate().take(6) {
                args[i] = u64::from_str_radix(a.trim(), 16).ok()?;
            }
            Event::SysEnter { nr, args }
        }
        "tracing_mark_write" => Event::Marker {
            text: text.trim_end().to_string(),
        },
        other => Event::Other {
            name: other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(line: &str) -> Record {
        match parse_line(line) {
            Ok(Line::Record(r)) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn parses_the_events_exitlab_uses() {
        let r = rec("           vcpu0-28566   [001] ..... 3435655597230: kvm_userspace_exit: reason KVM_EXIT_IO (2)");
        assert_eq!(
            (r.comm.as_str(), r.tid, r.tgid, r.cpu, r.ts),
            ("vcpu0", 28566, None, 1, 3435655597230)
        );
        assert_eq!(
            r.event,
            Event::UserspaceExit {
                reason: "IO".into(),
                code: 2
            }
        );
        let r = rec("           vcpu0-28566   [001] ..... 3435655599752: sys_enter: NR 16 (5, ae80, 0, 7f391fece000, 0, 4)");
        assert_eq!(
            r.event,
            Event::SysEnter {
                nr: 16,
                args: [5, 0xae80, 0, 0x7f39_1fec_e000, 0, 4]
            }
        );
        let r = rec("           vcpu0-28566   [001] ..... 3435655614208: kvm_pio: pio_read at 0x1234 size 4 count 1 val 0xffffffff ");
        assert_eq!(
            r.event,
            Event::Pio {
                write: false,
                port: 0x1234,
                size: 4,
                count: 1
            }
        );
        let r = rec(" vcpu0-28573 [001] ..... 3435776870902: kvm_pio: pio_write at 0x700 size 4 count 1 val 0x0 ");
        assert!(matches!(
            r.event,
            Event::Pio {
                write: true,
                port: 0x700,
                ..
            }
        ));
        let r = rec("vcpu0-28557 [001] ..... 3435576190786: kvm_msr: msr_write c0000080 = 0x100");
        assert_eq!(
            r.event,
            Event::Msr {
                write: true,
                index: 0xc000_0080,
                gp: false
            }
        );
        let r = rec("vcpu0-1 [000] d..1. 77: kvm_msr: msr_read 3b = 0x0 (#GP)");
        assert_eq!(
            r.event,
            Event::Msr {
                write: false,
                index: 0x3b,
                gp: true
            }
        );
        let r = rec(
            "vcpu0-1 [000] ..... 78: kvm_mmio: mmio unsatisfied-read len 4 gpa 0xd0000000 val 0x0",
        );
        assert_eq!(
            r.event,
            Event::Mmio {
                kind: MmioKind::UnsatisfiedRead,
                len: 4,
                gpa: 0xd000_0000
            }
        );
        let r = rec("vcpu0-1 [000] ..... 79: kvm_userspace_exit: reason restart (4)");
        assert_eq!(
            r.event,
            Event::UserspaceExit {
                reason: "restart".into(),
                code: 4
            }
        );
    }

    #[test]
    fn parses_kvm_exit_and_entry_of_both_vendors() {
        let r = rec(" CPU 0/KVM-4242 (   4230) [003] d..2. 100: kvm_exit: vcpu 1 reason IO_INSTRUCTION rip 0x1000 info1 0x0000000012340008 info2 0x0000000000000000 intr_info 0x00000000 error_code 0x00000000 requests 0x0000000000000000");
        assert_eq!(
            (r.comm.as_str(), r.tid, r.tgid, r.cpu),
            ("CPU 0/KVM", 4242, Some(4230), 3)
        );
        assert_eq!(
            r.event,
            Event::KvmExit {
                reason: "IO_INSTRUCTION".into(),
                vcpu: 1
            }
        );
        let r = rec("qemu-system-x86-9 [000] d..2. 101: kvm_exit: vcpu 0 reason io rip 0x10 info1 0x0 info2 0x0 intr_info 0x00000000 error_code 0x00000000");
        assert_eq!(r.comm, "qemu-system-x86");
        assert_eq!(
            r.event,
            Event::KvmExit {
                reason: "io".into(),
                vcpu: 0
            }
        );
        let r = rec("x-9 [000] d..2. 102: kvm_entry: vcpu 2, rip 0xfff0 intr_info 0x00000000 error_code 0x00000000");
        assert_eq!(r.event, Event::KvmEntry { vcpu: 2 });
    }

    #[test]
    fn names_with_brackets_dashes_and_unknown_tgids() {
        let r = rec("a [7] b-c-17 (-------) [002] ..... 5: sched_switch: prev_comm=x");
        assert_eq!(
            (r.comm.as_str(), r.tid, r.tgid, r.cpu),
            ("a [7] b-c", 17, None, 2)
        );
        assert_eq!(
            r.event,
            Event::Other {
                name: "sched_switch".into()
            }
        );
    }

    #[test]
    fn a_write_to_trace_marker_is_a_marker_with_its_text() {
        let r = rec(
            "<...>-14424 (  14424) [000] ...1. 71991: tracing_mark_write: exitlab-checkpoint 1",
        );
        assert_eq!(
            r.event,
            Event::Marker {
                text: "exitlab-checkpoint 1".into()
            }
        );
    }

    #[test]
    fn lost_events_comments_and_garbage() {
        assert_eq!(parse_line("CPU:1 [LOST 42 EVENTS]"), Ok(Line::Lost(42)));
        assert_eq!(parse_line("# tracer: nop"), Ok(Line::Blank));
        assert_eq!(parse_line(""), Ok(Line::Blank));
        assert!(parse_line("not a trace line").is_err());
        // A timestamp from another clock (seconds with a fraction) is refused.
        assert!(parse_line(
            "x-1 [000] ..... 12.345678: kvm_pio: pio_read at 0x1 size 1 count 1 val 0x0"
        )
        .is_err());
        // A port beyond 16 bits is refused, not truncated.
        assert!(parse_line(
            "x-1 [000] ..... 9: kvm_pio: pio_read at 0x12345 size 1 count 1 val 0x0"
        )
        .is_err());
    }
}
