/*
 * exitlab conformance kernel: checks, from inside the guest, that the platform and the
 * boot protocols behave as documented.
 *
 * Each area has its own file (boot.c, acpi.c, fwcfg.c, timers.c (also the firmware state), pci.c, serial.c,
 * smp.c, nmi.c, strio.c, mce.c, s3.c, faults.c, ioapic.c; lib.c holds what they share); a test
 * is one function, and the table below lists them, as kvm-unit-tests' x86/vmexit.c
 * keeps its tests.
 *
 * The command line names the tests to run (all that apply when it names none) and
 * gives the expected values as key=value words:
 *
 *   ram=MiB  cpus=N  tsc_khz=KHZ  initrd_len=BYTES  initrd_sum=FNV1A32  doorbells=N
 *
 * Every test prints `PASS <name>` or `FAIL <name>: <reason>` on COM1; lines starting
 * with `#` are information. The run ends with `SUMMARY <passed>/<total>` and writes 0
 * (all passed) or 1 to the debug-exit port.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "conformance.h"

/* ---------------------------------------------------------------------------------- */
/* Test table and main. */

#define T_MULTIBOOT (1u << 0)   /* applies to multiboot boots only */
#define T_PVH       (1u << 1)   /* applies to PVH boots only */
#define T_NAMED     (1u << 2)   /* runs only when named */
#define T_TSC       (1u << 3)   /* skipped by default without tsc_khz= */

static const struct test {
    const char *name;
    int (*fn)(void);
    uint32_t flags;
} tests[] = {
    {"mbinfo", test_mbinfo, T_MULTIBOOT},
    {"pvhinfo", test_pvhinfo, T_PVH},
    {"cmdline", test_cmdline, 0},
    {"fwcfg", test_fwcfg, 0},
    {"acpi", test_acpi, 0},
    {"pmtimer", test_pmtimer, T_TSC},
    {"hpet", test_hpet, T_TSC},
    {"firmware", test_firmware, T_MULTIBOOT},
    {"pci", test_pci, 0},
    {"pcicfg", test_pcicfg, 0},
    {"serial", test_serial, 0},
    {"smp", test_smp, 0},
    {"nmi", test_nmi, T_NAMED},
    {"strio", test_strio, T_NAMED},
    {"mce", test_mce, 0},
    {"s3", test_s3, T_NAMED},
    {"s5", test_s5, T_NAMED},
    {"triplefault", test_triplefault, T_NAMED},
    {"timeout", test_timeout, T_NAMED},
    {"badfetch", test_badfetch, T_NAMED},
    {"reset92", test_reset92, T_NAMED},
    {"ioapic", test_ioapic, T_NAMED},
};

#define NTESTS (sizeof(tests) / sizeof(tests[0]))

static void idt_init(void)
{
    for (uint32_t v = 0; v < 32; v++) {
        uint32_t a = (uint32_t)isr_stubs + 16 * v;
        idt[v] = (a & 0xFFFF) | ((uint64_t)SEL_CODE << 16) | (0x8EULL << 40) |
                 ((uint64_t)(a >> 16) << 48);
    }
}

/* Splits the command line into argv[0] (multiboot) and the rest, and reads the words. */
static uint32_t parse_cmdline(void)
{
    const char *s = cmdline_full;
    if (boot_kind == BOOT_MULTIBOOT) {
        while (s[argv0_len] && !is_space(s[argv0_len]))
            argv0_len++;
        argv0 = s;
        s += argv0_len;
        if (*s)
            s++;
    }
    cmdline_rest = s;
    args.doorbells = DEFAULT_DOORBELLS;
    uint32_t selected = 0;
    while (*s) {
        while (is_space(*s))
            s++;
        const char *w = s;
        uint32_t n = 0, eq = 0;
        while (w[n] && !is_space(w[n])) {
            if (w[n] == '=' && !eq)
                eq = n;
            n++;
        }
        s = w + n;
        if (!n)
            break;
        int known = 0;
        for (uint32_t t = 0; t < NTESTS; t++)
            if (word_is(w, n, tests[t].name)) {
                selected |= 1u << t;
                known = 1;
            }
        if (known || !eq)
            continue;
        uint64_t v;
        if (!parse_u64(w + eq + 1, n - eq - 1, &v))
            continue;
        if (word_is(w, eq, "ram")) {
            args.ram_mib = v;
            args.has_ram = 1;
        } else if (word_is(w, eq, "cpus")) {
            args.cpus = (uint32_t)v;
            args.has_cpus = 1;
        } else if (word_is(w, eq, "tsc_khz")) {
            args.tsc_khz = (uint32_t)v;
            args.has_tsc_khz = 1;
        } else if (word_is(w, eq, "initrd_len")) {
            args.initrd_len = (uint32_t)v;
            args.has_initrd = 1;
        } else if (word_is(w, eq, "initrd_sum")) {
            args.initrd_sum = (uint32_t)v;
        } else if (word_is(w, eq, "doorbells")) {
            args.doorbells = (uint32_t)v;
        }
    }
    return selected;
}

void cmain(uint32_t boot, uint32_t magic, uint32_t info)
{
    idt_init();
    boot_kind = boot;
    boot_magic = magic;
    boot_info = info;
    print("# exitlab conformance kernel, %s entry\n", boot == BOOT_PVH ? "PVH" : "multiboot");

    if (boot == BOOT_MULTIBOOT && magic == MULTIBOOT_BOOT_MAGIC && info &&
        (rd32(info + MBI_FLAGS) & MBI_F_CMDLINE) && rd32(info + MBI_CMDLINE))
        cmdline_full = (const char *)rd32(info + MBI_CMDLINE);
    else if (boot == BOOT_PVH && info && rd32(info + SI_MAGIC) == PVH_MAGIC &&
             rd64(info + SI_CMDLINE) && rd64(info + SI_CMDLINE) < PCI_HOLE_START)
        cmdline_full = (const char *)(uint32_t)rd64(info + SI_CMDLINE);
    uint32_t selected = parse_cmdline();

    uint32_t passed = 0, total = 0;
    for (uint32_t t = 0; t < NTESTS; t++) {
        const struct test *tt = &tests[t];
        int named = (selected >> t) & 1;
        if (selected && !named)
            continue;
        current_test = tt->name;
        if (!selected) {
            if (tt->flags & T_NAMED)
                continue;
            if ((tt->flags & T_MULTIBOOT) && boot != BOOT_MULTIBOOT)
                continue;
            if ((tt->flags & T_PVH) && boot != BOOT_PVH)
                continue;
            if ((tt->flags & T_TSC) && !args.has_tsc_khz) {
                print("SKIP %s: no tsc_khz= on the command line\n", tt->name);
                continue;
            }
        }
        total++;
        if ((tt->flags & T_MULTIBOOT) && boot != BOOT_MULTIBOOT) {
            fail_line("the kernel was not entered through multiboot");
            continue;
        }
        if ((tt->flags & T_PVH) && boot != BOOT_PVH) {
            fail_line("the kernel was not entered through PVH");
            continue;
        }
        if (tt->fn()) {
            passed++;
            print("PASS %s\n", tt->name);
        }
    }
    print("SUMMARY %u/%u\n", passed, total);
    debug_exit(passed == total ? 0 : 1);
}

