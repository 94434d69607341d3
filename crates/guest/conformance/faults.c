/*
 * exitlab conformance kernel. Endings the VMM must report: a triple fault and a guest that never stops.
 */
#include "conformance.h"

int test_triplefault(void)
{
    print("# triplefault: loading an empty IDT and raising #UD\n");
    triple_fault();
}

int test_timeout(void)
{
    print("# timeout: spinning until the VMM stops the guest\n");
    spin_forever();
}

