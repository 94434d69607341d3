/*
 * exitlab conformance kernel. String port I/O: `rep insb` from pc-testdev's latch port
 * into pc-testdev's RAM-like MMIO, 1,024 bytes. Each element is a port read (the
 * latch's low byte) and an MMIO write: the VMM must handle the string instruction one
 * element at a time and put every byte where the guest's EDI pointed.
 */
#include "conformance.h"

#define TESTDEV_LATCH_PORT 0xE0
#define TESTDEV_MEM_BASE   0xFF000000u
#define STRIO_BYTES        1024u

int test_strio(void)
{
    uint32_t dst = TESTDEV_MEM_BASE + 0x100;
    for (uint32_t i = 0; i < STRIO_BYTES + 2; i++)
        wr8(dst - 1 + i, 0x11);
    outw(TESTDEV_LATCH_PORT, 0xA55A);
    uint16_t back = inw(TESTDEV_LATCH_PORT);
    CHECK(back == 0xA55A, "the pc-testdev latch read %#x after writing 0xa55a", back);
    uint32_t edi = dst, ecx = STRIO_BYTES;
    __asm__ volatile("cld; rep insb"
                     : "+D"(edi), "+c"(ecx)
                     : "d"((uint16_t)TESTDEV_LATCH_PORT)
                     : "memory");
    CHECK(ecx == 0 && edi == dst + STRIO_BYTES, "rep insb ended with ECX %u, EDI %#x; "
          "expected 0, %#x", ecx, edi, dst + STRIO_BYTES);
    uint32_t bad = 0, first = 0;
    for (uint32_t i = 0; i < STRIO_BYTES; i++)
        if (rd8(dst + i) != 0x5A && !bad++)
            first = i;
    CHECK(bad == 0, "%u of %u bytes written by rep insb into MMIO are wrong, the first at "
          "offset %u reads %#x, expected 0x5a (the latch's low byte)", bad, STRIO_BYTES,
          first, rd8(dst + first));
    CHECK(rd8(dst - 1) == 0x11 && rd8(dst + STRIO_BYTES) == 0x11,
          "rep insb wrote outside its %u bytes", STRIO_BYTES);
    return 1;
}
