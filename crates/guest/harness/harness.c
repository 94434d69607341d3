/*
 * exitlab's second harness: a plain multiboot kernel, independent of the lab kernel
 * (crates/guest/kernel), that times the same instructions another way.
 *
 * The lab kernel runs in 64-bit mode, times every iteration on its own with
 * lfence-serialised rdtsc, and hands binary records to the VMM through shared memory.
 * This kernel stays in 32-bit protected mode as the loader left it, times a whole block
 * of 2^k iterations with one rdtsc pair (no fences), subtracts nothing itself, and
 * prints the raw totals as text on COM1, so that any VMM with a 16550 at 0x3F8 and an
 * isa-debug-exit at 0xF4 (exitlab run, QEMU) can run it.
 *
 * Command line words (key=value, others are ignored):
 *   k=K        2^K iterations per block (default 10, 0..20)
 *   reps=R     blocks per test (default 9, 1..1000)
 *   tests=...  comma-separated subset of: loop, loop_x2 (the same empty loop with
 *              2^(K+1) iterations, which gives the loop's cost per iteration), cpuid, inl_from_kernel, outl_to_kernel,
 *              inl_from_user, outl_to_user, rd_tsc_adjust_msr, wr_tsc_adjust_msr, and
 *              inl_from_kernel_reload, outl_to_kernel_reload, inl_from_user_reload,
 *              outl_to_user_reload, wr_tsc_adjust_msr_reload (the same with the
 *              operands loaded in every iteration, as a loop whose rdtsc clobbers
 *              them must; cpuid and rd_tsc_adjust_msr load theirs already)
 *   outs=N     instead of timing: N 32-bit OUTs of 0..N-1 to port=P,
 *   ins=N      then N 32-bit INs from port=P (default 0x1234),
 *   marker=M   each preceded by an 8-bit OUT to port M (1 before the OUTs, 2 before the
 *              INs, 3 at the end) when M is given.
 *
 * Output, one line each: "EXITLAB-HARNESS 1 k=<K> reps=<R>"; per block
 * "T <test> <rep> <cycles, hex>" (tests interleaved within each rep); "SKIP <test>
 * <reason>"; "X outs=<N> ins=<N> port=<hex>"; "END". Then it writes 0 to port 0xF4.
 */
#include <stdint.h>

#define COM1 0x3F8
#define DEBUG_EXIT 0xF4
#define KERNEL_PORT 0x4D0 /* ELCR: the in-kernel PIC answers it */
#define USER_PORT 0x1234  /* nothing claims it: the VMM's userspace answers */
#define MSR_TSC_ADJUST 0x3B

void harness_main(uint32_t magic, uint32_t info) __attribute__((noreturn));

static inline void outb(uint16_t port, uint8_t v)
{
    __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static inline void outl(uint16_t port, uint32_t v)
{
    __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port));
}

static inline uint32_t inl(uint16_t port)
{
    uint32_t v;
    __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static void putc(char c)
{
    outb(COM1, (uint8_t)c);
}

static void puts(const char *s)
{
    while (*s)
        putc(*s++);
}

static void putdec(uint32_t v)
{
    char buf[12];
    int n = 0;
    do {
        buf[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        putc(buf[--n]);
}

static void puthex64(uint64_t v)
{
    int started = 0;
    puts("0x");
    for (int shift = 60; shift >= 0; shift -= 4) {
        unsigned d = (unsigned)(v >> shift) & 0xF;
        if (d || started || shift == 0) {
            putc("0123456789abcdef"[d]);
            started = 1;
        }
    }
}

static __attribute__((noreturn)) void finish(uint32_t code)
{
    puts("END\n");
    outl(DEBUG_EXIT, code);
    for (;;)
        __asm__ volatile("cli; hlt");
}

/* ---- command line ------------------------------------------------------------------ */

static int word_is(const char *w, const char *end, const char *s)
{
    while (w < end && *s && *w == *s) {
        w++;
        s++;
    }
    return w == end && *s == 0;
}

/* Parses a decimal or 0x-prefixed number in [p, end); returns 0 on garbage. */
static int parse_num(const char *p, const char *end, uint32_t *out)
{
    uint32_t v = 0;
    int base = 10;
    if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    if (p == end)
        return 0;
    for (; p < end; p++) {
        uint32_t d;
        if (*p >= '0' && *p <= '9')
            d = (uint32_t)(*p - '0');
        else if (base == 16 && *p >= 'a' && *p <= 'f')
            d = (uint32_t)(*p - 'a' + 10);
        else if (base == 16 && *p >= 'A' && *p <= 'F')
            d = (uint32_t)(*p - 'A' + 10);
        else
            return 0;
        v = v * (uint32_t)base + d;
    }
    *out = v;
    return 1;
}

/* ---- the timed blocks --------------------------------------------------------------- */

enum test {
    T_LOOP,
    T_LOOP_X2,
    T_CPUID,
    T_INL_KERNEL,
    T_OUTL_KERNEL,
    T_INL_USER,
    T_OUTL_USER,
    T_RD_TSC_ADJUST,
    T_WR_TSC_ADJUST,
    T_INL_KERNEL_RELOAD,
    T_OUTL_KERNEL_RELOAD,
    T_INL_USER_RELOAD,
    T_OUTL_USER_RELOAD,
    T_WR_TSC_ADJUST_RELOAD,
    T_COUNT
};

static const char *const test_names[T_COUNT] = {
    "loop",
    "loop_x2",
    "cpuid",
    "inl_from_kernel",
    "outl_to_kernel",
    "inl_from_user",
    "outl_to_user",
    "rd_tsc_adjust_msr",
    "wr_tsc_adjust_msr",
    "inl_from_kernel_reload",
    "outl_to_kernel_reload",
    "inl_from_user_reload",
    "outl_to_user_reload",
    "wr_tsc_adjust_msr_reload",
};

/*
 * One block of n iterations, timed by one rdtsc pair. Each loop is written out in
 * assembly so that the loop around the measured instruction is the same two
 * instructions (dec, jnz) in every test; the instruction's own operand set-up is part
 * of what is measured, as in kvm-unit-tests.
 */
static uint64_t block(enum test t, uint32_t n, uint32_t tsc_adjust_lo, uint32_t tsc_adjust_hi)
{
    uint64_t t0 = rdtsc();
    uint32_t i = n;
    switch (t) {
    case T_LOOP:
        __asm__ volatile("1: dec %0; jnz 1b" : "+r"(i));
        break;
    case T_CPUID:
        __asm__ volatile("1: xorl %%eax, %%eax; xorl %%ecx, %%ecx; cpuid; dec %0; jnz 1b"
                         : "+S"(i)
                         :
                         : "eax", "ebx", "ecx", "edx");
        break;
    case T_INL_KERNEL:
        __asm__ volatile("1: inb %%dx, %%al; dec %0; jnz 1b"
                         : "+r"(i)
                         : "d"((uint16_t)KERNEL_PORT)
                         : "eax");
        break;
    case T_OUTL_KERNEL:
        __asm__ volatile("1: outb %%al, %%dx; dec %0; jnz 1b"
                         : "+r"(i)
                         : "a"(0), "d"((uint16_t)KERNEL_PORT));
        break;
    case T_INL_USER:
        __asm__ volatile("1: inl %%dx, %%eax; dec %0; jnz 1b"
                         : "+r"(i)
                         : "d"((uint16_t)USER_PORT)
                         : "eax");
        break;
    case T_OUTL_USER:
        __asm__ volatile("1: outl %%eax, %%dx; dec %0; jnz 1b"
                         : "+r"(i)
                         : "a"(0), "d"((uint16_t)USER_PORT));
        break;
    case T_RD_TSC_ADJUST:
        __asm__ volatile("1: rdmsr; dec %0; jnz 1b"
                         : "+S"(i)
                         : "c"(MSR_TSC_ADJUST)
                         : "eax", "edx");
        break;
    case T_WR_TSC_ADJUST:
        /* Writes back the value read at start, so the TSC does not move. */
        __asm__ volatile("1: wrmsr; dec %0; jnz 1b"
                         : "+S"(i)
                         : "c"(MSR_TSC_ADJUST), "a"(tsc_adjust_lo), "d"(tsc_adjust_hi));
        break;
    /*
     * The same, with the operands loaded again in every iteration from other registers,
     * as a loop whose rdtsc clobbers eax/edx must do (exitlab's lab kernel does).
     */
    case T_INL_KERNEL_RELOAD:
        __asm__ volatile("1: movl %1, %%edx; inb %%dx, %%al; dec %0; jnz 1b"
                         : "+r"(i)
                         : "r"((uint32_t)KERNEL_PORT)
                         : "eax", "edx");
        break;
    case T_OUTL_KERNEL_RELOAD:
        __asm__ volatile("1: movl %1, %%eax; movl %2, %%edx; outb %%al, %%dx; dec %0; jnz 1b"
                         : "+r"(i)
                         : "r"(0), "r"((uint32_t)KERNEL_PORT)
                         : "eax", "edx");
        break;
    case T_INL_USER_RELOAD:
        __asm__ volatile("1: movl %1, %%edx; inl %%dx, %%eax; dec %0; jnz 1b"
                         : "+r"(i)
                         : "r"((uint32_t)USER_PORT)
                         : "eax", "edx");
        break;
    case T_OUTL_USER_RELOAD:
        __asm__ volatile("1: movl %1, %%eax; movl %2, %%edx; outl %%eax, %%dx; dec %0; jnz 1b"
                         : "+r"(i)
                         : "r"(0), "r"((uint32_t)USER_PORT)
                         : "eax", "edx");
        break;
    case T_WR_TSC_ADJUST_RELOAD:
        /* ecx survives rdtsc, so a loop around rdtsc reloads eax and edx only. */
        __asm__ volatile("1: movl %1, %%eax; movl %2, %%edx; wrmsr; dec %0; jnz 1b"
                         : "+S"(i)
                         : "r"(tsc_adjust_lo), "D"(tsc_adjust_hi), "c"(MSR_TSC_ADJUST)
                         : "eax", "edx");
        break;
    default:
        break;
    }
    return rdtsc() - t0;
}

static int has_tsc_adjust(void)
{
    uint32_t a = 0, b, c = 0, d;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    if (a < 7)
        return 0;
    a = 7;
    c = 0;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (b >> 1) & 1;
}

static void exits_mode(uint32_t outs, uint32_t ins, uint16_t port, int marker, uint16_t marker_port)
{
    if (marker)
        outb(marker_port, 1);
    for (uint32_t i = 0; i < outs; i++)
        outl(port, i);
    if (marker)
        outb(marker_port, 2);
    uint32_t sum = 0;
    for (uint32_t i = 0; i < ins; i++)
        sum += inl(port);
    if (marker)
        outb(marker_port, 3);
    puts("X outs=");
    putdec(outs);
    puts(" ins=");
    putdec(ins);
    puts(" port=");
    puthex64(port);
    puts(" sum=");
    puthex64(sum);
    putc('\n');
}

void harness_main(uint32_t magic, uint32_t info)
{
    uint32_t k = 10, reps = 9, outs = 0, ins = 0, port = USER_PORT, marker_port = 0;
    int marker = 0, exits = 0;
    uint32_t selected = (1u << T_COUNT) - 1;

    if (magic == 0x2BADB002 && (*(volatile uint32_t *)info & 4)) {
        const char *p = (const char *)*(volatile uint32_t *)(info + 16);
        while (*p) {
            while (*p == ' ')
                p++;
            const char *w = p;
            while (*p && *p != ' ')
                p++;
            const char *eq = w;
            while (eq < p && *eq != '=')
                eq++;
            if (eq == p)
                continue;
            const char *v = eq + 1;
            if (word_is(w, eq, "k"))
                parse_num(v, p, &k);
            else if (word_is(w, eq, "reps"))
                parse_num(v, p, &reps);
            else if (word_is(w, eq, "outs"))
                exits |= parse_num(v, p, &outs);
            else if (word_is(w, eq, "ins"))
                exits |= parse_num(v, p, &ins);
            else if (word_is(w, eq, "port"))
                parse_num(v, p, &port);
            else if (word_is(w, eq, "marker"))
                marker = parse_num(v, p, &marker_port);
            else if (word_is(w, eq, "tests")) {
                selected = 1u << T_LOOP;
                const char *s = v;
                while (s < p) {
                    const char *e = s;
                    while (e < p && *e != ',')
                        e++;
                    for (int t = 0; t < T_COUNT; t++)
                        if (word_is(s, e, test_names[t]))
                            selected |= 1u << t;
                    s = e + 1;
                }
            }
        }
    }
    if (k > 20 || reps == 0 || reps > 1000 || port > 0xFFFF || marker_port > 0xFFFF) {
        puts("EXITLAB-HARNESS error: k must be 0..20, reps 1..1000, ports 16-bit\n");
        finish(1);
    }
    puts("EXITLAB-HARNESS 1 k=");
    putdec(k);
    puts(" reps=");
    putdec(reps);
    putc('\n');
    if (exits) {
        exits_mode(outs, ins, (uint16_t)port, marker, (uint16_t)marker_port);
        finish(0);
    }

    uint32_t adj_lo = 0, adj_hi = 0;
    if (!has_tsc_adjust()) {
        uint32_t msr_tests = (1u << T_RD_TSC_ADJUST) | (1u << T_WR_TSC_ADJUST) |
                             (1u << T_WR_TSC_ADJUST_RELOAD);
        for (int t = 0; t < T_COUNT; t++) {
            if (selected & msr_tests & (1u << t)) {
                puts("SKIP ");
                puts(test_names[t]);
                puts(" no-IA32_TSC_ADJUST-in-CPUID\n");
            }
        }
        selected &= ~msr_tests;
    } else {
        __asm__ volatile("rdmsr" : "=a"(adj_lo), "=d"(adj_hi) : "c"(MSR_TSC_ADJUST));
    }
    uint32_t n = 1u << k;
    /* One untimed warm-up block per test. */
    for (int t = 0; t < T_COUNT; t++)
        if (selected & (1u << t) && t != T_LOOP_X2)
            (void)block((enum test)t, n, adj_lo, adj_hi);
    for (uint32_t r = 0; r < reps; r++) {
        for (int t = 0; t < T_COUNT; t++) {
            if (!(selected & (1u << t)))
                continue;
            /* loop_x2 is the empty loop run twice as long. */
            uint64_t c = t == T_LOOP_X2 ? block(T_LOOP, 2 * n, adj_lo, adj_hi)
                                        : block((enum test)t, n, adj_lo, adj_hi);
            puts("T ");
            puts(test_names[t]);
            putc(' ');
            putdec(r);
            putc(' ');
            puthex64(c);
            putc('\n');
        }
    }
    finish(0);
}
