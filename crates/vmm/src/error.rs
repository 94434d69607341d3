//! The VMM's error type.

/// Errors of the VMM core. Each message says what went wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// /dev/kvm does not exist.
    #[error("/dev/kvm does not exist: KVM is not available here; `exitlab host` says why and what to do")]
    KvmMissing,
    /// /dev/kvm exists but cannot be opened.
    #[error("/dev/kvm cannot be opened ({0}): run as root or add your user to the group that owns /dev/kvm (usually `kvm`); `exitlab host` shows who owns it")]
    KvmPermission(std::io::Error),
    /// /dev/kvm opened but failed otherwise.
    #[error("/dev/kvm cannot be used: {0}; `exitlab host` says why")]
    KvmOpen(std::io::Error),
    /// The host's KVM API version is not 12.
    #[error("KVM API version {0} is not supported (exitlab needs 12)")]
    ApiVersion(i32),
    /// A KVM ioctl (or a system call on the memory given to KVM) failed.
    #[error("{0} failed: {1}")]
    Kvm(&'static str, kvm_ioctls::Error),
    /// A capability the requested configuration needs is missing.
    #[error("this host's KVM lacks {0}: {1}")]
    MissingCap(&'static str, &'static str),
    /// A guest RAM region is larger than this host's address space.
    #[error("a guest RAM region of {0:#x} bytes does not fit this host's address space: ask for less with --mem")]
    RegionTooLarge(u64),
    /// Guest RAM could not be allocated.
    #[error("cannot allocate guest RAM: {0}; ask for less with --mem")]
    MemoryAlloc(#[source] vm_memory::mmap::FromRangesError),
    /// A guest RAM region has no host mapping (a bug: regions are mapped when created).
    #[error("guest RAM region at {0:#x} has no host mapping")]
    Unmapped(u64),
    /// A device could not be registered.
    #[error("device bus: {0}")]
    Bus(#[from] crate::bus::BusError),
    /// A VM was asked for with no vCPU.
    #[error("invalid VM configuration: a VM needs at least one vCPU")]
    NoVcpus,
    /// The in-kernel PIT was asked for without the in-kernel irqchip.
    #[error("invalid VM configuration: the in-kernel PIT needs the full in-kernel irqchip (not none, not split): leave the PIT out or use --irqchip kernel")]
    PitWithoutIrqchip,
    /// KVM's routing table for the split irqchip's I/O APIC could not be built (a bug:
    /// it always has 24 entries).
    #[error("cannot build the I/O APIC's KVM routing table (a bug in exitlab: please report it)")]
    RoutingTable,
    /// A vCPU index beyond the VM's vCPU count.
    #[error("vCPU id {id} is out of range for a VM of {cpus} vCPUs")]
    VcpuOutOfRange {
        /// The index asked for.
        id: u32,
        /// The VM's vCPUs.
        cpus: u32,
    },
    /// The same vCPU index added twice to a machine.
    #[error("vCPU {0} was added twice to the machine: give each vCPU its own index")]
    VcpuTwice(u32),
    /// A vCPU's stamp page is not in guest RAM.
    #[error("vCPU {vcpu}: stamp page {gpa:#x} is not in guest RAM")]
    StampPageOutsideRam {
        /// vCPU index.
        vcpu: u32,
        /// The page's guest-physical address.
        gpa: u64,
    },
    /// More MSRs routed to userspace than an MSR filter holds.
    #[error("at most {max} MSRs can be routed to userspace ({asked} asked for)")]
    TooManyUserMsrs {
        /// The filter's limit.
        max: u32,
        /// How many were asked for.
        asked: usize,
    },
    /// An ioeventfd width KVM does not take.
    #[error("ioeventfd length {0} is not 1, 2, 4 or 8 (0 = any width is for MMIO without datamatch only)")]
    IoeventfdLength(u32),
    /// An OS call failed.
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
    /// The seccomp filter of a thread could not be built or installed.
    #[error("seccomp filter: {0}; run with --no-seccomp to go without it")]
    Seccomp(String),
}
