//! A vCPU and its run loop.
//!
//! The loop is the hot path of every userspace ("heavyweight") exit: KVM_RUN returns,
//! the exit is dispatched by reason to an [`ExitHandler`] (the platform's devices through
//! the vCPU's own bus views, with no lock shared with other vCPUs and no allocation; or
//! the bare floor it is measured against), and KVM_RUN is entered again. There is one
//! loop; the full VMM and the bare floor differ only in the handler (see [`crate::exit`]).
//! The only work added for measurement is two TSC reads and three stores into the
//! vCPU's stamp page.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::bus::BusView;
pub use crate::counts::{ExitCounts, VcpuExits};
use crate::exit::{self, Bare, Devices, DoorbellRoute, ExitHandler, Next};
pub use crate::hook::{DoorbellCtx, ExitHook, HltPolicy, HookReply, NoHook, VcpuStop};
use crate::kvmstats::KvmStats;
use crate::msr::UserMsr;
use crate::regs;
use crate::sys::{self, StampPage};
use crate::VmmError;
use exitlab_boot::EntryState;
use exitlab_devices::ioapic::Ioapic;

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

/// Stack words a register report carries (64-bit guests).
const STACK_DUMP_WORDS: usize = 64;

/// Marks a [`Vcpu::run_log`] entry whose exit was a doorbell.
pub const RUN_LOG_DOORBELL: u64 = 1 << 63;

/// A vCPU, owned by the thread that runs it.
// Laid out by hand: what a device exit touches comes first and together (the kvm_run
// pointer inside `fd`, the stamp page, the counters, the bus views), so that an exit
// pulls in as few cache lines as possible; the rest follows.
#[repr(C)]
pub struct Vcpu {
    fd: VcpuFd,
    run_page: sys::RunPage,
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
    ioapic: Option<Arc<Ioapic>>,
    inject: Inject,
    /// When this vCPU's thread first entered its run loop (its first KVM_RUN follows).
    first_entry: Option<std::time::Instant>,
}

pub use exitlab_counts::InjectedWaits;

/// The known-answer control of the exit path: host TSC cycles added to the handling of
/// every userspace exit but the doorbells by a busy-wait (0: off, the default), and the
/// waits made.
///
/// A wait costs more than the cycles it spins: the spin's last pass overshoots, and the
/// call and the clock reads around the spin take their own cycles, all of which an exit's
/// handling gets. Here they came to 40-220 cycles a wait (a nominal 480 made the handling
/// phase 546-702 cycles longer). So the spin is shortened by what a wait adds beyond it,
/// measured on the vCPU's thread just before its first KVM_RUN ([`Inject::calibrated`]),
/// and each wait counts its spin plus that cost outside it: the waits add, on average,
/// the cycles asked for (as far as a warm loop of waits tells what a wait costs after an
/// exit; the VMM's stamps around its handling of each exit are the check). Where a wait
/// costs far more than its spin ([`MAX_EXCESS`]: an emulated CPU), it is left as asked.
///
/// A warm loop of waits does not tell all a wait costs after an exit: there its code and
/// the handler's data are no longer in the caches, and its clock reads wait for the
/// handler's loads. Measured on a kvm_pvm host (Intel Xeon), 420 cycles asked, calibrated
/// warm, counted a mean 426, while the VMM's stamps around its handling of each exit
/// moved by ~470 and the guest saw ~460. So where the guest does not measure the first
/// exits of a run (its warm-up), the control calibrates itself there too
/// ([`InSitu`]): every other one of them gets no wait, the rest the warm calibration's,
/// and the spin is set so that a wait adds, over the exit's handling without it, the
/// cycles asked.
#[derive(Debug, Clone, Default)]
struct Inject {
    /// What each wait is to add.
    cycles: u64,
    /// What it spins for.
    spin: u64,
    /// What it costs outside its spin (the call, its clock reads and its count).
    outside: u64,
    /// Whether the warm calibration was used (not where a wait costs far more than its
    /// spin).
    warm: bool,
    /// Leading exits of a run that the guest does not measure (its warm-up), which the
    /// calibration where the waits are made may use.
    unmeasured: u64,
    /// That calibration while it lasts.
    in_situ: Option<Box<InSitu>>,
    /// Whether that calibration was made: a later run of the vCPU (after an S3 resume)
    /// keeps its result, and its exits are measured ones.
    placed: bool,
    done: InjectedWaits,
}

/// The most [`Vcpu::set_inject`] adds to an exit: 100 million cycles (tens of
/// milliseconds), as `bench --inject-cycles` takes.
pub const MAX_INJECT_CYCLES: u64 = 100_000_000;

/// Exits the calibration where the waits are made takes, at most: half without a wait,
/// half with one.
const IN_SITU_EXITS: usize = 64;
/// The fewest it takes: with fewer unmeasured exits the warm calibration stands.
const IN_SITU_MIN_EXITS: usize = 16;

/// The calibration of the control where its waits are made: the handling of exits
/// (from KVM_RUN's return to the end of the handler, wait included), alternately without
/// a wait and with one of the warm calibration's spin. Its arrays are allocated before
/// the vCPU first runs, so that an exit allocates nothing.
#[derive(Debug, Clone)]
struct InSitu {
    /// Exits it takes in all (even).
    exits: usize,
    /// Exits taken so far.
    taken: usize,
    /// Handling of the exits without a wait.
    bare: [u64; IN_SITU_EXITS / 2],
    /// Handling of the exits with one.
    waited: [u64; IN_SITU_EXITS / 2],
    /// What those waits spun.
    spun: [u64; IN_SITU_EXITS / 2],
}

/// Waits timed to calibrate the control.
const CALIBRATION_WAITS: usize = 101;
/// The longest spin timed to calibrate the control (what a wait adds beyond its spin
/// does not grow with the spin; a long one would only make the calibration slow).
const CALIBRATION_SPIN: u64 = 2_000;
/// The most a wait may add beyond its spin for the calibration to be used. Here it
/// added 40-220 cycles; in a guest whose CPU is emulated (the L1 of CI hosts without
/// /dev/kvm) a trial spin of 2,000 cycles took millions, and shortening the spin by that
/// would make every wait add far less than asked. Beyond this the wait is left as it is:
/// it spins what was asked, adds at least that, and counts what it spun.
pub const MAX_EXCESS: u64 = 1_000;

impl Inject {
    /// The control for waits that add `cycles` each (0: off). Times
    /// [`CALIBRATION_WAITS`] waits of a trial spin between two clock reads, against the
    /// same two reads around nothing: what a wait adds beyond the spin it was asked for
    /// (the median over the waits) is its overshoot plus its cost outside the spin, and
    /// the spin is shortened by it. A wait of fewer cycles than that cost adds more than
    /// asked, and its count says so.
    fn calibrated(cycles: u64) -> Inject {
        if cycles == 0 {
            return Inject::default();
        }
        let trial = cycles.min(CALIBRATION_SPIN);
        let mut probe = Inject {
            cycles: trial,
            spin: trial,
            ..Inject::default()
        };
        let mut bare = [0u64; CALIBRATION_WAITS];
        let mut around = [0u64; CALIBRATION_WAITS];
        let mut spun = [0u64; CALIBRATION_WAITS];
        for i in 0..CALIBRATION_WAITS {
            let t0 = sys::rdtscp();
            bare[i] = sys::rdtscp().wrapping_sub(t0);
            let before = probe.done.spun;
            let t0 = sys::rdtscp();
            probe.wait();
            around[i] = sys::rdtscp().wrapping_sub(t0);
            spun[i] = probe.done.spun.saturating_sub(before);
        }
        let added = middle(&mut around).saturating_sub(middle(&mut bare));
        Inject::from_timing(cycles, trial, added, middle(&mut spun))
    }

    /// The control for waits that add `cycles` each, from a calibration's medians: a
    /// wait of a `trial` spin added `added` cycles between two clock reads, of which its
    /// spin counted `spun`. Left uncalibrated (the spin is what was asked) where a wait
    /// added more than [`MAX_EXCESS`] beyond its trial.
    fn from_timing(cycles: u64, trial: u64, added: u64, spun: u64) -> Inject {
        let excess = added.saturating_sub(trial);
        let warm = excess <= MAX_EXCESS;
        let (spin, outside) = if warm {
            (cycles.saturating_sub(excess), added.saturating_sub(spun))
        } else {
            (cycles, 0)
        };
        Inject {
            cycles,
            spin,
            outside,
            warm,
            ..Inject::default()
        }
    }

    /// Calibrates the control in place (on the thread that will wait), keeping the waits
    /// made so far, and prepares its calibration where the waits are made on the run's
    /// unmeasured exits, when there are enough of them and the warm calibration was used.
    /// Once that calibration was made ([`Inject::placed`]) a later run keeps it: this
    /// then does nothing.
    fn calibrate(&mut self) {
        if !self.placed {
            self.adopt(Inject::calibrated(self.cycles));
        }
    }

    /// Takes the warm calibration `c` (of this control's cycles) and prepares the one
    /// where the waits are made ([`Inject::calibrate`]).
    fn adopt(&mut self, c: Inject) {
        // A calibration begun by an earlier run and not finished stays unfinished: its
        // waits kept the warm calibration, and the count says so.
        if self.in_situ.take().is_some_and(|c| c.taken > 0) {
            self.done.in_situ_cut += 1;
        }
        self.spin = c.spin;
        self.outside = c.outside;
        self.warm = c.warm;
        let exits = (self.unmeasured.min(IN_SITU_EXITS as u64) as usize) & !1;
        // The unmeasured exits are the first run's: a later run (or a calibration cut
        // short by one) does not take them again.
        self.unmeasured = 0;
        self.in_situ = (self.warm && exits >= IN_SITU_MIN_EXITS).then(|| {
            Box::new(InSitu {
                exits,
                taken: 0,
                bare: [0; IN_SITU_EXITS / 2],
                waited: [0; IN_SITU_EXITS / 2],
                spun: [0; IN_SITU_EXITS / 2],
            })
        });
    }

    /// Whether the calibration where the waits are made is under way (the run loop then
    /// reads the clock when KVM_RUN returns).
    #[inline(always)]
    fn calibrating(&self) -> bool {
        self.in_situ.is_some()
    }

    /// One exit of the calibration where the waits are made, whose KVM_RUN returned at
    /// `returned` (TSC): alternately no wait and a wait of the warm calibration's spin,
    /// then the handling's length. After the last, the spin and the cost outside it are
    /// set from the medians ([`Inject::from_in_situ`]).
    #[cold]
    #[inline(never)]
    fn calibration_exit(&mut self, returned: u64) {
        let Some(mut c) = self.in_situ.take() else {
            return;
        };
        let i = c.taken / 2;
        // A clock read behind KVM_RUN's return (as one on another CPU can be) counts as
        // no time, as in a wait.
        if c.taken % 2 == 0 {
            c.bare[i] = sys::rdtscp().saturating_sub(returned);
            self.done.unwaited += 1;
        } else {
            let before = self.done.spun;
            self.wait();
            c.spun[i] = self.done.spun.saturating_sub(before);
            c.waited[i] = sys::rdtscp().saturating_sub(returned);
        }
        c.taken += 1;
        if c.taken == c.exits {
            let n = c.exits / 2;
            match Inject::from_in_situ(
                self.cycles,
                self.spin,
                self.outside,
                middle(&mut c.bare[..n]),
                middle(&mut c.waited[..n]),
                middle(&mut c.spun[..n]),
            ) {
                Some((spin, outside)) => {
                    self.spin = spin;
                    self.outside = outside;
                }
                None => self.done.in_situ_unused += 1,
            }
            self.done.in_situ += 1;
            self.placed = true;
        } else {
            self.in_situ = Some(c);
        }
    }

    /// The spin and the cost outside it from the calibration where the waits are made:
    /// with the warm calibration's `spin` (counted as `outside` besides), exits were
    /// handled in `bare` cycles without a wait and `waited` with one whose count showed
    /// `spun` (its spin plus `outside`; medians). A wait then added `waited - bare`, of
    /// which `spun - outside` was spin: the spin becomes what adds `cycles`, and a wait
    /// counts its spin plus the rest. A wait adds at least its spin, so medians that say
    /// less (exits whose handling varied more than the spin) count as its spin alone:
    /// the spin is never set beyond `cycles`. `None`, and the warm calibration stands,
    /// where a wait added more than [`MAX_EXCESS`] beyond its spin (an exit disturbed too
    /// often to tell).
    fn from_in_situ(
        cycles: u64,
        spin: u64,
        outside: u64,
        bare: u64,
        waited: u64,
        spun: u64,
    ) -> Option<(u64, u64)> {
        let spun_alone = spun.saturating_sub(outside).max(spin);
        let added = waited.saturating_sub(bare).max(spun_alone);
        let beyond = added - spun_alone;
        if beyond > MAX_EXCESS {
            return None;
        }
        // The spin that adds `cycles`: what it spun, moved by what was missing.
        let new_spin = spin.saturating_add(cycles).saturating_sub(added);
        Some((new_spin, beyond))
    }

    /// The waits made so far, with a calibration where they are made that is under way
    /// counted as cut short ([`InjectedWaits::in_situ_cut`]): asked now, the run ended
    /// within it. One that took no exit (a run without userspace exits, such as a test
    /// KVM handles in the kernel) was never begun, and is not counted.
    fn counted(&self) -> InjectedWaits {
        let mut done = self.done;
        if self.in_situ.as_ref().is_some_and(|c| c.taken > 0) {
            done.in_situ_cut += 1;
        }
        done
    }

    /// One wait, counted as its spin plus its cost outside the spin.
    #[cold]
    #[inline(never)]
    fn wait(&mut self) {
        let spun = busy_wait(self.spin);
        self.done.add(spun.saturating_add(self.outside));
    }
}

/// The middle one of `v` once sorted (the upper of the two middle ones of an even count).
fn middle(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Busy-waits `cycles` host TSC cycles and returns the cycles it measured, at least
/// `cycles` (from its first clock read to its last; a read behind the first, as a TSC
/// read on another CPU can be, counts as no time). It only reads the clock, with no
/// PAUSE between reads: a PAUSE takes ~140 cycles on recent Intel cores, so a wait
/// would pass its deadline by up to that, by an amount that depends on the spin's length
/// (a calibration at one length would not hold at another).
#[inline(always)]
fn busy_wait(cycles: u64) -> u64 {
    let start = sys::rdtscp();
    loop {
        let spun = sys::rdtscp().saturating_sub(start);
        if spun >= cycles {
            return spun;
        }
    }
}

impl Vcpu {
    pub(crate) fn new(
        mut fd: VcpuFd,
        config: VcpuConfig,
        mem: Arc<GuestMemoryMmap>,
        pio: BusView,
        mmio: BusView,
        user_msrs: Arc<[UserMsr]>,
        ioapic: Option<Arc<Ioapic>>,
    ) -> Result<Vcpu, VmmError> {
        let stamps = match config.stamp_gpa {
            Some(gpa) => Some(StampPage::new(mem.clone(), gpa).ok_or(
                VmmError::StampPageOutsideRam {
                    vcpu: config.id,
                    gpa,
                },
            )?),
            None => None,
        };
        let stats = KvmStats::open(&fd);
        let run_page = sys::RunPage::new(&mut fd);
        Ok(Vcpu {
            fd,
            run_page,
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
            ioapic,
            inject: Inject::default(),
            first_entry: None,
        })
    }

    /// When this vCPU's thread first entered its run loop, after its seccomp filter: its
    /// first KVM_RUN, and so its first guest instruction, follows at once. `None` before
    /// it ever ran.
    pub fn first_entry(&self) -> Option<std::time::Instant> {
        self.first_entry
    }

    /// Adds `cycles` host TSC cycles to the handling of every userspace exit but the
    /// doorbells, from the next run on (0 turns it off), by a busy-wait calibrated when
    /// the run starts so that, with its call and clock reads, it adds that many on
    /// average: a change of known size for checking that a measurement sees it. Off, the
    /// loop tests two local flags per exit. Where the guest does not measure the first
    /// `unmeasured` userspace exits of the run (its warm-up), the control also calibrates
    /// itself on up to 64 of them (none when fewer than 16), every other one left without a
    /// wait ([`InjectedWaits::unwaited`]), so that a wait adds what was asked where it is
    /// made, not only in a warm loop. `cycles` is capped at [`MAX_INJECT_CYCLES`].
    pub fn set_inject(&mut self, cycles: u64, unmeasured: u64) {
        let cycles = cycles.min(MAX_INJECT_CYCLES);
        // Calibrated on the vCPU's own thread when it starts to run (`run_with`).
        self.inject = Inject {
            cycles,
            spin: cycles,
            unmeasured,
            done: self.injected_waits(),
            ..Inject::default()
        };
    }

    /// Busy-waits made by [`Vcpu::set_inject`] so far (one per userspace exit
    /// handled while it was on) and the cycles they actually spun; a calibration where
    /// the waits are made that is still under way counts as cut short
    /// ([`InjectedWaits::in_situ_cut`]): the run ended within it.
    pub fn injected_waits(&self) -> InjectedWaits {
        self.inject.counted()
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

    /// Its exits so far: userspace exits by reason, and KVM's counts of all exits and
    /// HLT exits when the host has binary stats.
    pub fn exits(&self) -> VcpuExits {
        let stats = self.kvm_stats();
        VcpuExits {
            vcpu: self.id(),
            user: self.counts,
            kvm_exits: stats.and_then(|s| s.read("exits")),
            halt_exits: stats.and_then(|s| s.read("halt_exits")),
        }
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
            let v = (regs::lapic_register(&lapic.regs, reg) & !0x700) | (mode << 8);
            regs::set_lapic_register(&mut lapic.regs, reg, v);
        }
        self.fd
            .set_lapic(&lapic)
            .map_err(|e| VmmError::Kvm("KVM_SET_LAPIC", e))
    }

    /// Puts an application processor back in wait-for-SIPI, as after a platform reset
    /// (the in-kernel LAPIC then starts it on the next INIT/SIPI).
    pub fn wait_for_sipi(&self) -> Result<(), VmmError> {
        self.fd
            .set_mp_state(kvm_bindings::kvm_mp_state {
                mp_state: kvm_bindings::KVM_MP_STATE_INIT_RECEIVED,
            })
            .map_err(|e| VmmError::Kvm("KVM_SET_MP_STATE", e))
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

    /// The vCPU's run state, interrupt flag and in-kernel LAPIC state (`None` without
    /// an in-kernel LAPIC), for failure reports.
    pub fn interrupt_state(&self) -> Option<regs::InterruptState> {
        regs::interrupt_state(&self.fd)
    }

    /// A dump of the registers, for failure reports.
    pub fn dump_registers(&self) -> String {
        let mut s = regs::dump(&self.fd);
        if let Some(i) = self.interrupt_state() {
            s += &format!("\ninterrupts: {i}");
        }
        if let Some(words) = self.stack_words(STACK_DUMP_WORDS) {
            s += "\nstack (rsp upwards):";
            for (i, w) in words.iter().enumerate() {
                if i % 4 == 0 {
                    s += "\n ";
                }
                s += &format!(" {w:016x}");
            }
        }
        s
    }

    /// Up to `n` 64-bit words of the guest's stack from RSP upwards (each page
    /// translated through the guest's page tables), for failure and timeout reports:
    /// the return addresses in it name the code that led to where the vCPU is.
    pub fn stack_words(&self, n: usize) -> Option<Vec<u64>> {
        let rsp = self.fd.get_regs().ok()?.rsp;
        let sregs = self.fd.get_sregs().ok()?;
        if sregs.cr0 & (1 << 31) == 0 || sregs.cs.l == 0 {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n as u64 {
            let gva = rsp.checked_add(i * 8)?;
            let t = self.fd.translate_gva(gva).ok()?;
            if t.valid == 0 {
                break;
            }
            let Ok(w) = self.mem.read_obj::<u64>(GuestAddress(t.physical_address)) else {
                break;
            };
            out.push(w);
        }
        (!out.is_empty()).then_some(out)
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

    /// Runs the vCPU with the platform's devices until something stops it. Every
    /// userspace exit is counted by reason; doorbell writes go to `hook`.
    pub fn run(&mut self, hook: &mut dyn ExitHook) -> VcpuStop {
        self.run_with(Handler::Devices, hook)
    }

    /// Runs the vCPU with the handler `handler` (see [`Handler`]).
    pub fn run_with(&mut self, handler: Handler, hook: &mut dyn ExitHook) -> VcpuStop {
        sys::set_immediate_exit_target(self.fd.get_kvm_run());
        // On this thread, as pinned, before the first entry's stamp (~0.1 ms).
        if self.inject.cycles != 0 {
            self.inject.calibrate();
        }
        self.first_entry.get_or_insert_with(std::time::Instant::now);
        // Bus changes now kick this thread; the views refresh on the kick's EINTR.
        self.pio.subscribe();
        self.mmio.subscribe();
        let Vcpu {
            fd,
            run_page,
            stamps,
            seq,
            pio,
            counts,
            mmio,
            run_log,
            config,
            mem,
            user_msrs,
            stats,
            stop,
            ioapic,
            inject,
            first_entry: _,
        } = self;
        let mut lp = Loop {
            fd,
            run_page,
            stamps: stamps.as_ref(),
            seq,
            run_log,
            doorbell: config.doorbell_port,
            stop,
            inject,
        };
        let doorbell = DoorbellRoute {
            hook,
            vcpu_id: config.id,
            mem,
            stats: stats.as_ref(),
        };
        let end = match handler {
            Handler::Devices => lp.run(&mut Devices {
                pio,
                mmio,
                counts,
                user_msrs,
                hlt: config.hlt,
                ioapic: ioapic.as_deref(),
                doorbell,
            }),
            Handler::Bare => lp.run(&mut Bare { counts, doorbell }),
        };
        self.pio.unsubscribe();
        self.mmio.unsubscribe();
        sys::clear_immediate_exit_target();
        end
    }
}

/// Which [`ExitHandler`] a vCPU runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// The platform: bus, devices, accounting ([`Devices`]).
    Devices,
    /// The floor a userspace exit is measured against: no device model ([`Bare`]).
    Bare,
}

/// What the run loop itself owns: the KVM_RUN call, the stamps and the log.
struct Loop<'a> {
    fd: &'a mut VcpuFd,
    run_page: &'a sys::RunPage,
    stamps: Option<&'a StampPage>,
    seq: &'a mut u64,
    run_log: &'a mut Vec<u64>,
    doorbell: Option<u16>,
    stop: &'a AtomicBool,
    inject: &'a mut Inject,
}

impl Loop<'_> {
    /// The one run loop.
    #[inline(always)]
    fn run<H: ExitHandler>(&mut self, h: &mut H) -> VcpuStop {
        // The first entry has no exit before it: nothing is published for it.
        let mut prev_return: Option<u64> = None;
        let mut t_enter = 0;
        // Decided once, so that a loop without a log reads nothing of it per exit, and a
        // loop with neither stamps nor a log reads no clock (rdtscp costs ~40 cycles).
        let logging = self.run_log.capacity() > 0;
        let timing = logging || self.stamps.is_some();
        // The control's calibration where its waits are made reads the clock too, while
        // it lasts (the run's first unmeasured exits).
        let mut calibrating = self.inject.calibrating();
        loop {
            if let (Some(st), Some(t)) = (self.stamps, prev_return) {
                *self.seq += 1;
                t_enter = sys::rdtscp();
                st.publish(*self.seq, t, t_enter);
            }
            // KVM_RUN, the exit decoded from kvm_run in line (port exits) or out of line.
            let result = self.run_page.run(self.fd);
            let t_return = if timing || calibrating {
                sys::rdtscp()
            } else {
                0
            };
            prev_return = Some(t_return);
            if logging && t_enter != 0 && self.run_log.len() < self.run_log.capacity() {
                self.run_log
                    .push(t_return.wrapping_sub(t_enter) & !RUN_LOG_DOORBELL);
            }
            match exit::dispatch(h, result, self.run_page.io_size(), self.doorbell) {
                Next::Resume => {
                    if calibrating {
                        self.inject.calibration_exit(t_return);
                        calibrating = self.inject.calibrating();
                    } else if self.inject.cycles != 0 {
                        self.inject.wait();
                    }
                }
                Next::Doorbell(reply) => {
                    if let Some(last) = self.run_log.last_mut() {
                        *last |= RUN_LOG_DOORBELL;
                    }
                    if let HookReply::Stop(c) = reply {
                        return VcpuStop::Hook(c);
                    }
                }
                Next::Stop(s) => return s,
                Next::InternalError => {
                    let (suberror, data, insn) = sys::internal_error(self.fd.get_kvm_run());
                    return VcpuStop::InternalError {
                        suberror,
                        data,
                        insn,
                    };
                }
                Next::Interrupted => {
                    self.fd.set_kvm_immediate_exit(0);
                    h.refresh();
                    if self.stop.load(Ordering::Acquire) {
                        return VcpuStop::Kicked;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibrated_wait_spins_less_than_asked_by_what_it_costs_besides() {
        let off = Inject::calibrated(0);
        assert_eq!((off.cycles, off.spin, off.outside), (0, 0, 0));
        for cycles in [1, 480, 200_000] {
            let i = Inject::calibrated(cycles);
            assert_eq!(i.cycles, cycles);
            // A wait costs more than its spin (a call and clock reads at least), so the
            // spin is shortened (to nothing for 1 cycle, which a wait cannot be), unless
            // the host's clock reads cost so much that the wait is left as asked (an
            // emulated CPU: `from_timing`'s test checks both cases on given timings).
            let uncalibrated = !i.warm && i.spin == cycles && i.outside == 0;
            assert!(
                uncalibrated || i.spin < cycles || cycles == 1 && i.spin == 0,
                "{i:?}"
            );
            // The trial spin's median count is at least the trial, so what the spin is
            // shortened by is never less than the cost counted outside it, unless it is
            // cut to nothing.
            assert!(i.spin + i.outside <= cycles || i.spin == 0, "{i:?}");
            assert_eq!(i.done, InjectedWaits::default());
        }
        // Calibrating a control in place keeps its waits.
        let mut i = Inject::calibrated(480);
        i.wait();
        i.calibrate();
        assert_eq!((i.cycles, i.done.waits), (480, 1));
    }

    #[test]
    fn a_wait_is_left_uncalibrated_where_it_costs_far_more_than_its_spin() {
        // As here: a trial of 2,000 added 2,150 between two reads, its spin counted 2,040.
        let i = Inject::from_timing(480, 2_000, 2_150, 2_040);
        assert_eq!((i.spin, i.outside, i.warm), (330, 110, true));
        // As in a guest whose CPU is emulated: the trial added two million cycles.
        let i = Inject::from_timing(2_000_000, 2_000, 2_001_000, 1_999_000);
        assert_eq!((i.cycles, i.spin, i.outside), (2_000_000, 2_000_000, 0));
        assert!(!i.warm);
        // Nor is the calibration where the waits are made tried then, however many
        // unmeasured exits the run has; after a warm calibration it is.
        let control = || Inject {
            cycles: 2_000_000,
            unmeasured: 200,
            ..Inject::default()
        };
        let mut emulated = control();
        emulated.adopt(i);
        assert!(!emulated.calibrating());
        let mut here = control();
        here.adopt(Inject::from_timing(2_000_000, 2_000, 2_150, 2_040));
        assert!(here.calibrating());
        // At the limit the calibration is still used; past it, not.
        let at = Inject::from_timing(480, 2_000, 2_000 + MAX_EXCESS, 2_000);
        let past = Inject::from_timing(480, 2_000, 2_001 + MAX_EXCESS, 2_000);
        assert_eq!((at.spin, at.outside), (0, MAX_EXCESS));
        assert_eq!((past.spin, past.outside), (480, 0));
    }

    #[test]
    fn a_wait_counts_its_spin_and_its_cost_outside_it() {
        // A cost outside the spin far beyond anything a spin of nothing can reach.
        const OUTSIDE: u64 = 1 << 40;
        let mut i = Inject {
            cycles: OUTSIDE,
            spin: 0,
            outside: OUTSIDE,
            ..Inject::default()
        };
        i.wait();
        i.wait();
        assert_eq!(i.done.waits, 2);
        assert!(
            i.done.min >= OUTSIDE && i.done.spun >= 2 * OUTSIDE,
            "{:?}",
            i.done
        );
    }

    #[test]
    fn a_wait_calibrated_where_it_is_made_adds_what_was_asked_over_the_handling_without_it() {
        // As measured on a kvm_pvm host: 420 asked, the warm calibration spun 332 and
        // counted 40 besides; where the waits were made, exits took 50 cycles without one
        // and 520 with one that counted 372. So a wait added 470, 138 of it beyond its
        // spin: the spin becomes 282, and a wait counts 282 + 138 = 420, which is also
        // what it adds over the 50.
        let (spin, outside) = Inject::from_in_situ(420, 332, 40, 50, 520, 372).unwrap();
        assert_eq!((spin, outside), (282, 138));
        assert_eq!(spin + outside, 420);
        // A wait that added less than asked spins longer.
        assert_eq!(
            Inject::from_in_situ(420, 332, 40, 50, 400, 372),
            Some((402, 18))
        );
        // One that costs more beyond its spin than was asked cannot be shortened below
        // nothing: it adds what it must, and counts it.
        assert_eq!(
            Inject::from_in_situ(100, 60, 40, 50, 400, 100),
            Some((0, 290))
        );
        // Where a wait seemed to add far more than its spin (exits disturbed too often
        // to tell), the warm calibration stands; at the limit it is still used.
        assert_eq!(
            Inject::from_in_situ(420, 332, 40, 50, 50 + 332 + MAX_EXCESS + 1, 372),
            None
        );
        assert_eq!(
            Inject::from_in_situ(420, 332, 40, 50, 50 + 332 + MAX_EXCESS, 372),
            Some((0, MAX_EXCESS))
        );
        // A wait adds at least its spin: exits that took longer without a wait than with
        // one count it as its spin alone (332), so the spin becomes 420 and not more, and
        // nothing is counted beyond it.
        assert_eq!(
            Inject::from_in_situ(420, 332, 40, 600, 520, 372),
            Some((420, 0))
        );
        // Nor does a count below the spin asked (impossible, as a wait counts at least
        // its spin) set the spin beyond what was asked: with every median 0 it stays at
        // 420 rather than doubling.
        assert_eq!(Inject::from_in_situ(420, 332, 40, 0, 0, 0), Some((420, 0)));
        for (bare, waited, spun) in [(0, 0, 0), (9_000, 10, 5), (10, 900, 700)] {
            let (spin, _) = Inject::from_in_situ(420, 332, 40, bare, waited, spun).unwrap();
            assert!(spin <= 420, "{bare} {waited} {spun}: {spin}");
        }
        // Nothing overflows at the largest control and clock values.
        assert!(Inject::from_in_situ(u64::MAX, u64::MAX, 0, 0, u64::MAX, u64::MAX).is_some());
    }

    #[test]
    fn the_calibration_where_waits_are_made_takes_every_other_unmeasured_exit_without_a_wait() {
        // A warm calibration as on a kvm_pvm host: a trial of 2,000 added 2,150 between
        // two reads and its spin counted 2,040, so the spin is 1,850 and 110 is counted
        // outside it.
        let warm = || Inject::from_timing(2_000, 2_000, 2_150, 2_040);
        let control = |unmeasured: u64| {
            let mut i = Inject {
                cycles: 2_000,
                unmeasured,
                ..Inject::default()
            };
            i.adopt(warm());
            i
        };
        // Too few unmeasured exits (or none): only the warm calibration.
        for unmeasured in [0, IN_SITU_MIN_EXITS as u64 - 1] {
            assert!(!control(unmeasured).calibrating(), "{unmeasured}");
        }
        // Enough: at most 64 of them, alternately without a wait and with one. Here the
        // exits without a wait are made to look a million cycles long (KVM_RUN returned
        // that long before), so the medians say a wait added less than its spin: it
        // counts as its spin alone, the spin is set from it and nothing is counted
        // outside it. Where the waited ones are made to look ten million cycles long,
        // the calibration is not used and the warm one stands. Those outcomes rest on
        // the waits spinning about what they are asked; where a spin of 2,000 cycles
        // takes far longer (an emulated CPU: the CI's L1 on hosts without /dev/kvm,
        // whose own warm calibration is refused), only the turns, the count of
        // calibrations and the bound on the spin are checked.
        let spins_as_asked = Inject::calibrated(2_000).warm;
        for (unmeasured, taken) in [(17, 16), (200, IN_SITU_EXITS)] {
            for slow_waits in [false, true] {
                let mut i = control(unmeasured);
                for n in 0..taken {
                    assert!(i.calibrating(), "exit {n} of {taken}");
                    let waited = n % 2 == 1;
                    let back = match (waited, slow_waits) {
                        (false, false) => 1_000_000,
                        (true, true) => 10_000_000,
                        _ => 0,
                    };
                    i.calibration_exit(sys::rdtscp().saturating_sub(back));
                    // No wait first, then a wait, by turns.
                    let n = n as u64;
                    assert_eq!(
                        (i.done.unwaited, i.done.waits),
                        (n / 2 + 1, n.div_ceil(2)),
                        "exit {n}: {:?}",
                        i.done
                    );
                }
                assert!(!i.calibrating());
                assert_eq!(i.done.in_situ, 1, "{:?}", i.done);
                assert!(i.spin <= 2_000, "{i:?}");
                if spins_as_asked && slow_waits {
                    assert_eq!(i.done.in_situ_unused, 1, "{:?}", i.done);
                    assert_eq!((i.spin, i.outside), (1_850, 110));
                } else if spins_as_asked {
                    assert_eq!(i.done.in_situ_unused, 0, "{:?}", i.done);
                    assert_eq!(i.outside, 0, "{i:?}");
                    // The spin that adds 2,000 when a wait adds its spin alone: what it
                    // spun (1,850 and its overshoot) moved by what was missing.
                    assert!(i.spin <= 2_000 && i.spin > 1_500, "{i:?}");
                }
                // Taking further exits is over: none is left without a wait.
                let done = i.done;
                i.calibration_exit(sys::rdtscp());
                assert_eq!(i.done, done);
                // A later run of the vCPU (after an S3 resume) keeps this calibration
                // and takes none of its exits for another.
                let (spin, outside) = (i.spin, i.outside);
                i.calibrate();
                assert!(!i.calibrating());
                assert_eq!((i.spin, i.outside), (spin, outside));
            }
        }
    }

    #[test]
    fn a_calibration_where_waits_are_made_that_the_run_ends_within_is_counted_as_cut_short() {
        // The warm calibration as on a kvm_pvm host (spin 1,850, 110 outside), then
        // `exits` of the calibration where the waits are made.
        let warm = || Inject::from_timing(2_000, 2_000, 2_150, 2_040);
        let after = |unmeasured: u64, exits: usize| {
            let mut i = Inject {
                cycles: 2_000,
                unmeasured,
                ..Inject::default()
            };
            i.adopt(warm());
            for _ in 0..exits {
                i.calibration_exit(sys::rdtscp());
            }
            i
        };
        // The run ends after 10 of 64: what it reports counts the calibration as cut
        // short, not as made, and its waits as the warm calibration's.
        let mut i = after(200, 10);
        let ended = i.counted();
        let counts = |w: InjectedWaits| (w.in_situ, w.in_situ_cut, w.unwaited, w.waits);
        assert_eq!(counts(ended), (0, 1, 5, 5));
        assert_eq!((i.spin, i.outside), (1_850, 110));
        // A later run of the vCPU does not resume it (its exits are measured ones), and
        // the count stays: once, not once per report.
        i.adopt(warm());
        assert!(!i.calibrating());
        assert_eq!((i.counted(), i.done), (ended, ended));
        // A calibration that ran to its end is made, never cut short; one that took no
        // exit (a run with no userspace exit) was not begun, and is neither.
        assert_eq!(counts(after(16, 16).counted()), (1, 0, 8, 8));
        let mut idle = after(200, 0);
        assert!(idle.calibrating());
        assert_eq!(counts(idle.counted()), (0, 0, 0, 0));
        idle.adopt(warm());
        assert_eq!(idle.done, InjectedWaits::default());
    }

    #[test]
    fn busy_wait_reports_at_least_the_cycles_asked_for() {
        for cycles in [0, 1, 1_000, 200_000] {
            let before = sys::rdtscp();
            let spun = busy_wait(cycles);
            let around = sys::rdtscp().wrapping_sub(before);
            assert!(spun >= cycles, "asked {cycles}, reported {spun}");
            // What it reports is what it spun: inside the caller's own view of the call.
            assert!(spun <= around, "reported {spun}, the call took {around}");
        }
    }
}
