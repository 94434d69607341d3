/*
 * exitlab guest kernel: IDT gates of the APIC vectors, the interrupt handlers, local
 * APIC set-up in xAPIC or x2APIC mode, and SMP bring-up with INIT-SIPI-SIPI.
 *
 * Every vCPU has a record on the per-vCPU page (struct percpu) that its handlers update
 * and that the other vCPUs and the host read; its GS base points at it so a handler
 * finds it without an APIC access.
 */
#include "abi.h"
#include "kernel.h"
#include "apic.h"

#define CONTROL ((volatile struct control *)CONTROL_GPA)

/* TSC cycles the BSP waits for the APs to come up (several seconds on any host). */
#define AP_TIMEOUT_CYCLES 20000000000ULL

int apic_x2;
volatile uint64_t lock_count;
volatile uint64_t timer_count;
static volatile uint32_t shared_lock;
static volatile uint64_t ap_idle;

extern char ap_trampoline_start[], ap_trampoline_end[];
extern uint64_t idt[];
void irq_ipi_entry(void);
void irq_self_entry(void);
void irq_lock_entry(void);
void irq_timer_entry(void);
void irq_spurious_entry(void);
void ap_main(uint32_t id) __attribute__((noreturn));
void irq_ipi(void);
void irq_self(void);
void irq_lock(void);
void irq_timer(void);

static void set_gate(uint32_t vector, void (*fn)(void))
{
    uint64_t a = (uint64_t)fn;
    idt[2 * vector] = (a & 0xFFFF) | ((uint64_t)SEL_KERNEL_CODE << 16) | (0x8EULL << 40) |
                      ((a >> 16) & 0xFFFF) << 48;
    idt[2 * vector + 1] = a >> 32;
}

/*
 * The handlers. Each runs with IF=0 on the interrupted stack, and signals EOI before it
 * acknowledges: a sender that sees the acknowledgement may send the same vector again at
 * once, and it must not find it still in service.
 */
void irq_ipi(void)
{
    ME->last_entry_tsc = rdtsc_plain();
    ME->irqs++;
    apic_eoi();
    ME->acks++;
}

void irq_self(void)
{
    ME->irqs++;
    apic_eoi();
    ME->acks++;
}

void irq_lock(void)
{
    while (__atomic_exchange_n(&shared_lock, 1, __ATOMIC_ACQUIRE))
        cpu_pause();
    ME->irqs++;
    apic_eoi();
    lock_count++;
    __atomic_store_n(&shared_lock, 0, __ATOMIC_RELEASE);
    ME->acks++;
}

void irq_timer(void)
{
    ME->irqs++;
    timer_count++;
    apic_eoi();
}

static void cpuid(uint32_t leaf, uint32_t sub, uint32_t *a, uint32_t *b, uint32_t *c, uint32_t *d)
{
    __asm__ volatile("cpuid" : "=a"(*a), "=b"(*b), "=c"(*c), "=d"(*d) : "a"(leaf), "c"(sub));
}

int cpu_has(int feature)
{
    uint32_t a, b, c, d;
    switch (feature) {
    case FEAT_TSC_DEADLINE:
        cpuid(1, 0, &a, &b, &c, &d);
        return (c >> 24) & 1;
    case FEAT_MWAIT:
        cpuid(1, 0, &a, &b, &c, &d);
        return (c >> 3) & 1;
    case FEAT_PV_SEND_IPI:
        /* "KVMKVMKVM\0\0\0" at 0x40000000, then KVM_FEATURE_PV_SEND_IPI (bit 11). */
        cpuid(0x40000000, 0, &a, &b, &c, &d);
        if (b != 0x4b4d564bU || c != 0x564b4d56U || d != 0x4d || a < 0x40000001U)
            return 0;
        cpuid(0x40000001, 0, &a, &b, &c, &d);
        return (a >> 11) & 1;
    default:
        return 0;
    }
}

static int has_x2apic(void)
{
    uint32_t a, b, c, d;
    cpuid(1, 0, &a, &b, &c, &d);
    return (c >> 21) & 1;
}

/* This vCPU's APIC on: x2APIC mode if asked, spurious vector, TPR 0; GS at its record. */
static void local_init(uint32_t id)
{
    wrmsr(MSR_GS_BASE, PERCPU_GPA + (uint64_t)id * PERCPU_BYTES);
    if (apic_x2)
        wrmsr(MSR_APIC_BASE, rdmsr(MSR_APIC_BASE) | (1ULL << 11) | (1ULL << 10));
    apic_write(APIC_SVR, 0x100 | VECTOR_SPURIOUS);
    apic_write(APIC_TPR, 0);
    ME->apic_id = apic_x2 ? apic_read(APIC_ID) : apic_read(APIC_ID) >> 24;
    ME->online = 1;
    __atomic_fetch_or(&CONTROL->cpus_online, 1ULL << id, __ATOMIC_SEQ_CST);
}

/* What an AP does once up: wait for interrupts the way `idle` says, forever. */
void ap_main(uint32_t id)
{
    local_init(id);
    switch (ap_idle) {
    case IDLE_HLT:
        for (;;) {
            __asm__ volatile("sti; hlt; cli" : : : "memory");
            ME->wake_tsc = rdtsc_plain();
            ME->wakes++;
        }
    case IDLE_MWAIT:
        for (;;) {
            __asm__ volatile("monitor" : : "a"(PERCPU(id)), "c"(0), "d"(0) : "memory");
            __asm__ volatile("sti; mwait; cli" : : "a"(0), "c"(0) : "memory");
            ME->wake_tsc = rdtsc_plain();
            ME->wakes++;
        }
    default:
        __asm__ volatile("sti" : : : "memory");
        for (;;)
            __asm__ volatile("" : : : "memory");
    }
}

static void delay(uint64_t cycles)
{
    uint64_t t = rdtsc_plain();
    while (rdtsc_plain() - t < cycles)
        cpu_pause();
}

uint64_t smp_init(uint64_t apic_mode, uint64_t cpus, uint64_t idle)
{
    if (apic_mode != APIC_XAPIC && apic_mode != APIC_X2APIC)
        return GUEST_ERR_FEATURE;
    if (cpus < 1 || cpus > MAX_CPUS)
        return GUEST_ERR_FEATURE;
    if (idle != IDLE_POLL && idle != IDLE_HLT && idle != IDLE_MWAIT)
        return GUEST_ERR_FEATURE;
    if (apic_mode == APIC_X2APIC && !has_x2apic())
        return GUEST_ERR_FEATURE;
    if (idle == IDLE_MWAIT && !cpu_has(FEAT_MWAIT))
        return GUEST_ERR_FEATURE;
    apic_x2 = apic_mode == APIC_X2APIC;
    ap_idle = idle;
    set_gate(VECTOR_IPI, irq_ipi_entry);
    set_gate(VECTOR_SELF, irq_self_entry);
    set_gate(VECTOR_LOCK, irq_lock_entry);
    set_gate(VECTOR_TIMER, irq_timer_entry);
    set_gate(VECTOR_SPURIOUS, irq_spurious_entry);
    local_init(0);
    if (cpus == 1)
        return 0;
    uint64_t len = (uint64_t)(ap_trampoline_end - ap_trampoline_start);
    __asm__ volatile("rep movsb"
                     : "+D"((uint64_t){AP_TRAMPOLINE_GPA}), "+S"((uint64_t){(uint64_t)ap_trampoline_start}),
                       "+c"(len)
                     :
                     : "memory");
    for (uint32_t id = 1; id < cpus; id++) {
        apic_icr(id, ICR_INIT | ICR_ASSERT | ICR_LEVEL);
        apic_icr(id, ICR_INIT | ICR_LEVEL);
        delay(10000);
        apic_icr(id, ICR_STARTUP | (AP_TRAMPOLINE_GPA >> 12));
        delay(10000);
        apic_icr(id, ICR_STARTUP | (AP_TRAMPOLINE_GPA >> 12));
    }
    const uint64_t all = cpus == 64 ? ~0ULL : (1ULL << cpus) - 1;
    const uint64_t start = rdtsc_plain();
    while (CONTROL->cpus_online != all) {
        if (rdtsc_plain() - start > AP_TIMEOUT_CYCLES)
            return GUEST_ERR_AP_TIMEOUT;
        cpu_pause();
    }
    return 0;
}
