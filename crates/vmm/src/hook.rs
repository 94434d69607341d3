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
                    let hex: Vec<String> = insn.iter().map(|b| format!("{b:02x}")).collect();
                    s += &format!("; instruction bytes: {}", hex.join(" "));
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
