/*
 * exitlab conformance kernel. ACPI: finds and validates the RSDP, RSDT, XSDT, FADT, FACS, DSDT and MADT.
 */
#include "conformance.h"

static uint8_t sum_bytes(uint32_t addr, uint32_t len)
{
    uint8_t s = 0;
    for (uint32_t i = 0; i < len; i++)
        s += rd8(addr + i);
    return s;
}

/* An RSDP with valid checksums at addr. */
int check_rsdp(uint32_t addr)
{
    CHECK(memcmp((const void *)addr, "RSD PTR ", 8) == 0, "no RSDP signature at %#x", addr);
    CHECK(sum_bytes(addr, 20) == 0, "the RSDP at %#x has a bad checksum", addr);
    if (rd8(addr + 15) >= 2) {
        uint32_t len = rd32(addr + 20);
        CHECK(len >= 36 && len < 4096, "the RSDP at %#x has length %u", addr, len);
        CHECK(sum_bytes(addr, len) == 0, "the RSDP at %#x has a bad extended checksum", addr);
    }
    return 1;
}

uint32_t scan_rsdp(void)
{
    for (uint32_t a = BIOS_START; a < HIGH_MEMORY; a += 16)
        if (rd32(a) == 0x20445352u && rd32(a + 4) == 0x20525450u) /* "RSD PTR " */
            return a;
    return 0;
}

/* A table header at addr with signature sig (or any when sig is NULL). */
static int check_table(uint32_t addr, const char *sig)
{
    CHECK(addr >= 0x1000 && addr < PCI_HOLE_START, "table %s at %#x is out of range",
          sig ? sig : "?", addr);
    uint32_t len = rd32(addr + 4);
    CHECK(len >= 36 && len <= 0x10000 && (uint64_t)addr + len <= PCI_HOLE_START,
          "table %.*s at %#x has length %u", 4, (const char *)addr, addr, len);
    if (sig)
        CHECK(memcmp((const void *)addr, sig, 4) == 0, "table at %#x is %.*s, expected %s", addr,
              4, (const char *)addr, sig);
    CHECK(sum_bytes(addr, len) == 0, "table %.*s at %#x has a bad checksum", 4,
          (const char *)addr, addr);
    return 1;
}

static int is_sig(uint32_t addr, const char *sig)
{
    return memcmp((const void *)addr, sig, 4) == 0;
}

/* Whether acpi_load() has described the tables already (they are described once). */
static int acpi_described;

/* Finds and validates the RSDP, RSDT, XSDT, FADT, FACS, DSDT and MADT. */
int acpi_load(struct acpi *a)
{
    int describe = !acpi_described;
    memset(a, 0, sizeof(*a));
    a->rsdp = scan_rsdp();
    CHECK(a->rsdp, "no RSDP (\"RSD PTR \") on a 16-byte boundary in 0xe0000..0xfffff");
    if (!check_rsdp(a->rsdp))
        return 0;
    uint32_t rev = rd8(a->rsdp + 15);
    a->rsdt = rd32(a->rsdp + 16);
    if (!check_table(a->rsdt, "RSDT"))
        return 0;
    uint32_t n = (rd32(a->rsdt + 4) - 36) / 4;
    if (rev >= 2) {
        uint64_t x = rd64(a->rsdp + 24);
        CHECK(x != 0 && x < PCI_HOLE_START, "the RSDP's XSDT address is %#llx", x);
        a->xsdt = (uint32_t)x;
        if (!check_table(a->xsdt, "XSDT"))
            return 0;
        uint32_t xn = (rd32(a->xsdt + 4) - 36) / 8;
        CHECK(xn == n, "the RSDT lists %u tables, the XSDT %u", n, xn);
    }
    if (describe)
        print("# acpi: RSDP at %05x (revision %u), RSDT at %x, XSDT at %x:", a->rsdp, rev,
              a->rsdt, a->xsdt);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = rd32(a->rsdt + 36 + 4 * i);
        if (a->xsdt) {
            uint64_t xt = rd64(a->xsdt + 36 + 8 * i);
            CHECK(xt == t, "RSDT entry %u is %#x but XSDT entry %u is %#llx", i, t, i, xt);
        }
        if (!check_table(t, NULL))
            return 0;
        if (describe)
            print(" %.*s@%x", 4, (const char *)t, t);
        if (is_sig(t, "FACP"))
            a->fadt = t;
        else if (is_sig(t, "APIC"))
            a->madt = t;
        else if (is_sig(t, "HPET"))
            a->hpet = t;
    }
    if (describe)
        print("\n");
    CHECK(a->fadt, "the RSDT lists no FADT (FACP)");
    CHECK(a->madt, "the RSDT lists no MADT (APIC)");

    uint32_t flen = rd32(a->fadt + 4);
    CHECK(flen >= 116, "the FADT is only %u bytes long", flen);
    a->dsdt = rd32(a->fadt + 40);
    if (flen >= 148) {
        uint64_t xd = rd64(a->fadt + 140);
        CHECK(xd == 0 || xd == a->dsdt, "FADT X_DSDT %#llx differs from DSDT %#x", xd, a->dsdt);
    }
    if (!check_table(a->dsdt, "DSDT"))
        return 0;
    a->facs = rd32(a->fadt + 36);
    if (a->facs) {
        CHECK(is_sig(a->facs, "FACS") && rd32(a->facs + 4) >= 64,
              "FADT FIRMWARE_CTRL %#x does not point at a FACS", a->facs);
    }
    uint32_t pm = rd32(a->fadt + 76);
    uint8_t pm_len = rd8(a->fadt + 91);
    uint32_t fflags = rd32(a->fadt + 112);
    CHECK(pm == PM_TIMER_PORT, "FADT PM_TMR_BLK is %#x, expected %#x", pm, PM_TIMER_PORT);
    CHECK(pm_len == 4, "FADT PM_TMR_LEN is %u, expected 4", pm_len);
    CHECK(!(fflags & (1u << 20)), "the FADT declares hardware-reduced ACPI (no PM timer)");
    a->pm_timer_bits = (fflags & (1u << 8)) ? 32 : 24;
    if (flen >= 220) {
        uint8_t space = rd8(a->fadt + 208), bits = rd8(a->fadt + 209);
        uint64_t xaddr = rd64(a->fadt + 212);
        CHECK(xaddr == 0 || (space == 1 && xaddr == PM_TIMER_PORT && bits == a->pm_timer_bits),
              "FADT X_PM_TMR_BLK is space %u, %u bits, address %#llx; expected I/O, %u bits, %#x",
              space, bits, xaddr, a->pm_timer_bits, PM_TIMER_PORT);
    }

    uint32_t mlen = rd32(a->madt + 4);
    CHECK(mlen >= 44, "the MADT is only %u bytes long", mlen);
    uint32_t lapic = rd32(a->madt + 36);
    CHECK(lapic == LAPIC_BASE, "MADT local APIC address is %#x, expected %#x", lapic, LAPIC_BASE);
    uint32_t ioapics = 0, ioapic_addr = 0, ioapic_gsi = 0, overrides = 0, disabled = 0;
    for (uint32_t off = 44; off < mlen;) {
        uint32_t e = a->madt + off;
        uint8_t type = rd8(e), elen = rd8(e + 1);
        CHECK(elen >= 2 && off + elen <= mlen, "MADT entry at offset %u has length %u", off, elen);
        if (type == 0) {
            CHECK(elen == 8, "MADT local APIC entry at offset %u has length %u", off, elen);
            uint8_t id = rd8(e + 3);
            if (rd32(e + 4) & 1) {
                for (uint32_t i = 0; i < a->ncpus; i++)
                    CHECK(a->apic_ids[i] != id, "MADT lists APIC id %u twice", id);
                a->apic_ids[a->ncpus++] = id;
            } else {
                disabled++;
            }
        } else if (type == 1) {
            CHECK(elen == 12, "MADT I/O APIC entry at offset %u has length %u", off, elen);
            ioapics++;
            ioapic_addr = rd32(e + 4);
            ioapic_gsi = rd32(e + 8);
        } else if (type == 2) {
            overrides++;
        }
        off += elen;
    }
    if (describe)
        print("# acpi: FADT at %x (PM timer %#x, %u bits), DSDT at %x (%u bytes), MADT at %x: "
              "%u enabled local APICs, %u disabled, %u I/O APIC, %u overrides\n",
              a->fadt, pm, a->pm_timer_bits, a->dsdt, rd32(a->dsdt + 4), a->madt, a->ncpus,
              disabled, ioapics, overrides);
    acpi_described = 1;
    CHECK(a->ncpus >= 1, "the MADT lists no enabled local APIC");
    CHECK(ioapics == 1, "the MADT lists %u I/O APICs, expected 1", ioapics);
    CHECK(ioapic_addr == IOAPIC_BASE && ioapic_gsi == 0,
          "the MADT's I/O APIC is at %#x with GSI base %u; expected %#x, 0", ioapic_addr,
          ioapic_gsi, IOAPIC_BASE);
    return 1;
}

int test_acpi(void)
{
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    if (args.has_cpus)
        CHECK(a.ncpus == args.cpus, "the MADT lists %u local APICs; cpus=%u", a.ncpus,
              args.cpus);
    uint32_t bsp = lapic_id();
    int found = 0;
    for (uint32_t i = 0; i < a.ncpus; i++)
        found |= a.apic_ids[i] == bsp;
    CHECK(found, "the boot CPU's APIC id %u is not in the MADT", bsp);
    return 1;
}

