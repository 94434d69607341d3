/*
 * exitlab conformance kernel. NMI latching: the boot CPU sends itself an NMI through
 * its local APIC; the handler sends two more while NMIs are blocked. The CPU latches
 * one and drops the other, so after the first IRET exactly one more NMI arrives: two
 * handler runs in all, not one and not three.
 */
#include "conformance.h"

#define ICR_NMI_SELF  0x00044400u  /* shorthand self, assert, NMI */
#define NMI_WAIT_MS   200u

static volatile uint32_t nmi_count;
static volatile uint32_t nmi_sent_inside;

void nmi_handler(void);

/* Saves the caller-clobbered registers around the C handler and returns with IRET. */
__asm__(".text\n"
        ".globl nmi_entry\n"
        "nmi_entry:\n"
        "    pushl %eax\n"
        "    pushl %ecx\n"
        "    pushl %edx\n"
        "    cld\n"
        "    call nmi_handler\n"
        "    popl %edx\n"
        "    popl %ecx\n"
        "    popl %eax\n"
        "    iret\n");
extern char nmi_entry[];

static int icr_idle(uint32_t ms)
{
    uint64_t t0 = rdtsc();
    while (lapic_read(LAPIC_ICR_LOW) & ICR_PENDING)
        if (rdtsc() - t0 > ms_to_tsc(ms))
            return 0;
    return 1;
}

void nmi_handler(void)
{
    uint32_t n = ++nmi_count;
    if (n != 1)
        return;
    /* Inside the first handler: NMIs are blocked until IRET. */
    for (int i = 0; i < 2; i++) {
        lapic_write(LAPIC_ICR_HIGH, 0);
        lapic_write(LAPIC_ICR_LOW, ICR_NMI_SELF);
        if (icr_idle(100))
            nmi_sent_inside++;
    }
    /* Give both time to arrive: neither may be delivered before IRET. */
    delay_us(20000);
    nmi_sent_inside |= (nmi_count != 1) << 8;
}

int test_nmi(void)
{
    uint64_t saved = idt[2];
    uint32_t a = (uint32_t)nmi_entry;
    idt[2] = (a & 0xFFFF) | ((uint64_t)SEL_CODE << 16) | (0x8EULL << 40) |
             ((uint64_t)(a >> 16) << 48);
    lapic_write(LAPIC_SVR, lapic_read(LAPIC_SVR) | 0x1FF);
    nmi_count = 0;
    nmi_sent_inside = 0;
    lapic_write(LAPIC_ICR_HIGH, 0);
    lapic_write(LAPIC_ICR_LOW, ICR_NMI_SELF);
    int idle = icr_idle(100);
    uint64_t t0 = rdtsc();
    while (nmi_count < 2 && rdtsc() - t0 < ms_to_tsc(NMI_WAIT_MS))
        __asm__ volatile("pause");
    /* Any third NMI would arrive by now too. */
    delay_us(20000);
    uint32_t count = nmi_count, inside = nmi_sent_inside;
    idt[2] = saved;
    print("# nmi: %u handler runs; %u NMIs sent from inside the handler\n", count, inside & 0xFF);
    CHECK(idle, "the ICR stayed busy after sending an NMI to self");
    CHECK(count >= 1, "the NMI sent to self never arrived");
    CHECK((inside & 0xFF) == 2, "only %u of the two NMIs from inside the handler were sent",
          inside & 0xFF);
    CHECK(!(inside & 0x100), "an NMI was delivered inside the NMI handler, before IRET");
    CHECK(count == 2, "%u NMI handler runs, expected 2: one NMI latched while the handler "
          "ran and the other dropped", count);
    return 1;
}
