/*
 * exitlab conformance kernel. Timers: the ACPI PM timer's rate against the TSC, and the HPET
 * (its ACPI table, its main counter's rate, a comparator interrupt in legacy replacement
 * and in I/O APIC routing).
 */
#include "conformance.h"

static uint32_t pm_timer_read(void)
{
    return inl(PM_TIMER_PORT);
}

/* A PM timer reading and the TSC when it was taken, to within +- width / 2. */
struct pm_sample {
    uint32_t pm;
    uint64_t tsc;
    uint64_t width;
};

/*
 * The best of a few TSC-bracketed reads: the VMM samples its clock somewhere between
 * the two TSC reads around the port access, so the narrowest bracket pins the reading
 * down best (a read whose exit was delayed by the host scheduler is discarded).
 */
static void pm_timer_sample(struct pm_sample *s, uint32_t mask)
{
    s->width = ~0ULL;
    for (int i = 0; i < 8; i++) {
        uint64_t a = rdtsc();
        uint32_t v = pm_timer_read() & mask;
        uint64_t b = rdtsc();
        if (b - a < s->width) {
            s->width = b - a;
            s->tsc = a + (b - a) / 2;
            s->pm = v;
        }
    }
}

int test_pmtimer(void)
{
    CHECK(args.has_tsc_khz && args.tsc_khz,
          "needs tsc_khz= on the command line (exitlab host --json, tsc.khz)");
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    uint32_t bits = a.pm_timer_bits;
    uint32_t mask = bits == 32 ? 0xFFFFFFFFu : 0xFFFFFFu;
    uint64_t span = ms_to_tsc(PM_MEASURE_MS);
    struct pm_sample first, last;
    pm_timer_sample(&first, mask);
    uint32_t prev = first.pm, reads = 0;
    uint64_t t;
    do {
        uint32_t v = pm_timer_read() & mask;
        CHECK(((v - prev) & mask) < mask / 2, "went backwards: %#x after %#x (read %u)", v, prev,
              reads);
        prev = v;
        reads++;
        t = rdtsc();
    } while (t - first.tsc < span);
    pm_timer_sample(&last, mask);
    CHECK(((last.pm - prev) & mask) < mask / 2, "went backwards: %#x after %#x", last.pm, prev);
    uint64_t ticks = (last.pm - first.pm) & mask;
    uint64_t tsc = last.tsc - first.tsc;
    /* Hz = ticks * tsc_khz * 1000 / tsc; compare without dividing. */
    uint64_t lhs = ticks * args.tsc_khz * 1000ULL;
    uint64_t rhs = tsc * PM_TIMER_HZ;
    uint64_t hz = tsc && tsc <= 0xFFFFFFFFu ? udiv64(lhs, (uint32_t)tsc, NULL) : 0;
    uint64_t diff = lhs > rhs ? lhs - rhs : rhs - lhs;
    print("# pmtimer: %u reads, %llu ticks in %llu TSC cycles (%u ms; end reads bracketed by "
          "%llu and %llu cycles): about %llu Hz, %u bits\n",
          reads + 16, ticks, tsc, PM_MEASURE_MS, first.width, last.width, hz, bits);
    CHECK(ticks > 0, "did not advance in %u ms", PM_MEASURE_MS);
    CHECK(diff * 20 <= rhs, "runs at about %llu Hz, more than 5%% away from %u Hz", hz,
          PM_TIMER_HZ);
    return 1;
}


#define HPET_BASE          0xFED00000u
#define HPET_CAP           0x000
#define HPET_CONFIG        0x010
#define HPET_ISR           0x020
#define HPET_COUNTER       0x0F0
#define HPET_TN_CONFIG(n)  (0x100 + 0x20 * (n))
#define HPET_TN_CMP(n)     (0x108 + 0x20 * (n))
#define HPET_ENABLE        1u
#define HPET_LEGACY        2u
#define HPET_TN_INT_ENB    (1u << 2)
#define HPET_TN_ROUTE(g)   ((uint32_t)(g) << 9)
#define IOAPIC_REGSEL      0x00
#define IOAPIC_WIN         0x10
#define LAPIC_IRR          0x200
#define HPET_MEASURE_MS    200u
#define HPET_IRQ_WAIT_MS   5000u

static uint32_t hpet_rd(uint32_t reg) { return rd32(HPET_BASE + reg); }
static void hpet_wr(uint32_t reg, uint32_t v) { wr32(HPET_BASE + reg, v); }

/* The 64-bit main counter through two 32-bit reads, without tearing. */
static uint64_t hpet_counter(void)
{
    uint32_t hi, lo;
    do {
        hi = hpet_rd(HPET_COUNTER + 4);
        lo = hpet_rd(HPET_COUNTER);
    } while (hpet_rd(HPET_COUNTER + 4) != hi);
    return ((uint64_t)hi << 32) | lo;
}

static void ioapic_route(uint32_t pin, uint32_t vector, uint32_t apic_id)
{
    wr32(IOAPIC_BASE + IOAPIC_REGSEL, 0x11 + 2 * pin);
    wr32(IOAPIC_BASE + IOAPIC_WIN, apic_id << 24);
    wr32(IOAPIC_BASE + IOAPIC_REGSEL, 0x10 + 2 * pin);
    wr32(IOAPIC_BASE + IOAPIC_WIN, vector); /* fixed, physical, edge, high, unmasked */
}

static void ioapic_mask(uint32_t pin)
{
    wr32(IOAPIC_BASE + IOAPIC_REGSEL, 0x10 + 2 * pin);
    wr32(IOAPIC_BASE + IOAPIC_WIN, 1u << 16);
}

static int lapic_irr(uint32_t vector)
{
    return (lapic_read(LAPIC_IRR + 0x10 * (vector / 32)) >> (vector % 32)) & 1;
}

/*
 * Arms comparator `timer` 1 ms ahead and waits, with interrupts off, for `vector`
 * (routed from I/O APIC input `pin`) to become pending in the local APIC's IRR: the
 * interrupt reached the CPU, without the guest having to take it.
 */
static int hpet_irq(uint32_t timer, uint32_t config, uint32_t pin, uint32_t vector,
                    const char *what)
{
    ioapic_route(pin, vector, lapic_id());
    /* A comparator the counter passes while the timer's interrupt is off has matched with
     * the interrupt off, and (as the HPET specification has it) turning the interrupt on
     * afterwards raises nothing. 1 ms between reading the counter and enabling is plenty
     * on hardware but not where each register write is a slow exit (an emulated L1 under
     * load). So the interrupt goes on first, with the comparator parked 2^30 ticks ahead
     * (10 s), and the comparator is then moved to 1 ms ahead, low half first: every value
     * it passes through is ahead of the counter, and if the host is so slow that the
     * final value is already behind it, the timer fires at once, with its interrupt on.
     * (Enabling the interrupt with the comparator still at its reset value, all ones,
     * would fire at once: that value counts as passed, as on QEMU.) */
    hpet_wr(HPET_TN_CONFIG(timer), config);
    uint64_t park = hpet_counter() + (1ULL << 30);
    hpet_wr(HPET_TN_CMP(timer) + 4, (uint32_t)(park >> 32));
    hpet_wr(HPET_TN_CMP(timer), (uint32_t)park);
    hpet_wr(HPET_TN_CONFIG(timer), config | HPET_TN_INT_ENB);
    uint64_t cmp = hpet_counter() + 100000; /* 1 ms at 100 MHz */
    hpet_wr(HPET_TN_CMP(timer), (uint32_t)cmp);
    hpet_wr(HPET_TN_CMP(timer) + 4, (uint32_t)(cmp >> 32));
    uint64_t t0 = rdtsc();
    int pending = 0;
    while (!(pending = lapic_irr(vector)) && rdtsc() - t0 < ms_to_tsc(HPET_IRQ_WAIT_MS))
        ;
    uint64_t at = hpet_counter();
    hpet_wr(HPET_TN_CONFIG(timer), 0);
    ioapic_mask(pin);
    print("# hpet: %s: comparator %llu, vector %#x pending %s at counter %llu\n", what, cmp,
          vector, pending ? "yes" : "NO", at);
    CHECK(pending, "%s: vector %#x (I/O APIC input %u) not pending within %u ms of the "
          "comparator", what, vector, pin, HPET_IRQ_WAIT_MS);
    CHECK(at >= cmp, "%s: the interrupt arrived at counter %llu, before the comparator %llu",
          what, at, cmp);
    return 1;
}

int test_hpet(void)
{
    CHECK(args.has_tsc_khz && args.tsc_khz,
          "needs tsc_khz= on the command line (exitlab host --json, tsc.khz)");
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    CHECK(a.hpet, "no HPET table in the RSDT");
    uint32_t block_id = rd32(a.hpet + 36);
    uint64_t base = rd64(a.hpet + 44);
    CHECK(rd8(a.hpet + 40) == 0 && base == HPET_BASE, "the HPET table's base is %#llx in "
          "address space %u; expected system memory %#x", base, rd8(a.hpet + 40), HPET_BASE);
    uint32_t cap = hpet_rd(HPET_CAP), period = hpet_rd(HPET_CAP + 4);
    uint32_t timers = ((cap >> 8) & 0x1F) + 1;
    print("# hpet: table at %x, block id %#x, capabilities %#x, period %u fs, %u timers\n",
          a.hpet, block_id, cap, period, timers);
    CHECK(block_id == cap, "the table's block id %#x differs from the capabilities %#x",
          block_id, cap);
    CHECK((cap & 0xFF) == 1 && (cap >> 16) == 0x8086 && (cap & (1u << 15)) && (cap & (1u << 13)),
          "capabilities %#x: expected revision 1, vendor 0x8086, 64-bit, legacy capable", cap);
    CHECK(period == 10000000, "period %u fs; QEMU's HPET has 10,000,000 (100 MHz)", period);
    CHECK(timers >= 3, "%u timers, expected at least 3", timers);

    /* The main counter's rate against the TSC. */
    hpet_wr(HPET_CONFIG, 0);
    hpet_wr(HPET_COUNTER, 0);
    hpet_wr(HPET_COUNTER + 4, 0);
    hpet_wr(HPET_CONFIG, HPET_ENABLE);
    /* Each counter read is three MMIO exits, slow where KVM is itself emulated: take the
     * TSC on both sides of a read and use the middle, as the PM timer test does. */
    uint64_t a0 = rdtsc(), c0 = hpet_counter(), b0 = rdtsc();
    uint64_t t0 = a0 + (b0 - a0) / 2;
    while (rdtsc() - t0 < ms_to_tsc(HPET_MEASURE_MS))
        ;
    uint64_t a1 = rdtsc(), c1 = hpet_counter(), b1 = rdtsc();
    uint64_t t1 = a1 + (b1 - a1) / 2;
    uint64_t ticks = c1 - c0, tsc = t1 - t0;
    uint64_t hz_want = udiv64(1000000000000000ULL, period, NULL);
    uint64_t lhs = ticks * args.tsc_khz * 1000ULL, rhs = tsc * hz_want;
    uint64_t diff = lhs > rhs ? lhs - rhs : rhs - lhs;
    uint64_t hz = tsc && tsc <= 0xFFFFFFFFu ? udiv64(lhs, (uint32_t)tsc, NULL) : 0;
    print("# hpet: %llu ticks in %llu TSC cycles (reads bracketed by %llu and %llu cycles): "
          "about %llu Hz\n", ticks, tsc, b0 - a0, b1 - a1, hz);
    CHECK(ticks > 0, "the main counter did not advance in %u ms", HPET_MEASURE_MS);
    CHECK(diff * 20 <= rhs, "the main counter runs at about %llu Hz, more than 5%% away from "
          "%llu Hz", hz, hz_want);

    /* Comparator interrupts: timer 2 routed to I/O APIC input 16, then timer 0 in
     * legacy replacement mode (ISA IRQ 0, I/O APIC input 2). */
    lapic_write(LAPIC_SVR, lapic_read(LAPIC_SVR) | 0x1FF);
    if (!hpet_irq(2, HPET_TN_ROUTE(16), 16, 0x51, "timer 2 routed to GSI 16"))
        return 0;
    hpet_wr(HPET_CONFIG, HPET_ENABLE | HPET_LEGACY);
    if (!hpet_irq(0, 0, 2, 0x50, "timer 0 in legacy replacement (GSI 2)"))
        return 0;
    hpet_wr(HPET_CONFIG, 0);
    return 1;
}

/*
 * What firmware leaves for a multiboot kernel (exitlab_boot::firmware and the VMM's PIC
 * and PIT set-up), as QEMU's SeaBIOS leaves it: the real-mode IVT points into the BIOS
 * segment, IRQ 0's handler counts ticks in the BDA; the BDA holds COM1's port, the
 * equipment word, 639 KiB of conventional memory and the EBDA segment; the PICs are
 * initialised with only IRQ 0 and the cascade unmasked; PIT channel 0 runs in mode 3
 * (LSB then MSB) and raises IRQ 0 (seen in the master's IRR, interrupts being off).
 * Without a PIT (QEMU's `-machine pit=off`; its ports then read 0xff) the PIT part is
 * said to be skipped. IRQ 0 is masked again at the end, so that no later test takes a
 * tick.
 */
/* The address `a`, opaque to the compiler (GCC takes constant addresses in the first
 * page for null-pointer arithmetic and warns about them). */
static uint32_t low_addr(uint32_t a)
{
    __asm__("" : "+r"(a));
    return a;
}

int test_firmware(void)
{
    const uint32_t bda = low_addr(0x400);
    for (uint32_t v = 0; v < 256; v++) {
        uint32_t e = rd32(4 * v);
        CHECK(e >> 16 == 0xF000, "IVT vector %#x is %04x:%04x, not in the BIOS segment", v,
              e >> 16, e & 0xFFFF);
        uint32_t at = 0xF0000 + (e & 0xFFFF);
        if (v == 8)
            CHECK(rd8(at) == 0x1E && rd8(at + 6) == 0x66 && rd16(at + 9) == 0x46C,
                  "IRQ 0's handler at %#x does not count ticks at 0x46c", at);
        else if ((v > 8 && v < 0x10) || (v >= 0x70 && v < 0x78))
            CHECK(rd8(at) == 0x50, "IRQ vector %#x's handler at %#x does not save AX", v, at);
        else
            CHECK(rd8(at) == 0xCF, "vector %#x's handler at %#x is not an iret", v, at);
    }
    CHECK(rd16(bda) == 0x3F8, "BDA COM1 port is %#x", rd16(bda));
    CHECK(((rd16(bda + 0x10) >> 9) & 7) == 1, "BDA equipment word %#x does not list one serial port",
          rd16(bda + 0x10));
    CHECK(rd16(bda + 0x13) == 639, "BDA conventional memory is %u KiB", rd16(bda + 0x13));
    CHECK(rd16(bda + 0x0E) == 0x9FC0, "BDA EBDA segment is %#x", rd16(bda + 0x0E));
    uint8_t imr0 = inb(0x21), imr1 = inb(0xA1);
    CHECK(imr0 == 0xFA && imr1 == 0xFF, "PIC masks are %#x/%#x, expected 0xfa/0xff", imr0, imr1);
    outb(0x43, 0xE2); /* read-back: latch channel 0's status */
    uint8_t status = inb(0x40);
    if (status == 0xFF) {
        outb(0x21, 0xFF);
        print("# no PIT (its ports read 0xff): its mode and IRQ 0 not checked\n");
        return 1;
    }
    CHECK(((status >> 1) & 3) == 3 && ((status >> 4) & 3) == 3,
          "PIT channel 0 status %#x: not mode 3, LSB then MSB", status);
    uint32_t polls = 0;
    uint8_t irr = 0;
    outb(0x20, 0x0A); /* OCW3: reads of port 0x20 return the IRR */
    while (polls < 2000000 && !(irr & 1)) {
        irr = inb(0x20);
        polls++;
    }
    outb(0x21, 0xFF);
    CHECK(irr & 1, "no IRQ 0 from the PIT in %u polls of the master's IRR", polls);
    print("# PIT raised IRQ 0 after %u polls of the IRR\n", polls);
    return 1;
}
