//! Runs one lab test in a fresh VM: builds the VM the test needs, loads the lab kernel,
//! hands it its parameters through the control page, collects sample records at each
//! doorbell, and watches for a guest that stops making progress.

use std::collections::BTreeMap;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use exitlab_abi::{self as abi, host};
use exitlab_devices::sink::Sink;
use exitlab_devices::{BusDevice, IoAction};
use exitlab_vmm::builder::{Machine, MachineBuilder, VcpuSpec};
use exitlab_vmm::machine::{build_pc_platform, PcPlatform, PlatformConfig, SerialOut};
use exitlab_vmm::msr::UserMsr;
use exitlab_vmm::regs::InterruptState;
use exitlab_vmm::teardown::Teardown;
use exitlab_vmm::thread::Finished;
use exitlab_vmm::vcpu::{
    DoorbellCtx, ExitCounts, ExitHook, Handler, HltPolicy, HookReply, VcpuConfig, VcpuStop,
};
use exitlab_vmm::vm::{IoSpace, VmConfig};
use exitlab_vmm::{Capabilities, Kvm, VmmError};
use vm_memory::{Address, ByteValued, Bytes, GuestMemoryMmap};

use crate::catalogue::{Platform, TestArg, TestDef, Where};

/// Most KVM_RUN durations kept per test (8 bytes each).
pub const RUN_LOG_MAX: u64 = 1 << 18;

/// [`RunParams::batch`] for "each test's own" ([`TestDef::batch`]): what `bench` runs
/// with unless `--batch` is given.
pub const BATCH_PER_TEST: u64 = 0;

/// Guest RAM of a lab VM.
pub const LAB_RAM_BYTES: u64 = 16 << 20;

/// How to run a test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunParams {
    /// 0 or 3.
    pub ring: u8,
    /// Samples to take.
    pub samples: u64,
    /// Iterations per sample; [`BATCH_PER_TEST`] (a bench's default) for each test's
    /// own ([`TestDef::batch`]), which every run of a test resolves to before it starts
    /// ([`RunParams::for_test`]), so a measurement's is never it.
    pub batch: u64,
    /// Iterations before the first sample.
    pub warmup: u64,
    /// A run that makes no progress (no doorbell) for this long is stopped.
    pub timeout: Duration,
    /// Host CPU to pin the vCPU thread to.
    pub pin: Option<usize>,
    /// Use the bare KVM_RUN loop instead of the full VMM loop.
    pub bare: bool,
    /// Interrupt knobs: APIC mode, vCPUs, idle, disabled exits, halt polling, PV IPI.
    pub irq: crate::smp::IrqKnobs,
    /// Known-answer control: host TSC cycles of busy-waiting the VMM adds to its
    /// handling of every userspace exit but the doorbells (0: off).
    pub inject_cycles: u64,
    /// Known-answer control for kernel-handled tests: guest TSC cycles of busy-waiting
    /// the lab kernel adds to every iteration of their measured loop, never to the
    /// paired empty loop (0: off). `loop_overhead` with the same work is its
    /// calibration; userspace-handled tests do not get it (they are the control that
    /// must not move, as kernel-handled ones are for `inject_cycles`).
    pub guest_cycles: u64,
}

impl RunParams {
    /// These parameters for a run of `def`: [`BATCH_PER_TEST`] becomes the test's own
    /// batch, and any other batch stays.
    pub fn for_test(self, def: &TestDef) -> RunParams {
        RunParams {
            batch: if self.batch == BATCH_PER_TEST {
                def.batch
            } else {
                self.batch
            },
            ..self
        }
    }
}

/// The guest work a run did ([`RunParams::guest_cycles`]), as the lab kernel reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuestWork {
    /// Iterations, warm-up included, that did the work.
    pub iterations: u64,
    /// TSC cycles the waits spanned in all (each from its first TSC read to its last).
    pub spent: u64,
}

/// The exit-path probes the lab kernel took before READY and after DONE, outside the
/// counted part of the round (see [`abi::PROBE_BLOCKS`]): each the median block's TSC
/// cycles of [`abi::PROBE_ACCESSES`] port accesses, `[kernel, user]` (writes an
/// ioeventfd absorbs in the kernel; doorbells the VMM answers). `None` where they were not
/// taken (a host without ioeventfds, a round that did not get that far, a guest that
/// reported nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitProbe {
    /// Before READY.
    pub before: Option<[u64; 2]>,
    /// After DONE.
    pub after: Option<[u64; 2]>,
}

impl ExitProbe {
    /// Cycles per exit of each probe's median block, when both ends were taken.
    pub fn per_exit(&self) -> Option<exitlab_results::results::Probes> {
        let (b, a) = (self.before?, self.after?);
        let per = |v: u64| v as f64 / abi::PROBE_ACCESSES as f64;
        Some(exitlab_results::results::Probes {
            kernel_before: per(b[0]),
            user_before: per(b[1]),
            kernel_after: per(a[0]),
            user_after: per(a[1]),
        })
    }
}

/// Both probes of one end, when the guest reported them (neither 0 nor garbage).
fn probes_of(kernel: u64, user: u64) -> Option<[u64; 2]> {
    let ok = |v: u64| v != 0 && v != u64::MAX;
    (ok(kernel) && ok(user)).then_some([kernel, user])
}

/// How a test run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every sample arrived.
    Completed,
    /// The host cannot run the test.
    Skipped(String),
    /// The guest stopped making progress and was stopped after the timeout.
    DidNotComplete(String),
    /// The guest or the VMM failed; the string has the details (and registers).
    Failed(String),
}

pub use exitlab_results::samples::Round;

/// The raw result of one test run.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// The test.
    pub def: &'static TestDef,
    /// The parameters it ran with.
    pub params: RunParams,
    /// How it ended.
    pub outcome: Outcome,
    /// Every sample record, in order.
    pub samples: Vec<abi::Sample>,
    /// Userspace exits between READY and DONE (the measured part, doorbells included).
    pub counts: ExitCounts,
    /// KVM's own event counts between READY and DONE ("exits", "io_exits",
    /// "mmio_exits", "halt_exits", ...), when the host has binary stats.
    pub kvm_counters: Option<BTreeMap<String, u64>>,
    /// Doorbells the guest rang between READY and DONE (batches plus DONE).
    pub doorbells: u64,
    /// The rounds this measurement is made of, in the order of `samples` (one for a
    /// single run): each VM has its own TSC offset, so the offset is kept per round.
    pub rounds: Vec<Round>,
    /// The vCPU's TSC frequency (KVM_GET_TSC_KHZ).
    pub tsc_khz: Option<u32>,
    /// Wall time from VM creation to the READY doorbell.
    pub boot_time: Option<Duration>,
    /// Wall time of the whole run.
    pub wall: Duration,
    /// Pinning failure, if any.
    pub pin_error: Option<String>,
    /// Durations of the KVM_RUN calls of the measured iterations, as the VMM saw them
    /// (userspace-exit tests with the full loop only).
    pub kvm_run_log: Vec<u64>,
    /// Memory of the process outside guest RAM, just before the VM was torn down.
    pub vmm_memory: Option<exitlab_vmm::sys::VmmMemory>,
    /// APIC mode the guest ran in.
    pub apic: exitlab_results::irq::ApicMode,
    /// Exits per vCPU (vCPU 0 between READY and DONE, the APs over the whole run).
    pub per_vcpu: Vec<exitlab_results::irq::VcpuExits>,
    /// Busy-waits the VMM added ([`RunParams::inject_cycles`]) over the whole run, boot
    /// and warm-up included (one per userspace exit but the doorbells), and the cycles
    /// they actually spun: the known answer of the control.
    pub injected: exitlab_vmm::vcpu::InjectedWaits,
    /// The guest work the lab kernel did ([`RunParams::guest_cycles`]), checked against
    /// the iterations asked for.
    pub guest_work: GuestWork,
    /// The exit-path probe around the round (one round's; the first round's after a
    /// merge, whose rounds keep their own in their figures).
    pub exit_probe: ExitProbe,
}

impl Measurement {
    /// KVM's count of all exits between READY and DONE, when the host has binary stats.
    pub fn kvm_exits(&self) -> Option<u64> {
        self.kvm_counters.as_ref()?.get("exits").copied()
    }

    /// The TSC offset of the first round (the only one of a single run).
    pub fn tsc_offset(&self) -> Option<i64> {
        self.rounds.first().and_then(|r| r.tsc_offset)
    }

    /// A measurement of `def` that has not run yet.
    pub fn new(def: &'static TestDef, params: RunParams) -> Measurement {
        Measurement {
            def,
            params,
            outcome: Outcome::Completed,
            samples: Vec::new(),
            counts: ExitCounts::default(),
            kvm_counters: None,
            doorbells: 0,
            rounds: Vec::new(),
            tsc_khz: None,
            boot_time: None,
            wall: Duration::ZERO,
            pin_error: None,
            kvm_run_log: Vec::new(),
            vmm_memory: None,
            apic: params.irq.apic_for(def),
            per_vcpu: Vec::new(),
            injected: Default::default(),
            guest_work: GuestWork::default(),
            exit_probe: ExitProbe::default(),
        }
    }

    /// Merges the rounds of one test (each run in its own VM) into one measurement: the
    /// samples in order, counts and doorbells added, each round's TSC offset kept with
    /// its samples, and parameters scaled so that the exit-count check still holds
    /// exactly (each round ran its own warm-up). The first round that did not complete
    /// decides the outcome.
    pub fn merge(rounds: Vec<Measurement>) -> Option<Measurement> {
        // Room for all samples and KVM_RUN durations at once: growing by doubling would
        // hold up to twice the run's samples while the last rounds are added.
        let samples: usize = rounds.iter().map(|r| r.samples.len()).sum();
        let runs: usize = rounds.iter().map(|r| r.kvm_run_log.len()).sum();
        let mut it = rounds.into_iter();
        let mut m = it.next()?;
        m.samples.reserve_exact(samples - m.samples.len());
        m.kvm_run_log.reserve_exact(runs - m.kvm_run_log.len());
        for r in it {
            if m.outcome != Outcome::Completed {
                break;
            }
            if r.outcome != Outcome::Completed {
                m.outcome = r.outcome;
                m.samples.clear();
                m.rounds.clear();
                break;
            }
            m.params.samples += r.params.samples;
            m.params.warmup += r.params.warmup;
            m.samples.extend(r.samples);
            m.counts = m.counts.plus(&r.counts);
            m.injected = m.injected.merged(r.injected);
            m.guest_work.iterations += r.guest_work.iterations;
            m.guest_work.spent += r.guest_work.spent;
            m.kvm_counters = match (m.kvm_counters.take(), r.kvm_counters) {
                (Some(a), Some(b)) => Some(
                    a.into_iter()
                        .filter_map(|(k, v)| {
                            let w = b.get(&k)?;
                            Some((k, v + w))
                        })
                        .collect(),
                ),
                _ => None,
            };
            m.doorbells += r.doorbells;
            m.kvm_run_log.extend(r.kvm_run_log);
            m.vmm_memory = exitlab_vmm::sys::VmmMemory::largest(m.vmm_memory, r.vmm_memory);
            exitlab_results::irq::merge_vcpu_exits(&mut m.per_vcpu, &r.per_vcpu);
            m.wall += r.wall;
            m.rounds.extend(r.rounds);
        }
        Some(m)
    }
}

/// Errors that stop the lab before a test can even start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// KVM or VM setup failed.
    #[error(transparent)]
    Vmm(#[from] VmmError),
    /// The lab kernel could not be loaded.
    #[error("cannot load the lab kernel: {0}")]
    Load(String),
    /// The PC platform's devices could not be set up.
    #[error("cannot set up the PC platform's devices: {0}")]
    Platform(String),
    /// /dev/kvm could not be opened again after a host knob's switch (a module reload).
    #[error("cannot open /dev/kvm again after switching a KVM module parameter: {0}")]
    Reopen(String),
    /// A host knob's switch failed (the module refused the value, or a reload failed);
    /// the original values are put back.
    #[error("{0}")]
    HostSwitch(String),
}

/// The MMIO page answered in userspace: reads return `MMIO_USER_READ_VALUE`, writes are
/// taken and dropped.
struct UserMmioPage;

impl BusDevice for UserMmioPage {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        let v = abi::MMIO_USER_READ_VALUE.to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = v.get(i).copied().unwrap_or(0);
        }
    }
    fn write(&self, _offset: u64, _data: &[u8]) -> IoAction {
        IoAction::Continue
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Booting,
    Running,
    /// After DONE, waiting for the probe after the samples (`DOORBELL_PROBED`).
    Probing,
    Done,
}

/// The doorbell side of the lab protocol, on vCPU 0; an AP's hook ([`LabHook::ap`]) only
/// catches a doorbell an AP should never ring.
pub(crate) struct LabHook {
    /// An AP's hook: every doorbell is an error.
    ap: bool,
    wanted: u64,
    records: Vec<abi::Sample>,
    buf: Vec<u8>,
    stage: Stage,
    start_counts: ExitCounts,
    end_counts: ExitCounts,
    start_kvm: Option<BTreeMap<String, u64>>,
    end_kvm: Option<BTreeMap<String, u64>>,
    doorbells: u64,
    ready_at: Option<Instant>,
    work: GuestWork,
    probe: ExitProbe,
    /// The protocol violation or fault that stopped the vCPU, if any.
    pub(crate) error: Option<String>,
    progress: Arc<AtomicU64>,
}

impl LabHook {
    fn new(wanted: u64, progress: Arc<AtomicU64>) -> LabHook {
        LabHook::with_role(false, wanted, progress)
    }

    /// The hook of an AP: it has no doorbell protocol of its own; a fault it reports
    /// stops it.
    pub(crate) fn ap() -> LabHook {
        LabHook::with_role(true, 0, Arc::new(AtomicU64::new(0)))
    }

    fn with_role(ap: bool, wanted: u64, progress: Arc<AtomicU64>) -> LabHook {
        LabHook {
            ap,
            wanted,
            records: Vec::with_capacity(wanted.min(1 << 22) as usize),
            // An AP takes no batches: no ring buffer.
            buf: if ap {
                Vec::new()
            } else {
                vec![0u8; (abi::SAMPLES_PER_BATCH * abi::SAMPLE_BYTES) as usize]
            },
            stage: Stage::Booting,
            start_counts: ExitCounts::default(),
            end_counts: ExitCounts::default(),
            start_kvm: None,
            end_kvm: None,
            doorbells: 0,
            ready_at: None,
            work: GuestWork::default(),
            probe: ExitProbe::default(),
            error: None,
            progress,
        }
    }

    fn fail(&mut self, msg: String) -> HookReply {
        self.error = Some(msg);
        HookReply::Stop(1)
    }

    /// Copies `count` records of the vCPU's ring, after checking `count` against the ring
    /// size and the samples still expected.
    fn take_batch(&mut self, mem: &GuestMemoryMmap, vcpu: u32) -> Result<(), String> {
        let count = host::read_control_field(mem, offset_of!(abi::Control, batch_count))
            .unwrap_or(u64::MAX);
        if count > abi::SAMPLES_PER_BATCH {
            return Err(format!(
                "guest protocol error: batch of {count} records exceeds the ring of {}",
                abi::SAMPLES_PER_BATCH
            ));
        }
        let have = self.records.len() as u64;
        if have + count > self.wanted {
            return Err(format!(
                "guest protocol error: {} records delivered, but only {} samples were asked for",
                have + count,
                self.wanted
            ));
        }
        let bytes = (count * abi::SAMPLE_BYTES) as usize;
        let ring = host::sample_gpa(vcpu, 0);
        mem.read_slice(&mut self.buf[..bytes], ring)
            .map_err(|e| format!("cannot read the sample ring: {e}"))?;
        self.records.extend(host::samples(&self.buf[..bytes]));
        // Clear what was taken, so that the watchdog sees the ring fill up again.
        self.buf[..bytes].fill(0);
        mem.write_slice(&self.buf[..bytes], ring)
            .map_err(|e| format!("cannot clear the sample ring: {e}"))?;
        Ok(())
    }
}

impl ExitHook for LabHook {
    fn doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> HookReply {
        if self.ap {
            return self.fail(format!(
                "AP {} rang doorbell {:#x} (an AP reports only faults; see vCPU 0's control page)",
                ctx.vcpu_id, ctx.value
            ));
        }
        let flow = self.handle_doorbell(ctx);
        // Progress as the watchdog counts it: doorbells plus samples handed over.
        self.progress.store(
            self.doorbells + 1 + self.records.len() as u64,
            Ordering::Relaxed,
        );
        flow
    }
}

impl LabHook {
    fn handle_doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> HookReply {
        match (ctx.value, self.stage) {
            (abi::DOORBELL_READY, Stage::Booting) => {
                self.stage = Stage::Running;
                self.ready_at = Some(Instant::now());
                self.start_counts = *ctx.counts;
                self.start_kvm = ctx.kvm_counters();
                let c = control_or_garbage(ctx.mem);
                self.probe.before = probes_of(c.probe_kernel_before, c.probe_user_before);
                HookReply::Resume
            }
            (abi::DOORBELL_BATCH, Stage::Running) => {
                self.doorbells += 1;
                match self.take_batch(ctx.mem, ctx.vcpu_id) {
                    Ok(()) => HookReply::Resume,
                    Err(e) => self.fail(e),
                }
            }
            (abi::DOORBELL_DONE, Stage::Running) => {
                self.doorbells += 1;
                self.end_counts = *ctx.counts;
                self.end_kvm = ctx.kvm_counters();
                let c = control_or_garbage(ctx.mem);
                self.work = GuestWork {
                    iterations: c.work_iterations,
                    spent: c.work_spent,
                };
                if let Err(e) = self.take_batch(ctx.mem, ctx.vcpu_id) {
                    return self.fail(e);
                }
                if self.records.len() as u64 != self.wanted {
                    return self.fail(format!(
                        "guest protocol error: DONE after {} of {} samples",
                        self.records.len(),
                        self.wanted
                    ));
                }
                // The counted part ends here; the guest takes the probe after it.
                self.stage = Stage::Probing;
                HookReply::Resume
            }
            // The userspace probe's doorbells, outside the counted part.
            (abi::DOORBELL_PROBE, Stage::Booting | Stage::Probing) => HookReply::Resume,
            (abi::DOORBELL_PROBED, Stage::Probing) => {
                let c = control_or_garbage(ctx.mem);
                self.probe.after = probes_of(c.probe_kernel_after, c.probe_user_after);
                self.stage = Stage::Done;
                HookReply::Stop(0)
            }
            (abi::DOORBELL_FAULT, _) => {
                let c = control_or_garbage(ctx.mem);
                let (v, rip, err, cr2) = (c.fault_vector, c.fault_rip, c.fault_error, c.fault_cr2);
                self.fail(format!(
                    "the guest took an unexpected exception: vector {v} ({}) at rip {rip:#x}, error code {err:#x}, cr2 {cr2:#x}",
                    vector_name(v)
                ))
            }
            (abi::DOORBELL_BAD_PARAMS, _) => {
                let e = control_or_garbage(ctx.mem).guest_error;
                let why = match e {
                    abi::GUEST_ERR_ABI => "magic or ABI version mismatch",
                    abi::GUEST_ERR_TEST => "unknown test id",
                    abi::GUEST_ERR_RING => "the test cannot run in that ring",
                    abi::GUEST_ERR_COUNTS => "samples, batch or warm-up out of range",
                    abi::GUEST_ERR_FEATURE => "the guest CPUID lacks what the test or its mode needs (x2APIC, TSC deadline, MONITOR/MWAIT, PV send-IPI), or the APIC mode, vCPU count or idle mode is invalid",
                    abi::GUEST_ERR_AP_TIMEOUT => "an AP did not come up after INIT-SIPI-SIPI",
                    _ => "unknown reason",
                };
                self.fail(format!(
                    "the lab kernel refused its parameters: {why} (code {e})"
                ))
            }
            (v, stage) => self.fail(format!(
                "guest protocol error: doorbell {v:#x} is not valid while {}",
                match stage {
                    Stage::Booting => "booting",
                    Stage::Running => "running",
                    Stage::Probing => "probing after DONE",
                    Stage::Done => "done",
                }
            )),
        }
    }
}

/// The control page as the guest left it; all ones if it cannot be read.
fn control_or_garbage(mem: &GuestMemoryMmap) -> abi::Control {
    host::read_control(mem).unwrap_or_else(|_| {
        let mut c = abi::Control::default();
        c.as_mut_slice().fill(0xff);
        c
    })
}

fn vector_name(v: u64) -> &'static str {
    match v {
        0 => "#DE",
        1 => "#DB",
        2 => "NMI",
        3 => "#BP",
        4 => "#OF",
        5 => "#BR",
        6 => "#UD",
        7 => "#NM",
        8 => "#DF",
        10 => "#TS",
        11 => "#NP",
        12 => "#SS",
        13 => "#GP",
        14 => "#PF",
        16 => "#MF",
        17 => "#AC",
        18 => "#MC",
        19 => "#XM",
        _ => "?",
    }
}

/// Why `cpuid_0xd` is skipped on a host whose guests see no XSAVE.
pub const NO_XSAVE: &str = "the guest CPUID has no leaf 0xD (no XSAVE)";

/// Why `def` cannot run on this host with `params`, if it cannot (KVM's answers come from
/// the VMM's [`Capabilities`]; the lab asks KVM nothing itself).
pub fn skip_reason(kvm: &Kvm, def: &TestDef, ring: u8) -> Option<String> {
    if ring == 3 && !def.ring3 {
        return Some("the instruction is privileged: it only runs at ring 0".into());
    }
    let caps = Capabilities::get(kvm);
    match def.platform {
        Platform::UserMsr => {
            if !caps.user_space_msr() {
                return Some(
                    "KVM lacks KVM_CAP_X86_USER_SPACE_MSR / KVM_CAP_X86_MSR_FILTER".into(),
                );
            }
        }
        Platform::MmioIoeventfd => {
            if !caps.ioeventfd() {
                return Some("KVM lacks KVM_CAP_IOEVENTFD".into());
            }
        }
        Platform::Irqchip => {
            if !caps.irqchip() {
                return Some("KVM lacks an in-kernel irqchip (KVM_CAP_IRQCHIP)".into());
            }
        }
        Platform::NoIrqchip => {}
    }
    if def.arg == TestArg::XsaveMaxSubleaf && caps.xsave_max_subleaf.is_none() {
        return Some(NO_XSAVE.into());
    }
    if def.hypercall && kvm_is_paravirtual() {
        return Some(NO_HYPERCALLS.into());
    }
    None
}

/// Why a hypercall test is skipped on `kvm_pvm`.
pub const NO_HYPERCALLS: &str = "this host's KVM is paravirtual (kvm_pvm), which never completes a guest's hypercall: the test would stall until the no-progress watchdog";

/// Whether the KVM module serving /dev/kvm is the paravirtual `kvm_pvm` (read once).
fn kvm_is_paravirtual() -> bool {
    static PVM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PVM.get_or_init(|| {
        exitlab_host::modules::has_kvm_pvm(&exitlab_host::modules::kvm_modules(
            std::path::Path::new("/sys/module"),
        ))
    })
}

/// Why `def` cannot run with `params`: the host's reasons ([`skip_reason`]), the
/// interrupt knobs', and guest work asked of a test whose figure would not show it.
fn run_skip_reason(kvm: &Kvm, def: &TestDef, params: &RunParams) -> Option<String> {
    skip_reason(kvm, def, params.ring)
        .or_else(|| params.irq.skip_reason(def))
        .or_else(|| {
            (params.guest_cycles != 0 && def.one_way).then(|| {
                "guest-cycles: the test's figure is the one-way latencies the guest sums, not its loop's time, so work added to the loop would not show in it".into()
            })
        })
}

fn vm_config(def: &TestDef, irq: &crate::smp::IrqKnobs) -> VmConfig {
    let mut c = VmConfig {
        ram: vec![(0, LAB_RAM_BYTES)],
        ..VmConfig::default()
    };
    match def.platform {
        Platform::NoIrqchip => {
            c.irqchip = exitlab_vmm::vm::IrqChip::None;
            c.pit = false;
        }
        Platform::UserMsr => c.user_msrs.push(UserMsr {
            index: abi::USER_MSR,
            read_value: abi::USER_MSR_READ_VALUE,
        }),
        Platform::Irqchip | Platform::MmioIoeventfd => {}
    }
    irq.configure(def, &mut c);
    c
}

/// Writes the control page: the test and its parameters, and the interrupt knobs'
/// fields; the guest's fields start at zero.
/// `probe`: the ioeventfd that keeps the exit-path probe's writes in the kernel is
/// registered, and the guest is to take the probe.
fn write_control(
    mem: &GuestMemoryMmap,
    def: &TestDef,
    p: &RunParams,
    arg0: u64,
    probe: bool,
) -> Result<(), String> {
    let mut c = abi::Control {
        magic: abi::CONTROL_MAGIC,
        abi_version: abi::ABI_VERSION,
        test: def.id,
        ring: u64::from(p.ring),
        samples: p.samples,
        batch: p.batch,
        warmup: p.warmup,
        arg0,
        work_cycles: guest_work_cycles(def, p),
        probe: u64::from(probe),
        ..abi::Control::default()
    };
    p.irq.fill_control(def, &mut c);
    host::write_control(mem, c).map_err(|e| format!("cannot write the control page: {e}"))
}

/// Runs `def` once in a new VM: the procedure of one round of one test.
pub fn run_test(
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    params: RunParams,
) -> Result<Measurement, RunError> {
    run_test_in(kvm, image, def, params, None)
}

/// [`run_test`], with the VM's closing left to `teardown` (its [`Teardown::finish`]), so
/// that rounds in fresh VMs do not each wait for the kernel to destroy the last one. The
/// lab kernel arms no periodic timer, so a kept VM is quiet until it is closed.
pub fn run_test_deferred(
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    params: RunParams,
    teardown: &Arc<Teardown>,
) -> Result<Measurement, RunError> {
    run_test_in(kvm, image, def, params, Some(teardown))
}

fn run_test_in(
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    params: RunParams,
    teardown: Option<&Arc<Teardown>>,
) -> Result<Measurement, RunError> {
    let started = Instant::now();
    let params = params.for_test(def);
    if let Some(why) = run_skip_reason(kvm, def, &params) {
        let mut m = Measurement::new(def, params);
        m.outcome = Outcome::Skipped(why);
        return Ok(m);
    }
    let lab = LabVm::build(kvm, def, &params, teardown)?;
    run_in(lab, kvm, image, def, params, started)
}

/// A run of `def` on a VM whose buses hold the devices of `exitlab run`'s PC platform
/// (the VMM's `build_pc_platform`), with the port `inl_from_user`/`outl_to_user` use
/// claimed by a sink device, so that the full loop's bus lookup searches a populated bus
/// and calls a device. Also returns how many ranges the buses hold (devices, counting
/// the lab's own MMIO page and that sink).
pub fn run_test_on_pc_bus(
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    params: RunParams,
) -> Result<(Measurement, usize), RunError> {
    let started = Instant::now();
    let params = params.for_test(def);
    if let Some(why) = run_skip_reason(kvm, def, &params) {
        let mut m = Measurement::new(def, params);
        m.outcome = Outcome::Skipped(why);
        return Ok((m, 0));
    }
    let mut lab = LabVm::build(kvm, def, &params, None)?;
    let platform = PlatformConfig {
        ram_bytes: LAB_RAM_BYTES,
        cpus: 1,
        cmdline: String::new(),
        serial: SerialOut::None,
    };
    let vm = lab.builder.vm();
    lab._platform =
        Some(build_pc_platform(vm, platform).map_err(|e| RunError::Platform(e.to_string()))?);
    vm.pio_bus()
        .insert(Arc::new(Sink::new()), abi::USER_PORT.into(), 4)
        .map_err(VmmError::from)?;
    let devices = vm.pio_bus().len() + vm.mmio_bus().len();
    Ok((run_in(lab, kvm, image, def, params, started)?, devices))
}

/// Runs `def` in `lab`, a VM built for it: loads the guest, runs the vCPUs under the
/// watchdog and collects what they measured.
fn run_in(
    mut lab: LabVm,
    kvm: &Arc<Kvm>,
    image: &[u8],
    def: &'static TestDef,
    params: RunParams,
    started: Instant,
) -> Result<Measurement, RunError> {
    let mut m = Measurement::new(def, params);
    let progress = Arc::new(AtomicU64::new(0));
    let vcpu = lab.load_guest(kvm, image, def, &params, progress.clone())?;
    let tsc_offset = vcpu.tsc_offset();
    m.tsc_khz = vcpu.tsc_khz();
    let cpus = params.irq.cpus_for(def);
    add_aps(&mut lab.builder, &params.irq, cpus)?;
    let LabVm {
        builder,
        _platform,
        _ioevent,
        probe: _probe,
    } = lab;
    let mut machine = builder.start()?;
    let watched = watch_progress(&mut machine, &params, &progress);
    m.wall = started.elapsed();
    let ap_report = ap_report(machine.stop_all(AP_STOP_GRACE));
    match watched {
        Ok(f) => {
            collect(&mut m, f, &machine, started);
            m.rounds = vec![Round {
                samples: m.samples.len(),
                tsc_offset,
            }];
        }
        Err(stuck) => {
            m.outcome = Outcome::DidNotComplete(stuck.reason);
            m.pin_error = stuck.pin_error;
        }
    }
    account_aps(&mut m, machine.memory(), cpus, ap_report);
    Ok(m)
}

/// The VM of one lab test, being built, and what must live as long as it.
struct LabVm {
    builder: MachineBuilder<LabHook>,
    // The PC platform's devices, when the test runs on a populated bus.
    _platform: Option<PcPlatform>,
    // Keeps the ioeventfd registered for the VM's lifetime; nobody needs to read it.
    _ioevent: Option<vmm_sys_util::eventfd::EventFd>,
    // The exit-path probe's ioeventfd on `PROBE_PORT`, where the host has ioeventfds.
    probe: Option<vmm_sys_util::eventfd::EventFd>,
}

impl LabVm {
    /// Creates the VM the test's platform needs, with the userspace MMIO page on its bus
    /// and, for the ioeventfd test, the ioeventfd.
    fn build(
        kvm: &Arc<Kvm>,
        def: &TestDef,
        params: &RunParams,
        teardown: Option<&Arc<Teardown>>,
    ) -> Result<LabVm, RunError> {
        let mut builder = lab_builder(kvm, vm_config(def, &params.irq))?;
        if let Some(t) = teardown {
            builder.defer_teardown(t);
        }
        let _ioevent = if def.platform == Platform::MmioIoeventfd {
            Some(
                builder
                    .vm_mut()
                    .add_ioeventfd(IoSpace::Mmio, abi::MMIO_IOEVENTFD_GPA, 4, None)?,
            )
        } else {
            None
        };
        // Without the ioeventfd the guest takes no probes (their writes would reach the
        // VMM), and the rounds' host state is told by the empty loop alone.
        let probe = if Capabilities::get(kvm).ioeventfd() {
            builder
                .vm_mut()
                .add_ioeventfd(IoSpace::Pio, u64::from(abi::PROBE_PORT), 1, None)
                .ok()
        } else {
            None
        };
        Ok(LabVm {
            builder,
            _platform: None,
            _ioevent,
            probe,
        })
    }

    /// Loads the lab kernel, writes the test's parameters into the control page and
    /// adds vCPU 0 at the kernel's entry, with the lab's doorbell protocol as its hook.
    fn load_guest(
        &mut self,
        kvm: &Kvm,
        image: &[u8],
        def: &TestDef,
        params: &RunParams,
        progress: Arc<AtomicU64>,
    ) -> Result<&exitlab_vmm::vcpu::Vcpu, RunError> {
        let mem = self.builder.vm().memory();
        let entry = crate::kernel::load(mem, image, LAB_RAM_BYTES).map_err(RunError::Load)?;
        write_control(
            mem,
            def,
            params,
            test_argument(kvm, def),
            self.probe.is_some(),
        )
        .map_err(RunError::Load)?;
        let spec = VcpuSpec {
            entry: Some(&entry),
            pin: params.pin,
            handler: if params.bare {
                Handler::Bare
            } else {
                Handler::Devices
            },
            inject_cycles: params.inject_cycles,
            // A userspace-handled test's warm-up iterations are one userspace exit each,
            // none of them measured.
            inject_unmeasured: params.warmup,
            ..VcpuSpec::new(VcpuConfig {
                run_log: if def.kvm_run_log && !params.bare {
                    // The probes' doorbells before READY fill entries too (marked).
                    (params.warmup + params.samples * params.batch + 2 + abi::PROBE_EXITS)
                        .min(RUN_LOG_MAX) as usize
                } else {
                    0
                },
                ..boot_vcpu()
            })
        };
        let hook = LabHook::new(params.samples, progress);
        Ok(self.builder.add_vcpu(spec, hook)?)
    }
}

/// A lab VM of `config` with the userspace MMIO page on its bus.
fn lab_builder(kvm: &Arc<Kvm>, config: VmConfig) -> Result<MachineBuilder<LabHook>, RunError> {
    let b = MachineBuilder::new(kvm.clone(), config)?;
    b.vm()
        .mmio_bus()
        .insert(Arc::new(UserMmioPage), abi::MMIO_USER_GPA, abi::PAGE_SIZE)
        .map_err(VmmError::from)?;
    Ok(b)
}

/// vCPU 0 of a lab VM: the stamp page and doorbell of the lab kernel, HLT exits resumed.
fn boot_vcpu() -> VcpuConfig {
    VcpuConfig {
        id: 0,
        stamp_gpa: Some(host::stamps_gpa(0).0),
        run_log: 0,
        doorbell_port: Some(abi::DOORBELL_PORT),
        hlt: HltPolicy::Resume,
    }
}

/// Samples a guest may hand over in one [`protocol_boot`] (bounds the memory it can make
/// the lab take: 4 rings' worth).
const PROTOCOL_SAMPLES: u64 = 4 * abi::SAMPLES_PER_BATCH;

/// How one boot of a guest under the lab's doorbell protocol ended ([`protocol_boot`]).
#[derive(Debug)]
pub struct ProtocolBoot {
    /// How it ended, with numbers replaced by `N` so that like endings group: the
    /// protocol violation the lab caught (with the doorbell and state), the guest's DONE,
    /// how the vCPU stopped, or `time up`.
    pub ended: String,
    /// The lab's whole message when it caught a protocol violation.
    pub protocol_error: Option<String>,
    /// Doorbells the guest rang (every one is handed to the lab's protocol handling).
    pub doorbells: u64,
    /// Sample records the lab took from the guest's ring.
    pub samples: u64,
    /// Userspace exits by reason.
    pub exits: ExitCounts,
}

/// Boots `image` (a multiboot kernel, such as the chaos kernel) with `cmdline` on a lab
/// VM and answers its doorbells with the lab's own protocol handling, as in a
/// measurement, for at most `limit`. A guest that breaks the protocol (doorbells out of
/// order, batch counts beyond the ring or the samples asked for, garbage in the control
/// page) must end the boot with a message naming the violation; nothing it writes may
/// make the lab panic, take unbounded memory or hang.
pub fn protocol_boot(
    kvm: &Arc<Kvm>,
    image: &[u8],
    cmdline: &str,
    limit: Duration,
) -> Result<ProtocolBoot, RunError> {
    let mut b = lab_builder(
        kvm,
        VmConfig {
            ram: vec![(0, LAB_RAM_BYTES)],
            ..VmConfig::default()
        },
    )?;
    let entry = crate::kernel::load_with_cmdline(b.vm().memory(), image, LAB_RAM_BYTES, cmdline)
        .map_err(RunError::Load)?;
    let spec = VcpuSpec {
        entry: Some(&entry),
        ..VcpuSpec::new(boot_vcpu())
    };
    let hook = LabHook::new(PROTOCOL_SAMPLES, Arc::new(AtomicU64::new(0)));
    b.add_vcpu(spec, hook)?;
    let mut machine = b.start()?;
    let (f, time_up) = match machine.wait_for(0, limit) {
        Some(f) => (f, false),
        None => match machine.stop(0, Duration::from_secs(2)) {
            Some(f) => (f, true),
            None => {
                return Ok(ProtocolBoot {
                    ended: "the vCPU could not be stopped (KVM_RUN did not return after a kick)"
                        .into(),
                    protocol_error: None,
                    doorbells: 0,
                    samples: 0,
                    exits: ExitCounts::default(),
                })
            }
        },
    };
    let hook = f.hook;
    let ended = match (&hook.error, &f.stop) {
        (Some(e), _) => numbers_as_n(e.lines().next().unwrap_or(e)),
        (None, _) if time_up => "time up".into(),
        (None, VcpuStop::Hook(0)) if hook.stage == Stage::Done => {
            "DONE with every sample asked for".into()
        }
        (None, stop) => numbers_as_n(&stop.describe()),
    };
    Ok(ProtocolBoot {
        ended,
        protocol_error: hook.error,
        doorbells: f.vcpu.counts().doorbell,
        samples: hook.records.len() as u64,
        exits: *f.vcpu.counts(),
    })
}

/// `text` with every number (decimal, or hex with 0x) replaced by `N`; digits inside a
/// word (`cr2`, `x2apic`) are kept.
fn numbers_as_n(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let starts_word = !out
            .chars()
            .last()
            .is_some_and(|p: char| p.is_ascii_alphanumeric());
        if c.is_ascii_digit() && starts_word {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_hexdigit() || *d == 'x')
            {
                chars.next();
            }
            out.push('N');
        } else {
            out.push(c);
        }
    }
    out
}

/// The test's argument in the control page, as its catalogue row says.
fn test_argument(kvm: &Kvm, def: &TestDef) -> u64 {
    match def.arg {
        TestArg::None => 0,
        TestArg::XsaveMaxSubleaf => Capabilities::get(kvm).xsave_max_subleaf.unwrap_or(1).into(),
    }
}

/// Samples the guest has written into vCPU `vcpu`'s ring since the host last took it:
/// the guest fills the ring in order and the host clears what it takes, so the first
/// record whose end stamp is zero ends the written part (a binary search, a few reads).
fn ring_fill(mem: &GuestMemoryMmap, vcpu: u32) -> u64 {
    let g_end = offset_of!(abi::Sample, g_end) as u64;
    let written = |i: u64| {
        mem.read_obj::<u64>(host::sample_gpa(vcpu, i).unchecked_add(g_end))
            .is_ok_and(|v| v != 0)
    };
    let (mut lo, mut hi) = (0, abi::SAMPLES_PER_BATCH);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if written(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The sequence number of the vCPU's last userspace exit, from its stamp page (the VMM
/// writes it at every userspace exit).
fn userspace_exits(mem: &GuestMemoryMmap) -> u64 {
    let seq = offset_of!(abi::Stamps, seq) as u64;
    mem.read_obj::<u64>(host::stamps_gpa(0).unchecked_add(seq))
        .unwrap_or(0)
}

/// A run the watchdog stopped.
struct Stuck {
    reason: String,
    pin_error: Option<String>,
}

/// Waits for vCPU 0 to finish, stopping it when the guest makes no progress for
/// `params.timeout`. Progress is the guest's: doorbells, samples handed over, samples
/// written into the ring since the last hand-over, and userspace exits (so that a test
/// whose samples each take many exits, or a slow host, is not stopped while it moves;
/// a guest stuck on one instruction that KVM never completes makes none of these).
fn watch_progress(
    machine: &mut Machine<LabHook>,
    params: &RunParams,
    progress: &AtomicU64,
) -> Result<Finished<LabHook>, Stuck> {
    let mut seen = 0;
    let mut last_change = Instant::now();
    loop {
        if let Some(f) = machine.wait_for(0, Duration::from_millis(25)) {
            return Ok(f);
        }
        let mem = machine.memory();
        let p = progress
            .load(Ordering::Relaxed)
            .wrapping_add(ring_fill(mem, 0))
            .wrapping_add(userspace_exits(mem));
        if p != seen {
            seen = p;
            last_change = Instant::now();
        } else if last_change.elapsed() >= params.timeout {
            let what = if seen == 0 {
                "before the lab kernel reported READY".to_string()
            } else {
                format!("after {seen} doorbells and samples")
            };
            let msg = format!(
                "no progress for {:.1} s {what}: the guest is stuck (on this host a hypercall never completes, for example)",
                params.timeout.as_secs_f64()
            );
            return Err(match machine.stop(0, Duration::from_secs(2)) {
                Some(f) => Stuck {
                    reason: format!(
                        "{msg}{}\nvCPU registers when stopped:\n{}",
                        host_fault(
                            f.vcpu.interrupt_state(),
                            machine
                                .memory()
                                .read_obj::<abi::PerCpu>(host::percpu_gpa(0))
                                .ok()
                        ),
                        f.vcpu.dump_registers()
                    ),
                    pin_error: f.pin_error.map(|e| e.to_string()),
                },
                None => Stuck {
                    reason: format!(
                        "{msg}; the vCPU could not be stopped (KVM_RUN did not return after a kick) and was abandoned"
                    ),
                    pin_error: None,
                },
            });
        }
    }
}

/// The sentence a stuck run's reason gets when its vCPU was halted with interrupts
/// enabled and a vector pending above its priority ([`InterruptState::undelivered_vector`]):
/// the guest waits for an interrupt the host holds and does not deliver.
pub const LOST_WAKEUP: &str = "the host did not wake the vCPU";

/// The sentence a stuck run's reason gets when its vCPU halted with interrupts enabled
/// and nothing requested or in service after its handlers had taken every self-IPI it
/// sent ([`shadow_ignored`]).
pub const SHADOW_IGNORED: &str = "the host delivered the interrupt before the HLT it was to wake";

/// A host fault a stuck vCPU's state shows, with its evidence ([`LOST_WAKEUP`] or
/// [`SHADOW_IGNORED`]), or nothing. `percpu` is the vCPU's record in guest memory.
fn host_fault(state: Option<InterruptState>, percpu: Option<abi::PerCpu>) -> String {
    let Some(s) = state else {
        return String::new();
    };
    if let Some(v) = s.undelivered_vector() {
        return format!(
            "; {LOST_WAKEUP}: it halted with interrupts enabled while its enabled local APIC held vector {v:#04x} requested above its priority ({s}), so the interrupt was most likely lost in the host's KVM (a self-IPI test stopped like this on nested KVM under an emulated CPU); re-run, or run on another host"
        );
    }
    match percpu {
        Some(p) if shadow_ignored(&s, &p) => format!(
            "; {SHADOW_IGNORED}: its handlers took all {} self-IPIs it sent ({} acknowledgements), yet it halted with interrupts enabled and nothing requested or in service ({s}). The self-IPI tests send with interrupts disabled and then run STI; HLT, so the last one was taken between the two, inside the one-instruction interrupt shadow of the STI, which the host did not honour (seen on nested KVM under an emulated CPU); re-run, or run on another host",
            p.self_ipis, p.acks
        ),
        _ => String::new(),
    }
}

/// Whether a stuck vCPU took every self-IPI it sent and then halted with interrupts
/// enabled and nothing pending: the wakeup came before the HLT, not lost after it.
fn shadow_ignored(s: &InterruptState, p: &abi::PerCpu) -> bool {
    s.halted_with_nothing_pending() && p.self_ipis > 0 && p.acks == p.self_ipis
}

/// Takes what a finished vCPU thread collected into `m`: the samples and exit counts of
/// a completed run, or why it failed.
fn collect(
    m: &mut Measurement,
    f: Finished<LabHook>,
    machine: &Machine<LabHook>,
    started: Instant,
) {
    m.pin_error = f.pin_error.as_ref().map(|e| e.to_string());
    m.injected = f.vcpu.injected_waits();
    m.vmm_memory = exitlab_vmm::sys::memory_outside_guest(machine.memory());
    m.kvm_run_log = f
        .vcpu
        .run_log()
        .iter()
        .filter(|&&d| d & exitlab_vmm::vcpu::RUN_LOG_DOORBELL == 0)
        .skip(m.params.warmup as usize)
        .copied()
        .collect();
    m.boot_time = f.hook.ready_at.map(|t| t.duration_since(started));
    let failure = match (&f.stop, &f.hook.error) {
        (_, Some(err)) => Some(err.clone()),
        (VcpuStop::Hook(0), None) if f.hook.stage == Stage::Done => None,
        (_, None) => Some(f.describe()),
    };
    if let Some(why) = failure {
        m.outcome = Outcome::Failed(format!(
            "{why}\nvCPU registers:\n{}",
            f.vcpu.dump_registers()
        ));
        return;
    }
    let hook = f.hook;
    m.counts = hook.end_counts.since(&hook.start_counts);
    m.kvm_counters = match (hook.start_kvm, hook.end_kvm) {
        (Some(a), Some(b)) => Some(counter_deltas(&a, &b)),
        _ => None,
    };
    m.doorbells = hook.doorbells;
    m.samples = hook.records;
    m.guest_work = hook.work;
    m.exit_probe = hook.probe;
    if let Some(why) = guest_work_error(&m.params, m.def, m.guest_work) {
        m.outcome = Outcome::Failed(why);
        m.samples.clear();
        return;
    }
    account_bsp(m, f.vcpu.kvm_stats());
}

/// The guest work `def`'s loop gets ([`RunParams::guest_cycles`]): kernel-handled
/// tests and the empty loop (the calibration) get it; userspace-handled tests do not.
pub fn guest_work_cycles(def: &TestDef, p: &RunParams) -> u64 {
    if (def.baseline || def.expected == Where::Kernel) && !def.one_way {
        p.guest_cycles
    } else {
        0
    }
}

/// What is wrong with the guest work a completed run reports, if anything: with
/// [`RunParams::guest_cycles`] set, every iteration of the loop (warm-up included) must
/// have waited at least that long; with it off, none may have waited.
fn guest_work_error(p: &RunParams, def: &TestDef, work: GuestWork) -> Option<String> {
    let asked = if guest_work_cycles(def, p) == 0 {
        0
    } else {
        p.warmup + p.samples * p.batch
    };
    if work.iterations != asked {
        return Some(format!(
            "guest protocol error: the lab kernel did the guest work (guest-cycles {}) in {} iterations, but {asked} were asked for",
            guest_work_cycles(def, p), work.iterations
        ));
    }
    let cycles = guest_work_cycles(def, p);
    if work.spent < work.iterations.saturating_mul(cycles) {
        return Some(format!(
            "guest protocol error: the lab kernel's {} waits of {cycles} cycles spanned {} cycles in all, less than they must",
            work.iterations, work.spent
        ));
    }
    None
}

/// Each counter's growth from `start` to `end` (counters present in both).
fn counter_deltas(
    start: &BTreeMap<String, u64>,
    end: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    end.iter()
        .filter_map(|(k, &b)| Some((k.clone(), b.wrapping_sub(*start.get(k)?))))
        .collect()
}

/// How long the lab waits for each AP to leave KVM_RUN after the kick that stops it.
const AP_STOP_GRACE: Duration = Duration::from_secs(2);

/// Adds vCPUs 1..cpus to the machine (the in-kernel LAPIC keeps them waiting for a
/// SIPI), each pinned as the knobs say; the machine starts them before vCPU 0.
fn add_aps(
    b: &mut MachineBuilder<LabHook>,
    knobs: &crate::smp::IrqKnobs,
    cpus: u32,
) -> Result<(), VmmError> {
    for id in (1..cpus).filter(|&id| id != knobs.withhold_ap) {
        let spec = VcpuSpec {
            pin: knobs.ap_pin(id),
            ..VcpuSpec::new(VcpuConfig {
                id,
                stamp_gpa: Some(host::stamps_gpa(id).0),
                run_log: 0,
                doorbell_port: Some(abi::DOORBELL_PORT),
                hlt: HltPolicy::Resume,
            })
        };
        b.add_vcpu(spec, LabHook::ap())?;
    }
    Ok(())
}

/// What the APs did, once stopped.
#[derive(Debug, Default)]
struct ApReport {
    /// Exits per AP.
    exits: Vec<exitlab_results::irq::VcpuExits>,
    /// The first error an AP reported or met.
    error: Option<String>,
}

/// Collects the exits of the stopped APs (the machine's vCPUs stopped after vCPU 0 was
/// collected). An AP's `intr` exits are not counted: they are the VMM's own signals
/// (the kicks that stop it), not the guest's doing.
fn ap_report(stopped: Vec<(u32, Option<Finished<LabHook>>)>) -> ApReport {
    let mut r = ApReport::default();
    for (_, f) in stopped {
        match f {
            Some(f) => {
                let mut exits = f.vcpu.exits();
                exits.user.intr = 0;
                r.exits.push(exits);
                if r.error.is_none() {
                    if let Some(e) = f.hook.error {
                        r.error = Some(e);
                    } else if !matches!(f.stop, VcpuStop::Kicked) {
                        r.error =
                            Some(format!("AP {} stopped: {}", f.vcpu.id(), f.stop.describe()));
                    }
                }
            }
            None => {
                r.error.get_or_insert_with(|| {
                    "an AP could not be stopped (KVM_RUN did not return after a kick)".into()
                });
            }
        }
    }
    r
}

/// Records vCPU 0's exits (after a completed run): its userspace exits between READY
/// and DONE, KVM's exits over the same span, and its HLT exits over the whole run.
fn account_bsp(m: &mut Measurement, stats: Option<&exitlab_vmm::kvmstats::KvmStats>) {
    m.per_vcpu.insert(
        0,
        exitlab_results::irq::VcpuExits {
            vcpu: 0,
            user: m.counts,
            kvm_exits: m.kvm_exits(),
            halt_exits: stats.and_then(|s| s.read("halt_exits")),
        },
    );
}

/// Folds the APs into a measurement: their exits per vCPU, their userspace exits added
/// to the test's (so the exit-count check covers every vCPU), an AP's failure as the
/// test's, and the APIC ids of vCPUs that never came up in any failure message.
fn account_aps(m: &mut Measurement, mem: &GuestMemoryMmap, cpus: u32, aps: ApReport) {
    if cpus > 1 {
        let missing = crate::smp::missing_cpus(mem, cpus);
        if !missing.is_empty() {
            let ids: Vec<String> = missing.iter().map(u32::to_string).collect();
            let note = format!(
                "\nvCPUs that never came up (APIC ids): {} of {cpus}",
                ids.join(", ")
            );
            match &mut m.outcome {
                Outcome::Failed(s) | Outcome::DidNotComplete(s) => s.push_str(&note),
                Outcome::Completed => {
                    m.outcome = Outcome::Failed(format!("vCPU 0 completed, but{note}"))
                }
                Outcome::Skipped(_) => {}
            }
        }
    }
    if let Outcome::Failed(s) | Outcome::DidNotComplete(s) = &mut m.outcome {
        if cpus > 1 {
            s.push_str(&format!(
                "\nper-vCPU records: {}",
                crate::smp::percpu_summary(mem, cpus)
            ));
        }
        if let Some(e) = &aps.error {
            s.push_str(&format!("\nAP: {e}"));
        } else if !aps.exits.is_empty() {
            // The APs ran to the end (stopped by the VMM's kick): what they did, so that
            // an interrupt lost by the host is told from a target that stopped running.
            let each: Vec<String> = aps
                .exits
                .iter()
                .map(|a| {
                    format!(
                        "vCPU {}: {} userspace exits, {} KVM exits",
                        a.vcpu,
                        a.user.total(),
                        a.kvm_exits.map_or("?".into(), |k| k.to_string())
                    )
                })
                .collect();
            s.push_str(&format!("\nAPs running until stopped: {}", each.join("; ")));
        }
    }
    if m.outcome == Outcome::Completed {
        if let Some(e) = aps.error {
            m.outcome = Outcome::Failed(e);
            m.samples.clear();
            return;
        }
        for ap in &aps.exits {
            m.counts = m.counts.plus(&ap.user);
        }
        m.per_vcpu.extend(aps.exits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ram() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(vm_memory::GuestAddress(0), abi::MIN_RAM_BYTES as usize)])
            .unwrap()
    }

    fn write_record(mem: &GuestMemoryMmap, i: u64, g_end: u64) {
        let s = abi::Sample {
            g_end,
            ..abi::Sample::default()
        };
        mem.write_obj(s, host::sample_gpa(0, i)).unwrap();
    }

    #[test]
    fn a_halted_vcpu_that_took_every_self_ipi_it_sent_is_reported_as_woken_before_its_hlt() {
        let halted = InterruptState {
            mp_state: exitlab_vmm::regs::MP_STATE_HALTED,
            interrupts_enabled: true,
            tpr: 0,
            irr_highest: None,
            isr_highest: None,
            apic_enabled: true,
        };
        let record = |self_ipis, acks| abi::PerCpu {
            self_ipis,
            acks,
            ..abi::PerCpu::default()
        };
        let r = host_fault(Some(halted), Some(record(21, 21)));
        assert!(r.contains(SHADOW_IGNORED), "{r}");
        assert!(
            r.contains("all 21 self-IPIs it sent (21 acknowledgements)"),
            "{r}"
        );
        // One fewer taken than sent: the last one is gone, not early; no claim is made.
        assert_eq!(host_fault(Some(halted), Some(record(21, 20))), "");
        // A test that sends no self-IPI, or a record that could not be read.
        assert_eq!(host_fault(Some(halted), Some(record(0, 0))), "");
        assert_eq!(host_fault(Some(halted), None), "");
        // Interrupts disabled: the guest itself waits.
        let cli = InterruptState {
            interrupts_enabled: false,
            ..halted
        };
        assert_eq!(host_fault(Some(cli), Some(record(21, 21))), "");
        // A requested vector the host held back is the lost wakeup, whatever the counts.
        let held = InterruptState {
            irr_highest: Some(0xe0),
            ..halted
        };
        let r = host_fault(Some(held), Some(record(21, 20)));
        assert!(
            r.contains(LOST_WAKEUP) && !r.contains(SHADOW_IGNORED),
            "{r}"
        );
        assert_eq!(host_fault(None, Some(record(21, 21))), "");
    }

    #[test]
    fn endings_group_with_numbers_as_n_but_words_keep_their_digits() {
        assert_eq!(
            numbers_as_n("guest protocol error: batch of 16385 records exceeds the ring of 16384"),
            "guest protocol error: batch of N records exceeds the ring of N"
        );
        assert_eq!(
            numbers_as_n("vector 13 (#GP) at rip 0xdeadbeef, cr2 0x0; x2apic"),
            "vector N (#GP) at rip N, cr2 N; x2apic"
        );
    }

    #[test]
    fn ring_fill_counts_the_records_written_since_the_last_hand_over() {
        let mem = ram();
        assert_eq!(ring_fill(&mem, 0), 0);
        for i in 0..1234 {
            write_record(&mem, i, 1_000 + i);
        }
        assert_eq!(ring_fill(&mem, 0), 1234);
        for i in 1234..abi::SAMPLES_PER_BATCH {
            write_record(&mem, i, 7);
        }
        assert_eq!(ring_fill(&mem, 0), abi::SAMPLES_PER_BATCH);
    }

    #[test]
    fn taking_a_batch_clears_the_ring_for_the_watchdog() {
        let mem = ram();
        for i in 0..100 {
            write_record(&mem, i, 5_000 + i);
        }
        let c = abi::Control {
            batch_count: 100,
            ..abi::Control::default()
        };
        host::write_control(&mem, c).unwrap();
        let mut hook = LabHook::new(1000, Arc::new(AtomicU64::new(0)));
        hook.take_batch(&mem, 0).unwrap();
        assert_eq!(hook.records.len(), 100);
        assert_eq!(hook.records[99].g_end, 5_099);
        assert_eq!(ring_fill(&mem, 0), 0);
    }

    fn guest_params(guest_cycles: u64) -> RunParams {
        RunParams {
            ring: 0,
            samples: 100,
            batch: 3,
            warmup: 7,
            timeout: Duration::from_secs(1),
            pin: None,
            bare: false,
            irq: Default::default(),
            inject_cycles: 0,
            guest_cycles,
        }
    }

    #[test]
    fn guest_work_goes_to_kernel_handled_loops_and_the_empty_loop_only() {
        let p = guest_params(500);
        let name = |n| crate::catalogue::find(n).unwrap();
        for kernel in ["cpuid", "inl_from_kernel", "mov_to_cr8", "eoi"] {
            assert_eq!(guest_work_cycles(name(kernel), &p), 500, "{kernel}");
        }
        assert_eq!(guest_work_cycles(crate::catalogue::baseline(), &p), 500);
        for other in [
            "inl_from_user",
            "hlt",
            "rdmsr_user",
            "ipi_one_way",
            "hlt_wake",
        ] {
            assert_eq!(guest_work_cycles(name(other), &p), 0, "{other}");
        }
        assert_eq!(guest_work_cycles(name("cpuid"), &guest_params(0)), 0);
    }

    #[test]
    fn the_guest_work_a_run_reports_is_checked_against_what_was_asked() {
        let cpuid = crate::catalogue::find("cpuid").unwrap();
        let user = crate::catalogue::find("inl_from_user").unwrap();
        let on = guest_params(500);
        let iterations = 7 + 100 * 3;
        let ok = GuestWork {
            iterations,
            spent: iterations * 500 + 9,
        };
        assert_eq!(guest_work_error(&on, cpuid, ok), None);
        assert_eq!(
            guest_work_error(&guest_params(0), cpuid, GuestWork::default()),
            None
        );
        assert_eq!(guest_work_error(&on, user, GuestWork::default()), None);
        let short = GuestWork {
            iterations: iterations - 1,
            ..ok
        };
        let e = guest_work_error(&on, cpuid, short).unwrap();
        assert!(
            e.contains("in 306 iterations, but 307 were asked for"),
            "{e}"
        );
        let quick = GuestWork {
            iterations,
            spent: iterations * 500 - 1,
        };
        let e = guest_work_error(&on, cpuid, quick).unwrap();
        assert!(e.contains("less than they must"), "{e}");
        // Work the host did not ask for is a protocol error too.
        let e = guest_work_error(&guest_params(0), cpuid, ok).unwrap();
        assert!(e.contains("but 0 were asked for"), "{e}");
        assert!(guest_work_error(&on, user, ok).is_some());
    }

    #[test]
    fn the_stamp_page_sequence_counts_userspace_exits() {
        let mem = ram();
        assert_eq!(userspace_exits(&mem), 0);
        let stamps = abi::Stamps {
            seq: 42,
            ..abi::Stamps::default()
        };
        mem.write_obj(stamps, host::stamps_gpa(0)).unwrap();
        assert_eq!(userspace_exits(&mem), 42);
    }
}
