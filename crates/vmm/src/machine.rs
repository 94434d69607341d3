//! The PC test platform behind `exitlab run`: guest RAM with the PCI hole, the in-kernel
//! irqchip and PIT, the small devices test kernels expect (16550A, debug-exit, i8042,
//! CMOS, pc-testdev, fw_cfg, ACPI PM timer, PCI with pci-testdev), a kernel loaded by
//! `exitlab-boot`, one thread per vCPU, and the end of the run as the guest decides it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exitlab_boot::{layout, BootError, BootOptions, ImageFormat};
use exitlab_devices::cmos::Cmos;
use exitlab_devices::debug_exit::DebugExit;
use exitlab_devices::fw_cfg::FwCfg;
use exitlab_devices::i8042::I8042;
use exitlab_devices::pc;
use exitlab_devices::pci::{PciAddress, PciBarChange, PciBarObserver, PciConfigIo, PciDevice};
use exitlab_devices::pci_testdev::PciTestDev;
use exitlab_devices::pm_timer::{PmTimer, PmTimerWidth};
use exitlab_devices::serial::Serial;
use exitlab_devices::sink::Sink;
use exitlab_devices::testdev::{TestDevIrqLines, TestDevMem, TestDevPorts};
use exitlab_devices::{BusDevice, IoEventSpec, IoSpace, IrqLine, OffsetDevice};
use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use crate::bus::Bus;
use crate::thread::{self, VcpuThread};
use crate::vcpu::{ExitCounts, Handler, HltPolicy, NoHook, VcpuConfig, VcpuStop};
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
    /// KVM's count of all exits, summed over vCPUs (when the host has binary stats).
    pub kvm_exits: Option<u64>,
    /// Time from `MachineConfig` to the first KVM_RUN of the boot vCPU.
    pub setup_time: Duration,
    /// Wall time of the guest run.
    pub run_time: Duration,
    /// The e820 map the guest was given.
    pub e820: Vec<exitlab_boot::E820Entry>,
}

/// Errors that stop a run before the guest starts.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// The kernel image could not be loaded.
    #[error("cannot boot the kernel: {0}")]
    Boot(#[from] BootError),
    /// The configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// KVM or VM setup failed.
    #[error(transparent)]
    Vmm(#[from] VmmError),
}

/// Raises and lowers interrupt lines through KVM_IRQ_LINE.
struct KvmIrqLine(Arc<VmFd>);

impl IrqLine for KvmIrqLine {
    fn set_level(&self, gsi: u32, level: bool) {
        let _ = self.0.set_irq_line(gsi, level);
    }
}

/// Moves PCI BAR registrations (bus ranges and ioeventfds) when the guest reprograms a
/// BAR. Runs on the vCPU thread that wrote the BAR: it publishes new bus snapshots and
/// never waits for anything that thread holds.
struct BarRemapper {
    vm: Arc<VmFd>,
    pio: Arc<Bus>,
    mmio: Arc<Bus>,
    device: Mutex<Option<Arc<dyn PciDevice>>>,
    registered: Mutex<Vec<IoEventSpec>>,
}

impl BarRemapper {
    fn bus(&self, space: IoSpace) -> &Arc<Bus> {
        match space {
            IoSpace::Pio => &self.pio,
            IoSpace::Mmio => &self.mmio,
        }
    }

    fn sync_ioeventfds(&self, dev: &Arc<dyn PciDevice>) {
        let mut reg = match self.registered.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
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
        let dev = match self.device.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let Some(dev) = dev else { return };
        if let Some(old) = change.old {
            let _ = self.bus(old.space).remove(old.addr);
        }
        if let Some(new) = change.new {
            if let Some(bar) = dev.bar_device(new.index) {
                let _ = self.bus(new.space).insert(bar, new.addr, new.size);
            }
        }
        self.sync_ioeventfds(&dev);
    }
}

fn serial_sink(out: SerialOut) -> Result<Box<dyn Write + Send>, MachineError> {
    Ok(match out {
        SerialOut::Stdio => Box::new(std::io::stdout()),
        SerialOut::File(p) => Box::new(std::fs::File::create(&p).map_err(|e| {
            MachineError::Config(format!(
                "cannot create the serial output file {}: {e}; choose a writable path",
                p.display()
            ))
        })?),
        SerialOut::None => Box::new(std::io::sink()),
        SerialOut::Writer(w) => w,
    })
}

fn insert(bus: &Bus, dev: Arc<dyn BusDevice>, r: pc::IoRange) -> Result<(), VmmError> {
    bus.insert(dev, r.base, r.len).map_err(VmmError::from)
}

/// Most vCPUs `exitlab run` creates.
pub const MAX_CPUS: u32 = 255;

/// Boots `cfg.kernel` and runs it until the guest ends the run, fails, or times out.
pub fn run(kvm: Arc<kvm_ioctls::Kvm>, cfg: MachineConfig) -> Result<RunReport, MachineError> {
    let t0 = Instant::now();
    if cfg.cpus == 0 || cfg.cpus > MAX_CPUS {
        return Err(MachineError::Config(format!(
            "--cpus {} is out of range: use 1..={MAX_CPUS}",
            cfg.cpus
        )));
    }
    layout::check_ram(cfg.ram_bytes)?;
    // Reject what cannot be booted before anything is created.
    exitlab_boot::detect(&cfg.kernel)?;
    let ram: Vec<(u64, u64)> = layout::ram_regions(cfg.ram_bytes)
        .into_iter()
        .map(|(a, l)| (a.0, l as u64))
        .collect();
    let vm = Vm::new(
        kvm.clone(),
        VmConfig {
            ram,
            irqchip: true,
            pit: true,
            user_msrs: Vec::new(),
            disable_exits: 0,
            cpus: cfg.cpus,
        },
    )?;
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
    let loaded = exitlab_boot::load(vm.memory().as_ref(), &cfg.kernel, &opts)?;

    // Devices.
    let pio = vm.pio_bus().clone();
    let mmio = vm.mmio_bus().clone();
    let serial_irq = EventFd::new(libc::EFD_NONBLOCK).map_err(|e| VmmError::Os("eventfd", e))?;
    vm.fd()
        .register_irqfd(&serial_irq, pc::COM1_IRQ)
        .map_err(|e| VmmError::Kvm("KVM_IRQFD", e))?;
    let serial = Arc::new(Serial::new(
        serial_irq
            .try_clone()
            .map_err(|e| VmmError::Os("eventfd dup", e))?,
        serial_sink(cfg.serial)?,
    ));
    insert(&pio, serial.clone(), pc::COM1)?;
    insert(&pio, Arc::new(DebugExit::new()), pc::DEBUG_EXIT)?;
    let i8042: Arc<dyn BusDevice> = Arc::new(I8042::new());
    insert(&pio, i8042.clone(), pc::I8042_DATA)?;
    insert(
        &pio,
        Arc::new(OffsetDevice::new(i8042, pc::I8042_COMMAND_BIAS)),
        pc::I8042_COMMAND,
    )?;
    insert(&pio, Arc::new(Sink::new()), pc::PORT80)?;
    let below = layout::low_ram_end(cfg.ram_bytes);
    let above = layout::high_ram_bytes(cfg.ram_bytes);
    insert(&pio, Arc::new(Cmos::new(below, above, cfg.cpus)), pc::CMOS)?;
    insert(&pio, Arc::new(TestDevPorts::new()), pc::TESTDEV_PORTS)?;
    let irq_line: Arc<dyn IrqLine> = Arc::new(KvmIrqLine(vm.fd().clone()));
    insert(
        &pio,
        Arc::new(TestDevIrqLines::new(irq_line)),
        pc::TESTDEV_IRQ,
    )?;
    insert(&mmio, Arc::new(TestDevMem::new()), pc::TESTDEV_MEM)?;
    let mut fw = FwCfg::new(
        layout::effective_ram(cfg.ram_bytes),
        cfg.cpus as u16,
        cfg.cpus as u16,
    );
    fw.set_cmdline(0, &cfg.cmdline)
        .map_err(|e| MachineError::Config(format!("fw_cfg: {e}")))?;
    insert(&pio, Arc::new(fw), pc::FW_CFG)?;
    insert(
        &pio,
        Arc::new(PmTimer::new(PmTimerWidth::Bits32)),
        pc::PM_TIMER,
    )?;
    // PM1a event and control blocks the FADT names: read as zero (SCI not enabled).
    pio.insert(Arc::new(Sink::new()), 0xB000, 4)
        .map_err(VmmError::from)?;
    pio.insert(Arc::new(Sink::new()), 0xB004, 2)
        .map_err(VmmError::from)?;

    // PCI: host bridge and pci-testdev, BARs decoding where firmware would leave them.
    let any_length = vm
        .fd()
        .check_extension_raw(kvm_bindings::KVM_CAP_IOEVENTFD_ANY_LENGTH.into())
        > 0;
    let testdev: Arc<dyn PciDevice> = Arc::new(
        PciTestDev::new(
            pc::PCI_TESTDEV_MMIO_BASE,
            pc::PCI_TESTDEV_PIO_BASE,
            any_length,
        )
        .map_err(|e| MachineError::Config(format!("pci-testdev: {e}")))?,
    );
    let remapper = Arc::new(BarRemapper {
        vm: vm.fd().clone(),
        pio: pio.clone(),
        mmio: mmio.clone(),
        device: Mutex::new(Some(testdev.clone())),
        registered: Mutex::new(Vec::new()),
    });
    let mut pci = PciConfigIo::new();
    let slot = PciAddress::new(0, pc::PCI_TESTDEV_SLOT, 0)
        .map_err(|e| MachineError::Config(format!("pci: {e}")))?;
    pci.add_device(slot, testdev.clone())
        .map_err(|e| MachineError::Config(format!("pci: {e}")))?;
    pci.set_bar_observer(remapper.clone());
    for bar in testdev.bars() {
        if let Some(dev) = testdev.bar_device(bar.index) {
            remapper
                .bus(bar.space)
                .insert(dev, bar.addr, bar.size)
                .map_err(VmmError::from)?;
        }
    }
    remapper.sync_ioeventfds(&testdev);
    insert(&pio, Arc::new(pci), pc::PCI_CONFIG)?;

    if cfg.serial_input {
        forward_stdin(serial.clone());
    }

    // vCPUs: the boot vCPU starts at the loader's entry; the others wait for INIT/SIPI
    // in the in-kernel LAPIC.
    let mut threads: Vec<(u32, VcpuThread<NoHook>)> = Vec::new();
    let mut vcpus = Vec::new();
    for id in 0..cfg.cpus {
        let vcpu = vm.create_vcpu(VcpuConfig {
            id,
            stamp_gpa: None,
            run_log: 0,
            doorbell_port: None,
            hlt: HltPolicy::Stop,
        })?;
        vcpu.setup_lapic_lint()?;
        if id == 0 {
            vcpu.set_entry(&loaded.entry)?;
        }
        vcpus.push(vcpu);
    }
    let setup_time = t0.elapsed();
    let started = Instant::now();
    for vcpu in vcpus {
        let id = vcpu.id();
        threads.push((id, thread::spawn(vcpu, NoHook, None, Handler::Devices)?));
    }
    let deadline = cfg.timeout.map(|t| started + t);
    let mut exits = ExitCounts::default();
    let mut kvm_exits: Option<u64> = Some(0);
    let mut end: Option<RunEnd> = None;
    let mut last_stop = String::new();
    let collect =
        |f: &thread::Finished<NoHook>, exits: &mut ExitCounts, kvm_exits: &mut Option<u64>| {
            *exits = exits.plus(f.vcpu.counts());
            *kvm_exits = match (*kvm_exits, f.vcpu.kvm_stats().and_then(|s| s.read("exits"))) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        };
    while !threads.is_empty() && end.is_none() {
        let mut i = 0;
        while i < threads.len() {
            let wait = Duration::from_millis(if threads.len() > 1 { 2 } else { 20 });
            match threads[i].1.wait(wait) {
                Some(f) => {
                    let (id, _) = threads.swap_remove(i);
                    collect(&f, &mut exits, &mut kvm_exits);
                    last_stop = format!("vCPU {id}: {}", f.stop.describe());
                    end = match f.stop {
                        VcpuStop::DebugExit(v) => Some(RunEnd::DebugExit(v)),
                        VcpuStop::Reset => Some(RunEnd::Reset),
                        VcpuStop::Shutdown => Some(RunEnd::TripleFault {
                            vcpu: id,
                            registers: f.vcpu.dump_registers(),
                        }),
                        VcpuStop::Halted | VcpuStop::Kicked | VcpuStop::Hook(_) => None,
                        other => Some(RunEnd::Failure {
                            vcpu: id,
                            what: describe_failure(&other, &f.vcpu),
                            registers: f.vcpu.dump_registers(),
                        }),
                    };
                    if end.is_some() {
                        break;
                    }
                }
                None => i += 1,
            }
        }
        if end.is_none()
            && cfg
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Acquire))
        {
            end = Some(RunEnd::Cancelled);
        }
        if end.is_none() && deadline.is_some_and(|d| Instant::now() >= d) {
            let mut registers = Vec::new();
            for (id, th) in threads.drain(..) {
                if let Some(f) = th.stop(Duration::from_secs(1)) {
                    collect(&f, &mut exits, &mut kvm_exits);
                    registers.push((id, f.vcpu.dump_registers()));
                }
            }
            registers.sort_by_key(|r| r.0);
            end = Some(RunEnd::Timeout { registers });
        }
    }
    // The guest ended the run: stop the other vCPUs.
    for (_, th) in threads.drain(..) {
        if let Some(f) = th.stop(Duration::from_secs(1)) {
            collect(&f, &mut exits, &mut kvm_exits);
        }
    }
    let _ = std::io::stdout().flush();
    Ok(RunReport {
        end: end.unwrap_or(RunEnd::Stopped(last_stop)),
        format: loaded.format,
        exits,
        kvm_exits,
        setup_time,
        run_time: started.elapsed(),
        e820: loaded.e820,
    })
}

fn describe_failure(stop: &VcpuStop, vcpu: &crate::vcpu::Vcpu) -> String {
    let mut s = stop.describe();
    if let VcpuStop::InternalError { insn, .. } = stop {
        if insn.is_empty() {
            if let Some(b) = vcpu.bytes_at_rip() {
                let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
                s += &format!("; bytes at rip: {}", hex.join(" "));
            }
        }
    }
    s
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
