/*
 * exitlab chaos kernel: seeded, reproducible hostile guest behaviour. From the seed on
 * its command line ("seed=N") it draws, forever: port reads and writes of random ports
 * and sizes, string I/O (rep ins/outs), MMIO reads and writes across the 32-bit
 * physical space above RAM, floods of serial output, garbage to the lab ABI's control
 * page, sample ring and doorbell port (the protocol's doorbells with garbage counts and
 * fields, and random ones), INIT/SIPI storms through the local APIC, random MSR reads and
 * writes, and, rarely, a triple fault. Faults it takes are counted and the loop goes on.
 * Every 256 operations it prints "\nCHAOS ops=<hex> faults=<hex> last=<hex>\n" on COM1.
 * With "lab" on its command line (a boot under the lab's doorbell protocol) it first
 * rings READY, so that its garbage reaches the protocol's later states too.
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define COM1 0x3F8
#define LAB_DOORBELL_PORT 0x700
#define LAB_CONTROL_GPA 0x400000u
/* The lab ABI (crates/abi/src/abi.rs): doorbells, vCPU 0's sample ring, its size. */
#define LAB_READY 1u
#define LAB_BATCH 2u
#define LAB_DONE 3u
#define LAB_FAULT 4u
#define LAB_BAD_PARAMS 5u
#define LAB_PROBED 6u
#define LAB_PROBE 7u
#define LAB_SAMPLES_GPA 0x500000u
#define LAB_SAMPLES_PER_BATCH 16384u
#define LAB_SAMPLE_BYTES 56u
#define LAPIC 0xFEE00000u
#define PCI_HOLE 0xC0000000u
/* SIPI vector of the page where application processors park: cli; hlt; jmp back. */
#define AP_PARK_PAGE 8

void chaos_triple_fault(void);
extern u8 stub_table[];
extern u64 idt[256];

static u64 rng;
static u32 ops, faults, last_vector;
static u32 ram_top = 0x100000;
static u8 buf[4096] __attribute__((aligned(16)));

static u64 next(void)
{
    /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
}

static u32 below(u32 n) { return (u32)(next() >> 32) % n; }

static inline void outb(u16 p, u8 v) { __asm__ volatile("outb %0, %1" ::"a"(v), "Nd"(p)); }
static inline void outw(u16 p, u16 v) { __asm__ volatile("outw %0, %1" ::"a"(v), "Nd"(p)); }
static inline void outl(u16 p, u32 v) { __asm__ volatile("outl %0, %1" ::"a"(v), "Nd"(p)); }
static inline u8 inb(u16 p) { u8 v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(p)); return v; }
static inline u16 inw(u16 p) { u16 v; __asm__ volatile("inw %1, %0" : "=a"(v) : "Nd"(p)); return v; }
static inline u32 inl(u16 p) { u32 v; __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(p)); return v; }

static void putc_raw(char c) { outb(COM1, (u8)c); }

static void put_hex(u32 v)
{
    for (int i = 28; i >= 0; i -= 4)
        putc_raw("0123456789abcdef"[(v >> i) & 15]);
}

static void report(void)
{
    const char *s = "\nCHAOS ops=";
    while (*s) putc_raw(*s++);
    put_hex(ops);
    s = " faults=";
    while (*s) putc_raw(*s++);
    put_hex(faults);
    s = " last=";
    while (*s) putc_raw(*s++);
    put_hex(last_vector);
    putc_raw('\n');
}

void build_idt(void)
{
    for (u32 v = 0; v < 256; v++) {
        u32 off = (u32)stub_table + v * 16;
        /* 32-bit interrupt gate, DPL 0, selector 0x08. */
        idt[v] = (u64)(off & 0xFFFF) | ((u64)0x08 << 16) | ((u64)0x8E00 << 32)
                 | ((u64)(off >> 16) << 48);
    }
}

static u16 random_port(void)
{
    switch (below(4)) {
    case 0: return (u16)below(0x100);          /* legacy devices */
    case 1: return (u16)(0x3F8 + below(8));     /* the UART's registers */
    default: return (u16)next();
    }
}

static u32 random_mmio(void)
{
    static const u32 pages[] = {0xFEBFF000u, 0xFF000000u, LAPIC, 0xFEC00000u, 0xFED00000u};
    switch (below(4)) {
    case 0: return pages[below(5)] + (below(0x1000) & ~3u);
    case 1: return PCI_HOLE + below(0x40000000u - 8);
    default: {
        u32 top = ram_top < PCI_HOLE ? ram_top : PCI_HOLE;
        return top + below(0xFFFFFFF0u - top);
    }
    }
}

/* A value for a control-page field the host reads: zero, small, around the ring's size,
 * all ones, or anything. */
static u64 lab_word(void)
{
    switch (below(6)) {
    case 0: return 0;
    case 1: return below(64);
    case 2: return LAB_SAMPLES_PER_BATCH - 1 + below(3);
    case 3: return ~0ULL;
    default: return next();
    }
}

/* Garbage to the lab protocol: the fields the host reads at a doorbell (batch count,
 * guest error, fault vector, rip, error code, cr2: words 9 to 14), random words
 * elsewhere in the control page and the start of the sample ring, then a doorbell:
 * mostly one of the protocol's, in any order, now and then any value. */
static void lab_protocol_op(void)
{
    if (LAB_CONTROL_GPA + 4096 <= ram_top) {
        volatile u64 *ctl = (volatile u64 *)LAB_CONTROL_GPA;
        for (u32 i = 9; i <= 14; i++)
            if (below(2))
                ctl[i] = lab_word();
        for (u32 i = 0; i < 4; i++)
            ((volatile u32 *)ctl)[below(1024)] = (u32)next();
    }
    if (LAB_SAMPLES_GPA + 64 * LAB_SAMPLE_BYTES <= ram_top) {
        volatile u32 *ring = (volatile u32 *)LAB_SAMPLES_GPA;
        u32 n = below(64 * LAB_SAMPLE_BYTES / 4);
        for (u32 i = 0; i < n; i++)
            ring[i] = (u32)next();
    }
    static const u32 bells[] = {LAB_READY, LAB_BATCH,      LAB_BATCH,  LAB_BATCH, LAB_DONE,
                                LAB_FAULT, LAB_BAD_PARAMS, LAB_PROBED, LAB_PROBE};
    outl(LAB_DOORBELL_PORT, below(10) ? bells[below(9)] : (u32)next());
}

static u32 random_msr(void)
{
    switch (below(5)) {
    case 0: return below(0x2000);
    case 1: return 0xC0000000u + below(0x2000);
    case 2: return 0x40000000u + below(0x200);   /* hypervisor (KVM PV) MSRs */
    case 3: return 0x800 + below(0x400);         /* x2APIC */
    default: return (u32)next();
    }
}

static void one_op(void)
{
    u32 r = below(64);
    if (r < 10) {
        u16 p = random_port();
        switch (below(3)) {
        case 0: (void)inb(p); break;
        case 1: (void)inw(p); break;
        default: (void)inl(p); break;
        }
    } else if (r < 20) {
        u16 p = random_port();
        /* The ports that end the run (debug-exit, i8042 reset) only now and then, so
         * that a boot lives long enough to reach the rarer operations. */
        if (((p >= 0xF4 && p <= 0xF7) || p == 0x64 || p == 0x60) && below(16))
            p = 0x80;
        u32 v = (u32)next();
        switch (below(3)) {
        case 0: outb(p, (u8)v); break;
        case 1: outw(p, (u16)v); break;
        default: outl(p, v); break;
        }
    } else if (r < 26) {
        u16 p = random_port();
        u32 n = 1 + below(64);
        void *d = buf;
        const void *s = buf;
        u32 kind = below(6);
        /* What goes out is drawn from the seed: the buffer may hold what an earlier
         * `rep ins` read from a clock (PIT, RTC, PM timer), and written to the UART that
         * would make the guest's output depend on time, not on the seed alone. */
        if (kind >= 3)
            for (u32 i = 0; i < 4 * n; i++)
                buf[i] = (u8)next();
        switch (kind) {
        case 0: __asm__ volatile("rep insb" : "+D"(d), "+c"(n) : "d"(p) : "memory"); break;
        case 1: __asm__ volatile("rep insw" : "+D"(d), "+c"(n) : "d"(p) : "memory"); break;
        case 2: __asm__ volatile("rep insl" : "+D"(d), "+c"(n) : "d"(p) : "memory"); break;
        case 3: __asm__ volatile("rep outsb" : "+S"(s), "+c"(n) : "d"(p) : "memory"); break;
        case 4: __asm__ volatile("rep outsw" : "+S"(s), "+c"(n) : "d"(p) : "memory"); break;
        default: __asm__ volatile("rep outsl" : "+S"(s), "+c"(n) : "d"(p) : "memory"); break;
        }
    } else if (r < 36) {
        u32 a = random_mmio();
        switch (below(3)) {
        case 0: (void)*(volatile u8 *)a; break;
        case 1: (void)*(volatile u16 *)(a & ~1u); break;
        default: (void)*(volatile u32 *)(a & ~3u); break;
        }
    } else if (r < 46) {
        u32 a = random_mmio();
        u32 v = (u32)next();
        switch (below(3)) {
        case 0: *(volatile u8 *)a = (u8)v; break;
        case 1: *(volatile u16 *)(a & ~1u) = (u16)v; break;
        default: *(volatile u32 *)(a & ~3u) = v; break;
        }
    } else if (r < 48) {
        u32 n = 1 + below(256);
        for (u32 i = 0; i < n; i++)
            outb(COM1, (u8)next());
    } else if (r < 54) {
        lab_protocol_op();
    } else if (r < 63) {
        u32 idx = random_msr();
        if (below(2)) {
            u32 lo, hi;
            __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(idx));
        } else {
            u64 v = next();
            __asm__ volatile("wrmsr" ::"c"(idx), "a"((u32)v), "d"((u32)(v >> 32)));
        }
    } else {
        /* INIT then SIPI to every other CPU, a few times over. */
        volatile u32 *icr_lo = (volatile u32 *)(LAPIC + 0x300);
        volatile u32 *icr_hi = (volatile u32 *)(LAPIC + 0x310);
        u32 n = 1 + below(8);
        for (u32 i = 0; i < n; i++) {
            *icr_hi = 0;
            *icr_lo = 0x000C4500;
            *icr_hi = 0;
            /* Mostly to the parking page (cli; hlt), sometimes anywhere. */
            *icr_lo = 0x000C4600 | (below(16) ? AP_PARK_PAGE : below(256));
        }
    }
}

static void chaos_loop(void) __attribute__((noreturn));
static void chaos_loop(void)
{
    for (;;) {
        if (below(1024) == 0)
            chaos_triple_fault();
        one_op();
        ops++;
        if ((ops & 255) == 0)
            report();
    }
}

/* Called on a fresh stack by every exception or interrupt stub. */
void chaos_fault(u32 vector)
{
    faults++;
    last_vector = vector;
    chaos_loop();
}

/* Whether the word `w` is on the command line `s`. */
static int has_word(const char *s, const char *w)
{
    for (; s && *s; s++) {
        u32 i = 0;
        while (w[i] && s[i] == w[i])
            i++;
        if (!w[i] && (s[i] == 0 || s[i] == ' '))
            return 1;
        while (*s && *s != ' ')
            s++;
        if (!*s)
            break;
    }
    return 0;
}

static u64 parse_seed(const char *s)
{
    for (; s && *s; s++) {
        if (s[0] == 's' && s[1] == 'e' && s[2] == 'e' && s[3] == 'd' && s[4] == '=') {
            u64 v = 0;
            for (s += 5; *s >= '0' && *s <= '9'; s++)
                v = v * 10 + (u64)(*s - '0');
            return v;
        }
    }
    return 1;
}

void chaos_main(u32 magic, const u32 *mbi)
{
    u64 seed = 1;
    int lab = 0;
    if (magic == 0x2BADB002u && mbi) {
        if (mbi[0] & 1)
            ram_top = (mbi[2] + 1024) * 1024;
        if (mbi[0] & 4) {
            seed = parse_seed((const char *)mbi[4]);
            lab = has_word((const char *)mbi[4], "lab");
        }
    }
    rng = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (!rng)
        rng = 1;
    for (u32 i = 0; i < sizeof(buf); i++)
        buf[i] = (u8)next();
    {
        static const u8 park[] = {0xFA, 0xF4, 0xEB, 0xFD}; /* cli; hlt; jmp $-3 */
        volatile u8 *p = (volatile u8 *)(AP_PARK_PAGE * 0x1000);
        for (u32 i = 0; i < sizeof(park); i++)
            p[i] = park[i];
    }
    report();
    if (lab)
        outl(LAB_DOORBELL_PORT, LAB_READY);
    chaos_loop();
}
