//! A vCPU and its run loop.
//!
//! The loop is the hot path of every userspace ("heavyweight") exit: KVM_RUN returns,
//! the exit is dispatched by reason, the device is found through the vCPU's own bus view
//! (no lock shared with other vCPUs, no allocation), the device fills the kvm_run data in
//! place, and KVM_RUN is entered again. The only work added for measurement is two TSC
//! reads and three stores into the vCPU's stamp page, and one counter increment.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use exitlab_devices::IoAction;
use kvm_ioctls::{VcpuExit, VcpuFd};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::bus::BusView;
use crate::kvmstats::KvmStats;
use crate::regs;
use crate::sys::{self, StampPage};
use crate::vm::UserMsr;
use crate::VmmError;
use exitlab_boot::EntryState;

/// How a vCPU is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuConfig {
    /// vCPU index (also its APIC id).
    pub id: u32,
    /// Guest-physical address of this vCPU's stamp page, if the guest wants the host's
    /// TSC stamps of each userspace exit.
    pub stamp_gpa: Option<u64>,
    /// Keep the duration (host TSC cycles) of up to this many KVM_RUN calls that ended in
    /// a userspace exit, as the VMM sees them: stamp before the ioctl, stamp after it.
    /// Needs `stamp_gpa`. Doorbell exits are marked with [`RUN_LOG_DOORBELL`].
    pub run_log: usize,
    /// Port whose 32-bit writes go to the [`ExitHook`] instead of the bus.
    pub doorbell_port: Option<u16>,
    /// What a HLT that reaches userspace (no in-kernel irqchip) does.
    pub hlt: HltPolicy,
}

/// Marks a [`Vcpu::run_log`] entry whose exit was a doorbell.
pub const RUN_LOG_DOORBELL: u64 = 1 << 63;

/// What a userspace HLT exit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HltPolicy {
    /// Re-enter the guest at the next instruction (measuring HLT exits).
    Resume,
    /// Stop the vCPU (a guest that halted with nothing to wake it).
    Stop,
}

/// Userspace exits of one vCPU by reason. Plain counters owned by the vCPU thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[repr(C)]
pub struct ExitCounts {
    /// Port reads.
    pub io_in: u64,
    /// Port writes (not counting doorbells).
    pub io_out: u64,
    /// MMIO reads.
    pub mmio_read: u64,
    /// MMIO writes.
    pub mmio_write: u64,
    /// HLT.
    pub hlt: u64,
    /// RDMSR routed to userspace.
    pub rdmsr: u64,
    /// WRMSR routed to userspace.
    pub wrmsr: u64,
    /// Doorbell writes handed to the hook.
    pub doorbell: u64,
    /// KVM_RUN interrupted by a signal.
    pub intr: u64,
    /// Anything else.
    pub other: u64,
}

impl ExitCounts {
    /// Every userspace exit counted.
    pub fn total(&self) -> u64 {
        self.io_in
            + self.io_out
            + self.mmio_read
            + self.mmio_write
            + self.hlt
            + self.rdmsr
            + self.wrmsr
            + self.doorbell
            + self.intr
            + self.other
    }

    /// (name, count) pairs, in a fixed order.
    pub fn entries(&self) -> [(&'static str, u64); 10] {
        [
            ("io_in", self.io_in),
            ("io_out", self.io_out),
            ("mmio_read", self.mmio_read),
            ("mmio_write", self.mmio_write),
            ("hlt", self.hlt),
            ("rdmsr", self.rdmsr),
            ("wrmsr", self.wrmsr),
            ("doorbell", self.doorbell),
            ("intr", self.intr),
            ("other", self.other),
        ]
    }

    /// These counts plus `other`.
    pub fn plus(&self, other: &ExitCounts) -> ExitCounts {
        ExitCounts {
            io_in: self.io_in + other.io_in,
            io_out: self.io_out + other.io_out,
            mmio_read: self.mmio_read + other.mmio_read,
            mmio_write: self.mmio_write + other.mmio_write,
            hlt: self.hlt + other.hlt,
            rdmsr: self.rdmsr + other.rdmsr,
            wrmsr: self.wrmsr + other.wrmsr,
            doorbell: self.doorbell + other.doorbell,
            intr: self.intr + other.intr,
            other: self.other + other.other,
        }
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &ExitCounts) -> ExitCounts {
        ExitCounts {
            io_in: self.io_in.wrapping_sub(earlier.io_in),
            io_out: self.io_out.wrapping_sub(earlier.io_out),
            mmio_read: self.mmio_read.wrapping_sub(earlier.mmio_read),
            mmio_write: self.mmio_write.wrapping_sub(earlier.mmio_write),
            hlt: self.hlt.wrapping_sub(earlier.hlt),
            rdmsr: self.rdmsr.wrapping_sub(earlier.rdmsr),
            wrmsr: self.wrmsr.wrapping_sub(earlier.wrmsr),
            doorbell: self.doorbell.wrapping_sub(earlier.doorbell),
            intr: self.intr.wrapping_sub(earlier.intr),
            other: self.other.wrapping_sub(earlier.other),
        }
    }
}

/// What the hook tells the run loop after a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Re-enter the guest.
    Continue,
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
    stats: Option<&'a KvmStats>,
}

impl DoorbellCtx<'_> {
    /// KVM's in-kernel count of all exits of this vCPU, when the host has binary stats.
    pub fn kvm_exits(&self) -> Option<u64> {
        self.stats.and_then(|s| s.read("exits"))
    }
}

/// Receives doorbell writes (the guest → host channel of the lab kernel and of tests).
pub trait ExitHook {
    /// Handles one doorbell write.
    fn doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> Flow;
}

/// A hook for guests that have no doorbell: every doorbell write stops the vCPU.
#[derive(Debug, Default)]
pub struct NoHook;

impl ExitHook for NoHook {
    fn doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> Flow {
        Flow::Stop(ctx.value)
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

/// A vCPU, owned by the thread that runs it.
// Laid out by hand: what a device exit touches comes first and together (the kvm_run
// pointer inside `fd`, the stamp page, the counters, the bus views), so that an exit
// pulls in as few cache lines as possible; the rest follows.
#[repr(C)]
pub struct Vcpu {
    fd: VcpuFd,
    stamps: Option<StampPage>,
    seq: u64,
    pio: BusView,
    counts: ExitCounts,
    mmio: BusView,
    run_log: Vec<u64>,
    config: VcpuConfig,
    mem: Arc<GuestMemoryMmap>,
    user_msrs: Arc<[UserMsr]>,
    stats: Option<KvmStats>,
    stop: Arc<AtomicBool>,
}

/// The value every unclaimed read returns (an open bus).
const OPEN_BUS: u8 = 0xff;

/// Fills an unclaimed read with all ones. Accesses of 1, 2, 4 or 8 bytes (nearly all) are
/// one store each, not a call into the C library's memset.
#[inline(always)]
fn open_bus(data: &mut [u8]) {
    match data.len() {
        1 => data[0] = OPEN_BUS,
        2 => data.copy_from_slice(&[OPEN_BUS; 2]),
        4 => data.copy_from_slice(&[OPEN_BUS; 4]),
        8 => data.copy_from_slice(&[OPEN_BUS; 8]),
        _ => data.fill(OPEN_BUS),
    }
}

impl Vcpu {
    pub(crate) fn new(
        fd: VcpuFd,
        config: VcpuConfig,
        mem: Arc<GuestMemoryMmap>,
        pio: BusView,
        mmio: BusView,
        user_msrs: Arc<[UserMsr]>,
    ) -> Result<Vcpu, VmmError> {
        let stamps = match config.stamp_gpa {
            Some(gpa) => Some(StampPage::new(mem.clone(), gpa).ok_or_else(|| {
                VmmError::Config(format!("stamp page {gpa:#x} is not in guest RAM"))
            })?),
            None => None,
        };
        let stats = KvmStats::open(&fd);
        Ok(Vcpu {
            fd,
            config,
            mem,
            pio,
            mmio,
            user_msrs,
            stamps,
            run_log: Vec::with_capacity(config.run_log),
            seq: 0,
            counts: ExitCounts::default(),
            stats,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The vCPU index.
    pub fn id(&self) -> u32 {
        self.config.id
    }

    /// The KVM vCPU fd.
    pub fn fd(&self) -> &VcpuFd {
        &self.fd
    }

    /// The KVM_RUN durations kept so far (see [`VcpuConfig::run_log`]).
    pub fn run_log(&self) -> &[u64] {
        &self.run_log
    }

    /// Userspace exits so far.
    pub fn counts(&self) -> &ExitCounts {
        &self.counts
    }

    /// KVM's binary statistics of this vCPU, if the host has them.
    pub fn kvm_stats(&self) -> Option<&KvmStats> {
        self.stats.as_ref()
    }

    /// The flag another thread sets (with a kick) to stop this vCPU.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Sets the registers for the first instruction.
    pub fn set_entry(&self, entry: &EntryState) -> Result<(), VmmError> {
        regs::apply(&self.fd, entry)
    }

    /// Wires the local APIC's LINT0 to ExtINT (the PIC's output) and LINT1 to NMI, as
    /// PC firmware does, so legacy interrupts reach the boot CPU.
    pub fn setup_lapic_lint(&self) -> Result<(), VmmError> {
        let mut lapic = self
            .fd
            .get_lapic()
            .map_err(|e| VmmError::Kvm("KVM_GET_LAPIC", e))?;
        for (reg, mode) in [(0x350usize, 0x7u32), (0x360, 0x4)] {
            let mut b = [0u8; 4];
            for (i, x) in b.iter_mut().enumerate() {
                *x = lapic.regs[reg + i] as u8;
            }
            let v = (u32::from_le_bytes(b) & !0x700) | (mode << 8);
            for (i, x) in v.to_le_bytes().iter().enumerate() {
                lapic.regs[reg + i] = *x as _;
            }
        }
        self.fd
            .set_lapic(&lapic)
            .map_err(|e| VmmError::Kvm("KVM_SET_LAPIC", e))
    }

    /// The vCPU's TSC frequency in kHz (KVM_GET_TSC_KHZ).
    pub fn tsc_khz(&self) -> Option<u32> {
        self.fd.get_tsc_khz().ok().filter(|&k| k > 0)
    }

    /// The guest TSC minus the host TSC (KVM_VCPU_TSC_OFFSET), when the host exposes it.
    pub fn tsc_offset(&self) -> Option<i64> {
        sys::vcpu_get_attr_u64(
            &self.fd,
            kvm_bindings::KVM_VCPU_TSC_CTRL,
            kvm_bindings::KVM_VCPU_TSC_OFFSET.into(),
        )
        .ok()
        .map(|v| v as i64)
    }

    /// A dump of the registers, for failure reports.
    pub fn dump_registers(&self) -> String {
        regs::dump(&self.fd)
    }

    /// Up to 16 bytes of guest memory at the current RIP (translated through the guest's
    /// page tables), for failure reports.
    pub fn bytes_at_rip(&self) -> Option<Vec<u8>> {
        let rip = self.fd.get_regs().ok()?.rip;
        let sregs = self.fd.get_sregs().ok()?;
        let linear = rip.wrapping_add(sregs.cs.base);
        let gpa = if sregs.cr0 & (1 << 31) != 0 {
            let t = self.fd.translate_gva(linear).ok()?;
            if t.valid == 0 {
                return None;
            }
            t.physical_address
        } else {
            linear
        };
        let mut b = vec![0u8; 16];
        self.mem.read_slice(&mut b, GuestAddress(gpa)).ok()?;
        Some(b)
    }

    /// Runs the vCPU until something stops it. Every userspace exit is counted by reason;
    /// doorbell writes go to `hook`.
    pub fn run(&mut self, hook: &mut dyn ExitHook) -> VcpuStop {
        sys::set_immediate_exit_target(self.fd.get_kvm_run());
        // Bus changes now kick this thread; the views refresh on the kick's EINTR.
        self.pio.subscribe();
        self.mmio.subscribe();
        let stop = self.run_loop(hook);
        self.pio.unsubscribe();
        self.mmio.unsubscribe();
        sys::clear_immediate_exit_target();
        stop
    }

    /// The floor of a userspace exit on this host: a bare KVM_RUN loop that answers every
    /// port read with all ones and hands doorbells to `hook`, with no bus, no device and no
    /// accounting; only the TSC stamps are kept, because they are what is measured. Any
    /// other exit stops it.
    pub fn run_bare_pio_in(&mut self, hook: &mut dyn ExitHook) -> VcpuStop {
        sys::set_immediate_exit_target(self.fd.get_kvm_run());
        let doorbell = self.config.doorbell_port;
        let mut prev_return: Option<u64> = None;
        let stop = loop {
            if let (Some(st), Some(t)) = (&self.stamps, prev_return) {
                self.seq += 1;
                st.publish(self.seq, t, sys::rdtscp());
            }
            let result = self.fd.run();
            let t_return = sys::rdtscp();
            prev_return = Some(t_return);
            match result {
                Ok(VcpuExit::IoIn(_, data)) => open_bus(data),
                Ok(VcpuExit::IoOut(port, data)) if Some(port) == doorbell => {
                    let flow = ring_doorbell(
                        hook,
                        self.config.id,
                        data,
                        &self.mem,
                        &mut self.counts,
                        self.stats.as_ref(),
                    );
                    if let Flow::Stop(c) = flow {
                        break VcpuStop::Hook(c);
                    }
                }
                Ok(other) => break VcpuStop::Unexpected(format!("{other:?} in the bare loop")),
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                    self.fd.set_kvm_immediate_exit(0);
                    if self.stop.load(Ordering::Acquire) {
                        break VcpuStop::Kicked;
                    }
                }
                Err(e) => break VcpuStop::RunError(std::io::Error::from_raw_os_error(e.errno())),
            }
        };
        sys::clear_immediate_exit_target();
        stop
    }

    fn run_loop(&mut self, hook: &mut dyn ExitHook) -> VcpuStop {
        let doorbell = self.config.doorbell_port;
        // The first entry has no exit before it: nothing is published for it.
        let mut prev_return: Option<u64> = None;
        let mut t_enter = 0;
        // Decided once, so that a loop without a log reads nothing of it per exit.
        let logging = self.run_log.capacity() > 0;
        loop {
            if let (Some(st), Some(t)) = (&self.stamps, prev_return) {
                self.seq += 1;
                t_enter = sys::rdtscp();
                st.publish(self.seq, t, t_enter);
            }
            let result = self.fd.run();
            let t_return = sys::rdtscp();
            prev_return = Some(t_return);
            if logging && t_enter != 0 && self.run_log.len() < self.run_log.capacity() {
                self.run_log
                    .push(t_return.wrapping_sub(t_enter) & !RUN_LOG_DOORBELL);
            }
            // The four device exits are handled inline and go straight back to the guest;
            // everything else takes the out-of-line path.
            let slow = match result {
                Ok(VcpuExit::IoIn(port, data)) => {
                    self.counts.io_in += 1;
                    if !self.pio.read(u64::from(port), data) {
                        open_bus(data);
                    }
                    continue;
                }
                Ok(VcpuExit::MmioRead(addr, data)) => {
                    self.counts.mmio_read += 1;
                    if !self.mmio.read(addr, data) {
                        open_bus(data);
                    }
                    continue;
                }
                Ok(VcpuExit::IoOut(port, data)) if Some(port) != doorbell => {
                    self.counts.io_out += 1;
                    match self.pio.write(u64::from(port), data) {
                        None | Some(IoAction::Continue) => continue,
                        Some(a) => Slow::Stop(device_stop(a)),
                    }
                }
                Ok(VcpuExit::MmioWrite(addr, data)) => {
                    self.counts.mmio_write += 1;
                    match self.mmio.write(addr, data) {
                        None | Some(IoAction::Continue) => continue,
                        Some(a) => Slow::Stop(device_stop(a)),
                    }
                }
                Ok(VcpuExit::IoOut(_, data)) => {
                    if let Some(last) = self.run_log.last_mut() {
                        *last |= RUN_LOG_DOORBELL;
                    }
                    let flow = ring_doorbell(
                        hook,
                        self.config.id,
                        data,
                        &self.mem,
                        &mut self.counts,
                        self.stats.as_ref(),
                    );
                    match flow {
                        Flow::Continue => continue,
                        Flow::Stop(c) => Slow::Stop(VcpuStop::Hook(c)),
                    }
                }
                other => slow_exit(other, &mut self.counts, &self.user_msrs, self.config.hlt),
            };
            match slow {
                Slow::Continue => {}
                Slow::Stop(s) => return s,
                Slow::InternalError => {
                    let (suberror, data, insn) = sys::internal_error(self.fd.get_kvm_run());
                    return VcpuStop::InternalError {
                        suberror,
                        data,
                        insn,
                    };
                }
                Slow::Interrupted => {
                    self.fd.set_kvm_immediate_exit(0);
                    self.pio.refresh();
                    self.mmio.refresh();
                    if self.stop.load(Ordering::Acquire) {
                        return VcpuStop::Kicked;
                    }
                }
            }
        }
    }
}

/// Counts a doorbell exit and hands the value written (up to 32 bits, little-endian) to
/// the hook.
fn ring_doorbell(
    hook: &mut dyn ExitHook,
    vcpu_id: u32,
    data: &[u8],
    mem: &GuestMemoryMmap,
    counts: &mut ExitCounts,
    stats: Option<&KvmStats>,
) -> Flow {
    counts.doorbell += 1;
    let mut v = [0u8; 4];
    let n = data.len().min(4);
    v[..n].copy_from_slice(&data[..n]);
    hook.doorbell(&DoorbellCtx {
        vcpu_id,
        value: u32::from_le_bytes(v),
        mem,
        counts,
        stats,
    })
}

/// What the out-of-line exit path decided.
enum Slow {
    Continue,
    Stop(VcpuStop),
    InternalError,
    Interrupted,
}

fn device_stop(a: IoAction) -> VcpuStop {
    match a {
        IoAction::Exit(v) => VcpuStop::DebugExit(v),
        IoAction::Reset => VcpuStop::Reset,
        IoAction::Continue => VcpuStop::Unexpected("device asked to continue".into()),
    }
}

/// The exits that are not device accesses: HLT, MSRs routed to userspace, signals,
/// shutdown and failures. Kept out of line so the device path stays short.
#[cold]
#[inline(never)]
fn slow_exit(
    exit: Result<VcpuExit<'_>, kvm_ioctls::Error>,
    counts: &mut ExitCounts,
    user_msrs: &[UserMsr],
    hlt: HltPolicy,
) -> Slow {
    let exit = match exit {
        Ok(e) => e,
        Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
            counts.intr += 1;
            return Slow::Interrupted;
        }
        Err(e) => {
            return Slow::Stop(VcpuStop::RunError(std::io::Error::from_raw_os_error(
                e.errno(),
            )))
        }
    };
    match exit {
        VcpuExit::Hlt => {
            counts.hlt += 1;
            match hlt {
                HltPolicy::Resume => Slow::Continue,
                HltPolicy::Stop => Slow::Stop(VcpuStop::Halted),
            }
        }
        VcpuExit::X86Rdmsr(m) => {
            counts.rdmsr += 1;
            match user_msrs.iter().find(|u| u.index == m.index) {
                Some(u) => *m.data = u.read_value,
                None => *m.error = 1,
            }
            Slow::Continue
        }
        VcpuExit::X86Wrmsr(m) => {
            counts.wrmsr += 1;
            if !user_msrs.iter().any(|u| u.index == m.index) {
                *m.error = 1;
            }
            Slow::Continue
        }
        VcpuExit::Intr => {
            counts.intr += 1;
            Slow::Interrupted
        }
        VcpuExit::Shutdown => Slow::Stop(VcpuStop::Shutdown),
        VcpuExit::FailEntry(reason, cpu) => Slow::Stop(VcpuStop::FailEntry { reason, cpu }),
        VcpuExit::InternalError => Slow::InternalError,
        VcpuExit::SystemEvent(kind, _) => Slow::Stop(match kind {
            kvm_bindings::KVM_SYSTEM_EVENT_RESET => VcpuStop::Reset,
            kvm_bindings::KVM_SYSTEM_EVENT_SHUTDOWN => VcpuStop::Shutdown,
            other => VcpuStop::Unexpected(format!("system event {other}")),
        }),
        other => {
            counts.other += 1;
            Slow::Stop(VcpuStop::Unexpected(format!("{other:?}")))
        }
    }
}
