//! The machine builder: the one owner of a VM and its vCPU threads, from creation to
//! teardown.
//!
//! [`MachineBuilder::new`] creates the VM in the one order this crate uses: the VM fd and
//! its VM-wide settings, guest memory, the irqchip (and KVM's PIT), then the buses. The
//! caller then loads its guest and puts its devices on the buses ([`MachineBuilder::vm`]),
//! and adds its vCPUs ([`MachineBuilder::add_vcpu`]: created at once, with their entry
//! registers or waiting for INIT/SIPI). [`MachineBuilder::start`] spawns one thread per
//! vCPU (the application processors before vCPU 0, so that every vCPU a SIPI can name is
//! running before the first guest instruction) and hands back the running [`Machine`].
//!
//! A [`Machine`] is supervised by its caller ([`Machine::wait_any`], [`Machine::wait_for`]),
//! which stops vCPUs one by one or all at once and gets each one's [`Finished`] back
//! (exit counts, registers, its hook). Dropping a machine stops every vCPU still
//! running, joins its thread, and only then closes the vCPU and VM fds and unmaps guest
//! memory: after a machine is gone, the process holds the file descriptors and threads
//! it held before (only a vCPU the host never lets out of KVM_RUN is left behind, and
//! is reported as such by [`Machine::stop`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use exitlab_boot::EntryState;
use kvm_ioctls::Kvm;
use vm_memory::GuestMemoryMmap;

use crate::hook::ExitHook;
use crate::teardown::Teardown;
use crate::thread::{self, Finished, VcpuThread};
use crate::vcpu::{Handler, Vcpu, VcpuConfig};
use crate::vm::{Vm, VmConfig};
use crate::VmmError;

/// How long [`Machine`]'s teardown waits for each vCPU to leave KVM_RUN after a kick.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(1);

/// One vCPU of a machine.
#[derive(Debug, Clone, Copy)]
pub struct VcpuSpec<'a> {
    /// Its index, stamp page, run log, doorbell port and HLT policy.
    pub config: VcpuConfig,
    /// The registers of its first instruction; `None` leaves KVM's reset state (vCPU 0,
    /// the bootstrap processor, then runs from the reset vector; with an in-kernel
    /// LAPIC the others wait for INIT/SIPI).
    pub entry: Option<&'a EntryState>,
    /// Wire LINT0 to ExtINT and LINT1 to NMI, as PC firmware does.
    pub pc_lint: bool,
    /// Host CPU to pin its thread to.
    pub pin: Option<usize>,
    /// The exit handler it runs with.
    pub handler: Handler,
    /// Known-answer control: host cycles a calibrated busy-wait adds per userspace exit
    /// ([`Vcpu::set_inject`]; 0: off).
    pub inject_cycles: u64,
    /// Leading userspace exits the guest does not measure (its warm-up), on which that
    /// control also calibrates itself where it waits ([`Vcpu::set_inject`]; 0: none).
    pub inject_unmeasured: u64,
}

impl VcpuSpec<'_> {
    /// vCPU `config.id` with the platform's devices, unpinned, no LINT wiring, and no entry.
    pub fn new(config: VcpuConfig) -> VcpuSpec<'static> {
        VcpuSpec {
            config,
            entry: None,
            pc_lint: false,
            pin: None,
            handler: Handler::Devices,
            inject_cycles: 0,
            inject_unmeasured: 0,
        }
    }
}

/// A vCPU created and not started yet.
struct Pending<H> {
    vcpu: Vcpu,
    hook: H,
    pin: Option<usize>,
    handler: Handler,
}

/// A VM being built: created, waiting for its guest, devices and vCPUs.
pub struct MachineBuilder<H> {
    pending: Vec<Pending<H>>,
    vm: Vm,
    created: Instant,
}

impl<H: ExitHook + Send + 'static> MachineBuilder<H> {
    /// Creates the VM `config` describes: the VM fd with its settings, guest memory, the
    /// irqchip and PIT, and the buses (in that order: KVM needs the irqchip before any
    /// vCPU, and takes it as well after memory; registering the memory slot once the
    /// in-kernel irqchip and PIT exist took 7.4 ms here against 0.11 ms before them, the
    /// largest part of the time to the first guest instruction, see docs/memory.md).
    pub fn new(kvm: Arc<Kvm>, config: VmConfig) -> Result<MachineBuilder<H>, VmmError> {
        let created = Instant::now();
        let fd = Vm::create_fd(&kvm, &config)?;
        let mem = Vm::create_memory(&fd, &config)?;
        Vm::create_irqchip(&fd, &config)?;
        let vm = Vm::assemble(kvm, fd, mem, config)?;
        Ok(MachineBuilder {
            pending: Vec::new(),
            vm,
            created,
        })
    }

    /// The VM, for loading the guest and putting devices on its buses.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }

    /// The VM, for registering ioeventfds.
    pub fn vm_mut(&mut self) -> &mut Vm {
        &mut self.vm
    }

    /// Puts off closing the VM, once the machine is dropped, to `teardown`'s
    /// [`Teardown::finish`]: its vCPU threads, devices and guest memory still go at
    /// once (see [`crate::teardown`] for when this suits).
    pub fn defer_teardown(&mut self, teardown: &Arc<Teardown>) {
        self.vm.defer_teardown(teardown);
    }

    /// When [`MachineBuilder::new`] was called.
    pub fn created(&self) -> Instant {
        self.created
    }

    /// Creates vCPU `spec.config.id` now (CPUID, MCE, its entry registers or its wait for
    /// INIT/SIPI) and keeps it, with `hook`, for [`MachineBuilder::start`].
    pub fn add_vcpu(&mut self, spec: VcpuSpec<'_>, hook: H) -> Result<&Vcpu, VmmError> {
        if self.pending.iter().any(|p| p.vcpu.id() == spec.config.id) {
            return Err(VmmError::VcpuTwice(spec.config.id));
        }
        let mut vcpu = self.vm.create_vcpu(spec.config)?;
        vcpu.set_inject(spec.inject_cycles, spec.inject_unmeasured);
        if spec.pc_lint {
            vcpu.setup_lapic_lint()?;
        }
        if let Some(entry) = spec.entry {
            vcpu.set_entry(entry)?;
        }
        self.pending.push(Pending {
            vcpu,
            hook,
            pin: spec.pin,
            handler: spec.handler,
        });
        Ok(&self.pending[self.pending.len() - 1].vcpu)
    }

    /// The vCPU with index `id`, once added.
    pub fn vcpu(&self, id: u32) -> Option<&Vcpu> {
        self.pending.iter().map(|p| &p.vcpu).find(|v| v.id() == id)
    }

    /// Starts one thread per vCPU: the application processors first, then vCPU 0 (the
    /// bootstrap processor), so that every vCPU its SIPIs can name is already in
    /// KVM_RUN. A thread that cannot be spawned stops the ones already running (the
    /// machine's teardown) and is reported.
    pub fn start(self) -> Result<Machine<H>, VmmError> {
        let MachineBuilder {
            mut pending, vm, ..
        } = self;
        // Stable: the APs keep their order.
        pending.sort_by_key(|p| p.vcpu.id() == 0);
        let mut machine = Machine {
            running: Vec::with_capacity(pending.len()),
            placement: pending
                .iter()
                .map(|p| (p.vcpu.id(), p.pin, p.handler))
                .collect(),
            vm,
        };
        for p in pending {
            let id = p.vcpu.id();
            let thread = thread::spawn(p.vcpu, p.hook, p.pin, p.handler)?;
            machine.running.push(Running { id, thread });
        }
        Ok(machine)
    }
}

/// A running vCPU thread of a machine.
struct Running<H> {
    id: u32,
    thread: VcpuThread<H>,
}

/// A running machine: the VM and the threads of its vCPUs. Dropping it stops them.
pub struct Machine<H> {
    // Stopped (in `Drop`) before the VM's fds close and its memory is unmapped.
    running: Vec<Running<H>>,
    /// Each vCPU's pinning and exit handler, as it started (for [`Machine::restart`]).
    placement: Vec<(u32, Option<usize>, Handler)>,
    vm: Vm,
}

impl<H> Machine<H> {
    /// The VM.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }

    /// Guest memory.
    pub fn memory(&self) -> &Arc<GuestMemoryMmap> {
        self.vm.memory()
    }

    /// How many vCPU threads are still running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The indices of the vCPUs still running, in start order.
    pub fn running_ids(&self) -> Vec<u32> {
        self.running.iter().map(|r| r.id).collect()
    }

    /// One pass over the running vCPUs, waiting up to `each` on each: the first that
    /// stopped on its own, taken out of the machine; `None` if none did.
    pub fn wait_any(&mut self, each: Duration) -> Option<Finished<H>> {
        for i in 0..self.running.len() {
            if let Some(f) = self.running[i].thread.wait(each) {
                self.running.swap_remove(i).thread.reap();
                return Some(f);
            }
        }
        None
    }

    /// Waits up to `timeout` for vCPU `id` to stop on its own; it is then taken out of
    /// the machine. `None` if it is still running (or is not running at all).
    pub fn wait_for(&mut self, id: u32, timeout: Duration) -> Option<Finished<H>> {
        let i = self.index(id)?;
        let f = self.running[i].thread.wait(timeout)?;
        self.running.remove(i).thread.reap();
        Some(f)
    }

    /// Kicks vCPU `id` out of KVM_RUN and takes it out of the machine. `None` if it is
    /// not running, or if the host did not let it out within `grace` (its thread is then
    /// left behind until the process ends).
    pub fn stop(&mut self, id: u32, grace: Duration) -> Option<Finished<H>> {
        let i = self.index(id)?;
        self.running.remove(i).thread.stop(grace)
    }

    /// Stops every running vCPU (kicks them all first, then collects each within
    /// `grace`): `(id, Some(finished))` by vCPU index, `None` for a vCPU the host did not
    /// let out of KVM_RUN.
    pub fn stop_all(&mut self, grace: Duration) -> Vec<(u32, Option<Finished<H>>)> {
        for r in &self.running {
            r.thread.kick();
        }
        let mut out: Vec<_> = std::mem::take(&mut self.running)
            .into_iter()
            .map(|r| (r.id, r.thread.stop(grace)))
            .collect();
        out.sort_by_key(|(id, _)| *id);
        out
    }

    fn index(&self, id: u32) -> Option<usize> {
        self.running.iter().position(|r| r.id == id)
    }
}

impl<H: ExitHook + Send + 'static> Machine<H> {
    /// Runs a stopped vCPU of this machine again (after an ACPI S3 resume), on a new
    /// thread with the pinning and exit handler it started with.
    pub fn restart(&mut self, vcpu: Vcpu, hook: H) -> Result<(), VmmError> {
        let id = vcpu.id();
        let (_, pin, handler) =
            self.placement
                .iter()
                .copied()
                .find(|p| p.0 == id)
                .ok_or(VmmError::VcpuOutOfRange {
                    id,
                    cpus: self.placement.len() as u32,
                })?;
        let thread = thread::spawn(vcpu, hook, pin, handler)?;
        self.running.push(Running { id, thread });
        Ok(())
    }
}

impl<H> Drop for Machine<H> {
    fn drop(&mut self) {
        // The vCPUs (and their fds) go first; `vm` then drops its buses, fd and memory.
        drop(self.stop_all(TEARDOWN_GRACE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{NoHook, VcpuStop};
    use crate::irqchip::IrqChip;
    use crate::testing::{kvm_or_fail, reset_vector_ram, test_vcpu_config, write_at_reset_vector};

    /// Real mode at the reset vector: `mov dx, 0x700; out dx, al` (the doorbell), then
    /// `jmp $`.
    const DOORBELL_THEN_SPIN: [u8; 6] = [0xBA, 0x00, 0x07, 0xEE, 0xEB, 0xFE];
    /// `jmp $`: a guest that runs until it is stopped.
    const SPIN: [u8; 2] = [0xEB, 0xFE];

    /// A machine of `cpus` vCPUs with the in-kernel irqchip and `code` at the reset
    /// vector; vCPU 0 runs from there (KVM's reset state), the others wait for INIT/SIPI.
    fn machine(cpus: u32, code: &[u8]) -> MachineBuilder<NoHook> {
        let kvm = Arc::new(kvm_or_fail());
        let mut b = MachineBuilder::new(
            kvm,
            VmConfig {
                ram: reset_vector_ram(),
                irqchip: IrqChip::Kernel,
                pit: false,
                cpus,
                ..VmConfig::default()
            },
        )
        .unwrap();
        write_at_reset_vector(b.vm().memory(), code);
        for id in 0..cpus {
            b.add_vcpu(VcpuSpec::new(test_vcpu_config(id)), NoHook)
                .unwrap();
        }
        b
    }

    #[test]
    fn a_deferred_teardown_keeps_only_the_vm_fd_until_it_is_finished() {
        let teardown = Teardown::new();
        let closed_at_once = machine(1, &SPIN);
        let mut kept = machine(1, &SPIN);
        kept.defer_teardown(&teardown);
        let vm_fds = [&closed_at_once, &kept].map(|b| Arc::downgrade(b.vm().fd()));
        let memory = [&closed_at_once, &kept].map(|b| Arc::downgrade(b.vm().memory()));
        for b in [closed_at_once, kept] {
            let mut m = b.start().unwrap();
            assert_eq!(m.stop_all(Duration::from_secs(5)).len(), 1);
        }
        // Both machines are dropped: their guest memory is unmapped; only the kept VM's
        // fd is still open, held by the teardown.
        assert!(memory.iter().all(|m| m.upgrade().is_none()));
        assert!(vm_fds[0].upgrade().is_none());
        assert!(vm_fds[1].upgrade().is_some());
        assert_eq!(teardown.kept(), 1);
        assert_eq!(teardown.finish(), 1);
        assert!(vm_fds[1].upgrade().is_none());
        assert_eq!((teardown.kept(), teardown.finish()), (0, 0));
    }

    #[test]
    fn an_application_processor_that_is_never_started_runs_nothing_and_stops_when_asked() {
        let mut m = machine(2, &DOORBELL_THEN_SPIN).start().unwrap();
        let bsp = m
            .wait_for(0, Duration::from_secs(30))
            .expect("vCPU 0 rang the doorbell");
        assert!(matches!(bsp.stop, VcpuStop::Hook(_)), "{}", bsp.describe());
        assert_eq!(bsp.vcpu.counts().doorbell, 1);
        // vCPU 1 waits for a SIPI nobody sends: it neither runs the code nor stops.
        assert_eq!(m.running_ids(), vec![1]);
        assert!(m.wait_for(1, Duration::from_millis(200)).is_none());
        assert!(m.wait_any(Duration::from_millis(20)).is_none());
        let stopped = m.stop_all(Duration::from_secs(2));
        assert_eq!(stopped.len(), 1);
        let (id, f) = &stopped[0];
        let f = f.as_ref().expect("KVM let the waiting vCPU out of KVM_RUN");
        assert_eq!((*id, f.vcpu.id()), (1, 1));
        assert!(matches!(f.stop, VcpuStop::Kicked), "{}", f.describe());
        let c = f.vcpu.counts();
        assert_eq!(
            c.total() - c.intr,
            0,
            "a vCPU never started exits only for the kicks: {c:?}"
        );
        assert_eq!(m.running(), 0);
        assert!(m.stop_all(Duration::from_secs(1)).is_empty());
    }

    #[test]
    fn a_stop_right_after_the_start_ends_the_boot_with_every_vcpu_collected() {
        // Repeated, so that some stops land before the thread enters KVM_RUN and some
        // while the guest runs: every one must come back as a kick.
        for round in 0..10 {
            let mut m = machine(2, &SPIN).start().unwrap();
            if round % 2 == 1 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let stopped = m.stop_all(Duration::from_secs(5));
            let ids: Vec<u32> = stopped.iter().map(|s| s.0).collect();
            assert_eq!(ids, vec![0, 1], "round {round}");
            for (id, f) in stopped {
                let f = f.unwrap_or_else(|| panic!("round {round}: vCPU {id} was not let out"));
                assert!(
                    matches!(f.stop, VcpuStop::Kicked),
                    "round {round}: vCPU {id}: {}",
                    f.describe()
                );
            }
            assert_eq!(m.running(), 0);
        }
    }

    #[test]
    fn a_vcpu_index_is_added_once_and_a_stopped_vcpu_restarts_where_it_was() {
        let mut b = machine(1, &DOORBELL_THEN_SPIN);
        let e = b
            .add_vcpu(VcpuSpec::new(test_vcpu_config(0)), NoHook)
            .err()
            .unwrap();
        assert!(e.to_string().contains("added twice"), "{e}");
        assert_eq!(b.vcpu(0).map(Vcpu::id), Some(0));
        assert!(b.vcpu(1).is_none());
        let mut m = b.start().unwrap();
        let f = m.wait_for(0, Duration::from_secs(30)).expect("doorbell");
        assert_eq!(m.running(), 0);
        // Restarted after the doorbell, the vCPU continues at `jmp $` until stopped.
        m.restart(f.vcpu, NoHook).unwrap();
        assert_eq!(m.running_ids(), vec![0]);
        assert!(m.wait_any(Duration::from_millis(50)).is_none());
        let f = m.stop(0, Duration::from_secs(2)).expect("stopped");
        assert!(matches!(f.stop, VcpuStop::Kicked), "{}", f.describe());
        assert_eq!(
            f.vcpu.counts().doorbell,
            1,
            "the doorbell is not rung again"
        );
        assert!(m.stop(0, Duration::from_secs(1)).is_none(), "not running");
    }
}
