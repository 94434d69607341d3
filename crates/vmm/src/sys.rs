//! The few raw system interfaces kvm-ioctls does not wrap: KVM's binary statistics fd,
//! vCPU device attributes (the TSC offset), the TSC itself, the per-vCPU stamp page
//! the guest reads, and the run loop's KVM_RUN with its exit decoding ([`RunPage`]:
//! in line for port exits, where kvm-ioctls' `VcpuFd::run` cost ~60 cycles per exit;
//! docs/exit-path.md). Every `unsafe` block of the VMM lives here or in `memory.rs`.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Arc;

use kvm_bindings::kvm_device_attr;
use kvm_ioctls::{VcpuExit, VcpuFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::ioctl::{ioctl, ioctl_with_mut_ref, ioctl_with_ref};
use vmm_sys_util::{ioctl_io_nr, ioctl_ior_nr, ioctl_iow_nr};

#[allow(missing_docs)]
mod nr {
    use super::*;
    const KVMIO: u32 = 0xAE;
    ioctl_io_nr!(KVM_RUN, KVMIO, 0x80);
    ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);
    ioctl_iow_nr!(KVM_GET_DEVICE_ATTR, KVMIO, 0xe2, kvm_device_attr);
    ioctl_iow_nr!(KVM_IOEVENTFD, KVMIO, 0x79, kvm_bindings::kvm_ioeventfd);
    ioctl_iow_nr!(KVM_X86_SETUP_MCE, KVMIO, 0x9c, u64);
    ioctl_io_nr!(KVM_REINJECT_CONTROL, KVMIO, 0x71);
    ioctl_ior_nr!(KVM_X86_GET_MCE_CAP_SUPPORTED, KVMIO, 0x9d, u64);
}
use nr::{
    KVM_GET_DEVICE_ATTR, KVM_GET_STATS_FD, KVM_IOEVENTFD, KVM_REINJECT_CONTROL, KVM_RUN,
    KVM_X86_GET_MCE_CAP_SUPPORTED, KVM_X86_SETUP_MCE,
};

/// Assigns (or with `deassign`, removes) an ioeventfd with any combination of length
/// and datamatch, which kvm-ioctls' typed wrapper cannot express (a port doorbell of
/// width 1 that matches any value, for one).
pub fn ioeventfd(
    vm: &kvm_ioctls::VmFd,
    eventfd: &vmm_sys_util::eventfd::EventFd,
    pio: bool,
    addr: u64,
    len: u32,
    datamatch: Option<u64>,
    deassign: bool,
) -> std::io::Result<()> {
    let mut flags = 0u32;
    if datamatch.is_some() {
        flags |= 1 << kvm_bindings::kvm_ioeventfd_flag_nr_datamatch;
    }
    if pio {
        flags |= 1 << kvm_bindings::kvm_ioeventfd_flag_nr_pio;
    }
    if deassign {
        flags |= 1 << kvm_bindings::kvm_ioeventfd_flag_nr_deassign;
    }
    let req = kvm_bindings::kvm_ioeventfd {
        datamatch: datamatch.unwrap_or(0),
        addr,
        len,
        fd: eventfd.as_raw_fd(),
        flags,
        ..Default::default()
    };
    // SAFETY: `req` is a fully initialized kvm_ioeventfd the kernel only reads; the
    // eventfd stays open for the duration of the call.
    let ret = unsafe { ioctl_with_ref(vm, KVM_IOEVENTFD(), &req) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this CPU executes `rdtscp`: 0 not asked yet, 1 no, 2 yes.
static RDTSCP: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Asks CPUID whether the CPU has RDTSCP (leaf 0x80000001 EDX bit 27) and remembers it.
#[cold]
fn probe_rdtscp() -> bool {
    use core::arch::x86_64::__cpuid_count;
    let has = __cpuid_count(0x8000_0000, 0).eax >= 0x8000_0001
        && __cpuid_count(0x8000_0001, 0).edx & (1 << 27) != 0;
    RDTSCP.store(
        if has { 2 } else { 1 },
        std::sync::atomic::Ordering::Relaxed,
    );
    has
}

/// Reads the TSC after all earlier instructions have executed: `rdtscp`, or `lfence;
/// rdtsc` on a CPU without RDTSCP (asked of CPUID once per process; a relaxed load after).
#[inline(always)]
pub fn rdtscp() -> u64 {
    let has = match RDTSCP.load(std::sync::atomic::Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => probe_rdtscp(),
    };
    if has {
        let mut aux = 0u32;
        // SAFETY: CPUID says this CPU has RDTSCP; it has no memory effects besides
        // writing `aux`.
        unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
    } else {
        // SAFETY: lfence and rdtsc exist on every x86-64 CPU; lfence waits for earlier
        // instructions to complete, rdtsc only reads the counter.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
}

/// Reads the TSC (`rdtsc`), not serialized.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Opens the binary statistics fd of a vCPU (KVM_GET_STATS_FD).
pub fn vcpu_stats_fd(vcpu: &VcpuFd) -> std::io::Result<File> {
    // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or -1; we own the
    // returned descriptor exclusively.
    let fd = unsafe { ioctl(vcpu, KVM_GET_STATS_FD()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly created descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Reads a vCPU device attribute of 64 bits (KVM_GET_DEVICE_ATTR), e.g. the TSC offset.
pub fn vcpu_get_attr_u64(vcpu: &VcpuFd, group: u32, attr: u64) -> std::io::Result<u64> {
    let mut value: u64 = 0;
    let da = kvm_device_attr {
        flags: 0,
        group,
        attr,
        addr: &mut value as *mut u64 as u64,
    };
    // SAFETY: `da` is a valid kvm_device_attr whose `addr` points at a live u64 the kernel
    // writes 8 bytes to; the ioctl does not keep the pointer.
    let ret = unsafe { ioctl_with_ref(vcpu, KVM_GET_DEVICE_ATTR(), &da) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

/// The MCG_CAP bits KVM can give a vCPU (KVM_X86_GET_MCE_CAP_SUPPORTED, on /dev/kvm).
pub fn mce_cap_supported(kvm: &kvm_ioctls::Kvm) -> std::io::Result<u64> {
    let mut cap: u64 = 0;
    // SAFETY: the ioctl writes one u64 to the pointer, which points at a live local; it
    // does not keep the pointer.
    let ret = unsafe { ioctl_with_mut_ref(kvm, KVM_X86_GET_MCE_CAP_SUPPORTED(), &mut cap) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cap)
}

/// Sets a vCPU's MCG_CAP, and so its number of MCE banks (KVM_X86_SETUP_MCE).
pub fn setup_mce(vcpu: &VcpuFd, mcg_cap: u64) -> std::io::Result<()> {
    // SAFETY: the ioctl reads one u64 from the pointer, which points at a live value; it
    // does not keep the pointer.
    let ret = unsafe { ioctl_with_ref(vcpu, KVM_X86_SETUP_MCE(), &mcg_cap) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the in-kernel PIT re-injects ticks the guest missed (KVM_REINJECT_CONTROL;
/// KVM's default is on, QEMU's `lost_tick_policy=discard` turns it off).
pub fn pit_reinject(vm: &kvm_ioctls::VmFd, on: bool) -> std::io::Result<()> {
    let ctl = kvm_bindings::kvm_reinject_control {
        pit_reinject: u8::from(on),
        ..Default::default()
    };
    // SAFETY: the ioctl reads one kvm_reinject_control from the pointer, which points at
    // a live value; it does not keep the pointer.
    let ret = unsafe { ioctl_with_ref(vm, KVM_REINJECT_CONTROL(), &ctl) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Puts the in-kernel PICs and PIT in the state PC firmware leaves them in: master at
/// vector `bases.0`, slave at `bases.1`, masks `imrs`, both initialised (edge-triggered,
/// normal EOI); with `pit`, PIT channel 0 in mode 3 (square wave), LSB-then-MSB, count 0
/// (65536: 18.2 Hz), counting. Needs KVM_CREATE_IRQCHIP (and KVM_CREATE_PIT2) done.
pub fn firmware_pic_pit(
    vm: &kvm_ioctls::VmFd,
    bases: (u8, u8),
    imrs: (u8, u8),
    pit: bool,
) -> Result<(), (&'static str, kvm_ioctls::Error)> {
    for (chip_id, base, imr) in [(0u32, bases.0, imrs.0), (1, bases.1, imrs.1)] {
        let mut chip = kvm_bindings::kvm_irqchip {
            chip_id,
            ..Default::default()
        };
        vm.get_irqchip(&mut chip)
            .map_err(|e| ("KVM_GET_IRQCHIP", e))?;
        // SAFETY: chip ids 0 and 1 are the master and slave PIC, for which KVM fills and
        // reads the union's `pic` member; every bit pattern is a valid kvm_pic_state.
        let pic = unsafe { &mut chip.chip.pic };
        pic.irq_base = base;
        pic.imr = imr;
        pic.irr = 0;
        pic.isr = 0;
        pic.last_irr = 0;
        pic.init_state = 0;
        pic.init4 = 1;
        pic.auto_eoi = 0;
        pic.read_reg_select = 0;
        vm.set_irqchip(&chip).map_err(|e| ("KVM_SET_IRQCHIP", e))?;
    }
    if !pit {
        return Ok(());
    }
    let mut pit = vm.get_pit2().map_err(|e| ("KVM_GET_PIT2", e))?;
    let c = &mut pit.channels[0];
    c.count = 0x1_0000;
    c.mode = 3;
    c.rw_mode = 3;
    c.read_state = 3;
    c.write_state = 3;
    c.gate = 1;
    c.bcd = 0;
    vm.set_pit2(&pit).map_err(|e| ("KVM_SET_PIT2", e))
}

/// Positional read that fills `buf` completely.
pub fn pread_exact(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

/// The raw fd of a file, for diagnostics.
pub fn raw_fd(f: &File) -> i32 {
    f.as_raw_fd()
}

/// A vCPU's stamp page in guest memory (see the guest ABI's `Stamps`): the host writes
/// its TSC when KVM_RUN returned and just before it re-enters, then bumps `seq`.
pub struct StampPage {
    ptr: *mut u64,
    // Keeps the mapping `ptr` points into alive.
    _mem: Arc<GuestMemoryMmap>,
}

// SAFETY: the page is only written by the one vCPU thread that owns this value; the
// mapping is kept alive by `_mem`. The guest reading it concurrently is the intended use
// (volatile accesses on plain integers, no references are formed).
unsafe impl Send for StampPage {}

impl StampPage {
    /// Maps the stamp page at `gpa`; `None` if 24 bytes at `gpa` are not guest RAM in one
    /// region or the address is not 8-byte aligned.
    pub fn new(mem: Arc<GuestMemoryMmap>, gpa: u64) -> Option<StampPage> {
        if !gpa.is_multiple_of(8) {
            return None;
        }
        let end = GuestAddress(gpa.checked_add(23)?);
        let start_region = mem.find_region(GuestAddress(gpa))?;
        let end_region = mem.find_region(end)?;
        if !std::ptr::eq(start_region, end_region) {
            return None;
        }
        let ptr = mem.get_host_address(GuestAddress(gpa)).ok()? as *mut u64;
        Some(StampPage { ptr, _mem: mem })
    }

    /// Publishes the stamps of one userspace exit: `t_return`, `t_reenter`, then `seq`.
    #[inline(always)]
    pub fn publish(&self, seq: u64, t_return: u64, t_reenter: u64) {
        // SAFETY: `ptr` points at 24 bytes of mapped guest RAM, 8-byte aligned (checked in
        // `new`), kept mapped by `_mem`; volatile writes because the guest reads them.
        unsafe {
            self.ptr.add(1).write_volatile(t_return);
            self.ptr.add(2).write_volatile(t_reenter);
            self.ptr.write_volatile(seq);
        }
    }
}

/// Details of a KVM_EXIT_INTERNAL_ERROR: sub-error, its data words, and for emulation
/// failures the instruction bytes KVM reported (when it did).
pub fn internal_error(run: &kvm_bindings::kvm_run) -> (u32, Vec<u64>, Vec<u8>) {
    // SAFETY: the caller saw exit_reason == KVM_EXIT_INTERNAL_ERROR, so `internal` is the
    // active union member; it is plain integers.
    let internal = unsafe { run.__bindgen_anon_1.internal };
    let n = (internal.ndata as usize).min(internal.data.len());
    let data = internal.data[..n].to_vec();
    let mut insn = Vec::new();
    if internal.suberror == kvm_bindings::KVM_INTERNAL_ERROR_EMULATION {
        // SAFETY: for KVM_INTERNAL_ERROR_EMULATION the kernel fills `emulation_failure`,
        // which overlays `internal`; plain integers.
        let ef = unsafe { run.__bindgen_anon_1.emulation_failure };
        if ef.ndata >= 3
            && ef.flags
                & u64::from(kvm_bindings::KVM_INTERNAL_ERROR_EMULATION_FLAG_INSTRUCTION_BYTES)
                != 0
        {
            // SAFETY: the union has a single member (insn_size, insn_bytes), plain bytes.
            let bytes = unsafe { ef.__bindgen_anon_1.__bindgen_anon_1 };
            let len = (bytes.insn_size as usize).min(bytes.insn_bytes.len());
            insn = bytes.insn_bytes[..len].to_vec();
        }
    }
    (internal.suberror, data, insn)
}

/// Gives the calling thread its own copy of the process's file descriptor table
/// (`unshare(CLONE_FILES)`), for a vCPU thread before its first KVM_RUN.
///
/// While threads share one table, every `ioctl` looks its fd up with a reference taken
/// and dropped (two atomic operations on the file, `fdget`/`fdput`); a thread whose
/// table is its own takes the lookup's fast path without them. On this project's second
/// host that was 52 cycles at p10 and 78 at the median of each exit's userspace share
/// (docs/exit-path.md). The copy holds the same open files under the same numbers, so
/// the vCPU fd, the VM fd and every fd the machine set up before its vCPUs started stay
/// valid; files other threads open afterwards are not seen by the vCPU thread, which
/// under its seccomp filter opens none itself. A descriptor the thread closes is closed
/// in its copy only: the thread must leave every fd-owning object to its owner (the
/// machine, which outlives it) and end with [`PrivateFdTable::release`]. `ENOMEM` is
/// the only way this fails.
pub fn private_fd_table() -> std::io::Result<PrivateFdTable> {
    // SAFETY: unshare takes flags only and touches no memory of this process.
    let r = unsafe { libc::unshare(libc::CLONE_FILES) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PrivateFdTable(std::marker::PhantomData))
}

/// The calling thread's own copy of the fd table, made by [`private_fd_table`]; not
/// `Send`, since only the thread that made it may release it.
#[derive(Debug)]
pub struct PrivateFdTable(std::marker::PhantomData<*const ()>);

impl PrivateFdTable {
    /// Closes every descriptor of the thread's copy (`close_range`), so that the file
    /// references it holds go now and not while the thread exits, after whoever joins
    /// it has moved on: a vCPU thread calls it last, once it has handed its vCPU back,
    /// and its machine then holds the only references to its files, as with one table.
    /// Without it, the last close of a VM that the machine had already dropped ran in
    /// the exiting vCPU thread, which a census of the process's threads then still saw.
    pub fn release(self) {
        // SAFETY: close_range takes numbers only; it closes descriptors of this thread's
        // own table (unshared above, which the type proves), which no other thread
        // shares and which nothing on this thread uses after this call.
        let _ = unsafe { libc::close_range(0, u32::MAX, 0) };
    }
}

/// Pins the calling thread to host CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so CPU_SET stays in bounds.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: we pass a valid set of the right size for the calling thread (pid 0).
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A vCPU's kvm_run page and fd: the one system call of the run loop (KVM_RUN) and the
/// decoding of its exit. A port exit, nearly every userspace exit, is decoded straight
/// from the page in line in the loop; every other exit by an out-of-line decoder. Both
/// give kvm-ioctls' [`VcpuExit`], as its `VcpuFd::run` would, so the handlers and their
/// tests see one vocabulary; the element size of a string port access, which
/// `VcpuExit` leaves out, is [`RunPage::io_size`].
pub struct RunPage {
    run: *mut kvm_bindings::kvm_run,
    fd: libc::c_int,
}

// SAFETY: the pointer refers to the vCPU's own kvm_run mapping, which lives as long as
// the VcpuFd it belongs to; the RunPage is stored beside that VcpuFd in the same `Vcpu`
// and moves with it to the thread that runs it. Nothing is shared between threads.
unsafe impl Send for RunPage {}

impl RunPage {
    /// The kvm_run page and fd of `fd`. The caller keeps `fd` alive as long as the
    /// RunPage.
    pub fn new(fd: &mut VcpuFd) -> RunPage {
        RunPage {
            fd: fd.as_raw_fd(),
            run: fd.get_kvm_run(),
        }
    }

    /// Enters the guest (KVM_RUN on `_vcpu`, the fd this page belongs to) and decodes the
    /// exit. The exit's buffers borrow `vcpu`, as kvm-ioctls' own `run` does, so nothing
    /// else reaches the page (`get_kvm_run`) while they live.
    #[inline(always)]
    pub fn run<'f>(&self, _vcpu: &'f mut VcpuFd) -> Result<VcpuExit<'f>, kvm_ioctls::Error> {
        // SAFETY: `fd` is the vCPU fd this page belongs to (see `new`), open while the
        // VcpuFd borrowed here lives; KVM_RUN takes no argument and touches no memory of
        // this process but the kvm_run mapping.
        let ret = unsafe { libc::ioctl(self.fd, KVM_RUN() as _, 0) };
        // SAFETY: the mapping is valid for the RunPage's lifetime (see `new`); the VcpuFd
        // is borrowed mutably for 'f, so this is the only reference to the page, and the
        // kernel writes it only inside KVM_RUN, which returned.
        let run = unsafe { &mut *self.run };
        if ret == 0 && run.exit_reason == kvm_bindings::KVM_EXIT_IO {
            // SAFETY: the exit reason says `io` is the member of the union the kernel
            // wrote; it is plain old data.
            let io = unsafe { run.__bindgen_anon_1.io };
            let len = usize::from(io.size) * io.count as usize;
            // SAFETY: the kernel puts a port exit's data `data_offset` bytes into the
            // kvm_run mapping, inside it (the mapping is KVM_GET_VCPU_MMAP_SIZE long and
            // the kernel's buffer is one of its pages), and the VcpuFd borrow keeps
            // every other reference away for 'f.
            let data = unsafe {
                std::slice::from_raw_parts_mut(
                    self.run.cast::<u8>().add(io.data_offset as usize),
                    len,
                )
            };
            return match u32::from(io.direction) {
                kvm_bindings::KVM_EXIT_IO_IN => Ok(VcpuExit::IoIn(io.port, data)),
                kvm_bindings::KVM_EXIT_IO_OUT => Ok(VcpuExit::IoOut(io.port, data)),
                _ => Err(kvm_ioctls::Error::new(libc::EINVAL)),
            };
        }
        decode(run, ret)
    }

    /// kvm_run's `io.size`: the bytes of one element of the last port exit. After any
    /// other exit the value means nothing (the union holds another member).
    #[inline(always)]
    pub fn io_size(&self) -> usize {
        // SAFETY: the mapping is valid for the RunPage's lifetime (see `new`) and at least
        // one page long; `io` is a plain-old-data member of the exit union at a fixed
        // offset in the header, so reading its `size` byte is defined whatever member the
        // kernel last wrote. The data buffer of a port exit lies at `io.data_offset`,
        // past the header, so this read never overlaps it.
        unsafe { usize::from((*self.run).__bindgen_anon_1.io.size) }
    }
}

/// Every exit but a port access, decoded from kvm_run after KVM_RUN returned `ret`: the
/// reasons exitlab handles with their data, the others by name where they carry none,
/// and any other as `Unsupported(reason)`. Out of line, so the port path stays short.
#[inline(never)]
fn decode(
    run: &mut kvm_bindings::kvm_run,
    ret: libc::c_int,
) -> Result<VcpuExit<'_>, kvm_ioctls::Error> {
    use kvm_bindings::*;
    use kvm_ioctls::{MsrExitReason, ReadMsrExit, WriteMsrExit};
    if ret != 0 {
        let err = kvm_ioctls::Error::last();
        // A memory fault is the one exit that comes with -1 (EFAULT or EHWPOISON); after
        // any other error the exit reason is stale.
        if matches!(err.errno(), libc::EFAULT | libc::EHWPOISON)
            && run.exit_reason == KVM_EXIT_MEMORY_FAULT
        {
            // SAFETY: the exit reason names the union's member; plain old data.
            let f = unsafe { run.__bindgen_anon_1.memory_fault };
            return Ok(VcpuExit::MemoryFault {
                flags: f.flags,
                gpa: f.gpa,
                size: f.size,
            });
        }
        return Err(err);
    }
    // Each union read below is of the member the exit reason just matched names (the one
    // the kernel wrote); each is plain old data inside the mapping, borrowed as `run` is.
    Ok(match run.exit_reason {
        KVM_EXIT_MMIO => {
            // SAFETY: KVM_EXIT_MMIO: the kernel wrote `mmio` (see above).
            let m = unsafe { &mut run.__bindgen_anon_1.mmio };
            let len = (m.len as usize).min(m.data.len());
            let (addr, write) = (m.phys_addr, m.is_write != 0);
            let data = &mut m.data[..len];
            if write {
                VcpuExit::MmioWrite(addr, data)
            } else {
                VcpuExit::MmioRead(addr, data)
            }
        }
        KVM_EXIT_HLT => VcpuExit::Hlt,
        KVM_EXIT_X86_RDMSR => {
            // SAFETY: KVM_EXIT_X86_RDMSR: the kernel wrote `msr` (see above).
            let m = unsafe { &mut run.__bindgen_anon_1.msr };
            VcpuExit::X86Rdmsr(ReadMsrExit {
                error: &mut m.error,
                reason: MsrExitReason::from_bits_truncate(m.reason),
                index: m.index,
                data: &mut m.data,
            })
        }
        KVM_EXIT_X86_WRMSR => {
            // SAFETY: KVM_EXIT_X86_WRMSR: the kernel wrote `msr` (see above).
            let m = unsafe { &mut run.__bindgen_anon_1.msr };
            VcpuExit::X86Wrmsr(WriteMsrExit {
                error: &mut m.error,
                reason: MsrExitReason::from_bits_truncate(m.reason),
                index: m.index,
                data: m.data,
            })
        }
        KVM_EXIT_INTR => VcpuExit::Intr,
        KVM_EXIT_IOAPIC_EOI => {
            // SAFETY: KVM_EXIT_IOAPIC_EOI: the kernel wrote `eoi` (see above).
            VcpuExit::IoapicEoi(unsafe { run.__bindgen_anon_1.eoi.vector })
        }
        KVM_EXIT_SHUTDOWN => VcpuExit::Shutdown,
        KVM_EXIT_FAIL_ENTRY => {
            // SAFETY: KVM_EXIT_FAIL_ENTRY: the kernel wrote `fail_entry` (see above).
            let f = unsafe { run.__bindgen_anon_1.fail_entry };
            VcpuExit::FailEntry(f.hardware_entry_failure_reason, f.cpu)
        }
        KVM_EXIT_INTERNAL_ERROR => VcpuExit::InternalError,
        KVM_EXIT_SYSTEM_EVENT => {
            // SAFETY: KVM_EXIT_SYSTEM_EVENT: the kernel wrote `system_event` (see above).
            let e = unsafe { &run.__bindgen_anon_1.system_event };
            // SAFETY: `data` is the event's payload member (u64 words, any value valid);
            // only the `ndata` words the kernel filled are handed on.
            let all = unsafe { &e.__bindgen_anon_1.data };
            let data = all.get(..e.ndata as usize).unwrap_or(all);
            VcpuExit::SystemEvent(e.type_, data)
        }
        KVM_EXIT_UNKNOWN => VcpuExit::Unknown,
        KVM_EXIT_EXCEPTION => VcpuExit::Exception,
        KVM_EXIT_IRQ_WINDOW_OPEN => VcpuExit::IrqWindowOpen,
        KVM_EXIT_SET_TPR => VcpuExit::SetTpr,
        KVM_EXIT_TPR_ACCESS => VcpuExit::TprAccess,
        KVM_EXIT_NMI => VcpuExit::Nmi,
        KVM_EXIT_HYPERV => VcpuExit::Hyperv,
        other => VcpuExit::Unsupported(other),
    })
}

thread_local! {
    static IMMEDIATE_EXIT: std::cell::Cell<*mut u8> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Records where this thread's kvm_run `immediate_exit` byte is, for the kick signal.
pub fn set_immediate_exit_target(run: &mut kvm_bindings::kvm_run) {
    let p = &mut run.immediate_exit as *mut u8;
    IMMEDIATE_EXIT.with(|c| c.set(p));
}

/// Forgets this thread's kvm_run (before the vCPU is dropped).
pub fn clear_immediate_exit_target() {
    IMMEDIATE_EXIT.with(|c| c.set(std::ptr::null_mut()));
}

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe work: a const-initialized thread-local read and a volatile
    // byte store, then a fence so the store is visible before KVM_RUN checks it.
    let p = IMMEDIATE_EXIT.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: `p` points into the kvm_run mapping of the vCPU owned by this thread; it
        // is set while the vCPU is alive and cleared before it is dropped.
        unsafe { p.write_volatile(1) };
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// The signal used to kick vCPU threads out of KVM_RUN.
pub fn kick_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN()
}

/// Installs the kick handler (idempotent).
pub fn install_kick_handler() -> std::io::Result<()> {
    static ONCE: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let r = ONCE.get_or_init(|| {
        vmm_sys_util::signal::register_signal_handler(kick_signal(), kick_handler)
            .map_err(|e| e.errno())
    });
    r.map_err(std::io::Error::from_raw_os_error)
}

/// Memory of this process outside the mappings of guest RAM, in bytes, from
/// /proc/self/smaps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmmMemory {
    /// Resident pages (`Rss`): the private part plus the file pages mapped from the page
    /// cache (exitlab's binary and the C libraries). The kernel maps a file's cached pages
    /// a whole folio (here up to 128 KiB) at a time around each fault, so this part moves
    /// with how the files were read into the page cache, not only with what is used.
    pub resident: u64,
    /// The part that is this process's own: anonymous pages (`Anonymous`: heap, stacks,
    /// the binary's and libraries' pages copied on write by relocation). Not
    /// `Private_Dirty`, which also counts the binary's page-cache pages while they are
    /// dirty (for ~30 s after it was built or copied: 2.7 MiB more here).
    pub private: u64,
}

impl VmmMemory {
    /// The larger of each figure of `a` and `b` (the most over several samples).
    pub fn largest(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Self {
                resident: a.resident.max(b.resident),
                private: a.private.max(b.private),
            }),
            (a, b) => a.or(b),
        }
    }
}

/// Memory of this process outside the mappings of `mem` (guest RAM), from
/// /proc/self/smaps.
pub fn memory_outside_guest(mem: &GuestMemoryMmap) -> Option<VmmMemory> {
    use vm_memory::GuestMemoryRegion;
    let guest: Vec<(u64, u64)> = mem
        .iter()
        .filter_map(|r| {
            let host = mem.get_host_address(r.start_addr()).ok()? as u64;
            Some((host, host + r.len()))
        })
        .collect();
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let kib = |rest: &str| {
        rest.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
    };
    let (mut resident_kib, mut private_kib) = (0u64, 0u64);
    let mut in_guest = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                in_guest = guest.iter().any(|&(s, e)| a < e && s < b);
                continue;
            }
        }
        if in_guest {
            continue;
        }
        if let Some(rest) = line.strip_prefix("Rss:") {
            resident_kib += kib(rest);
        } else if let Some(rest) = line.strip_prefix("Anonymous:") {
            private_kib += kib(rest);
        }
    }
    Some(VmmMemory {
        resident: resident_kib * 1024,
        private: private_kib * 1024,
    })
}

/// Peak resident memory of this process (VmHWM), in bytes.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line["VmHWM:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The calling thread, for [`kick_thread`].
pub fn current_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() }
}

/// Sends the kick signal to `thread`, which must be alive: callers keep a thread in
/// their kick lists only while it runs (it removes itself, under the same lock, before
/// it ends).
pub fn kick_thread(thread: libc::pthread_t) {
    if install_kick_handler().is_err() {
        return;
    }
    // SAFETY: `thread` is a live thread of this process (see above); the kick handler is
    // installed, so the signal cannot terminate the process.
    unsafe {
        libc::pthread_kill(thread, kick_signal());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn rdtscp_follows_cpuid_and_both_paths_count_forward() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let listed = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|f| f == "rdtscp"));
        RDTSCP.store(0, Ordering::Relaxed);
        let a = rdtscp();
        assert_eq!(RDTSCP.load(Ordering::Relaxed), if listed { 2 } else { 1 });
        // The fallback (lfence; rdtsc) works on every CPU; force it for two reads.
        RDTSCP.store(1, Ordering::Relaxed);
        let b = rdtscp();
        let c = rdtscp();
        RDTSCP.store(0, Ordering::Relaxed);
        let d = rdtscp();
        assert!(0 < a && a <= b && b <= c && c <= d, "{a} {b} {c} {d}");
    }

    #[test]
    fn memory_outside_guest_counts_the_heap_as_private_and_leaves_guest_ram_out() {
        use vm_memory::{Bytes, GuestAddress};
        const MIB: u64 = 1 << 20;
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), (64 * MIB) as usize)])
            .expect("guest memory");
        let before = memory_outside_guest(&mem).expect("smaps");
        assert!(before.private <= before.resident, "{before:?}");
        // Guest RAM written in full stays out of both figures.
        let page = [0x5au8; 4096];
        for a in (0..64 * MIB).step_by(4096) {
            mem.write_slice(&page, GuestAddress(a))
                .expect("guest write");
        }
        let guest = memory_outside_guest(&mem).expect("smaps");
        // Other tests of this process run alongside; 32 MiB is far above what they add.
        assert!(
            guest.private < before.private + 32 * MIB,
            "{before:?} {guest:?}"
        );
        // A buffer of the process's own, written in full, is private and resident.
        let own = vec![0x5au8; (64 * MIB) as usize];
        let after = memory_outside_guest(&mem).expect("smaps");
        assert!(
            after.private >= guest.private + 32 * MIB,
            "{guest:?} {after:?}"
        );
        assert!(
            after.resident >= guest.resident + 32 * MIB,
            "{guest:?} {after:?}"
        );
        assert!(after.private <= after.resident, "{after:?}");
        drop(std::hint::black_box(own));
    }

    fn run_with_reason(reason: u32) -> kvm_bindings::kvm_run {
        kvm_bindings::kvm_run {
            exit_reason: reason,
            ..Default::default()
        }
    }

    #[test]
    fn decode_gives_mmio_accesses_with_their_length_and_direction() {
        let mut run = run_with_reason(kvm_bindings::KVM_EXIT_MMIO);
        run.__bindgen_anon_1.mmio = kvm_bindings::kvm_run__bindgen_ty_1__bindgen_ty_6 {
            phys_addr: 0xfed0_0000,
            data: [1, 2, 3, 4, 5, 6, 7, 8],
            len: 4,
            is_write: 1,
        };
        match decode(&mut run, 0) {
            Ok(VcpuExit::MmioWrite(0xfed0_0000, d)) => assert_eq!(d, &[1, 2, 3, 4]),
            other => panic!("{other:?}"),
        }
        run.__bindgen_anon_1.mmio.is_write = 0;
        run.__bindgen_anon_1.mmio.len = 2;
        match decode(&mut run, 0) {
            Ok(VcpuExit::MmioRead(0xfed0_0000, d)) => d.copy_from_slice(&[9, 9]),
            other => panic!("{other:?}"),
        }
        // SAFETY: the test wrote `mmio` above; plain old data.
        let data = unsafe { run.__bindgen_anon_1.mmio.data };
        assert_eq!(data, [9, 9, 3, 4, 5, 6, 7, 8]);
        // A length past the 8-byte buffer is cut to it, not a panic.
        run.__bindgen_anon_1.mmio.len = 4096;
        match decode(&mut run, 0) {
            Ok(VcpuExit::MmioRead(_, d)) => assert_eq!(d.len(), 8),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decode_gives_msr_eoi_entry_failure_and_system_events_with_their_data() {
        let mut run = run_with_reason(kvm_bindings::KVM_EXIT_X86_RDMSR);
        run.__bindgen_anon_1.msr.index = 0x1b;
        match decode(&mut run, 0) {
            Ok(VcpuExit::X86Rdmsr(m)) => {
                assert_eq!(m.index, 0x1b);
                *m.data = 0xfee0_0900;
                *m.error = 1;
            }
            other => panic!("{other:?}"),
        }
        // SAFETY: the test wrote `msr` above.
        let m = unsafe { run.__bindgen_anon_1.msr };
        assert_eq!((m.data, m.error), (0xfee0_0900, 1));

        run.exit_reason = kvm_bindings::KVM_EXIT_X86_WRMSR;
        run.__bindgen_anon_1.msr.data = 7;
        match decode(&mut run, 0) {
            Ok(VcpuExit::X86Wrmsr(m)) => assert_eq!((m.index, m.data), (0x1b, 7)),
            other => panic!("{other:?}"),
        }

        let mut run = run_with_reason(kvm_bindings::KVM_EXIT_IOAPIC_EOI);
        run.__bindgen_anon_1.eoi.vector = 0x31;
        assert!(matches!(decode(&mut run, 0), Ok(VcpuExit::IoapicEoi(0x31))));

        let mut run = run_with_reason(kvm_bindings::KVM_EXIT_FAIL_ENTRY);
        run.__bindgen_anon_1
            .fail_entry
            .hardware_entry_failure_reason = 0x21;
        run.__bindgen_anon_1.fail_entry.cpu = 1;
        assert!(matches!(
            decode(&mut run, 0),
            Ok(VcpuExit::FailEntry(0x21, 1))
        ));

        let mut run = run_with_reason(kvm_bindings::KVM_EXIT_SYSTEM_EVENT);
        run.__bindgen_anon_1.system_event.type_ = kvm_bindings::KVM_SYSTEM_EVENT_RESET;
        run.__bindgen_anon_1.system_event.ndata = 1;
        match decode(&mut run, 0) {
            Ok(VcpuExit::SystemEvent(kvm_bindings::KVM_SYSTEM_EVENT_RESET, d)) => {
                assert_eq!(d, &[0])
            }
            other => panic!("{other:?}"),
        }
        // More data words than the event holds: all of them, not a panic.
        run.__bindgen_anon_1.system_event.ndata = 1000;
        match decode(&mut run, 0) {
            Ok(VcpuExit::SystemEvent(_, d)) => assert_eq!(d.len(), 16),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decode_names_plain_exits_and_passes_unknown_reasons_on_by_number() {
        for (reason, name) in [
            (kvm_bindings::KVM_EXIT_HLT, "Hlt"),
            (kvm_bindings::KVM_EXIT_INTR, "Intr"),
            (kvm_bindings::KVM_EXIT_SHUTDOWN, "Shutdown"),
            (kvm_bindings::KVM_EXIT_INTERNAL_ERROR, "InternalError"),
            (kvm_bindings::KVM_EXIT_EXCEPTION, "Exception"),
            (kvm_bindings::KVM_EXIT_IRQ_WINDOW_OPEN, "IrqWindowOpen"),
            (kvm_bindings::KVM_EXIT_NMI, "Nmi"),
            (kvm_bindings::KVM_EXIT_DEBUG, "Unsupported(4)"),
            (999, "Unsupported(999)"),
        ] {
            let mut run = run_with_reason(reason);
            let exit = decode(&mut run, 0).expect("an exit");
            assert_eq!(format!("{exit:?}"), name);
        }
    }
}
