//! A VM: the KVM VM fd, guest memory, the irqchip (in the kernel, or split with
//! exitlab's I/O APIC and PIC: [`crate::irqchip`]) and the in-kernel PIT, ioeventfds,
//! MSRs routed to userspace, and the port and MMIO buses.

use std::sync::Arc;

use exitlab_devices::ioapic::Ioapic;
pub use exitlab_devices::IoSpace;
use exitlab_devices::{IoEventSpec, IrqLine};
use kvm_bindings::{kvm_enable_cap, kvm_pit_config, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Cap, Kvm, VmFd};
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::EventFd;

use crate::bus::Bus;
pub use crate::irqchip::IrqChip;
use crate::irqchip::{KvmIrqLine, SplitChips, SplitIrqLine};
use crate::msr::{self, UserMsr};
use crate::teardown::Teardown;
use crate::vcpu::{Vcpu, VcpuConfig};
use crate::{cpuid, memory, VmmError};

/// How to build a VM.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// Guest RAM as (guest-physical base, bytes), sorted, non-overlapping.
    pub ram: Vec<(u64, u64)>,
    /// The interrupt controllers: all in the kernel (KVM_CREATE_IRQCHIP), split (local
    /// APICs in the kernel, exitlab's I/O APIC and PIC on the buses), or none (HLT and
    /// every interrupt-controller access reach userspace).
    pub irqchip: IrqChip,
    /// Create the in-kernel PIT (needs `irqchip` = [`IrqChip::Kernel`]).
    pub pit: bool,
    /// MSRs routed to userspace.
    pub user_msrs: Vec<UserMsr>,
    /// KVM_CAP_X86_DISABLE_EXITS bits to enable (0 = none).
    pub disable_exits: u32,
    /// Number of vCPUs that will be created (for CPUID topology).
    pub cpus: u32,
    /// Whether the in-kernel PIT re-injects missed ticks (KVM's default; off is QEMU's
    /// `kvm-pit.lost_tick_policy=discard`).
    pub pit_reinject: bool,
    /// The guest CPU (QEMU's `-cpu`): the host's by default.
    pub cpu: cpuid::CpuTemplate,
    /// Halt polling and CPUID knobs ([`crate::knobs`]).
    pub knobs: crate::knobs::VmKnobs,
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            ram: vec![(0, 64 << 20)],
            irqchip: IrqChip::Kernel,
            pit: true,
            user_msrs: Vec::new(),
            disable_exits: 0,
            cpus: 1,
            pit_reinject: true,
            cpu: cpuid::CpuTemplate::default(),
            knobs: crate::knobs::VmKnobs::default(),
        }
    }
}

/// Opens /dev/kvm, with errors that say how to fix the usual problems.
pub fn open_kvm() -> Result<Kvm, VmmError> {
    match Kvm::new() {
        Ok(k) => {
            let v = k.get_api_version();
            if v != 12 {
                return Err(VmmError::ApiVersion(v));
            }
            Ok(k)
        }
        Err(e) => Err(open_error(std::io::Error::from_raw_os_error(e.errno()))),
    }
}

/// What a failure to open /dev/kvm means for the user.
fn open_error(io: std::io::Error) -> VmmError {
    match io.kind() {
        std::io::ErrorKind::NotFound => VmmError::KvmMissing,
        std::io::ErrorKind::PermissionDenied => VmmError::KvmPermission(io),
        _ => VmmError::KvmOpen(io),
    }
}

/// A VM.
pub struct Vm {
    kvm: Arc<Kvm>,
    // Field order matters: the buses (whose devices may hold the VM fd) go first, then
    // the fd, then the memory, so KVM never holds a slot whose mapping is gone, unless
    // the VM's closing is deferred (`teardown`): its fd then outlives the memory, and the
    // VM, whose vCPUs have stopped, never runs again.
    pio: Arc<Bus>,
    mmio: Arc<Bus>,
    ioevents: Vec<EventFd>,
    split: Option<SplitChips>,
    irq_line: Arc<dyn IrqLine>,
    fd: Arc<VmFd>,
    mem: Arc<GuestMemoryMmap>,
    user_msrs: Arc<[UserMsr]>,
    config: VmConfig,
    // Where the fd goes when the VM is dropped, instead of being closed at once.
    teardown: Option<Arc<Teardown>>,
}

impl Drop for Vm {
    fn drop(&mut self) {
        // The teardown's copy of the fd outlives the VM's own, which then drops in its
        // order, before the memory, without closing the VM.
        if let Some(t) = &self.teardown {
            t.keep(self.fd.clone());
        }
    }
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm").field("config", &self.config).finish()
    }
}

impl Vm {
    /// KVM_CREATE_VM with the VM-wide settings of `config` (disabled exits, halt polling,
    /// MSRs routed to userspace); no irqchip and no memory yet. The machine builder
    /// ([`crate::builder`]) adds them, in its order, and then assembles the [`Vm`].
    pub(crate) fn create_fd(kvm: &Kvm, config: &VmConfig) -> Result<VmFd, VmmError> {
        if config.cpus == 0 {
            return Err(VmmError::NoVcpus);
        }
        if config.pit && config.irqchip != IrqChip::Kernel {
            return Err(VmmError::PitWithoutIrqchip);
        }
        let fd = kvm
            .create_vm()
            .map_err(|e| VmmError::Kvm("KVM_CREATE_VM", e))?;
        // Intel VMX needs these three pages below 4 GiB for real-mode emulation; they sit
        // in the PCI hole, away from RAM. Other hosts accept and ignore them.
        let _ = fd.set_tss_address(0xfffb_d000);
        let _ = fd.set_identity_map_address(0xfffb_c000);
        if config.disable_exits != 0 {
            let supported =
                fd.check_extension_raw(kvm_bindings::KVM_CAP_X86_DISABLE_EXITS.into()) as u32;
            if supported & config.disable_exits != config.disable_exits {
                return Err(VmmError::MissingCap(
                    "KVM_CAP_X86_DISABLE_EXITS for the requested exits",
                    "run without the option that disables exits",
                ));
            }
            let mut cap = kvm_enable_cap {
                cap: kvm_bindings::KVM_CAP_X86_DISABLE_EXITS,
                ..Default::default()
            };
            cap.args[0] = config.disable_exits.into();
            fd.enable_cap(&cap)
                .map_err(|e| VmmError::Kvm("KVM_ENABLE_CAP(X86_DISABLE_EXITS)", e))?;
        }
        crate::knobs::apply_vm(&fd, &config.knobs)?;
        if !config.user_msrs.is_empty() {
            msr::route_to_userspace(&fd, &config.user_msrs)?;
        }
        Ok(fd)
    }

    /// The interrupt controllers `config` asks for, and KVM's PIT with the in-kernel
    /// ones (both must exist before the first vCPU).
    pub(crate) fn create_irqchip(fd: &VmFd, config: &VmConfig) -> Result<(), VmmError> {
        match config.irqchip {
            IrqChip::Kernel => fd
                .create_irq_chip()
                .map_err(|e| VmmError::Kvm("KVM_CREATE_IRQCHIP", e))?,
            IrqChip::Split => crate::irqchip::enable_split(fd)?,
            IrqChip::None => {}
        }
        if config.pit {
            let pit = kvm_pit_config {
                flags: KVM_PIT_SPEAKER_DUMMY,
                ..Default::default()
            };
            fd.create_pit2(pit)
                .map_err(|e| VmmError::Kvm("KVM_CREATE_PIT2", e))?;
            if !config.pit_reinject {
                crate::sys::pit_reinject(fd, false)
                    .map_err(|e| VmmError::Os("KVM_REINJECT_CONTROL", e))?;
            }
        }
        Ok(())
    }

    /// Guest RAM as `config.ram` says, registered with KVM.
    pub(crate) fn create_memory(
        fd: &VmFd,
        config: &VmConfig,
    ) -> Result<Arc<GuestMemoryMmap>, VmmError> {
        memory::create(fd, &config.ram)
    }

    /// The VM around an fd that has its irqchip and memory: the buses, the userspace
    /// interrupt controllers of a split irqchip, and the interrupt lines devices drive.
    pub(crate) fn assemble(
        kvm: Arc<Kvm>,
        fd: VmFd,
        mem: Arc<GuestMemoryMmap>,
        config: VmConfig,
    ) -> Result<Vm, VmmError> {
        let fd = Arc::new(fd);
        let (pio, mmio) = (Bus::new(), Bus::new());
        let split = match config.irqchip {
            IrqChip::Split => Some(SplitChips::install(&fd, &pio, &mmio)?),
            _ => None,
        };
        let irq_line: Arc<dyn IrqLine> = match &split {
            Some(chips) => Arc::new(SplitIrqLine(chips.clone())),
            None => Arc::new(KvmIrqLine(fd.clone())),
        };
        Ok(Vm {
            kvm,
            fd,
            mem,
            pio,
            mmio,
            split,
            irq_line,
            user_msrs: config.user_msrs.clone().into(),
            ioevents: Vec::new(),
            config,
            teardown: None,
        })
    }

    /// The KVM system handle.
    pub fn kvm(&self) -> &Arc<Kvm> {
        &self.kvm
    }

    /// The VM fd.
    pub fn fd(&self) -> &Arc<VmFd> {
        &self.fd
    }

    /// Hands the VM's fd to `teardown` when the VM is dropped, to be closed with the
    /// others it keeps ([`Teardown::finish`]).
    pub(crate) fn defer_teardown(&mut self, teardown: &Arc<Teardown>) {
        self.teardown = Some(teardown.clone());
    }

    /// Guest memory.
    pub fn memory(&self) -> &Arc<GuestMemoryMmap> {
        &self.mem
    }

    /// The port I/O bus.
    pub fn pio_bus(&self) -> &Arc<Bus> {
        &self.pio
    }

    /// The MMIO bus.
    pub fn mmio_bus(&self) -> &Arc<Bus> {
        &self.mmio
    }

    /// The interrupt lines devices drive: KVM_IRQ_LINE with the in-kernel irqchip, the
    /// userspace I/O APIC and PIC with a split one.
    pub fn irq_line(&self) -> &Arc<dyn IrqLine> {
        &self.irq_line
    }

    /// The userspace I/O APIC and PIC, with a split irqchip.
    pub fn split_chips(&self) -> Option<&SplitChips> {
        self.split.as_ref()
    }

    /// The userspace I/O APIC, with a split irqchip.
    pub fn ioapic(&self) -> Option<&Arc<Ioapic>> {
        self.split.as_ref().map(|s| &s.ioapic)
    }

    /// The configuration the VM was built from.
    pub fn config(&self) -> &VmConfig {
        &self.config
    }

    /// Registers an ioeventfd: writes of `len` bytes (1, 2, 4 or 8; 0 = any width, MMIO
    /// only) at `addr` (with `datamatch`, only of that value) are absorbed in the kernel
    /// and signal the returned EventFd instead of exiting to userspace.
    pub fn add_ioeventfd(
        &mut self,
        space: IoSpace,
        addr: u64,
        len: u32,
        datamatch: Option<u64>,
    ) -> Result<EventFd, VmmError> {
        let evt = EventFd::new(libc::EFD_NONBLOCK).map_err(|e| VmmError::Os("eventfd", e))?;
        register_ioeventfd(&self.fd, &evt, space, addr, len, datamatch)?;
        let ret = evt
            .try_clone()
            .map_err(|e| VmmError::Os("eventfd dup", e))?;
        self.ioevents.push(evt);
        Ok(ret)
    }

    /// Registers a device's doorbell as an ioeventfd with the device's own EventFd.
    pub fn add_ioevent_spec(&self, spec: &IoEventSpec) -> Result<(), VmmError> {
        register_ioeventfd(
            &self.fd,
            &spec.eventfd,
            spec.space,
            spec.addr,
            spec.len,
            spec.datamatch,
        )
    }

    /// Creates vCPU `config.id` with the process-wide cached CPUID, patched for its APIC id
    /// (the machine builder's step: [`crate::builder::MachineBuilder::add_vcpu`]).
    pub(crate) fn create_vcpu(&self, config: VcpuConfig) -> Result<Vcpu, VmmError> {
        if config.id >= self.config.cpus {
            return Err(VmmError::VcpuOutOfRange {
                id: config.id,
                cpus: self.config.cpus,
            });
        }
        let fd = self
            .fd
            .create_vcpu(config.id.into())
            .map_err(|e| VmmError::Kvm("KVM_CREATE_VCPU", e))?;
        let tsc_deadline =
            self.config.irqchip.in_kernel_lapic() && crate::knobs::tsc_deadline_offered(&self.fd);
        let extra: &[cpuid::CpuidBit] = if tsc_deadline {
            &[cpuid::TSC_DEADLINE]
        } else {
            &[]
        };
        let (base, _) = cpuid::apply(cpuid::supported(&self.kvm)?, &self.config.cpu, extra);
        let mut table = cpuid::for_vcpu(&base, config.id, self.config.cpus);
        crate::knobs::patch_cpuid(&mut table, self.config.disable_exits, &self.config.knobs);
        fd.set_cpuid2(&table)
            .map_err(|e| VmmError::Kvm("KVM_SET_CPUID2", e))?;
        crate::mce::setup(&self.kvm, &fd)?;
        Vcpu::new(
            fd,
            config,
            self.mem.clone(),
            self.pio.view(),
            self.mmio.view(),
            self.user_msrs.clone(),
            self.ioapic().cloned(),
        )
    }
}

/// Checks and registers one ioeventfd.
pub fn register_ioeventfd(
    fd: &VmFd,
    evt: &EventFd,
    space: IoSpace,
    addr: u64,
    len: u32,
    datamatch: Option<u64>,
) -> Result<(), VmmError> {
    if !fd.check_extension(Cap::Ioeventfd) {
        return Err(VmmError::MissingCap(
            "KVM_CAP_IOEVENTFD",
            "kernel-absorbed writes are unavailable",
        ));
    }
    if !matches!(len, 0 | 1 | 2 | 4 | 8)
        || (len == 0 && (space == IoSpace::Pio || datamatch.is_some()))
    {
        return Err(VmmError::IoeventfdLength(len));
    }
    crate::sys::ioeventfd(fd, evt, space == IoSpace::Pio, addr, len, datamatch, false)
        .map_err(|e| VmmError::Os("KVM_IOEVENTFD", e))
}

/// Removes an ioeventfd registered with exactly these parameters.
pub fn unregister_ioeventfd(
    fd: &VmFd,
    evt: &EventFd,
    space: IoSpace,
    addr: u64,
    len: u32,
    datamatch: Option<u64>,
) -> Result<(), VmmError> {
    crate::sys::ioeventfd(fd, evt, space == IoSpace::Pio, addr, len, datamatch, true)
        .map_err(|e| VmmError::Os("KVM_IOEVENTFD (deassign)", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::MachineBuilder;
    use crate::hook::NoHook;

    /// A vCPU with no stamp page, run log or doorbell, whose HLT stops it.
    fn plain_vcpu(id: u32) -> VcpuConfig {
        VcpuConfig {
            id,
            stamp_gpa: None,
            run_log: 0,
            doorbell_port: None,
            hlt: crate::vcpu::HltPolicy::Stop,
        }
    }

    fn new_vm(kvm: Arc<Kvm>, config: VmConfig) -> Result<MachineBuilder<NoHook>, VmmError> {
        MachineBuilder::new(kvm, config)
    }

    #[test]
    fn open_errors_say_what_to_do() {
        let missing = open_error(std::io::Error::from_raw_os_error(libc::ENOENT)).to_string();
        assert!(missing.contains("/dev/kvm does not exist"), "{missing}");
        assert!(missing.contains("`exitlab host` says why"), "{missing}");
        let denied = open_error(std::io::Error::from_raw_os_error(libc::EACCES)).to_string();
        assert!(
            denied.contains("run as root or add your user to the group"),
            "{denied}"
        );
        let other = open_error(std::io::Error::from_raw_os_error(libc::EIO)).to_string();
        assert!(other.contains("/dev/kvm cannot be used"), "{other}");
    }

    #[test]
    fn bad_configurations_are_refused() {
        let kvm = Arc::new(crate::testing::kvm_or_fail());
        let e = new_vm(
            kvm.clone(),
            VmConfig {
                cpus: 0,
                ..VmConfig::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("at least one vCPU"), "{e}");
        let e = new_vm(
            kvm.clone(),
            VmConfig {
                irqchip: IrqChip::None,
                pit: true,
                ..VmConfig::default()
            },
        )
        .err()
        .unwrap();
        assert!(
            e.to_string()
                .contains("PIT needs the full in-kernel irqchip"),
            "{e}"
        );
        let e = new_vm(
            kvm.clone(),
            VmConfig {
                irqchip: IrqChip::Split,
                pit: true,
                ..VmConfig::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("--irqchip kernel"), "{e}");
        let mut b = new_vm(kvm, VmConfig::default()).unwrap();
        let vm = b.vm_mut();
        assert!(vm.ioapic().is_none(), "KVM's own I/O APIC answers");
        let e = vm.add_ioeventfd(IoSpace::Pio, 0x10, 0, None).err().unwrap();
        assert!(e.to_string().contains("MMIO without datamatch only"), "{e}");
        let e = vm
            .add_ioeventfd(IoSpace::Mmio, 0x1000_0000, 3, Some(1))
            .err()
            .unwrap();
        assert!(e.to_string().contains("is not 1, 2, 4 or 8"), "{e}");
        assert!(vm
            .add_ioeventfd(IoSpace::Mmio, 0x1000_0000, 4, Some(1))
            .is_ok());
        let r = vm.create_vcpu(plain_vcpu(5));
        match r {
            Err(e) => assert!(e.to_string().contains("out of range"), "{e}"),
            Ok(_) => panic!("vCPU 5 of a 1-vCPU VM was created"),
        }
    }

    #[test]
    fn the_vcpu_gets_the_cpu_template_s_cpuid() {
        let kvm = Arc::new(crate::testing::kvm_or_fail());
        let x2apic = cpuid::feature("x2apic").unwrap();
        let b = new_vm(
            kvm,
            VmConfig {
                cpu: cpuid::CpuTemplate {
                    model: cpuid::model("qemu64"),
                    vendor: Some(*b"AuthenticAMD"),
                    remove: vec![x2apic, cpuid::TSC_DEADLINE],
                    phys_bits: cpuid::PhysBits::Exact(36),
                    ..Default::default()
                },
                ..VmConfig::default()
            },
        )
        .unwrap();
        let vm = b.vm();
        let vcpu = vm.create_vcpu(plain_vcpu(0)).unwrap();
        let c = vcpu
            .fd()
            .get_cpuid2(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
            .unwrap();
        let (eax0, ebx, ecx, edx) = cpuid::lookup(&c, 0, 0).unwrap();
        let v: Vec<u8> = [ebx, edx, ecx]
            .into_iter()
            .flat_map(u32::to_le_bytes)
            .collect();
        assert_eq!(&v, b"AuthenticAMD");
        assert_eq!(eax0, 0xd, "qemu64's level");
        let (eax1, _, ecx1, _) = cpuid::lookup(&c, 1, 0).unwrap();
        assert_eq!(
            cpuid::split_version(eax1),
            (15, 107, 1),
            "qemu64's family/model/stepping"
        );
        assert_eq!(
            ecx1 & (1 << 21 | 1 << 24),
            0,
            "x2apic and tsc-deadline hidden"
        );
        assert_eq!(cpuid::lookup(&c, 0x8000_0008, 0).unwrap().0 & 0xff, 36);
    }

    #[test]
    fn a_split_irqchip_puts_the_ioapic_and_pic_on_the_buses_or_names_the_capability() {
        let kvm = Arc::new(crate::testing::kvm_or_fail());
        let r = new_vm(
            kvm.clone(),
            VmConfig {
                irqchip: IrqChip::Split,
                pit: false,
                ..VmConfig::default()
            },
        );
        if kvm.check_extension_raw(kvm_bindings::KVM_CAP_SPLIT_IRQCHIP.into()) <= 0 {
            let e = r.err().unwrap().to_string();
            panic!("this host's KVM lacks KVM_CAP_SPLIT_IRQCHIP: {e}");
        }
        let b = r.unwrap();
        let vm = b.vm();
        let io = vm.ioapic().expect("a userspace I/O APIC").clone();
        let mut d = [0u8; 4];
        assert!(vm
            .mmio_bus()
            .view()
            .write(0xfec0_0000, &[1, 0, 0, 0])
            .is_some());
        assert!(vm.mmio_bus().view().read(0xfec0_0010, &mut d));
        assert_eq!(u32::from_le_bytes(d), 0x0017_0020, "the version register");
        assert_eq!(io.accesses().total(), 2);
        let mut b = [0u8; 1];
        assert!(vm.pio_bus().view().read(0x21, &mut b), "the master PIC");
        assert!(vm.pio_bus().view().read(0xa1, &mut b), "the slave PIC");
        assert!(vm.pio_bus().view().read(0x4d0, &mut b), "the ELCR");
        vm.irq_line().set_level(3, true);
        assert!(vm.create_vcpu(plain_vcpu(0)).is_ok());
    }
}
