/*
 * exitlab conformance kernel. Endings the VMM must report: a triple fault and a guest that never stops.
 */
#include "conformance.h"

int test_triplefault(void)
{
    print("# triplefault: loading an empty IDT and raising #UD\n");
    triple_fault();
}

/* Runs code from a guest-physical address with neither RAM nor a device behind it (in the
 * PCI hole, where exitlab places no BAR): KVM cannot fetch the instruction, so the run
 * must end as a KVM failure that names it, not hang or crash the VMM. */
int test_badfetch(void)
{
    void (*nowhere)(void) = (void (*)(void))0xD0000000u;
    print("# badfetch: jumping to %#x, where no RAM or device is\n", 0xD0000000u);
    nowhere();
    fail_line("returned from a jump to unbacked memory");
    return 0;
}

int test_timeout(void)
{
    print("# timeout: spinning until the VMM stops the guest\n");
    spin_forever();
}


/* System Control Port A: setting bit 0 resets the machine, which ends the run. */
int test_reset92(void)
{
    uint8_t before = inb(0x92);
    print("# reset92: port 0x92 reads %#x; setting A20, then bit 0\n", before);
    outb(0x92, 0x02);
    uint8_t a20 = inb(0x92);
    CHECK(a20 == 0x02, "port 0x92 read %#x after writing 0x02", a20);
    outb(0x92, 0x03);
    fail_line("still running after setting bit 0 of port 0x92");
    return 0;
}
