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

#define CONTROL ((volatile struct control *)CONTROL_GPA)
#define STAMPS  ((volatile struct stamps *)STAMPS_GPA)
#define SAMPLES ((volatile struct sample *)SAMPLES_GPA)

_Static_assert(SAMPLES_PER_BATCH * SIZEOF_SAMPLE <= SAMPLES_BYTES_PER_CPU,
               "a full sample ring must fit in the space reserved for it");
_Static_assert(CONTROL_GPA >= KERNEL_END_GPA, "the control page must follow the kernel");

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
} params;

/* Whether the CPU wants `vmmcall` (AMD, Hygon) rather than `vmcall`. */
static int use_vmmcall;

static inline void doorbell(uint32_t cmd)
{
    __asm__ volatile("outl %0, %1" : : "a"(cmd), "Nd"((uint16_t)DOORBELL_PORT) : "memory");
}

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
}

/* TSC at the start of a sample: earlier instructions done, later ones not started. */
static inline uint64_t tsc_begin(void)
{
    uint32_t lo, hi;
    __asm__ volatile("lfence; rdtsc; lfence" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
}

/*
 * TSC at the end of a sample: the leading lfence waits for the measured instructions,
 * as rdtscp would; rdtscp itself is avoided because instruction emulators (used for
 * guest ring 0 on some hosts) do not all implement it.
 */
static inline uint64_t tsc_end(void)
{
    uint32_t lo, hi;
    __asm__ volatile("lfence; rdtsc; lfence" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static void __attribute__((noreturn)) spin(void)
{
    for (;;)
        __asm__ volatile("" : : : "memory");
}

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
    spin();
}

#define REPEAT(count, ...)                                                     \
    for (uint64_t rep_ = (count); rep_ != 0; rep_--) {                         \
        __VA_ARGS__;                                                           \
    }

/*
 * One test: `state` declares what the body keeps between iterations, the rest is one
 * iteration. Warm-up first, then `samples` samples of `batch` iterations each.
 */
#define DEFINE_TEST(name, state, ...)                                          \
    static void __attribute__((noreturn, noinline)) test_##name(void)          \
    {                                                                          \
        const uint64_t samples = params.samples;                               \
        const uint64_t batch = params.batch;                                   \
        state;                                                                 \
        REPEAT(params.warmup, __VA_ARGS__);                                    \
        uint64_t idx = 0;                                                      \
        for (uint64_t s_ = samples; s_ != 0; s_--) {                           \
            const uint64_t l_start = tsc_begin();                              \
            REPEAT(batch, __asm__ volatile("" : : : "memory"));                \
            const uint64_t g_loop = tsc_end() - l_start;                       \
            const uint64_t seq_before = STAMPS->seq;                           \
            const uint64_t prev_reenter = STAMPS->t_reenter;                   \
            const uint64_t g_start = tsc_begin();                              \
            REPEAT(batch, __VA_ARGS__);                                        \
            const uint64_t g_end = tsc_end();                                  \
            const uint64_t seq_after = STAMPS->seq;                            \
            const uint64_t h_return = STAMPS->t_return;                        \
            const uint64_t h_reenter = STAMPS->t_reenter;                      \
            idx = store_sample(idx, g_start, g_end, prev_reenter, h_return,    \
                               h_reenter, seq_after - seq_before, g_loop);     \
        }                                                                      \
        finish(idx);                                                           \
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
    CONTROL->ready_tsc = rdtsc();
    doorbell(DOORBELL_READY);
    if (params.ring == 3)
        enter_user(run_test, (uint64_t)user_stack_top);
    run_test();
}
