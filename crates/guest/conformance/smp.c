/*
 * exitlab conformance kernel. SMP: INIT/SIPI bring-up of the application processors through the local APIC.
 */
#include "conformance.h"

/* Application processors. */
volatile uint32_t ap_next;
static volatile uint32_t ap_online;
static volatile uint8_t ap_ids[MAX_APS];

void ap_main(uint32_t index)
{
    ap_ids[index] = (uint8_t)lapic_id();
    __atomic_fetch_add(&ap_online, 1, __ATOMIC_SEQ_CST);
    for (;;)
        __asm__ volatile("cli; hlt");
}

static int send_ipi(uint32_t icr)
{
    lapic_write(LAPIC_ICR_HIGH, 0);
    lapic_write(LAPIC_ICR_LOW, icr);
    uint64_t t0 = rdtsc();
    while (lapic_read(LAPIC_ICR_LOW) & ICR_PENDING)
        CHECK(rdtsc() - t0 < ms_to_tsc(100), "the ICR stays busy after writing %#x", icr);
    return 1;
}

int test_smp(void)
{
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    uint32_t cpus = (uint32_t)fw_cfg_item(FW_CFG_NB_CPUS, 2);
    CHECK(cpus == a.ncpus, "fw_cfg says %u CPUs, the MADT lists %u", cpus, a.ncpus);
    CHECK(cpus >= 1 && cpus <= MAX_CPUS, "%u CPUs; this kernel handles 1..%u", cpus, MAX_CPUS);
    uint32_t bsp = lapic_id();
    if (cpus == 1) {
        print("# smp: one CPU (APIC id %u), no application processors\n", bsp);
        return 1;
    }
    uint32_t tlen = (uint32_t)(ap_trampoline_end - ap_trampoline_start);
    memcpy((void *)AP_TRAMPOLINE_ADDR, ap_trampoline_start, tlen);
    ap_next = 0;
    ap_online = 0;
    for (uint32_t i = 0; i < MAX_APS; i++)
        ap_ids[i] = 0xFF;
    lapic_write(LAPIC_SVR, lapic_read(LAPIC_SVR) | 0x1FF);

    uint64_t t0 = rdtsc();
    if (!send_ipi(ICR_INIT))
        return 0;
    delay_us(10000);
    if (!send_ipi(ICR_STARTUP | (AP_TRAMPOLINE_ADDR >> 12)))
        return 0;
    delay_us(200);
    if (!send_ipi(ICR_STARTUP | (AP_TRAMPOLINE_ADDR >> 12)))
        return 0;
    while (ap_online < cpus - 1 && rdtsc() - t0 < ms_to_tsc(AP_TIMEOUT_MS))
        __asm__ volatile("pause");
    uint64_t took = rdtsc() - t0;
    uint32_t online = ap_online;
    print("# smp: %u of %u application processors online after %llu TSC cycles\n", online,
          cpus - 1, took);
    CHECK(online == cpus - 1, "%u of %u application processors came online within %u ms", online,
          cpus - 1, AP_TIMEOUT_MS);
    CHECK(ap_next == cpus - 1, "%u processors entered the trampoline, expected %u", ap_next,
          cpus - 1);

    uint8_t seen[MAX_CPUS];
    seen[0] = (uint8_t)bsp;
    for (uint32_t i = 0; i < online; i++) {
        uint8_t id = ap_ids[i];
        print("# smp: AP %u has APIC id %u\n", i, id);
        for (uint32_t j = 0; j <= i; j++)
            CHECK(seen[j] != id, "APIC id %u reported twice", id);
        seen[i + 1] = id;
    }
    for (uint32_t i = 0; i < cpus; i++) {
        int listed = 0;
        for (uint32_t j = 0; j < a.ncpus; j++)
            listed |= a.apic_ids[j] == seen[i];
        CHECK(listed, "APIC id %u of a running CPU is not in the MADT", seen[i]);
    }
    return 1;
}

