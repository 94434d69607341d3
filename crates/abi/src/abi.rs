// The contract between exitlab's host side and its guest test kernel.
//
// This file is plain constants and `repr(C)` layouts with no dependencies; `c_header.rs`
// renders them as the C header (`abi.h`) the guest kernels are compiled against (the
// guest crate's build script writes it): one source of truth for both sides.
//
// Guest-physical layout (identity-mapped by the guest kernel):
//
//   0x0000_0000 .. 0x0000_1000   left alone (real-mode IVT)
//   AP_TRAMPOLINE_GPA            one page: the real-mode entry the SIPI starts each AP at
//   0x0010_0000 .. 0x0040_0000   the kernel image, its bss, stacks and static page tables
//   CONTROL_GPA                  one page: parameters in, guest status out
//   PERCPU_GPA + n * 64          one record per vCPU: its state and interrupt counters (`PerCpu`)
//   STAMPS_GPA + n * 4 KiB       one page per vCPU: the host's TSC stamps of its last userspace exit
//   SAMPLES_GPA + n * 1 MiB      one sample ring per vCPU
//   MMIO_USER_GPA                a page with no memory slot, answered by the VMM in userspace
//   MMIO_IOEVENTFD_GPA           a page with no memory slot whose writes an ioeventfd absorbs

/// Version of this contract; the guest refuses to run against another one.
pub const ABI_VERSION: u64 = 6;
/// Value the host stores in `Control::magic` ("EXITLAB1" as little-endian bytes).
pub const CONTROL_MAGIC: u64 = 0x3142_414c_5449_5845;

/// Guest-physical address the kernel image is linked for and loaded at.
pub const KERNEL_GPA: u64 = 0x0010_0000;
/// End of the region the kernel image (with bss) may occupy.
pub const KERNEL_END_GPA: u64 = 0x0040_0000;
/// Guest-physical address of the control page.
pub const CONTROL_GPA: u64 = 0x0040_0000;
/// Guest-physical address of vCPU 0's stamp page; vCPU n's is `STAMPS_GPA + n * PAGE_SIZE`.
pub const STAMPS_GPA: u64 = 0x0040_1000;
/// Guest-physical address of the page of per-vCPU records (`PerCpu`, `PERCPU_BYTES` each).
pub const PERCPU_GPA: u64 = 0x0048_0000;
/// Bytes of one `PerCpu` record.
pub const PERCPU_BYTES: u64 = 64;
/// Guest-physical address of the AP trampoline (a page below 1 MiB, SIPI vector 0x08).
pub const AP_TRAMPOLINE_GPA: u64 = 0x8000;
/// The local APIC's MMIO base in xAPIC mode.
pub const LAPIC_GPA: u64 = 0xFEE0_0000;
/// Guest-physical address of vCPU 0's sample ring; vCPU n's is `SAMPLES_GPA + n * SAMPLES_BYTES_PER_CPU`.
pub const SAMPLES_GPA: u64 = 0x0050_0000;
/// Bytes reserved for each vCPU's sample ring.
pub const SAMPLES_BYTES_PER_CPU: u64 = 0x0010_0000;
/// Records one sample ring holds; the guest rings the doorbell when it is full.
pub const SAMPLES_PER_BATCH: u64 = 16384;
/// Most vCPUs the layout has room for.
pub const MAX_CPUS: u64 = 64;
/// Smallest guest RAM the lab kernel runs in (for one vCPU).
pub const MIN_RAM_BYTES: u64 = SAMPLES_GPA + SAMPLES_BYTES_PER_CPU;
/// A page.
pub const PAGE_SIZE: u64 = 0x1000;

/// MMIO page the VMM answers in userspace (reads return `MMIO_USER_READ_VALUE`).
pub const MMIO_USER_GPA: u64 = 0xC000_0000;
/// MMIO page whose 4-byte writes at offset 0 an ioeventfd absorbs in the kernel.
pub const MMIO_IOEVENTFD_GPA: u64 = 0xC000_1000;
/// What a read of `MMIO_USER_GPA` returns (low bytes, as wide as the access).
pub const MMIO_USER_READ_VALUE: u64 = 0x4558_4954_4c41_4221;

/// Port the guest writes a `DOORBELL_*` command to (32-bit `out`).
pub const DOORBELL_PORT: u16 = 0x0700;
/// Port the exit-path probe writes (8-bit `out`): an ioeventfd absorbs the writes in the
/// kernel, whatever the VM's irqchip, so that they never reach the VMM.
pub const PROBE_PORT: u16 = 0x0710;
/// Port answered by the VMM in userspace: no device claims it, reads return all ones.
pub const USER_PORT: u16 = 0x1234;
/// Port the in-kernel PIC answers (ELCR), as kvm-unit-tests' `inl_from_kernel` uses.
pub const KERNEL_PORT: u16 = 0x04d0;
/// MSR that the VMM routes to userspace with an MSR filter.
pub const USER_MSR: u32 = 0x4558_4954;
/// What a read of `USER_MSR` returns.
pub const USER_MSR_READ_VALUE: u64 = 0x1234_5678_9abc_def0;
/// IA32_TSC_ADJUST.
pub const MSR_TSC_ADJUST: u32 = 0x3b;

/// Doorbell: the kernel booted and is about to run the test (warm-up not started yet).
pub const DOORBELL_READY: u32 = 1;
/// Doorbell: `Control::batch_count` records of this vCPU's ring are ready; the ring is reused after.
pub const DOORBELL_BATCH: u32 = 2;
/// Doorbell: the test is finished; the last `Control::batch_count` records are ready.
/// The host that resumes the vCPU after it gets the exit-path probes after the samples
/// (`Control::probe_kernel_after`, `Control::probe_user_after`, then `DOORBELL_PROBED`);
/// one that stops the VM there loses only those probes.
pub const DOORBELL_DONE: u32 = 3;
/// Doorbell: after DONE, the exit-path probes after the samples are in `Control`.
pub const DOORBELL_PROBED: u32 = 6;
/// Doorbell: one access of the userspace exit-path probe; the host resumes the vCPU at
/// once (before READY and after DONE only).
pub const DOORBELL_PROBE: u32 = 7;
/// The exit-path probes the guest times before READY and after DONE, outside the part
/// whose exits are counted: blocks of port writes to `PROBE_PORT`, which an ioeventfd
/// absorbs in the kernel, then blocks of `DOORBELL_PROBE` doorbells, which the VMM
/// answers in userspace (as doorbells, they get no injected wait). A host state that slows the exit path shows in them though the
/// guest's empty loop runs as fast as ever; each probe reports its median block.
pub const PROBE_BLOCKS: u64 = 9;
/// Port accesses per block of an exit-path probe.
pub const PROBE_ACCESSES: u64 = 8;
/// Exits one exit-path probe makes (each of the four).
pub const PROBE_EXITS: u64 = PROBE_BLOCKS * PROBE_ACCESSES;
/// Doorbell: an unexpected exception; `Control::fault_*` say which.
pub const DOORBELL_FAULT: u32 = 4;
/// Doorbell: the guest refuses the parameters; `Control::guest_error` says why (a `GUEST_ERR_*`).
pub const DOORBELL_BAD_PARAMS: u32 = 5;

/// `Control::guest_error`: magic or ABI version wrong.
pub const GUEST_ERR_ABI: u64 = 1;
/// `Control::guest_error`: unknown test id.
pub const GUEST_ERR_TEST: u64 = 2;
/// `Control::guest_error`: the test cannot run in the requested ring.
pub const GUEST_ERR_RING: u64 = 3;
/// `Control::guest_error`: samples, batch, warm-up or work cycles out of range.
pub const GUEST_ERR_COUNTS: u64 = 4;
/// Most `Control::work_cycles` the guest accepts.
pub const MAX_WORK_CYCLES: u64 = 100_000_000;

/// `Control::guest_error`: APIC mode, vCPU count or idle mode invalid, or the guest CPUID
/// lacks what the test or the mode needs (x2APIC, TSC deadline, MWAIT, PV send-IPI).
pub const GUEST_ERR_FEATURE: u64 = 5;
/// `Control::guest_error`: an AP did not come up after INIT-SIPI-SIPI; `Control::cpus_online`
/// says which did.
pub const GUEST_ERR_AP_TIMEOUT: u64 = 6;

/// `Control::apic_mode`: the local APIC through its MMIO page (xAPIC).
pub const APIC_XAPIC: u64 = 1;
/// `Control::apic_mode`: the local APIC through MSRs (x2APIC).
pub const APIC_X2APIC: u64 = 2;

/// `Control::idle`: idle vCPUs spin on memory with `pause`.
pub const IDLE_POLL: u64 = 0;
/// `Control::idle`: idle vCPUs `sti; hlt`.
pub const IDLE_HLT: u64 = 1;
/// `Control::idle`: idle vCPUs `monitor`/`mwait` on their doorbell word.
pub const IDLE_MWAIT: u64 = 2;

/// Interrupt vector of IPIs to other vCPUs (handler: stamp entry, acknowledge, EOI).
pub const VECTOR_IPI: u64 = 0x40;
/// Interrupt vector of self-IPIs and timer interrupts (handler: count, EOI).
pub const VECTOR_SELF: u64 = 0x41;
/// Interrupt vector of the broadcast-lock IPI (handler takes a shared lock).
pub const VECTOR_LOCK: u64 = 0x42;
/// Interrupt vector of the LAPIC timer.
pub const VECTOR_TIMER: u64 = 0x43;
/// Spurious-interrupt vector.
pub const VECTOR_SPURIOUS: u64 = 0xFF;
/// TSC cycles from arming to the deadline in `tscdeadline`.
pub const TSC_DEADLINE_DELTA: u64 = 10_000;
/// KVM_HC_SEND_IPI.
pub const KVM_HC_SEND_IPI: u64 = 10;

/// Test ids (`Control::test`). Names follow kvm-unit-tests `vmexit` where the test is the same.
pub const TEST_LOOP_OVERHEAD: u64 = 0;
pub const TEST_CPUID: u64 = 1;
pub const TEST_CPUID_0XD: u64 = 2;
pub const TEST_VMCALL: u64 = 3;
pub const TEST_HLT: u64 = 4;
pub const TEST_INL_FROM_KERNEL: u64 = 5;
pub const TEST_OUTL_TO_KERNEL: u64 = 6;
pub const TEST_INL_FROM_USER: u64 = 7;
pub const TEST_OUTL_TO_USER: u64 = 8;
pub const TEST_MMIO_READ_USER: u64 = 9;
pub const TEST_MMIO_WRITE_USER: u64 = 10;
pub const TEST_MMIO_WRITE_IOEVENTFD: u64 = 11;
pub const TEST_RD_TSC_ADJUST_MSR: u64 = 12;
pub const TEST_WR_TSC_ADJUST_MSR: u64 = 13;
pub const TEST_RDMSR_USER: u64 = 14;
pub const TEST_WRMSR_USER: u64 = 15;
pub const TEST_MOV_FROM_CR8: u64 = 16;
pub const TEST_MOV_TO_CR8: u64 = 17;
pub const TEST_IPI: u64 = 20;
pub const TEST_IPI_HALT: u64 = 21;
pub const TEST_IPI_ONE_WAY: u64 = 22;
pub const TEST_SELF_IPI_STI_NOP: u64 = 23;
pub const TEST_SELF_IPI_STI_HLT: u64 = 24;
pub const TEST_SELF_IPI_TPR: u64 = 25;
pub const TEST_SELF_IPI_TPR_STI_NOP: u64 = 26;
pub const TEST_SELF_IPI_TPR_STI_HLT: u64 = 27;
pub const TEST_EOI: u64 = 28;
pub const TEST_TSCDEADLINE_IMMED: u64 = 29;
pub const TEST_TSCDEADLINE: u64 = 30;
pub const TEST_LAPIC_TIMER_ONESHOT: u64 = 31;
pub const TEST_BROADCAST_IPI: u64 = 32;
pub const TEST_BROADCAST_LOCK: u64 = 33;
pub const TEST_PV_SEND_IPI: u64 = 34;
pub const TEST_HLT_WAKE: u64 = 35;
/// SMP bring-up only: every AP is started and reports online, then DONE with no samples
/// beyond one per sample asked (each the bring-up time of the whole set).
pub const TEST_SMP_BRINGUP: u64 = 36;
/// Self-test: writes garbage into the control page and rings the doorbell with it.
pub const TEST_SELFTEST_GARBAGE: u64 = 100;
/// Self-test: triple-faults (loads an empty IDT and raises an exception).
pub const TEST_SELFTEST_TRIPLE_FAULT: u64 = 101;
/// Self-test: spins forever without exiting.
pub const TEST_SELFTEST_SPIN: u64 = 102;
/// Self-test: executes `ud2`, which the kernel's IDT reports with `DOORBELL_FAULT`.
pub const TEST_SELFTEST_UD: u64 = 103;

/// The control page at `CONTROL_GPA`. The host fills the first block before the vCPU
/// starts; the guest fills the second before each doorbell; the guest work's fields
/// (host's `work_cycles`, the guest's report) come last.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    /// `CONTROL_MAGIC`.
    pub magic: u64,
    /// `ABI_VERSION`.
    pub abi_version: u64,
    /// A `TEST_*` id.
    pub test: u64,
    /// 0 or 3: the privilege level the measured loop runs at.
    pub ring: u64,
    /// Samples to take (each a `Sample` record), at least 1.
    pub samples: u64,
    /// Iterations of the measured instruction per sample, at least 1.
    pub batch: u64,
    /// Iterations to run before the first sample.
    pub warmup: u64,
    /// Test argument: for `cpuid_0xd`, the highest sub-leaf to cycle through (sub-leaves 1..=arg0).
    pub arg0: u64,
    /// Spare test argument.
    pub arg1: u64,
    /// Guest → host: records ready in the ring at `DOORBELL_BATCH` / `DOORBELL_DONE`.
    pub batch_count: u64,
    /// Guest → host: `GUEST_ERR_*` at `DOORBELL_BAD_PARAMS`.
    pub guest_error: u64,
    /// Guest → host at `DOORBELL_FAULT`: exception vector.
    pub fault_vector: u64,
    /// Guest → host at `DOORBELL_FAULT`: RIP of the faulting instruction.
    pub fault_rip: u64,
    /// Guest → host at `DOORBELL_FAULT`: error code (0 when the vector has none).
    pub fault_error: u64,
    /// Guest → host at `DOORBELL_FAULT`: CR2.
    pub fault_cr2: u64,
    /// Guest → host: the guest's TSC when it rang `DOORBELL_READY`.
    pub ready_tsc: u64,
    /// `APIC_XAPIC` or `APIC_X2APIC`: how every vCPU drives its local APIC.
    pub apic_mode: u64,
    /// vCPUs to bring up (1..=MAX_CPUS; APIC ids 0..cpus).
    pub cpus: u64,
    /// An `IDLE_*`: what the vCPUs that wait for interrupts do.
    pub idle: u64,
    /// Guest → host: bit n set once the vCPU with APIC id n runs the kernel's C code.
    pub cpus_online: u64,
    /// Known-answer control: guest TSC cycles of busy-waiting added to every iteration of
    /// the measured loop (after the measured instruction; never to the paired empty loop),
    /// at most `MAX_WORK_CYCLES`; 0: off.
    pub work_cycles: u64,
    /// Guest → host at `DOORBELL_DONE`: iterations, warm-up included, that did the
    /// `work_cycles` wait.
    pub work_iterations: u64,
    /// Guest → host at `DOORBELL_DONE`: TSC cycles those waits spanned in all, each from
    /// its first TSC read to its last.
    pub work_spent: u64,
    /// 1: take the exit-path probes (`PROBE_BLOCKS`); the host asks for them only when it
    /// registered the ioeventfd on `PROBE_PORT`, so that the kernel probe's writes never
    /// leave the kernel. 0: the guest reports 0 for all four and still rings
    /// `DOORBELL_PROBED` after DONE.
    pub probe: u64,
    /// Guest → host at `DOORBELL_READY`: TSC cycles of the median block of the kernel
    /// exit-path probe before the test (`PROBE_BLOCKS` blocks of `PROBE_ACCESSES` writes
    /// to `PROBE_PORT`, each block timed as one); 0: not taken.
    pub probe_kernel_before: u64,
    /// Guest → host at `DOORBELL_READY`: the same of the userspace probe (`DOORBELL_PROBE`
    /// doorbells), taken just after the kernel one.
    pub probe_user_before: u64,
    /// Guest → host at `DOORBELL_PROBED`: the kernel probe after the samples.
    pub probe_kernel_after: u64,
    /// Guest → host at `DOORBELL_PROBED`: the userspace probe after the samples.
    pub probe_user_after: u64,
}

/// One vCPU's record at `PERCPU_GPA + id * PERCPU_BYTES`, written by that vCPU (and read
/// by the others and the host).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerCpu {
    /// 1 once the vCPU is up.
    pub online: u64,
    /// Its APIC id, as it read it from its local APIC.
    pub apic_id: u64,
    /// Interrupts its handlers took (all vectors but spurious).
    pub irqs: u64,
    /// Guest TSC at the entry of its last IPI handler.
    pub last_entry_tsc: u64,
    /// Acknowledgements of IPIs (incremented by the IPI handlers).
    pub acks: u64,
    /// Guest TSC of its first instruction after its last HLT.
    pub wake_tsc: u64,
    /// Times it woke from HLT or MWAIT.
    pub wakes: u64,
    /// Self-IPIs it sent (the self-IPI tests count each ICR write before making it), so
    /// that a vCPU found halted can be told to have taken every one it sent (`acks`).
    pub self_ipis: u64,
}

/// The per-vCPU stamp page. The host writes it on every userspace exit before it
/// re-enters the guest: `t_return`, then `t_reenter`, then `seq += 1`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    /// Count of userspace exits of this vCPU so far.
    pub seq: u64,
    /// Host TSC right after KVM_RUN returned for the last userspace exit.
    pub t_return: u64,
    /// Host TSC right before KVM_RUN re-entered after that exit.
    pub t_reenter: u64,
}

/// One sample record in a vCPU's ring. All times are raw TSC values: guest ones in the
/// guest's TSC, host ones in the host's; the host converts with the vCPU's TSC offset.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Guest TSC before the sample's first iteration (lfence; rdtsc; lfence).
    pub g_start: u64,
    /// Guest TSC after the sample's last iteration (rdtscp; lfence).
    pub g_end: u64,
    /// `Stamps::t_reenter` read just before `g_start`: the host re-entry that preceded the sample.
    pub h_prev_reenter: u64,
    /// `Stamps::t_return` read just after `g_end`.
    pub h_return: u64,
    /// `Stamps::t_reenter` read just after `g_end`.
    pub h_reenter: u64,
    /// `Stamps::seq` after the sample minus before it: userspace exits during the sample.
    pub seq_delta: u64,
    /// Cycles of `batch` iterations of the empty loop, measured the same way just before
    /// the sample: a paired loop overhead, immune to the host drifting between tests.
    pub g_loop: u64,
}

/// Size in bytes of one `Sample` record.
pub const SAMPLE_BYTES: u64 = 56;
