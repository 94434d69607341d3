/*
 * exitlab guest kernel: parameter checks, the measured loops and the self-tests.
 *
 * The host fills the control page, the kernel checks it, rings DOORBELL_READY, then runs
 * one test in ring 0 or ring 3. Each test has its own loop with the measured instruction
 * inlined; samples go to this vCPU's ring, which is handed to the host with
 * DOORBELL_BATCH whenever it is full and with DOORBELL_DONE at the end.
 */
#include "abi.h"
#include "kernel.h"
#include "lab.h"
#include "apic.h"

#define STAMPS  ((volatile struct stamps *)STAMPS_GPA)
#define SAMPLES ((volatile struct sample *)SAMPLES_GPA)

_Static_assert(SAMPLES_PER_BATCH * SIZEOF_SAMPLE <= SAMPLES_BYTES_PER_CPU,
               "a full sample ring must fit in the space reserved for it");
_Static_assert(CONTROL_GPA >= KERNEL_END_GPA, "the control page must follow the kernel");
_Static_assert(MAX_WORK_CYCLES < (1ULL << 32), "the guest work counts TSC cycles in 32 bits");

/* Largest samples, batch and warm-up counts the kernel accepts. */
#define MAX_COUNT (1ULL << 32)
/* Hypercall number no hypervisor implements. */
#define UNKNOWN_HYPERCALL 0xffff0000ULL
/* Unknown doorbell command of the garbage self-test. */
#define DOORBELL_UNKNOWN 0xDEADU
/* What the garbage self-test writes into the guest fields of the control page. */
#define GARBAGE 0xDEADBEEFDEADBEEFULL
/* batch_count of the garbage self-test's first doorbell. */
#define GARBAGE_BATCH_COUNT 0xFFFFFFFFFFFFULL

#define RING0 (1U << 0)
#define RING3 (1U << 3)

/* The checked parameters; read by the test loops in ring 0 or ring 3. */
static struct {
    uint64_t test;
    uint64_t ring;
    uint64_t samples;
    uint64_t batch;
    uint64_t warmup;
    uint64_t arg0;
    uint64_t apic_mode;
    uint64_t cpus;
    uint64_t idle;
    uint64_t work_cycles;
} params;

/* Whether the CPU wants `vmmcall` (AMD, Hygon) rather than `vmcall`. */
static int use_vmmcall;

/* Stores one sample at `idx`; hands the ring over when it is full. Returns the next index. */
static uint64_t store_sample(uint64_t idx, uint64_t g_start, uint64_t g_end,
                             uint64_t prev_reenter, uint64_t h_return, uint64_t h_reenter,
                             uint64_t seq_delta, uint64_t g_loop)
{
    volatile struct sample *s = &SAMPLES[idx];
    s->g_start = g_start;
    s->g_end = g_end;
    s->h_prev_reenter = prev_reenter;
    s->h_return = h_return;
    s->h_reenter = h_reenter;
    s->seq_delta = seq_delta;
    s->g_loop = g_loop;
    idx++;
    if (idx == SAMPLES_PER_BATCH) {
        CONTROL->batch_count = idx;
        doorbell(DOORBELL_BATCH);
        idx = 0;
    }
    return idx;
}

static void __attribute__((noreturn)) finish(uint64_t idx)
{
    CONTROL->batch_count = idx;
    doorbell(DOORBELL_DONE);
    /*
     * A jump, not a call: as a leaf, finish leaves the tests that inline it with the
     * prologues and code they had before the probes existed (a call makes every test
     * align its stack, which moves its loops).
     */
    __asm__ volatile("jmp after_done" : : : "memory");
    __builtin_unreachable();
}

#define REPEAT(count, ...)                                                     \
    for (uint64_t rep_ = (count); rep_ != 0; rep_--) {                         \
        __VA_ARGS__;                                                           \
    }

/*
 * The known-answer control's guest work: busy-waits until `work_cycles` TSC cycles have
 * passed since its first TSC read, adds the span it saw (from that read to its last) to
 * `spent` and counts itself in `count`. Its cost is `work_cycles` plus a bounded
 * overshoot (the loop's last pass and the instructions around it), which the empty
 * loop's own run with the same work calibrates (loop_overhead). It is one fixed block of
 * instructions that saves and restores the registers it uses and reads its operands
 * from static memory: the compiler has nothing to reload or spill around it, so the test's own
 * body is the same with the work as without, and the work costs the same in every test
 * as in the calibration (an emulated ring 0 pays for every added instruction, ~1,000
 * cycles each on a kvm_pvm host). The low 32 bits of the TSC suffice: the wait is at
 * most MAX_WORK_CYCLES < 2^32.
 */
#define GUEST_WORK(spent, count)                                               \
    __asm__ volatile("push %%rax\n\t"                                          \
                     "push %%rdx\n\t"                                          \
                     "push %%rcx\n\t"                                          \
                     "rdtsc\n\t"                                               \
                     "mov %%eax, %%ecx\n"                                      \
                     "1:\n\t"                                                  \
                     "rdtsc\n\t"                                               \
                     "sub %%ecx, %%eax\n\t"                                    \
                     "cmp %[n], %%eax\n\t"                                     \
                     "jb 1b\n\t"                                               \
                     "add %%rax, %[s]\n\t"                                     \
                     "incq %[c]\n\t"                                           \
                     "pop %%rcx\n\t"                                           \
                     "pop %%rdx\n\t"                                           \
                     "pop %%rax"                                               \
                     : [s] "+m"(spent), [c] "+m"(count)                        \
                     : [n] "m"(work_cycles32)                                  \
                     : "cc")

/* One iteration of a test's body, followed by the guest work in the variant with it. */
#define BODY_AND_WORK(with_work, ...)                                          \
    do {                                                                       \
        __VA_ARGS__;                                                           \
        if (with_work)                                                         \
            GUEST_WORK(work_spent, work_iterations);                           \
    } while (0)

/*
 * GUEST_WORK's operands, in static memory: addressed without the stack pointer, which
 * the block moves. `work_cycles32` is params.work_cycles (checked to fit); the other two
 * are what the work reports at DONE.
 */
static uint32_t work_cycles32;
static uint64_t work_spent, work_iterations;

/*
 * One test: `state` declares what the body keeps between iterations, the rest is one
 * iteration. Warm-up first, then `samples` samples of `batch` iterations each. With
 * `work_cycles` set, every iteration of the body (warm-up and measured, never the
 * paired empty loop) is followed by the guest work; the test is compiled twice, with the
 * work and without it, so that with the knob off the loops are exactly what they were.
 */
#define DEFINE_TEST(name, state, ...)                                          \
    static inline __attribute__((always_inline, noreturn)) void                \
    run_##name(const int with_work)                                            \
    {                                                                          \
        const uint64_t samples = params.samples;                               \
        const uint64_t batch = params.batch;                                   \
        state;                                                                 \
        REPEAT(params.warmup, BODY_AND_WORK(with_work, __VA_ARGS__));          \
        uint64_t idx = 0;                                                      \
        for (uint64_t s_ = samples; s_ != 0; s_--) {                           \
            const uint64_t l_start = tsc_begin();                              \
            REPEAT(batch, __asm__ volatile("" : : : "memory"));                \
            const uint64_t g_loop = tsc_end() - l_start;                       \
            const uint64_t seq_before = STAMPS->seq;                           \
            const uint64_t prev_reenter = STAMPS->t_reenter;                   \
            const uint64_t g_start = tsc_begin();                              \
            REPEAT(batch, BODY_AND_WORK(with_work, __VA_ARGS__));              \
            const uint64_t g_end = tsc_end();                                  \
            const uint64_t seq_after = STAMPS->seq;                            \
            const uint64_t h_return = STAMPS->t_return;                        \
            const uint64_t h_reenter = STAMPS->t_reenter;                      \
            idx = store_sample(idx, g_start, g_end, prev_reenter, h_return,    \
                               h_reenter, seq_after - seq_before, g_loop);     \
        }                                                                      \
        CONTROL->work_iterations = work_iterations;                            \
        CONTROL->work_spent = work_spent;                                      \
        finish(idx);                                                           \
    }                                                                          \
    static void __attribute__((noreturn, noinline)) test_##name(void)          \
    {                                                                          \
        if (params.work_cycles != 0)                                           \
            run_##name(1);                                                     \
        run_##name(0);                                                         \
    }

#define NO_STATE do { } while (0)

DEFINE_TEST(loop_overhead, NO_STATE, __asm__ volatile("" : : : "memory"))

DEFINE_TEST(cpuid, NO_STATE, {
    uint32_t leaf = 0, subleaf = 0;
    __asm__ volatile("cpuid" : "+a"(leaf), "+c"(subleaf) : : "rbx", "rdx");
})

DEFINE_TEST(cpuid_0xd, uint32_t subleaf = 1; const uint32_t last = (uint32_t)params.arg0, {
    uint32_t leaf = 0xd, ecx = subleaf;
    __asm__ volatile("cpuid" : "+a"(leaf), "+c"(ecx) : : "rbx", "rdx");
    subleaf = subleaf == last ? 1 : subleaf + 1;
})

DEFINE_TEST(vmcall, NO_STATE, {
    uint64_t nr = UNKNOWN_HYPERCALL;
    __asm__ volatile("vmcall" : "+a"(nr) : : "memory");
})

DEFINE_TEST(vmmcall, NO_STATE, {
    uint64_t nr = UNKNOWN_HYPERCALL;
    __asm__ volatile("vmmcall" : "+a"(nr) : : "memory");
})

DEFINE_TEST(hlt, NO_STATE, __asm__ volatile("hlt" : : : "memory"))

DEFINE_TEST(inl_from_kernel, NO_STATE,
            __asm__ volatile("inb %%dx, %%al" : : "d"((uint16_t)KERNEL_PORT) : "rax"))

DEFINE_TEST(outl_to_kernel, NO_STATE,
            __asm__ volatile("outb %%al, %%dx" : : "a"(0), "d"((uint16_t)KERNEL_PORT)))

DEFINE_TEST(inl_from_user, NO_STATE,
            __asm__ volatile("inl %%dx, %%eax" : : "d"((uint16_t)USER_PORT) : "rax"))

DEFINE_TEST(outl_to_user, NO_STATE,
            __asm__ volatile("outl %%eax, %%dx" : : "a"(0), "d"((uint16_t)USER_PORT)))

DEFINE_TEST(mmio_read_user, NO_STATE,
            __asm__ volatile("movl (%0), %%eax" : : "r"(MMIO_USER_GPA) : "rax", "memory"))

DEFINE_TEST(mmio_write_user, NO_STATE,
            __asm__ volatile("movl %0, (%1)" : : "r"(0), "r"(MMIO_USER_GPA) : "memory"))

DEFINE_TEST(mmio_write_ioeventfd, NO_STATE,
            __asm__ volatile("movl %0, (%1)" : : "r"(0), "r"(MMIO_IOEVENTFD_GPA) : "memory"))

DEFINE_TEST(rd_tsc_adjust_msr, NO_STATE,
            __asm__ volatile("rdmsr" : : "c"(MSR_TSC_ADJUST) : "rax", "rdx"))

DEFINE_TEST(wr_tsc_adjust_msr, NO_STATE,
            __asm__ volatile("wrmsr" : : "c"(MSR_TSC_ADJUST), "a"(0), "d"(0)))

DEFINE_TEST(rdmsr_user, NO_STATE,
            __asm__ volatile("rdmsr" : : "c"(USER_MSR) : "rax", "rdx"))

DEFINE_TEST(wrmsr_user, NO_STATE,
            __asm__ volatile("wrmsr" : : "c"(USER_MSR), "a"(0), "d"(0)))

DEFINE_TEST(mov_from_cr8, NO_STATE, __asm__ volatile("mov %%cr8, %%rax" : : : "rax"))

DEFINE_TEST(mov_to_cr8, NO_STATE, __asm__ volatile("mov %0, %%cr8" : : "r"(0ULL)))

/*
 * Interrupt tests. vCPU 0 measures; vCPU 1 (and the other APs) wait in their idle loop
 * and acknowledge in their handlers (struct percpu). Ring 0 only, IF=0 unless a test
 * says otherwise.
 */
#define IPI_TARGET PERCPU(1)

/* Round trip: fixed IPI to APIC id 1, wait for its handler's acknowledgement. */
DEFINE_TEST(ipi, volatile struct percpu *t = IPI_TARGET, {
    const uint64_t a = t->acks;
    apic_icr(1, ICR_FIXED | VECTOR_IPI);
    while (t->acks == a)
        cpu_pause();
})

/* The same through KVM_HC_SEND_IPI (bitmap of APIC ids from 0, fixed delivery), with
   the vendor's hypercall instruction. */
#define DEFINE_PV_SEND_IPI(name, insn)                                                     \
    DEFINE_TEST(name, volatile struct percpu *t = IPI_TARGET, {                            \
        const uint64_t a = t->acks;                                                        \
        uint64_t nr = KVM_HC_SEND_IPI;                                                     \
        __asm__ volatile(insn                                                              \
                         : "+a"(nr)                                                        \
                         : "b"(1ULL << 1), "c"(0ULL), "d"(0ULL),                           \
                           "S"((uint64_t)(ICR_FIXED | VECTOR_IPI))                         \
                         : "memory");                                                      \
        while (t->acks == a)                                                               \
            cpu_pause();                                                                   \
    })

DEFINE_PV_SEND_IPI(pv_send_ipi, "vmcall")
DEFINE_PV_SEND_IPI(pv_send_ipi_amd, "vmmcall")

/* Sum of the acknowledgements of every AP. */
static inline uint64_t ap_acks(uint64_t cpus)
{
    uint64_t n = 0;
    for (uint64_t i = 1; i < cpus; i++)
        n += PERCPU(i)->acks;
    return n;
}

/* All-but-self fixed IPI; wait until every AP acknowledged. */
DEFINE_TEST(broadcast_ipi, const uint64_t cpus = params.cpus, {
    const uint64_t want = ap_acks(cpus) + cpus - 1;
    apic_icr(0, ICR_ALL_BUT_SELF | ICR_FIXED | VECTOR_IPI);
    while (ap_acks(cpus) != want)
        cpu_pause();
})

/* All-but-self; each AP's handler takes one shared spinlock to count. */
DEFINE_TEST(broadcast_lock, const uint64_t cpus = params.cpus, {
    const uint64_t want = lock_count + cpus - 1;
    apic_icr(0, ICR_ALL_BUT_SELF | ICR_FIXED | VECTOR_LOCK);
    while (lock_count != want)
        cpu_pause();
})

/* One self-IPI, counted first (`self_ipis`: a stuck run's report compares it with `acks`). */
static inline void self_ipi(void)
{
    ME->self_ipis++;
    apic_icr(0, ICR_SELF | ICR_FIXED | VECTOR_SELF);
}

/* Self-IPI while IF=0, then an interrupt window of one NOP (kvm-unit-tests self_ipi_*). */
DEFINE_TEST(self_ipi_sti_nop, NO_STATE, {
    self_ipi();
    __asm__ volatile("sti; nop; cli" : : : "memory");
})

DEFINE_TEST(self_ipi_sti_hlt, NO_STATE, {
    self_ipi();
    __asm__ volatile("sti; hlt; cli" : : : "memory");
})

/* TPR raised above the vector, self-IPI (held pending), TPR lowered: delivered at once (IF=1). */
DEFINE_TEST(self_ipi_tpr, __asm__ volatile("sti" : : : "memory"), {
    const uint64_t a = ME->acks;
    apic_write(APIC_TPR, 0xF0);
    self_ipi();
    apic_write(APIC_TPR, 0);
    while (ME->acks == a)
        cpu_pause();
})

DEFINE_TEST(self_ipi_tpr_sti_nop, NO_STATE, {
    apic_write(APIC_TPR, 0xF0);
    self_ipi();
    apic_write(APIC_TPR, 0);
    __asm__ volatile("sti; nop; cli" : : : "memory");
})

DEFINE_TEST(self_ipi_tpr_sti_hlt, NO_STATE, {
    apic_write(APIC_TPR, 0xF0);
    self_ipi();
    apic_write(APIC_TPR, 0);
    __asm__ volatile("sti; hlt; cli" : : : "memory");
})

/* An EOI write with nothing in service (kvm-unit-tests eoi). */
DEFINE_TEST(eoi, NO_STATE, apic_eoi())

/* TSC deadline already passed when armed: interrupt at once (IF=1). */
DEFINE_TEST(tscdeadline_immed, __asm__ volatile("sti" : : : "memory"), {
    const uint64_t n = timer_count;
    wrmsr(MSR_TSC_DEADLINE, rdtsc_plain());
    while (timer_count == n)
        cpu_pause();
})

/* Armed TSC_DEADLINE_DELTA cycles ahead: arm to delivery. */
DEFINE_TEST(tscdeadline, __asm__ volatile("sti" : : : "memory"), {
    const uint64_t n = timer_count;
    wrmsr(MSR_TSC_DEADLINE, rdtsc_plain() + TSC_DEADLINE_DELTA);
    while (timer_count == n)
        cpu_pause();
})

/* One-shot LAPIC timer, divide by 1, initial count 1: arm to delivery. */
DEFINE_TEST(lapic_timer_oneshot, __asm__ volatile("sti" : : : "memory"), {
    const uint64_t n = timer_count;
    apic_write(APIC_TMICT, 1);
    while (timer_count == n)
        cpu_pause();
})

/*
 * One-way latencies, from the sender's TSC just before the ICR write to a TSC the target
 * read: its handler's entry (ipi_one_way) or its first instruction after HLT returned
 * (hlt_wake, with the target idling in HLT). All vCPUs read one TSC (KVM keeps the
 * offsets of one VM's vCPUs equal). A sample's g_end - g_start is the sum over its batch.
 */
static void __attribute__((noreturn, noinline)) test_one_way(int wake)
{
    volatile struct percpu *t = IPI_TARGET;
    uint64_t idx = 0;
    const uint64_t total = params.warmup + params.samples;
    for (uint64_t s = 0; s < total; s++) {
        const uint64_t l_start = tsc_begin();
        REPEAT(params.batch, __asm__ volatile("" : : : "memory"));
        const uint64_t g_loop = tsc_end() - l_start;
        const uint64_t seq_before = STAMPS->seq;
        const uint64_t prev_reenter = STAMPS->t_reenter;
        uint64_t sum = 0;
        const uint64_t g_start = tsc_begin();
        for (uint64_t i = params.batch; i != 0; i--) {
            const uint64_t a = wake ? t->wakes : t->acks;
            const uint64_t t0 = rdtsc_plain();
            apic_icr(1, ICR_FIXED | VECTOR_IPI);
            if (wake) {
                while (t->wakes == a)
                    cpu_pause();
                sum += t->wake_tsc - t0;
            } else {
                while (t->acks == a)
                    cpu_pause();
                sum += t->last_entry_tsc - t0;
            }
        }
        if (s < params.warmup)
            continue;
        const uint64_t seq_after = STAMPS->seq;
        idx = store_sample(idx, g_start, g_start + sum, prev_reenter, STAMPS->t_return,
                           STAMPS->t_reenter, seq_after - seq_before, g_loop);
    }
    finish(idx);
}

/* SMP bring-up: every AP came up before READY; each sample is one empty iteration. */
DEFINE_TEST(smp_bringup, NO_STATE, __asm__ volatile("" : : : "memory"))

/* Hands the host a batch count no ring can hold; if resumed, garbage and an unknown command. */
static void __attribute__((noreturn)) selftest_garbage(void)
{
    volatile struct control *c = CONTROL;
    c->batch_count = GARBAGE_BATCH_COUNT;
    doorbell(DOORBELL_BATCH);
    c->batch_count = GARBAGE;
    c->guest_error = GARBAGE;
    c->fault_vector = GARBAGE;
    c->fault_rip = GARBAGE;
    c->fault_error = GARBAGE;
    c->fault_cr2 = GARBAGE;
    c->ready_tsc = GARBAGE;
    doorbell(DOORBELL_UNKNOWN);
    finish(SAMPLES_PER_BATCH + 1);
}

static void __attribute__((noreturn)) selftest_spin(void)
{
    for (;;)
        __asm__ volatile("1: jmp 1b");
}

static void __attribute__((noreturn)) selftest_ud(void)
{
    __asm__ volatile("ud2");
    spin();
}

/* Runs the selected test; entered in ring 0 or, through enter_user, in ring 3. */
static void __attribute__((noreturn)) run_test(void)
{
    switch (params.test) {
    case TEST_LOOP_OVERHEAD: test_loop_overhead();
    case TEST_CPUID: test_cpuid();
    case TEST_CPUID_0XD: test_cpuid_0xd();
    case TEST_VMCALL:
        if (use_vmmcall)
            test_vmmcall();
        test_vmcall();
    case TEST_HLT: test_hlt();
    case TEST_INL_FROM_KERNEL: test_inl_from_kernel();
    case TEST_OUTL_TO_KERNEL: test_outl_to_kernel();
    case TEST_INL_FROM_USER: test_inl_from_user();
    case TEST_OUTL_TO_USER: test_outl_to_user();
    case TEST_MMIO_READ_USER: test_mmio_read_user();
    case TEST_MMIO_WRITE_USER: test_mmio_write_user();
    case TEST_MMIO_WRITE_IOEVENTFD: test_mmio_write_ioeventfd();
    case TEST_RD_TSC_ADJUST_MSR: test_rd_tsc_adjust_msr();
    case TEST_WR_TSC_ADJUST_MSR: test_wr_tsc_adjust_msr();
    case TEST_RDMSR_USER: test_rdmsr_user();
    case TEST_WRMSR_USER: test_wrmsr_user();
    case TEST_MOV_FROM_CR8: test_mov_from_cr8();
    case TEST_MOV_TO_CR8: test_mov_to_cr8();
    case TEST_IPI:
    case TEST_IPI_HALT: test_ipi();
    case TEST_IPI_ONE_WAY: test_one_way(0);
    case TEST_HLT_WAKE: test_one_way(1);
    case TEST_PV_SEND_IPI:
        if (use_vmmcall)
            test_pv_send_ipi_amd();
        test_pv_send_ipi();
    case TEST_BROADCAST_IPI: test_broadcast_ipi();
    case TEST_BROADCAST_LOCK: test_broadcast_lock();
    case TEST_SELF_IPI_STI_NOP: test_self_ipi_sti_nop();
    case TEST_SELF_IPI_STI_HLT: test_self_ipi_sti_hlt();
    case TEST_SELF_IPI_TPR: test_self_ipi_tpr();
    case TEST_SELF_IPI_TPR_STI_NOP: test_self_ipi_tpr_sti_nop();
    case TEST_SELF_IPI_TPR_STI_HLT: test_self_ipi_tpr_sti_hlt();
    case TEST_EOI: test_eoi();
    case TEST_TSCDEADLINE_IMMED: test_tscdeadline_immed();
    case TEST_TSCDEADLINE: test_tscdeadline();
    case TEST_LAPIC_TIMER_ONESHOT: test_lapic_timer_oneshot();
    case TEST_SMP_BRINGUP: test_smp_bringup();
    case TEST_SELFTEST_GARBAGE: selftest_garbage();
    case TEST_SELFTEST_TRIPLE_FAULT: load_empty_idt_and_fault();
    case TEST_SELFTEST_SPIN: selftest_spin();
    case TEST_SELFTEST_UD: selftest_ud();
    default: finish(0); /* unreachable: the id was checked */
    }
}

/* Rings a test may run at (RING0 | RING3 bits); 0 for an unknown test. */
static uint32_t allowed_rings(uint64_t test)
{
    switch (test) {
    case TEST_LOOP_OVERHEAD:
    case TEST_CPUID:
    case TEST_CPUID_0XD:
    case TEST_VMCALL:
    case TEST_INL_FROM_KERNEL:
    case TEST_OUTL_TO_KERNEL:
    case TEST_INL_FROM_USER:
    case TEST_OUTL_TO_USER:
    case TEST_MMIO_READ_USER:
    case TEST_MMIO_WRITE_USER:
    case TEST_MMIO_WRITE_IOEVENTFD:
        return RING0 | RING3;
    case TEST_HLT:
    case TEST_RD_TSC_ADJUST_MSR:
    case TEST_WR_TSC_ADJUST_MSR:
    case TEST_RDMSR_USER:
    case TEST_WRMSR_USER:
    case TEST_MOV_FROM_CR8:
    case TEST_MOV_TO_CR8:
    case TEST_IPI:
    case TEST_IPI_HALT:
    case TEST_IPI_ONE_WAY:
    case TEST_HLT_WAKE:
    case TEST_PV_SEND_IPI:
    case TEST_BROADCAST_IPI:
    case TEST_BROADCAST_LOCK:
    case TEST_SELF_IPI_STI_NOP:
    case TEST_SELF_IPI_STI_HLT:
    case TEST_SELF_IPI_TPR:
    case TEST_SELF_IPI_TPR_STI_NOP:
    case TEST_SELF_IPI_TPR_STI_HLT:
    case TEST_EOI:
    case TEST_TSCDEADLINE_IMMED:
    case TEST_TSCDEADLINE:
    case TEST_LAPIC_TIMER_ONESHOT:
    case TEST_SMP_BRINGUP:
    case TEST_SELFTEST_GARBAGE:
    case TEST_SELFTEST_TRIPLE_FAULT:
    case TEST_SELFTEST_SPIN:
    case TEST_SELFTEST_UD:
        return RING0;
    default:
        return 0;
    }
}

/* Copies the host's parameters into `params`; returns 0 or a GUEST_ERR_*. */
static uint64_t check_params(void)
{
    volatile struct control *c = CONTROL;
    if (c->magic != CONTROL_MAGIC || c->abi_version != ABI_VERSION)
        return GUEST_ERR_ABI;
    params.test = c->test;
    uint32_t rings = allowed_rings(params.test);
    if (rings == 0)
        return GUEST_ERR_TEST;
    params.ring = c->ring;
    if ((params.ring != 0 && params.ring != 3) || !(rings & (1U << params.ring)))
        return GUEST_ERR_RING;
    params.samples = c->samples;
    params.batch = c->batch;
    params.warmup = c->warmup;
    params.arg0 = c->arg0;
    if (params.samples < 1 || params.samples > MAX_COUNT || params.batch < 1 ||
        params.batch > MAX_COUNT || params.warmup > MAX_COUNT)
        return GUEST_ERR_COUNTS;
    if (params.test == TEST_CPUID_0XD && (params.arg0 < 1 || params.arg0 > 0xffffffffULL))
        return GUEST_ERR_COUNTS;
    params.work_cycles = c->work_cycles;
    if (params.work_cycles > MAX_WORK_CYCLES)
        return GUEST_ERR_COUNTS;
    work_cycles32 = (uint32_t)params.work_cycles;
    params.apic_mode = c->apic_mode;
    params.cpus = c->cpus;
    params.idle = c->idle;
    switch (params.test) {
    case TEST_IPI_HALT:
    case TEST_HLT_WAKE:
        params.idle = IDLE_HLT; /* the target waits in HLT whatever the run's idle mode */
        /* fall through */
    case TEST_IPI:
    case TEST_IPI_ONE_WAY:
    case TEST_BROADCAST_IPI:
    case TEST_BROADCAST_LOCK:
        if (params.cpus < 2)
            return GUEST_ERR_FEATURE;
        break;
    case TEST_PV_SEND_IPI:
        if (params.cpus < 2 || !cpu_has(FEAT_PV_SEND_IPI))
            return GUEST_ERR_FEATURE;
        break;
    case TEST_TSCDEADLINE_IMMED:
    case TEST_TSCDEADLINE:
        if (!cpu_has(FEAT_TSC_DEADLINE))
            return GUEST_ERR_FEATURE;
        break;
    default:
        break;
    }
    return 0;
}

/* CPUID leaf 0 vendor check: AMD and Hygon use vmmcall. */
static int cpu_wants_vmmcall(void)
{
    uint32_t eax = 0, ebx, ecx = 0, edx;
    __asm__ volatile("cpuid" : "+a"(eax), "=b"(ebx), "+c"(ecx), "=d"(edx));
    /* "AuthenticAMD" and "HygonGenuine": compare EBX and EDX. */
    if (ebx == 0x68747541U && edx == 0x69746e65U)
        return 1;
    if (ebx == 0x6f677948U && edx == 0x6e65476eU)
        return 1;
    return 0;
}

void kmain(void)
{
    uint64_t err = check_params();
    if (err != 0) {
        CONTROL->guest_error = err;
        doorbell(DOORBELL_BAD_PARAMS);
        spin();
    }
    use_vmmcall = cpu_wants_vmmcall();
    err = smp_init(params.apic_mode, params.cpus, params.idle);
    if (err != 0) {
        CONTROL->guest_error = err;
        doorbell(DOORBELL_BAD_PARAMS);
        spin();
    }
    switch (params.test) {
    case TEST_TSCDEADLINE_IMMED:
    case TEST_TSCDEADLINE:
        apic_write(APIC_LVTT, LVTT_TSC_DEADLINE | VECTOR_TIMER);
        break;
    case TEST_LAPIC_TIMER_ONESHOT:
        apic_write(APIC_TDCR, 0xB); /* divide by 1 */
        apic_write(APIC_LVTT, VECTOR_TIMER);
        break;
    default:
        break;
    }
    if (CONTROL->probe != 0)
        probe_before();
    CONTROL->ready_tsc = rdtsc();
    doorbell(DOORBELL_READY);
    if (params.ring == 3)
        enter_user(run_test, (uint64_t)user_stack_top);
    run_test();
}
