/*
 * exitlab guest kernel: the local APIC in xAPIC (MMIO) or x2APIC (MSR) mode, per-vCPU
 * records, SMP bring-up. Accessors are inline: they sit in measured loops.
 */
#ifndef EXITLAB_APIC_H
#define EXITLAB_APIC_H

#include <stdint.h>
#include "abi.h"

/* Register offsets (xAPIC MMIO; the x2APIC MSR is 0x800 + offset / 16). */
#define APIC_ID      0x20
#define APIC_TPR     0x80
#define APIC_EOI     0xB0
#define APIC_SVR     0xF0
#define APIC_ICR     0x300
#define APIC_ICR2    0x310
#define APIC_LVTT    0x320
#define APIC_TMICT   0x380
#define APIC_TDCR    0x3E0

#define ICR_FIXED        0x00000
#define ICR_INIT         0x00500
#define ICR_STARTUP      0x00600
#define ICR_ASSERT       0x04000
#define ICR_LEVEL        0x08000
#define ICR_SELF         0x40000
#define ICR_ALL_BUT_SELF 0xC0000

#define LVTT_TSC_DEADLINE (2U << 17)
#define MSR_APIC_BASE     0x1B
#define MSR_TSC_DEADLINE  0x6E0
#define MSR_GS_BASE       0xC0000101

#define PERCPU(id) ((volatile struct percpu *)(PERCPU_GPA + (uint64_t)(id) * PERCPU_BYTES))
/* This vCPU's own record, through GS (its base is the record's address). */
#define ME ((volatile struct percpu __seg_gs *)0)

extern int apic_x2;

static inline uint64_t rdmsr(uint32_t msr)
{
    uint32_t lo, hi;
    __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr) : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline void wrmsr(uint32_t msr, uint64_t v)
{
    __asm__ volatile("wrmsr" : : "c"(msr), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}

static inline uint64_t rdtsc_plain(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline void cpu_pause(void)
{
    __asm__ volatile("pause" : : : "memory");
}

static inline uint32_t apic_read(uint32_t reg)
{
    if (apic_x2)
        return (uint32_t)rdmsr(0x800 + (reg >> 4));
    return *(volatile uint32_t *)(LAPIC_GPA + reg);
}

static inline void apic_write(uint32_t reg, uint32_t v)
{
    if (apic_x2)
        wrmsr(0x800 + (reg >> 4), v);
    else
        *(volatile uint32_t *)(LAPIC_GPA + reg) = v;
}

/* One ICR write: in x2APIC mode a single WRMSR, in xAPIC mode ICR2 (destination) then ICR. */
static inline void apic_icr(uint32_t dest, uint32_t low)
{
    if (apic_x2) {
        wrmsr(0x830, ((uint64_t)dest << 32) | low);
    } else {
        *(volatile uint32_t *)(LAPIC_GPA + APIC_ICR2) = dest << 24;
        *(volatile uint32_t *)(LAPIC_GPA + APIC_ICR) = low;
    }
}

static inline void apic_eoi(void)
{
    apic_write(APIC_EOI, 0);
}

/* Sets up the IDT gates of the APIC vectors, this vCPU's APIC and, for cpus > 1, starts
   the APs. Returns 0 or a GUEST_ERR_*. */
uint64_t smp_init(uint64_t apic_mode, uint64_t cpus, uint64_t idle);
/* Whether CPUID offers `feature` (a GUEST_ERR_FEATURE check): 1 = TSC deadline,
   2 = MONITOR/MWAIT, 3 = KVM PV send-IPI. */
int cpu_has(int feature);
#define FEAT_TSC_DEADLINE 1
#define FEAT_MWAIT        2
#define FEAT_PV_SEND_IPI  3

/* Shared by the broadcast-lock handlers and the sender. */
extern volatile uint64_t lock_count;
/* Timer interrupts taken by the BSP. */
extern volatile uint64_t timer_count;

#endif /* EXITLAB_APIC_H */
