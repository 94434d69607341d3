//! The vocabulary the run loop shares with its exit handlers and its callers: what a
//! userspace HLT does ([`HltPolicy`]), the doorbell hook ([`ExitHook`]), what it sees
//! ([`DoorbellCtx`]) and answers ([`HookReply`]), and why a vCPU stopped ([`VcpuStop`]).
//!
//! It sits below both [`crate::vcpu`] (the loop) and [`crate::exit`] (the handlers), so
//! that neither has to import the other's vocabulary.

use vm_memory::GuestMemoryMmap;

use crate::counts::ExitCounts;
use crate::kvmstats::KvmStats;

/// What a userspace HLT exit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HltPolicy {
    /// Re-enter the guest at the next instruction (measuring HLT exits).
    Resume,
    /// Stop the vCPU (a guest that halted with nothing to wake it).
    Stop,
}

/// What the hook tells the run loop after a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookReply {
    /// Re-enter the guest.
    Resume,
    /// Stop the vCPU; the run ends with [`VcpuStop::Hook`] carrying this code.
    Stop(u32),
}

/// What a doorbell handler sees.
pub struct DoorbellCtx<'a> {
    /// vCPU index.
    pub vcpu_id: u32,
    /// The 32-bit value written.
    pub value: u32,
    /// Guest memory.
    pub mem: &'a GuestMemoryMmap,
    /// Userspace exits so far (the doorbell being handled is already counted).
    pub counts: &'a ExitCounts,
    pub(crate) stats: Option<&'a KvmStats>,
}

impl DoorbellCtx<'_> {
    /// KVM's in-kernel count of all exits of this vCPU, when the host has binary stats.
    pub fn kvm_exits(&self) -> Option<u64> {
        self.stats.and_then(|s| s.read("exits"))
    }

    /// Every cumulative event count of KVM's binary statistics of this vCPU ("exits",
    /// "io_exits", "mmio_exits", "halt_exits", ...), when the host has them.
    pub fn kvm_counters(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        self.stats.map(KvmStats::read_counters)
    }
}

/// Receives doorbell writes (the guest → host channel of the lab kernel and of tests).
pub trait ExitHook {
    /// Handles one doorbell write.
    fn doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> HookReply;
}

/// A hook for guests that have no doorbell: every doorbell write stops the vCPU.
#[derive(Debug, Default)]
pub struct NoHook;

impl ExitHook for NoHook {
    fn doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> HookReply {
        HookReply::Stop(ctx.value)
    }
}

/// Why a vCPU stopped running.
#[derive(Debug)]
pub enum VcpuStop {
    /// The exit hook asked to stop.
    Hook(u32),
    /// A device asked to end the run (debug-exit port).
    DebugExit(u32),
    /// The guest asked for a reset.
    Reset,
    /// The guest entered ACPI S3 through PM1a_CNT.
    Suspend,
    /// The guest shut down (triple fault, or a shutdown system event).
    Shutdown,
    /// The guest halted with no in-kernel irqchip to wake it, under [`HltPolicy::Stop`].
    Halted,
    /// Another thread kicked the vCPU out of KVM_RUN and asked it to stop.
    Kicked,
    /// KVM_EXIT_FAIL_ENTRY.
    FailEntry {
        /// hardware_entry_failure_reason.
        reason: u64,
        /// Host CPU.
        cpu: u32,
    },
    /// KVM_EXIT_INTERNAL_ERROR.
    InternalError {
        /// Sub-error (1 = emulation failure).
        suberror: u32,
        /// The data words KVM attached.
        data: Vec<u64>,
        /// Bytes of the instruction that failed, when known.
        insn: Vec<u8>,
    },
    /// An exit reason this VMM does not handle.
    Unexpected(String),
    /// KVM_RUN itself failed.
    RunError(std::io::Error),
}

impl VcpuStop {
    /// A one-line description.
    pub fn describe(&self) -> String {
        match self {
            VcpuStop::Hook(c) => format!("stopped by the exit hook (code {c})"),
            VcpuStop::DebugExit(v) => format!("the guest wrote {v:#x} to the debug-exit port"),
            VcpuStop::Reset => "the guest requested a reset".into(),
            VcpuStop::Suspend => "the guest entered ACPI S3 (suspend to RAM)".into(),
            VcpuStop::Shutdown => "the guest shut down (triple fault or shutdown request)".into(),
            VcpuStop::Halted => "the guest halted with nothing to wake it".into(),
            VcpuStop::Kicked => "stopped from outside (timeout or end of run)".into(),
            VcpuStop::FailEntry { reason, cpu } => format!(
                "KVM could not enter the guest (KVM_EXIT_FAIL_ENTRY, hardware reason {reason:#x}, host CPU {cpu})"
            ),
            VcpuStop::InternalError { suberror, data, insn } => {
                let what = match *suberror {
                    1 => "emulation failure: the host's instruction emulator cannot run this instruction",
                    2 => "simultaneous exceptions",
                    3 => "delivery event failure",
                    _ => "internal error",
                };
                let mut s = format!("KVM internal error, sub-error {suberror} ({what})");
                if !insn.is_empty() {
                    s += &format!("; instruction bytes: {}", bytes_named(insn));
                }
                if !data.is_empty() {
                    let hex: Vec<String> = data.iter().map(|d| format!("{d:#x}")).collect();
                    s += &format!("; data: {}", hex.join(" "));
                }
                s
            }
            VcpuStop::Unexpected(r) => format!("unexpected exit: {r}"),
            VcpuStop::RunError(e) => format!("KVM_RUN failed: {e}"),
        }
    }
}

/// KVM_INTERNAL_ERROR_EMULATION: the sub-error of an instruction KVM's emulator could
/// not run.
pub const EMULATION_FAILURE: u32 = 1;

/// `bytes` in hex, followed by the instruction they start with when [`instruction_name`]
/// knows it: `f0 48 0f c7 0e (lock cmpxchg16b)`.
pub fn bytes_named(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    match instruction_name(bytes) {
        Some(name) => format!("{} ({name})", hex.join(" ")),
        None => hex.join(" "),
    }
}

/// The name of the x86 instruction `bytes` start with, for the few that hosts whose KVM
/// emulates guest code (kvm_pvm emulates all of ring 0) were seen to fail on, or that an
/// emulator commonly lacks: `lock cmpxchg16b`/`cmpxchg8b`, the XSAVE and FXSAVE families,
/// `ldmxcsr`/`stmxcsr`, `clac`/`stac`, `xgetbv`/`xsetbv`, `popcnt`, `int3`, `fwait`.
/// `None` for any other (this is no disassembler).
pub fn instruction_name(bytes: &[u8]) -> Option<&'static str> {
    let mut lock = false;
    let mut rep = false;
    let mut rex_w = false;
    let mut i = 0;
    // Legacy prefixes, then one REX prefix.
    while let Some(&b) = bytes.get(i) {
        match b {
            0xf0 => lock = true,
            0xf3 => rep = true,
            0x66 | 0xf2 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 => {}
            _ => break,
        }
        i += 1;
    }
    if let Some(&b) = bytes.get(i).filter(|b| (0x40..=0x4f).contains(*b)) {
        rex_w = b & 0x08 != 0;
        i += 1;
    }
    let op = &bytes[i.min(bytes.len())..];
    // The reg field of a ModRM byte, and whether it names memory (mod != 3).
    let modrm = |m: u8| ((m >> 3) & 7, m >> 6 != 3);
    Some(match op {
        [0xcc, ..] => "int3",
        [0x9b, ..] => "fwait",
        [0x0f, 0x01, 0xca, ..] => "clac",
        [0x0f, 0x01, 0xcb, ..] => "stac",
        [0x0f, 0x01, 0xd0, ..] => "xgetbv",
        [0x0f, 0x01, 0xd1, ..] => "xsetbv",
        [0x0f, 0xb8, ..] if rep => "popcnt",
        [0x0f, 0xc7, m, ..] if modrm(*m) == (1, true) => match (lock, rex_w) {
            (true, true) => "lock cmpxchg16b",
            (true, false) => "lock cmpxchg8b",
            (false, true) => "cmpxchg16b",
            (false, false) => "cmpxchg8b",
        },
        [0x0f, 0xae, m, ..] => match modrm(*m) {
            (0, true) => "fxsave",
            (1, true) => "fxrstor",
            (2, true) => "ldmxcsr",
            (3, true) => "stmxcsr",
            (4, true) => "xsave",
            (5, true) => "xrstor",
            (6, true) => "xsaveopt",
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod instruction_tests {
    use super::*;

    #[test]
    fn the_instructions_kvm_pvm_fails_on_are_named_from_their_bytes() {
        for (bytes, name) in [
            (&[0xf0, 0x48, 0x0f, 0xc7, 0x0e][..], Some("lock cmpxchg16b")),
            (&[0xf0, 0x49, 0x0f, 0xc7, 0x0f], Some("lock cmpxchg16b")),
            (&[0xf0, 0x0f, 0xc7, 0x0e], Some("lock cmpxchg8b")),
            (&[0x48, 0x0f, 0xae, 0x2f], Some("xrstor")),
            (&[0x0f, 0xae, 0x6c, 0x24, 0x08], Some("xrstor")),
            (&[0x0f, 0xae, 0x54, 0x24, 0xfc], Some("ldmxcsr")),
            (&[0x0f, 0xae, 0xe8], None), // lfence: mod 3
            (&[0xcc, 0x90], Some("int3")),
            (&[0x0f, 0x01, 0xca], Some("clac")),
            (&[0xf3, 0x48, 0x0f, 0xb8, 0xc7], Some("popcnt")),
            (&[0x0f, 0xb8], None),
            (&[0x9b], Some("fwait")),
            (&[0x90, 0xcc], None),
            (&[], None),
            (&[0xf0], None),
        ] {
            assert_eq!(instruction_name(bytes), name, "{bytes:02x?}");
        }
        assert_eq!(
            bytes_named(&[0xf0, 0x48, 0x0f, 0xc7, 0x0e]),
            "f0 48 0f c7 0e (lock cmpxchg16b)"
        );
        assert_eq!(bytes_named(&[0x90, 0x90]), "90 90");
        let stop = VcpuStop::InternalError {
            suberror: EMULATION_FAILURE,
            data: vec![],
            insn: vec![0xcc],
        };
        assert!(
            stop.describe().ends_with("instruction bytes: cc (int3)"),
            "{}",
            stop.describe()
        );
    }
}
