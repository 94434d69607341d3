/*
 * exitlab conformance kernel. Machine-check banks: MCG_CAP names the bank count (10,
 * as on QEMU's pc machine) and every bank's MCi_CTL, MCi_STATUS, MCi_ADDR and MCi_MISC
 * behave: CTL takes all ones and 0, STATUS takes 0, all read back without a fault; the
 * first MSR past the last bank raises #GP.
 *
 * The #GP is caught without IRET (some hosts' KVM cannot emulate a ring-0 IRET): the
 * handler skips the 2-byte RDMSR/WRMSR and returns with a far return.
 */
#include "conformance.h"

#define MSR_MCG_CAP     0x179
#define MSR_MCG_STATUS  0x17A
#define MSR_MCG_CTL     0x17B
#define MSR_MC0_CTL     0x400
#define MCG_CTL_P       (1u << 8)
#define EXPECTED_BANKS  10u

volatile uint32_t mce_gp_count;

__asm__(".text\n"
        ".globl mce_gp_entry\n"
        "mce_gp_entry:\n"
        "    addl $4, %esp\n"          /* the error code */
        "    addl $2, (%esp)\n"        /* past the faulting rdmsr/wrmsr */
        "    incl mce_gp_count\n"
        "    pushl 8(%esp)\n"
        "    popfl\n"                  /* EFLAGS as saved */
        "    lret $4\n");              /* EIP, CS, then drop EFLAGS */
extern char mce_gp_entry[];

static inline uint64_t rdmsr(uint32_t msr)
{
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("rdmsr" : "+a"(lo), "+d"(hi) : "c"(msr) : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline void wrmsr(uint32_t msr, uint64_t v)
{
    __asm__ volatile("wrmsr" : : "c"(msr), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}

/* Whether rdmsr/wrmsr of msr faulted. */
static int faults(uint32_t before)
{
    return mce_gp_count != before;
}

int test_mce(void)
{
    uint64_t saved = idt[13];
    uint32_t a = (uint32_t)mce_gp_entry;
    idt[13] = (a & 0xFFFF) | ((uint64_t)SEL_CODE << 16) | (0x8EULL << 40) |
              ((uint64_t)(a >> 16) << 48);
    mce_gp_count = 0;
    int ok = 0;
    uint64_t cap = rdmsr(MSR_MCG_CAP);
    uint32_t banks = (uint32_t)cap & 0xFF;
    print("# mce: MCG_CAP %#llx: %u banks%s\n", cap, banks,
          cap & MCG_CTL_P ? ", MCG_CTL present" : "");
    if (mce_gp_count || banks != EXPECTED_BANKS) {
        fail_line("MCG_CAP %#llx%s: expected %u banks", cap, mce_gp_count ? " (#GP)" : "",
                  EXPECTED_BANKS);
        goto out;
    }
    uint32_t g = mce_gp_count;
    if (cap & MCG_CTL_P) {
        wrmsr(MSR_MCG_CTL, ~0ULL);
        uint64_t v = rdmsr(MSR_MCG_CTL);
        if (faults(g) || v != ~0ULL) {
            fail_line("MCG_CTL read %#llx after writing all ones%s", v, faults(g) ? " (#GP)" : "");
            goto out;
        }
    }
    (void)rdmsr(MSR_MCG_STATUS);
    for (uint32_t i = 0; i < banks; i++) {
        uint32_t base = MSR_MC0_CTL + 4 * i;
        g = mce_gp_count;
        wrmsr(base, ~0ULL);
        uint64_t ctl = rdmsr(base);
        wrmsr(base, 0);
        uint64_t ctl0 = rdmsr(base);
        wrmsr(base + 1, 0);
        uint64_t status = rdmsr(base + 1);
        (void)rdmsr(base + 2);
        (void)rdmsr(base + 3);
        if (faults(g) || ctl != ~0ULL || ctl0 != 0 || status != 0) {
            fail_line("bank %u: MCi_CTL read %#llx after all ones and %#llx after 0, MCi_STATUS "
                      "%#llx after 0, %u #GP", i, ctl, ctl0, status, mce_gp_count - g);
            goto out;
        }
    }
    g = mce_gp_count;
    (void)rdmsr(MSR_MC0_CTL + 4 * banks);
    if (!faults(g)) {
        fail_line("MC%u_CTL (MSR %#x), past the last bank, did not raise #GP", banks,
                  MSR_MC0_CTL + 4 * banks);
        goto out;
    }
    print("# mce: %u banks x 4 MSRs behave; MSR %#x raises #GP\n", banks, MSR_MC0_CTL + 4 * banks);
    ok = 1;
out:
    idt[13] = saved;
    return ok;
}
