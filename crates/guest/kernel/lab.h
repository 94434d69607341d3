/*
 * exitlab guest kernel: what kmain.c and probe.c share, the control page and the
 * guest's side of the doorbell and the clock.
 */
#ifndef EXITLAB_LAB_H
#define EXITLAB_LAB_H

#include <stdint.h>
#include "abi.h"

#define CONTROL ((volatile struct control *)CONTROL_GPA)

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

/*
 * The exit-path probes (probe.c), outside the part whose exits are counted: before READY
 * into the control page, and after DONE followed by DOORBELL_PROBED (the guest then
 * spins; where the host did not ask for them, `Control::probe` 0, it only rings). They live in a file of their own, linked after
 * the tests, so that the tests' code sits where it did before the probes existed: on a
 * host that emulates guest ring 0, moving a loop across a page boundary moved its cost
 * by up to 15 %.
 */
void probe_before(void);
void after_done(void) __attribute__((noreturn));

#endif /* EXITLAB_LAB_H */
