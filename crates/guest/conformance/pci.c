/*
 * exitlab conformance kernel. PCI: configuration mechanism #1 on bus 0, the host bridge, pci-testdev's BARs
 * and its doorbells.
 */
#include "conformance.h"

/* PCI configuration mechanism #1, bus 0. */
static uint32_t pci_address(uint32_t dev, uint32_t fn, uint32_t off)
{
    return 0x80000000u | (dev << 11) | (fn << 8) | (off & 0xFC);
}

static uint32_t pci_read32(uint32_t dev, uint32_t fn, uint32_t off)
{
    outl(PCI_CONFIG_ADDR, pci_address(dev, fn, off));
    return inl(PCI_CONFIG_DATA);
}

static void pci_write32(uint32_t dev, uint32_t fn, uint32_t off, uint32_t v)
{
    outl(PCI_CONFIG_ADDR, pci_address(dev, fn, off));
    outl(PCI_CONFIG_DATA, v);
}

static uint16_t pci_read16(uint32_t dev, uint32_t fn, uint32_t off)
{
    outl(PCI_CONFIG_ADDR, pci_address(dev, fn, off));
    return inw((uint16_t)(PCI_CONFIG_DATA + (off & 2)));
}

static void pci_write16(uint32_t dev, uint32_t fn, uint32_t off, uint16_t v)
{
    outl(PCI_CONFIG_ADDR, pci_address(dev, fn, off));
    outw((uint16_t)(PCI_CONFIG_DATA + (off & 2)), v);
}

/* Sizes BAR `bar` of 00:dev.0 with decoding off; returns the mask read back. */
static uint32_t pci_size_bar(uint32_t dev, uint32_t bar, uint32_t *orig_out, int *restored)
{
    uint32_t off = 0x10 + 4 * bar;
    uint16_t cmd = pci_read16(dev, 0, 4);
    pci_write16(dev, 0, 4, cmd & ~3u);
    uint32_t orig = pci_read32(dev, 0, off);
    pci_write32(dev, 0, off, 0xFFFFFFFFu);
    uint32_t mask = pci_read32(dev, 0, off);
    pci_write32(dev, 0, off, orig);
    *restored = pci_read32(dev, 0, off) == orig;
    pci_write16(dev, 0, 4, cmd);
    *orig_out = orig;
    return mask;
}

/* One BAR of pci-testdev: MMIO (base is an address) or port I/O (base is a port). */
struct testdev_bar {
    int pio;
    uint32_t base;
};

static uint8_t bar_read8(const struct testdev_bar *b, uint32_t off)
{
    return b->pio ? inb((uint16_t)(b->base + off)) : rd8(b->base + off);
}

static uint32_t bar_read32(const struct testdev_bar *b, uint32_t off)
{
    return b->pio ? inl((uint16_t)(b->base + off)) : rd32(b->base + off);
}

static void bar_write8(const struct testdev_bar *b, uint32_t off, uint8_t v)
{
    if (b->pio)
        outb((uint16_t)(b->base + off), v);
    else
        wr8(b->base + off, v);
}

static void ring(const struct testdev_bar *b, uint32_t off, uint32_t width, uint32_t data,
                 uint32_t n)
{
    uint32_t a = b->base + off;
    for (uint32_t i = 0; i < n; i++) {
        if (b->pio) {
            if (width == 1)
                outb((uint16_t)a, (uint8_t)data);
            else if (width == 2)
                outw((uint16_t)a, (uint16_t)data);
            else
                outl((uint16_t)a, data);
        } else {
            if (width == 1)
                wr8(a, (uint8_t)data);
            else if (width == 2)
                wr16(a, (uint16_t)data);
            else
                wr32(a, data);
        }
    }
}

static const char *const testdev_names[6] = {
    "mmio-no-eventfd", "mmio-wildcard-eventfd", "mmio-datamatch-eventfd",
    "portio-no-eventfd", "portio-wildcard-eventfd", "portio-datamatch-eventfd",
};

/* Runs every test of one BAR; returns how many it found, or -1 after a FAIL. */
static int testdev_run_bar(const struct testdev_bar *b, uint32_t first_index, uint32_t n)
{
    uint32_t t;
    for (t = 0; t < 8; t++) {
        bar_write8(b, 0, (uint8_t)t);
        uint32_t width = bar_read8(b, 1);
        if (width != 1 && width != 2 && width != 4)
            break;
        uint32_t index = bar_read8(b, 0);
        uint32_t off = bar_read32(b, 4);
        uint32_t data = bar_read8(b, 8);
        char name[64];
        uint32_t len = 0;
        while (len < sizeof(name) - 1 && (name[len] = (char)bar_read8(b, 16 + len)) != 0)
            len++;
        name[len] = 0;
        if (!(off + width <= (b->pio ? 256u : 4096u) && off >= 16 + len)) {
            fail_line("test %u (%s) has its doorbell at offset %u, outside the BAR or in the "
                      "header", t, name, off);
            return -1;
        }
        ring(b, off, width, data, n);
        uint32_t count = bar_read32(b, 12);
        print("# pci-testdev test %u: %s, %s+%u, width %u, data %#x: count %u after %u writes\n",
              index, name, b->pio ? "port" : "mmio", off, width, data, count, n);
        if (index != first_index + t || index >= 6 || !streq(name, testdev_names[index])) {
            fail_line("test %u of the %s BAR reads as index %u \"%s\"; expected %u \"%s\"", t,
                      b->pio ? "I/O" : "MMIO", index, name, first_index + t,
                      first_index + t < 6 ? testdev_names[first_index + t] : "-");
            return -1;
        }
        if (count != n) {
            fail_line("%s counted %u doorbell writes; expected %u", name, count, n);
            return -1;
        }
    }
    bar_write8(b, 0, 0xFF);
    return (int)t;
}

int test_pci(void)
{
    uint32_t found_testdev = 0, found_bridge = 0, devices = 0;
    for (uint32_t dev = 0; dev < 32; dev++) {
        uint32_t id = pci_read32(dev, 0, 0);
        if ((id & 0xFFFF) == 0xFFFF) {
            CHECK(id == 0xFFFFFFFFu, "absent device 00:%02x.0 reads id %#x, not all ones", dev,
                  id);
            continue;
        }
        uint32_t nfn = (pci_read32(dev, 0, 0x0C) >> 16) & 0x80 ? 8 : 1;
        for (uint32_t fn = 0; fn < nfn; fn++) {
            uint32_t fid = fn ? pci_read32(dev, fn, 0) : id;
            if ((fid & 0xFFFF) == 0xFFFF) {
                CHECK(fid == 0xFFFFFFFFu, "absent function 00:%02x.%u reads id %#x", dev, fn, fid);
                continue;
            }
            uint32_t class = pci_read32(dev, fn, 8) >> 8;
            print("# pci 00:%02x.%u %04x:%04x class %06x\n", dev, fn, fid & 0xFFFF, fid >> 16,
                  class);
            devices++;
            if (dev == 0 && fn == 0)
                found_bridge = fid == (HOST_BRIDGE_VENDOR | (HOST_BRIDGE_DEVICE << 16));
            if (fid == (PCI_TESTDEV_VENDOR | (PCI_TESTDEV_DEVICE << 16))) {
                CHECK(dev == PCI_TESTDEV_SLOT && fn == 0, "pci-testdev is at 00:%02x.%u, expected "
                      "00:%02x.0", dev, fn, PCI_TESTDEV_SLOT);
                found_testdev = 1;
            }
        }
    }
    CHECK(found_bridge, "no host bridge %04x:%04x at 00:00.0", HOST_BRIDGE_VENDOR,
          HOST_BRIDGE_DEVICE);
    CHECK(found_testdev, "no pci-testdev %04x:%04x on bus 0", PCI_TESTDEV_VENDOR,
          PCI_TESTDEV_DEVICE);
    /* An out-of-range register of an absent device also reads all ones. */
    CHECK(pci_read32(31, 7, 0x3C) == 0xFFFFFFFFu || (pci_read32(31, 7, 0) & 0xFFFF) != 0xFFFF,
          "an absent function's register 0x3c does not read all ones");

    uint32_t dev = PCI_TESTDEV_SLOT;
    uint16_t cmd = pci_read16(dev, 0, 4);
    CHECK((cmd & 3) == 3, "pci-testdev's command register is %#x: I/O and memory decode "
          "should be on", cmd);
    uint32_t orig[6], mask[6];
    for (uint32_t bar = 0; bar < 6; bar++) {
        int restored;
        mask[bar] = pci_size_bar(dev, bar, &orig[bar], &restored);
        CHECK(restored, "BAR%u did not read back %#x after sizing", bar, orig[bar]);
    }
    CHECK(pci_read16(dev, 0, 4) == cmd, "the command register did not keep %#x", cmd);
    uint32_t size0 = ~(mask[0] & ~0xFu) + 1, size1 = (~(mask[1] & ~0x3u) + 1) & 0xFFFF;
    print("# pci-testdev BAR0 %08x (mask %08x, %u bytes), BAR1 %08x (mask %08x, %u ports)\n",
          orig[0], mask[0], size0, orig[1], mask[1], size1);
    CHECK((orig[0] & 0xF) == 0, "BAR0 %#x is not 32-bit non-prefetchable memory", orig[0]);
    CHECK((orig[0] & ~0xFu) == PCI_TESTDEV_MMIO, "BAR0 is at %#x, expected %#x", orig[0] & ~0xFu,
          PCI_TESTDEV_MMIO);
    CHECK(size0 == 4096, "BAR0 sizes to %u bytes, expected 4096", size0);
    CHECK((orig[1] & 3) == 1, "BAR1 %#x is not an I/O BAR", orig[1]);
    CHECK((orig[1] & ~3u) == PCI_TESTDEV_PIO, "BAR1 is at %#x, expected %#x", orig[1] & ~3u,
          PCI_TESTDEV_PIO);
    CHECK(size1 == 256, "BAR1 sizes to %u ports, expected 256", size1);
    for (uint32_t bar = 2; bar < 6; bar++)
        CHECK(mask[bar] == 0, "unimplemented BAR%u sizes to mask %#x, expected 0", bar,
              mask[bar]);

    uint32_t n = args.doorbells;
    struct testdev_bar mmio = {0, orig[0] & ~0xFu}, pio = {1, orig[1] & ~3u};
    int tm = testdev_run_bar(&mmio, 0, n);
    if (tm < 0)
        return 0;
    int tp = testdev_run_bar(&pio, 3, n);
    if (tp < 0)
        return 0;
    CHECK(tm == 3 && tp == 3, "found %d MMIO and %d port I/O tests, expected 3 and 3", tm, tp);
    print("# pci: %u functions on bus 0\n", devices);
    return 1;
}


/*
 * Configuration mechanism #1 with the low bits of CONFIG_ADDRESS set, as test libraries
 * use it: every byte offset 0..3 in CONFIG_ADDRESS, every port 0xCFC..0xCFF and every
 * access size that stays within them, against the bytes read with aligned 32-bit reads.
 * The byte reached is (offset | port) + i, as on QEMU's pc machine.
 */
static int pcicfg_check(uint32_t dev, uint32_t reg)
{
    uint8_t bytes[8];
    for (uint32_t i = 0; i < 8; i += 4) {
        uint32_t v = pci_read32(dev, 0, reg + i);
        for (uint32_t j = 0; j < 4; j++)
            bytes[i + j] = (uint8_t)(v >> (8 * j));
    }
    for (uint32_t low = 0; low < 4; low++) {
        for (uint32_t port = 0; port < 4; port++) {
            for (uint32_t size = 1; size <= 4; size *= 2) {
                if (port + size > 4)
                    continue;
                outl(PCI_CONFIG_ADDR, pci_address(dev, 0, reg) | low);
                uint16_t p = (uint16_t)(PCI_CONFIG_DATA + port);
                uint32_t got = size == 1 ? inb(p) : size == 2 ? inw(p) : inl(p);
                uint32_t want = 0, start = low | port;
                for (uint32_t i = 0; i < size; i++)
                    want |= (uint32_t)bytes[start + i] << (8 * i);
                CHECK(got == want, "00:%02x.0 register %#x with CONFIG_ADDRESS bits 1:0 = %u: "
                      "a %u-byte read of port %#x gave %#x, expected %#x (bytes from %#x)", dev,
                      reg, low, size, p, got, want, reg + start);
            }
        }
    }
    return 1;
}

int test_pcicfg(void)
{
    /* The host bridge's and pci-testdev's identity and class dwords. */
    static const uint32_t regs[] = {0x00, 0x08};
    uint32_t devs[] = {0, PCI_TESTDEV_SLOT};
    for (uint32_t d = 0; d < 2; d++)
        for (uint32_t r = 0; r < 2; r++)
            if (!pcicfg_check(devs[d], regs[r]))
                return 0;
    /* The case the test libraries rely on: the device ID through 0xCFC. */
    outl(PCI_CONFIG_ADDR, pci_address(PCI_TESTDEV_SLOT, 0, 0) | 2);
    uint16_t id = inw(PCI_CONFIG_DATA);
    CHECK(id == PCI_TESTDEV_DEVICE, "0x80001802 then a 16-bit read of 0xCFC gave %#x, expected "
          "pci-testdev's device id %#x", id, PCI_TESTDEV_DEVICE);
    print("# pcicfg: 4 offsets x 4 ports x sizes 1/2/4 on 2 functions read as QEMU's\n");
    return 1;
}
