/* exitlab guest kernel: the exit-path probes (see lab.h and abi.h's PROBE_BLOCKS). */
#include "abi.h"
#include "kernel.h"
#include "lab.h"

/* The median of PROBE_BLOCKS block times (sorts them). */
static uint64_t median_block(uint64_t *blocks)
{
    for (uint64_t i = 1; i < PROBE_BLOCKS; i++) {
        const uint64_t v = blocks[i];
        uint64_t j = i;
        for (; j > 0 && blocks[j - 1] > v; j--)
            blocks[j] = blocks[j - 1];
        blocks[j] = v;
    }
    return blocks[PROBE_BLOCKS / 2];
}

/*
 * The exit-path probes: PROBE_BLOCKS blocks of PROBE_ACCESSES port accesses, each block
 * timed as one; each returns its median block's TSC cycles. The kernel probe writes
 * PROBE_PORT, which an ioeventfd absorbs in the kernel; the userspace probe rings
 * DOORBELL_PROBE, which the VMM answers at once. A host state that slows the exit path (and not the
 * guest's own code, which the empty loop before every sample watches) slows them too.
 * They run before READY and after DONE, outside the part whose exits are counted, and
 * away from the measured loop, whose code and timing they leave as they were.
 */
static uint64_t __attribute__((noinline)) probe_kernel(void)
{
    uint64_t blocks[PROBE_BLOCKS];
    for (uint64_t b = 0; b < PROBE_BLOCKS; b++) {
        const uint64_t start = tsc_begin();
        for (uint64_t a = 0; a < PROBE_ACCESSES; a++)
            __asm__ volatile("outb %%al, %%dx" : : "a"(0), "d"((uint16_t)PROBE_PORT) : "memory");
        blocks[b] = tsc_end() - start;
    }
    return median_block(blocks);
}

static uint64_t __attribute__((noinline)) probe_user(void)
{
    uint64_t blocks[PROBE_BLOCKS];
    for (uint64_t b = 0; b < PROBE_BLOCKS; b++) {
        const uint64_t start = tsc_begin();
        for (uint64_t a = 0; a < PROBE_ACCESSES; a++)
            doorbell(DOORBELL_PROBE);
        blocks[b] = tsc_end() - start;
    }
    return median_block(blocks);
}

void probe_before(void)
{
    CONTROL->probe_kernel_before = probe_kernel();
    CONTROL->probe_user_before = probe_user();
}

/* A host that resumes after DONE gets the probes after the samples. */
void after_done(void)
{
    if (CONTROL->probe != 0) {
        CONTROL->probe_kernel_after = probe_kernel();
        CONTROL->probe_user_after = probe_user();
    }
    doorbell(DOORBELL_PROBED);
    spin();
}
