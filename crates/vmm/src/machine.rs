//! The PC test platform behind `exitlab run`: guest RAM with the PCI hole, the irqchip
//! (in the kernel with KVM's PIT, or split with exitlab's I/O APIC and PIC and no PIT:
//! [`crate::irqchip`]), the small devices test kernels expect (16550A, debug-exit, i8042,
//! CMOS, pc-testdev, fw_cfg, ACPI PM timer, PCI with pci-testdev), a kernel loaded by
//! `exitlab-boot`, one thread per vCPU, and the end of the run as the guest decides it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use exitlab_boot::{layout, BootError, BootOptions, ImageFormat};
use exitlab_devices::cmos::Cmos;
use exitlab_devices::debug_exit::DebugExit;
use exitlab_devices::fw_cfg::{FwCfg, FwCfgError};
use exitlab_devices::hpet::Hpet;
use exitlab_devices::i8042::I8042;
use exitlab_devices::ioapic::IoapicAccesses;
use exitlab_devices::pc;
use exitlab_devices::pci::{
    PciAddress, PciBarChange, PciBarObserver, PciConfigIo, PciDevice, PciError,
};
use exitlab_devices::pci_testdev::PciTestDev;
use exitlab_devices::pm::PmControl;
use exitlab_devices::pm_timer::{PmTimer, PmTimerWidth};
use exitlab_devices::port92::Port92;
use exitlab_devices::serial::Serial;
use exitlab_devices::sink::Sink;
use exitlab_devices::testdev::{TestDevIrqLines, TestDevMem, TestDevPorts};
use exitlab_devices::{BusDevice, IoEventSpec, IoSpace, IrqLine, OffsetDevice};
use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use crate::builder::{Machine, MachineBuilder, VcpuSpec};
use crate::bus::Bus;
pub use crate::counts::VcpuExits;
pub use crate::irqchip::IrqChip;
use crate::suspend::{self, SleepEnd};
use crate::thread::Finished;
use crate::vcpu::{ExitCounts, HltPolicy, NoHook, Vcpu, VcpuConfig, VcpuStop};
use crate::vm::{self, Vm, VmConfig};
use crate::VmmError;

/// Where the guest's serial output goes.
pub enum SerialOut {
    /// The process's standard output.
    Stdio,
    /// A file (created or truncated).
    File(PathBuf),
    /// Nowhere.
    None,
    /// A caller-provided writer (tests capture output this way).
    Writer(Box<dyn Write + Send>),
}

impl std::fmt::Debug for SerialOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SerialOut::Stdio => f.write_str("Stdio"),
            SerialOut::File(p) => write!(f, "File({})", p.display()),
            SerialOut::None => f.write_str("None"),
            SerialOut::Writer(_) => f.write_str("Writer"),
        }
    }
}

/// What to boot and on how much of a machine.
#[derive(Debug)]
pub struct MachineConfig {
    /// The kernel image bytes.
    pub kernel: Vec<u8>,
    /// The kernel's path as given (multiboot passes it as argv[0]).
    pub kernel_path: String,
    /// Kernel command line.
    pub cmdline: String,
    /// Initial ramdisk / module 0.
    pub initrd: Option<Vec<u8>>,
    /// vCPUs.
    pub cpus: u32,
    /// Guest RAM in bytes.
    pub ram_bytes: u64,
    /// Stop the run after this long.
    pub timeout: Option<Duration>,
    /// Serial output.
    pub serial: SerialOut,
    /// Forward standard input to the serial port (when it is a terminal).
    pub serial_input: bool,
    /// Enter an ELF vmlinux with a PVH note through PVH (else at its 64-bit entry).
    pub prefer_pvh: bool,
    /// Set from another thread (or from the serial writer) to end the run early.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Platform choices a QEMU command line can make.
    pub platform: PlatformOptions,
}

/// Platform choices beyond the defaults, as QEMU's `-machine pit=off`, `-global
/// kvm-pit.lost_tick_policy=discard` and `-cpu host,-feature` make them, and
/// `--irqchip`.
#[derive(Debug, Clone)]
pub struct PlatformOptions {
    /// Where the interrupt controllers are emulated ([`IrqChip::Kernel`] or
    /// [`IrqChip::Split`]).
    pub irqchip: IrqChip,
    /// Create the in-kernel PIT (only with [`IrqChip::Kernel`]: a split irqchip has no
    /// PIT, whatever this says).
    pub pit: bool,
    /// Let the PIT re-inject missed ticks (KVM's default).
    pub pit_reinject: bool,
    /// The guest CPU (QEMU's `-cpu`): the host's by default.
    pub cpu: crate::cpuid::CpuTemplate,
    /// Leave what PC firmware leaves for a multiboot kernel (QEMU boots those through
    /// SeaBIOS): the real-mode IVT and BDA ([`exitlab_boot::firmware`]), the PICs
    /// initialised with IRQ 0 unmasked and PIT channel 0 at 18.2 Hz (in-kernel irqchip).
    pub firmware_state: bool,
}

impl Default for PlatformOptions {
    fn default() -> Self {
        PlatformOptions {
            irqchip: IrqChip::Kernel,
            pit: true,
            pit_reinject: true,
            cpu: crate::cpuid::CpuTemplate::default(),
            firmware_state: true,
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub enum RunEnd {
    /// The guest wrote this value to the debug-exit port.
    DebugExit(u32),
    /// The guest asked for a reset (i8042, 0xCF9) or a shutdown.
    Reset,
    /// A vCPU triple-faulted (KVM_EXIT_SHUTDOWN).
    TripleFault {
        /// vCPU index.
        vcpu: u32,
        /// Its registers.
        registers: String,
    },
    /// The timeout expired.
    Timeout {
        /// Registers of each vCPU that could be stopped.
        registers: Vec<(u32, String)>,
    },
    /// KVM failed to run the guest: internal error (emulation failure), failed entry, an
    /// unexpected exit, or KVM_RUN failing.
    Failure {
        /// vCPU index.
        vcpu: u32,
        /// What happened.
        what: String,
        /// Its registers.
        registers: String,
        /// When KVM's instruction emulator could not run an instruction (an emulation
        /// failure): its bytes, as KVM gave them or as read at RIP (empty when neither
        /// could be had). `None` for every other failure.
        emulation_failure: Option<Vec<u8>>,
    },
    /// The caller cancelled the run.
    Cancelled,
    /// Every vCPU stopped without the guest ending the run (e.g. halted with no
    /// in-kernel irqchip); reported with the last stop's description.
    Stopped(String),
}

/// The outcome of [`run`].
#[derive(Debug)]
pub struct RunReport {
    /// How it ended.
    pub end: RunEnd,
    /// The image format that was booted.
    pub format: ImageFormat,
    /// Userspace exits by reason, summed over vCPUs.
    pub exits: ExitCounts,
    /// The same per vCPU (those that could be stopped), by vCPU index.
    pub per_vcpu: Vec<VcpuExits>,
    /// KVM's count of all exits, summed over vCPUs (when the host has binary stats).
    pub kvm_exits: Option<u64>,
    /// The guest's accesses to the userspace I/O APIC (split irqchip only).
    pub ioapic: Option<IoapicAccesses>,
    /// KVM's `mmio_exits` (binary stats), summed over vCPUs, when the host has them.
    pub kvm_mmio_exits: Option<u64>,
    /// Time from `MachineConfig` to the first KVM_RUN of the boot vCPU.
    pub setup_time: Duration,
    /// Wall time of the guest run.
    pub run_time: Duration,
    /// When the boot vCPU's thread entered its first KVM_RUN (after its seccomp filter):
    /// the first guest instruction. `None` if it never ran.
    pub first_entry: Option<Instant>,
    /// The e820 map the guest was given.
    pub e820: Vec<exitlab_boot::E820Entry>,
    /// Memory of the process outside guest RAM when the guest stopped.
    pub vmm_memory: Option<crate::sys::VmmMemory>,
}

/// Errors that stop a run before the guest starts.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// The kernel image could not be loaded.
    #[error("cannot boot the kernel: {0}")]
    Boot(#[from] BootError),
    /// A vCPU count outside what `exitlab run` supports.
    #[error("--cpus {0} is out of range: use 1..={MAX_CPUS}")]
    Cpus(u32),
    /// The serial output file cannot be created.
    #[error("cannot create the serial output file {path}: {source}; choose a writable path")]
    SerialFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// fw_cfg refused an item.
    #[error("fw_cfg: {0}")]
    FwCfg(#[from] FwCfgError),
    /// The PCI setup failed.
    #[error("pci: {0}")]
    Pci(#[from] PciError),
    /// KVM or VM setup failed.
    #[error(transparent)]
    Vmm(#[from] VmmError),
}

/// Moves PCI BAR registrations (bus ranges and ioeventfds) when the guest reprograms a
/// BAR. Runs on the vCPU thread that wrote the BAR: it publishes new bus snapshots and
/// never waits for anything that thread holds.
/// It holds the buses weakly: the PCI device on the port bus holds it, and a strong
/// reference back would keep the whole VM (fds, guest RAM) alive after the run.
struct BarRemapper {
    vm: Arc<VmFd>,
    pio: Weak<Bus>,
    mmio: Weak<Bus>,
    device: Mutex<Option<Arc<dyn PciDevice>>>,
    registered: Mutex<Vec<IoEventSpec>>,
}

impl BarRemapper {
    fn bus(&self, space: IoSpace) -> Option<Arc<Bus>> {
        match space {
            IoSpace::Pio => self.pio.upgrade(),
            IoSpace::Mmio => self.mmio.upgrade(),
        }
    }

    fn sync_ioeventfds(&self, dev: &Arc<dyn PciDevice>) {
        let mut reg = exitlab_devices::lock(&self.registered);
        for s in reg.drain(..) {
            let _ =
                vm::unregister_ioeventfd(&self.vm, &s.eventfd, s.space, s.addr, s.len, s.datamatch);
        }
        for s in dev.ioeventfds() {
            if vm::register_ioeventfd(&self.vm, &s.eventfd, s.space, s.addr, s.len, s.datamatch)
                .is_ok()
            {
                reg.push(s);
            }
        }
    }
}

impl PciBarObserver for BarRemapper {
    fn bar_changed(&self, change: &PciBarChange) {
        let dev = exitlab_devices::lock(&self.device).clone();
        let Some(dev) = dev else { return };
        if let Some((old, bus)) = change.old.and_then(|o| Some((o, self.bus(o.space)?))) {
            let _ = bus.remove(old.addr);
        }
        if let Some((new, bus)) = change.new.and_then(|n| Some((n, self.bus(n.space)?))) {
            if let Some(bar) = dev.bar_device(new.index) {
                let _ = bus.insert(bar, new.addr, new.size);
            }
        }
        self.sync_ioeventfds(&dev);
    }
}

fn serial_sink(out: SerialOut) -> Result<Box<dyn Write + Send>, MachineError> {
    Ok(match out {
        SerialOut::Stdio => Box::new(std::io::stdout()),
        SerialOut::File(p) => match std::fs::File::create(&p) {
            Ok(f) => Box::new(f),
            Err(source) => return Err(MachineError::SerialFile { path: p, source }),
        },
        SerialOut::None => Box::new(std::io::sink()),
        SerialOut::Writer(w) => w,
    })
}

fn insert(bus: &Bus, dev: Arc<dyn BusDevice>, r: pc::IoRange) -> Result<(), VmmError> {
    bus.insert(dev, r.base, r.len).map_err(VmmError::from)
}

/// Most vCPUs `exitlab run` creates.
pub const MAX_CPUS: u32 = 255;

/// What the PC platform's devices need to know of the machine.
#[derive(Debug)]
pub struct PlatformConfig {
    /// Guest RAM in bytes (CMOS and fw_cfg report it).
    pub ram_bytes: u64,
    /// vCPUs (CMOS and fw_cfg report them).
    pub cpus: u32,
    /// Kernel command line (fw_cfg serves it).
    pub cmdline: String,
    /// Where the 16550A's output goes.
    pub serial: SerialOut,
}

/// The PC platform's devices, inserted on a VM's buses: what `exitlab run` boots on, and
/// what the lab's VMM-overhead experiment measures the exit path against.
pub struct PcPlatform {
    serial: Arc<Serial>,
    cmos: Arc<Cmos>,
    // Keeps the BAR observer (and through it the pci-testdev) alive with the platform.
    _remapper: Arc<BarRemapper>,
    pio_ranges: usize,
    mmio_ranges: usize,
}

impl PcPlatform {
    /// The serial port (for input forwarding).
    pub fn serial(&self) -> &Arc<Serial> {
        &self.serial
    }

    /// How many port and MMIO ranges the platform claimed on the buses.
    pub fn ranges(&self) -> (usize, usize) {
        (self.pio_ranges, self.mmio_ranges)
    }
}

/// Inserts the PC platform's devices on `vm`'s buses: 16550A, debug-exit, i8042, port 80,
/// CMOS, pc-testdev ports, IRQ lines and memory, fw_cfg, ACPI PM timer and PM1 blocks,
/// PCI with the host bridge and pci-testdev (BARs decoding where firmware would leave
/// them, ioeventfd doorbells in the kernel).
pub fn build_pc_platform(vm: &Vm, cfg: PlatformConfig) -> Result<PcPlatform, MachineError> {
    let pio = vm.pio_bus().clone();
    let mmio = vm.mmio_bus().clone();
    let (pio_before, mmio_before) = (pio.len(), mmio.len());
    let serial = add_serial(vm, cfg.serial)?;
    let cmos = add_legacy_devices(vm, cfg.ram_bytes, cfg.cpus)?;
    add_firmware_interfaces(vm, cfg.ram_bytes, cfg.cpus, &cfg.cmdline)?;
    let remapper = add_pci(vm)?;
    Ok(PcPlatform {
        serial,
        cmos,
        _remapper: remapper,
        pio_ranges: pio.len() - pio_before,
        mmio_ranges: mmio.len() - mmio_before,
    })
}

/// The 16550A at COM1, its interrupt through an irqfd (in-kernel irqchip) or as a
/// pulse on the userspace I/O APIC's input 4 (split irqchip).
fn add_serial(vm: &Vm, out: SerialOut) -> Result<Arc<Serial>, MachineError> {
    if vm.split_chips().is_some() {
        let serial = Arc::new(Serial::with_line(
            vm.irq_line().clone(),
            pc::COM1_IRQ,
            serial_sink(out)?,
        ));
        insert(vm.pio_bus(), serial.clone(), pc::COM1)?;
        return Ok(serial);
    }
    let serial_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(|e| VmmError::Os("eventfd", e))?;
    vm.fd()
        .register_irqfd(&serial_irq, pc::COM1_IRQ)
        .map_err(|e| VmmError::Kvm("KVM_IRQFD", e))?;
    let serial = Arc::new(Serial::new(
        serial_irq
            .try_clone()
            .map_err(|e| VmmError::Os("eventfd dup", e))?,
        serial_sink(out)?,
    ));
    insert(vm.pio_bus(), serial.clone(), pc::COM1)?;
    Ok(serial)
}

/// Debug-exit, i8042, port 80, port 0x92, CMOS, the pc-testdev ports, IRQ lines and
/// memory, and the HPET; returns the CMOS, whose alarm wakes the machine from S3.
fn add_legacy_devices(vm: &Vm, ram_bytes: u64, cpus: u32) -> Result<Arc<Cmos>, MachineError> {
    let pio = vm.pio_bus();
    insert(pio, Arc::new(DebugExit::new()), pc::DEBUG_EXIT)?;
    let i8042: Arc<dyn BusDevice> = Arc::new(I8042::new());
    insert(pio, i8042.clone(), pc::I8042_DATA)?;
    insert(
        pio,
        Arc::new(OffsetDevice::new(i8042, pc::I8042_COMMAND_BIAS)),
        pc::I8042_COMMAND,
    )?;
    insert(pio, Arc::new(Sink::new()), pc::PORT80)?;
    insert(pio, Arc::new(Port92::new()), pc::PORT92)?;
    let below = layout::low_ram_end(ram_bytes);
    let above = layout::high_ram_bytes(ram_bytes);
    let cmos = Arc::new(Cmos::new(below, above, cpus));
    insert(pio, cmos.clone(), pc::CMOS)?;
    insert(pio, Arc::new(TestDevPorts::new()), pc::TESTDEV_PORTS)?;
    let irq_line: Arc<dyn IrqLine> = vm.irq_line().clone();
    insert(
        pio,
        Arc::new(TestDevIrqLines::new(irq_line.clone())),
        pc::TESTDEV_IRQ,
    )?;
    insert(vm.mmio_bus(), Arc::new(TestDevMem::new()), pc::TESTDEV_MEM)?;
    insert(vm.mmio_bus(), Arc::new(Hpet::new(irq_line)), pc::HPET)?;
    Ok(cmos)
}

/// fw_cfg, the ACPI PM timer and the PM1a blocks the FADT names.
fn add_firmware_interfaces(
    vm: &Vm,
    ram_bytes: u64,
    cpus: u32,
    cmdline: &str,
) -> Result<(), MachineError> {
    let pio = vm.pio_bus();
    let mut fw = FwCfg::new(layout::effective_ram(ram_bytes), cpus as u16, cpus as u16);
    fw.set_cmdline(0, cmdline)?;
    insert(pio, Arc::new(fw), pc::FW_CFG)?;
    insert(
        pio,
        Arc::new(PmTimer::new(PmTimerWidth::Bits32)),
        pc::PM_TIMER,
    )?;
    // PM1a event block the FADT names: reads as zero (SCI not enabled). PM1a control:
    // S3 and S5.
    pio.insert(Arc::new(Sink::new()), 0xB000, 4)
        .map_err(VmmError::from)?;
    insert(pio, Arc::new(PmControl::new()), pc::PM1A_CONTROL)?;
    Ok(())
}

/// PCI configuration mechanism #1 with the host bridge and the pci-testdev, its BARs
/// mapped and its ioeventfd doorbells registered; returns the observer that moves them
/// when the guest reprograms a BAR.
fn add_pci(vm: &Vm) -> Result<Arc<BarRemapper>, MachineError> {
    let any_length = vm
        .fd()
        .check_extension_raw(kvm_bindings::KVM_CAP_IOEVENTFD_ANY_LENGTH.into())
        > 0;
    let testdev: Arc<dyn PciDevice> = Arc::new(PciTestDev::new(
        pc::PCI_TESTDEV_MMIO_BASE,
        pc::PCI_TESTDEV_PIO_BASE,
        any_length,
    )?);
    let remapper = Arc::new(BarRemapper {
        vm: vm.fd().clone(),
        pio: Arc::downgrade(vm.pio_bus()),
        mmio: Arc::downgrade(vm.mmio_bus()),
        device: Mutex::new(Some(testdev.clone())),
        registered: Mutex::new(Vec::new()),
    });
    let mut pci = PciConfigIo::new();
    let slot = PciAddress::new(0, pc::PCI_TESTDEV_SLOT, 0)?;
    pci.add_device(slot, testdev.clone())?;
    pci.set_bar_observer(remapper.clone());
    for bar in testdev.bars() {
        if let Some(dev) = testdev.bar_device(bar.index) {
            match bar.space {
                IoSpace::Pio => vm.pio_bus(),
                IoSpace::Mmio => vm.mmio_bus(),
            }
            .insert(dev, bar.addr, bar.size)
            .map_err(VmmError::from)?;
        }
    }
    remapper.sync_ioeventfds(&testdev);
    insert(vm.pio_bus(), Arc::new(pci), pc::PCI_CONFIG)?;
    Ok(remapper)
}

/// Refuses a machine that cannot be built, before anything is created.
fn validate(cfg: &MachineConfig) -> Result<(), MachineError> {
    if cfg.cpus == 0 || cfg.cpus > MAX_CPUS {
        return Err(MachineError::Cpus(cfg.cpus));
    }
    layout::check_ram(cfg.ram_bytes)?;
    exitlab_boot::detect(&cfg.kernel)?;
    Ok(())
}

/// The VM's configuration: RAM around the PCI hole, the irqchip asked for, KVM's PIT
/// with the in-kernel one.
fn vm_config(cfg: &MachineConfig) -> VmConfig {
    let ram: Vec<(u64, u64)> = layout::ram_regions(cfg.ram_bytes)
        .into_iter()
        .map(|(a, l)| (a.0, l as u64))
        .collect();
    VmConfig {
        ram,
        irqchip: cfg.platform.irqchip,
        pit: cfg.platform.pit && cfg.platform.irqchip == IrqChip::Kernel,
        user_msrs: Vec::new(),
        disable_exits: 0,
        cpus: cfg.cpus,
        pit_reinject: cfg.platform.pit_reinject,
        cpu: cfg.platform.cpu.clone(),
        knobs: Default::default(),
    }
}

/// The vCPUs: the boot vCPU starts at the loader's entry; the others wait for
/// INIT/SIPI in the in-kernel LAPIC. Every LAPIC's LINT pins are wired as on a PC.
fn add_vcpus(
    b: &mut MachineBuilder<NoHook>,
    cpus: u32,
    entry: &exitlab_boot::EntryState,
) -> Result<(), MachineError> {
    for id in 0..cpus {
        let spec = VcpuSpec {
            entry: (id == 0).then_some(entry),
            pc_lint: true,
            ..VcpuSpec::new(VcpuConfig {
                id,
                stamp_gpa: None,
                run_log: 0,
                doorbell_port: None,
                hlt: HltPolicy::Stop,
            })
        };
        b.add_vcpu(spec, NoHook)?;
    }
    Ok(())
}

/// What PC firmware leaves behind (see [`PlatformOptions::firmware_state`]): the PICs
/// initialised with the firmware's bases and masks, KVM's or the userspace pair of a
/// split irqchip, and the PIT only where it is KVM's (a split irqchip has no PIT;
/// `pit=off` none).
fn firmware_state(vm: &Vm, p: &PlatformOptions) -> Result<(), MachineError> {
    use exitlab_boot::firmware as fw;
    fw::write_bios_state(vm.memory().as_ref())?;
    if let Some(chips) = vm.split_chips() {
        chips.pic.firmware_init(
            (fw::PIC_MASTER_BASE, fw::PIC_SLAVE_BASE),
            (fw::PIC_MASTER_IMR, fw::PIC_SLAVE_IMR),
        );
    }
    if p.irqchip == IrqChip::Kernel {
        crate::sys::firmware_pic_pit(
            vm.fd(),
            (fw::PIC_MASTER_BASE, fw::PIC_SLAVE_BASE),
            (fw::PIC_MASTER_IMR, fw::PIC_SLAVE_IMR),
            p.pit,
        )
        .map_err(|(what, e)| VmmError::Kvm(what, e))?;
    }
    Ok(())
}

/// Boots `cfg.kernel` and runs it until the guest ends the run, fails, or times out.
pub fn run(kvm: Arc<kvm_ioctls::Kvm>, cfg: MachineConfig) -> Result<RunReport, MachineError> {
    let t0 = Instant::now();
    validate(&cfg)?;
    let mut b = MachineBuilder::new(kvm, vm_config(&cfg))?;
    let opts = BootOptions {
        kernel_path: cfg.kernel_path.clone(),
        cmdline: cfg.cmdline.clone(),
        initrd: cfg.initrd.clone(),
        cpus: cfg.cpus,
        ram_bytes: cfg.ram_bytes,
        acpi: true,
        pm_timer_32bit: true,
        prefer_pvh: cfg.prefer_pvh,
    };
    let loaded = exitlab_boot::load(b.vm().memory().as_ref(), &cfg.kernel, &opts)?;
    if cfg.platform.firmware_state && loaded.format == ImageFormat::Multiboot {
        firmware_state(b.vm(), &cfg.platform)?;
    }
    let platform = build_pc_platform(
        b.vm(),
        PlatformConfig {
            ram_bytes: cfg.ram_bytes,
            cpus: cfg.cpus,
            cmdline: cfg.cmdline.clone(),
            serial: cfg.serial,
        },
    )?;
    if cfg.serial_input {
        forward_stdin(platform.serial().clone());
    }
    add_vcpus(&mut b, cfg.cpus, &loaded.entry)?;
    let setup_time = t0.elapsed();
    let started = Instant::now();
    let mut sup = Supervisor::new(b.start()?, platform.cmos.clone(), loaded.facs);
    let end = sup.wait_for_end(cfg.timeout.map(|t| started + t), cfg.cancel.as_deref());
    // The guest ended the run: stop the other vCPUs.
    sup.stop_all();
    let _ = std::io::stdout().flush();
    sup.per_vcpu.sort_by_key(|v| v.vcpu);
    Ok(RunReport {
        end: end.unwrap_or(RunEnd::Stopped(sup.last_stop)),
        format: loaded.format,
        exits: sup.exits,
        per_vcpu: sup.per_vcpu,
        kvm_exits: sup.kvm_exits,
        ioapic: sup.machine.vm().ioapic().map(|io| io.accesses()),
        kvm_mmio_exits: sup.kvm_mmio_exits,
        setup_time,
        run_time: started.elapsed(),
        first_entry: sup.first_entry,
        e820: loaded.e820,
        vmm_memory: crate::sys::memory_outside_guest(sup.machine.memory()),
    })
}

/// Watches the vCPUs of a run and adds up what they hand back.
struct Supervisor {
    machine: Machine<NoHook>,
    exits: ExitCounts,
    kvm_exits: Option<u64>,
    kvm_mmio_exits: Option<u64>,
    per_vcpu: Vec<VcpuExits>,
    last_stop: String,
    /// When the boot vCPU first entered KVM_RUN.
    first_entry: Option<Instant>,
    /// What an ACPI S3 sleep needs.
    sleep: SleepContext,
    /// The vCPU that entered S3, until the supervisor puts the machine to sleep.
    suspended: Option<Vcpu>,
}

/// The CMOS whose alarm wakes the machine, and where the FACS waking vector is.
struct SleepContext {
    cmos: Arc<Cmos>,
    mem: Arc<vm_memory::GuestMemoryMmap>,
    facs: Option<u64>,
}

impl Supervisor {
    /// Watches `machine`, whose `cmos` alarm wakes it from S3 at the waking vector of
    /// the FACS at `facs`.
    fn new(machine: Machine<NoHook>, cmos: Arc<Cmos>, facs: Option<u64>) -> Supervisor {
        Supervisor {
            sleep: SleepContext {
                cmos,
                mem: machine.memory().clone(),
                facs,
            },
            machine,
            exits: ExitCounts::default(),
            kvm_exits: Some(0),
            kvm_mmio_exits: Some(0),
            per_vcpu: Vec::new(),
            last_stop: String::new(),
            first_entry: None,
            suspended: None,
        }
    }

    /// Adds a stopped vCPU's counts.
    fn collect(&mut self, vcpu: &Vcpu) {
        let v = vcpu.exits();
        if vcpu.id() == 0 {
            // The earliest: a resume from S3 enters KVM_RUN again.
            self.first_entry = match (self.first_entry, vcpu.first_entry()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let add = |a: Option<u64>, b: Option<u64>| Some(a? + b?);
        self.exits = self.exits.plus(&v.user);
        self.kvm_exits = add(self.kvm_exits, v.kvm_exits);
        self.kvm_mmio_exits = add(
            self.kvm_mmio_exits,
            vcpu.kvm_stats().and_then(|s| s.read("mmio_exits")),
        );
        self.per_vcpu.push(v);
    }

    /// ACPI S3: stops every vCPU, sleeps until the RTC alarm (crate::suspend), then
    /// restarts them for the resume at the FACS waking vector; the end of the run if
    /// the deadline or a cancel came first, or the resume is impossible.
    fn suspend(
        &mut self,
        vcpu: Vcpu,
        deadline: Option<Instant>,
        cancel: Option<&AtomicBool>,
    ) -> Option<RunEnd> {
        let id = vcpu.id();
        let mut asleep = vec![(id, vcpu)];
        for (id, f) in self.machine.stop_all(Duration::from_secs(1)) {
            asleep.extend(f.map(|f| (id, f.vcpu)));
        }
        let mut end = match suspend::sleep(&self.sleep.cmos, deadline, cancel) {
            SleepEnd::Alarm => suspend::resume(&self.sleep.mem, self.sleep.facs, &asleep)
                .err()
                .map(|what| RunEnd::Failure {
                    vcpu: id,
                    what,
                    registers: String::new(),
                    emulation_failure: None,
                }),
            SleepEnd::Timeout => Some(RunEnd::Timeout {
                registers: Vec::new(),
            }),
            SleepEnd::Cancelled => Some(RunEnd::Cancelled),
        };
        for (id, vcpu) in asleep {
            if end.is_some() {
                self.collect(&vcpu);
                continue;
            }
            if let Err(e) = self.machine.restart(vcpu, NoHook) {
                end = Some(RunEnd::Failure {
                    vcpu: id,
                    what: format!("cannot restart the vCPU after the S3 resume: {e}"),
                    registers: String::new(),
                    emulation_failure: None,
                })
            }
        }
        end
    }

    /// Waits until a vCPU ends the run, the deadline passes or the run is cancelled;
    /// `None` when every vCPU stopped without ending it.
    fn wait_for_end(
        &mut self,
        deadline: Option<Instant>,
        cancel: Option<&AtomicBool>,
    ) -> Option<RunEnd> {
        while self.machine.running() > 0 || self.suspended.is_some() {
            if let Some(end) = self.poll_threads() {
                return Some(end);
            }
            if let Some(s) = self.suspended.take() {
                if let Some(end) = self.suspend(s, deadline, cancel) {
                    return Some(end);
                }
                continue;
            }
            if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
                return Some(RunEnd::Cancelled);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Some(self.time_out());
            }
        }
        None
    }

    /// Waits briefly on each vCPU; the end of the run if a vCPU decided it.
    fn poll_threads(&mut self) -> Option<RunEnd> {
        let wait = Duration::from_millis(if self.machine.running() > 1 { 2 } else { 20 });
        while let Some(f) = self.machine.wait_any(wait) {
            if let Some(end) = self.on_stop(f) {
                return Some(end);
            }
            if self.suspended.is_some() {
                return None;
            }
        }
        None
    }

    /// What a vCPU that stopped on its own means for the run.
    fn on_stop(&mut self, f: Finished<NoHook>) -> Option<RunEnd> {
        if matches!(f.stop, VcpuStop::Suspend) {
            self.suspended = Some(f.vcpu);
            return None;
        }
        self.collect(&f.vcpu);
        let id = f.vcpu.id();
        self.last_stop = format!("vCPU {id}: {}", f.stop.describe());
        run_end(&f)
    }

    /// Stops every vCPU at the deadline and keeps their registers.
    fn time_out(&mut self) -> RunEnd {
        let mut registers = Vec::new();
        for (id, f) in self.machine.stop_all(Duration::from_secs(1)) {
            if let Some(f) = f {
                self.collect(&f.vcpu);
                registers.push((id, f.vcpu.dump_registers()));
            }
        }
        RunEnd::Timeout { registers }
    }

    /// Stops the vCPUs still running.
    fn stop_all(&mut self) {
        for (_, f) in self.machine.stop_all(Duration::from_secs(1)) {
            if let Some(f) = f {
                self.collect(&f.vcpu);
            }
        }
    }
}

/// How a vCPU that stopped on its own ends the run, if it does: the guest's own ending
/// (debug-exit, reset, triple fault) or a failure; a halt, a kick or a hook's stop do
/// not end it.
fn run_end(f: &Finished<NoHook>) -> Option<RunEnd> {
    let vcpu = f.vcpu.id();
    match f.stop {
        VcpuStop::DebugExit(v) => Some(RunEnd::DebugExit(v)),
        VcpuStop::Reset => Some(RunEnd::Reset),
        VcpuStop::Shutdown => Some(RunEnd::TripleFault {
            vcpu,
            registers: f.vcpu.dump_registers(),
        }),
        VcpuStop::Halted | VcpuStop::Kicked | VcpuStop::Hook(_) | VcpuStop::Suspend => None,
        _ => Some(RunEnd::Failure {
            vcpu,
            what: f.describe(),
            registers: f.vcpu.dump_registers(),
            emulation_failure: f.emulation_failure(),
        }),
    }
}

/// Forwards standard input to the serial port when it is a terminal.
fn forward_stdin(serial: Arc<Serial>) {
    use std::io::{IsTerminal, Read};
    if !std::io::stdin().is_terminal() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("serial-input".into())
        .spawn(move || {
            if crate::seccomp::apply(crate::seccomp::ThreadKind::SerialInput).is_err() {
                return;
            }
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut rest = &buf[..n];
                while !rest.is_empty() {
                    match serial.enqueue_input(rest) {
                        Ok(0) => std::thread::sleep(Duration::from_millis(5)),
                        Ok(k) => rest = &rest[k..],
                        Err(_) => return,
                    }
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kvm_or_fail, reset_vector_ram, write_at_reset_vector};

    fn config(cpus: u32, ram_bytes: u64, kernel: Vec<u8>) -> MachineConfig {
        MachineConfig {
            kernel,
            kernel_path: "k".into(),
            cmdline: String::new(),
            initrd: None,
            cpus,
            ram_bytes,
            timeout: None,
            serial: SerialOut::None,
            serial_input: false,
            prefer_pvh: false,
            cancel: None,
            platform: PlatformOptions::default(),
        }
    }

    #[test]
    fn a_machine_that_cannot_be_built_is_refused_before_anything_is_created() {
        for cpus in [0, MAX_CPUS + 1] {
            let e = validate(&config(cpus, 64 << 20, Vec::new())).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("--cpus {cpus} is out of range: use 1..=255")
            );
        }
        let e = validate(&config(1, 64 << 20, vec![0; 4096])).unwrap_err();
        assert!(matches!(e, MachineError::Boot(_)), "{e}");
        assert!(e.to_string().starts_with("cannot boot the kernel: "), "{e}");
        let e = validate(&config(1, 4096, vec![0; 4096])).unwrap_err();
        assert!(matches!(e, MachineError::Boot(_)), "too little RAM: {e}");
    }

    #[test]
    fn the_vm_has_ram_around_the_pci_hole_and_a_pit_only_beside_the_kernel_irqchip() {
        let mut cfg = config(3, 4 << 30, Vec::new());
        let vm = vm_config(&cfg);
        assert_eq!(vm.cpus, 3);
        assert!(vm.pit, "KVM's PIT with the in-kernel irqchip");
        assert!(
            vm.ram.len() >= 2,
            "RAM is split by the PCI hole: {:?}",
            vm.ram
        );
        let total: u64 = vm.ram.iter().map(|r| r.1).sum();
        assert_eq!(total, layout::effective_ram(4 << 30));
        assert!(vm
            .ram
            .iter()
            .all(|&(a, l)| a + l <= 0xC000_0000 || a >= 1 << 32));
        cfg.platform.irqchip = IrqChip::Split;
        assert!(!vm_config(&cfg).pit, "a split irqchip has no PIT");
        cfg.platform.irqchip = IrqChip::Kernel;
        cfg.platform.pit = false;
        assert!(!vm_config(&cfg).pit);
    }

    #[test]
    fn serial_output_to_a_path_that_cannot_be_created_says_what_to_do() {
        let e = serial_sink(SerialOut::File("/nonexistent-dir/serial.txt".into()))
            .err()
            .unwrap();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent-dir/serial.txt"), "{msg}");
        assert!(msg.contains("choose a writable path"), "{msg}");
    }

    /// Runs `code` from the reset vector on a machine of `cpus` vCPUs with the PC
    /// platform (vCPU 0 runs it, the others wait for a SIPI) under the supervisor, until
    /// the run ends; the supervisor is returned with every vCPU stopped and counted.
    fn supervise(
        code: &[u8],
        irqchip: IrqChip,
        cpus: u32,
        deadline: Option<Duration>,
        cancel: Option<&AtomicBool>,
    ) -> (Option<RunEnd>, Supervisor) {
        let kvm = Arc::new(kvm_or_fail());
        let mut b = MachineBuilder::new(
            kvm,
            VmConfig {
                ram: reset_vector_ram(),
                irqchip,
                pit: false,
                cpus,
                ..VmConfig::default()
            },
        )
        .unwrap();
        write_at_reset_vector(b.vm().memory(), code);
        // The PC platform's serial port needs an irqchip to interrupt through.
        let cmos = if irqchip == IrqChip::None {
            Arc::new(Cmos::new(1 << 20, 0, cpus))
        } else {
            let platform = PlatformConfig {
                ram_bytes: 1 << 20,
                cpus,
                cmdline: String::new(),
                serial: SerialOut::None,
            };
            build_pc_platform(b.vm(), platform).unwrap().cmos
        };
        for id in 0..cpus {
            let spec = VcpuSpec::new(VcpuConfig {
                id,
                stamp_gpa: None,
                run_log: 0,
                doorbell_port: None,
                hlt: HltPolicy::Stop,
            });
            b.add_vcpu(spec, NoHook).unwrap();
        }
        let mut sup = Supervisor::new(b.start().unwrap(), cmos, None);
        let end = sup.wait_for_end(deadline.map(|d| Instant::now() + d), cancel);
        sup.stop_all();
        sup.per_vcpu.sort_by_key(|v| v.vcpu);
        (end, sup)
    }

    #[test]
    fn the_guest_ends_the_run_through_the_debug_exit_port_and_every_vcpu_is_counted() {
        // mov al, 0x2a; out 0xf4, al; jmp $
        let (end, sup) = supervise(
            &[0xB0, 0x2A, 0xE6, 0xF4, 0xEB, 0xFE],
            IrqChip::Kernel,
            2,
            None,
            None,
        );
        assert!(matches!(end, Some(RunEnd::DebugExit(0x2A))), "{end:?}");
        assert_eq!(sup.exits.io_out, 1, "{:?}", sup.exits);
        let ids: Vec<u32> = sup.per_vcpu.iter().map(|v| v.vcpu).collect();
        assert_eq!(ids, vec![0, 1], "the AP that never started is counted too");
        assert_eq!(sup.per_vcpu[0].user.io_out, 1);
        assert_eq!(sup.per_vcpu[1].user.io_out, 0);
        assert_eq!(sup.machine.running(), 0);
    }

    #[test]
    fn a_run_past_its_deadline_times_out_with_each_vcpus_registers() {
        let (end, sup) = supervise(
            &[0xEB, 0xFE],
            IrqChip::Kernel,
            2,
            Some(Duration::from_millis(50)),
            None,
        );
        match end {
            Some(RunEnd::Timeout { registers }) => {
                let ids: Vec<u32> = registers.iter().map(|r| r.0).collect();
                assert_eq!(ids, vec![0, 1]);
                assert!(
                    registers.iter().all(|r| r.1.contains("rip")),
                    "{registers:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(sup.per_vcpu.len(), 2);
    }

    #[test]
    fn a_cancelled_run_ends_as_cancelled() {
        let cancel = AtomicBool::new(true);
        let (end, sup) = supervise(&[0xEB, 0xFE], IrqChip::Kernel, 1, None, Some(&cancel));
        assert!(matches!(end, Some(RunEnd::Cancelled)), "{end:?}");
        assert_eq!(sup.per_vcpu.len(), 1);
    }

    #[test]
    fn a_guest_halted_with_nothing_to_wake_it_stops_the_run_with_the_reason() {
        // cli; hlt, with no in-kernel irqchip: the HLT reaches userspace.
        let (end, sup) = supervise(&[0xFA, 0xF4], IrqChip::None, 1, None, None);
        assert!(end.is_none(), "{end:?}");
        assert_eq!(
            sup.last_stop,
            "vCPU 0: the guest halted with nothing to wake it"
        );
        assert_eq!(sup.exits.hlt, 1);
    }
}
