/*
 * exitlab conformance kernel. Timers: the ACPI PM timer's rate against the TSC.
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

