/*
 * exitlab conformance kernel: checks, from inside the guest, that the platform and the
 * boot protocols behave as documented.
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
/* The platform. */

#define COM1              0x3F8
#define UART_THR          0
#define UART_SCR          7
#define UART_LSR          5
#define UART_LSR_THRE     0x20
#define UART_LSR_TEMT     0x40
#define DEBUG_EXIT_PORT   0xF4
#define FW_CFG_SELECTOR   0x510
#define FW_CFG_DATA       0x511
#define PM_TIMER_PORT     0xB008
#define PM_TIMER_HZ       3579545u
#define PCI_CONFIG_ADDR   0xCF8
#define PCI_CONFIG_DATA   0xCFC
#define LAPIC_BASE        0xFEE00000u
#define IOAPIC_BASE       0xFEC00000u
#define PCI_HOLE_START    0xC0000000ULL
#define FOUR_GIB          0x100000000ULL
#define EBDA_START        0x9FC00u
#define VGA_START         0xA0000u
#define BIOS_START        0xE0000u
#define HIGH_MEMORY       0x100000u
#define BOOT_LOADER_NAME  "exitlab"

#define FW_CFG_SIGNATURE  0x00
#define FW_CFG_ID         0x01
#define FW_CFG_RAM_SIZE   0x03
#define FW_CFG_NB_CPUS    0x05
#define FW_CFG_MAX_CPUS   0x0F
#define FW_CFG_FILE_DIR   0x19
#define FW_CFG_UNUSED_KEY 0x00FE

#define LAPIC_ID          0x020
#define LAPIC_SVR         0x0F0
#define LAPIC_ICR_LOW     0x300
#define LAPIC_ICR_HIGH    0x310
#define ICR_PENDING       (1u << 12)
#define ICR_INIT          0x000C4500u   /* all excluding self, assert, INIT */
#define ICR_STARTUP       0x000C4600u   /* all excluding self, assert, start-up */

#define PCI_TESTDEV_VENDOR 0x1B36
#define PCI_TESTDEV_DEVICE 0x0005
#define PCI_TESTDEV_SLOT   3
#define PCI_TESTDEV_MMIO   0xFEBFF000u
#define PCI_TESTDEV_PIO    0xC000u
#define HOST_BRIDGE_VENDOR 0x8086
#define HOST_BRIDGE_DEVICE 0x1237

#define DEFAULT_DOORBELLS  1000u
#define DEFAULT_TSC_KHZ    3000000u   /* for timeouts only, when tsc_khz= is absent */
#define PM_MEASURE_MS      40u
#define AP_TIMEOUT_MS      5000u

/* ---------------------------------------------------------------------------------- */
/* Instructions. */

static inline void outb(uint16_t port, uint8_t v)
{
    __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port) : "memory");
}

static inline void outw(uint16_t port, uint16_t v)
{
    __asm__ volatile("outw %0, %1" : : "a"(v), "Nd"(port) : "memory");
}

static inline void outl(uint16_t port, uint32_t v)
{
    __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port) : "memory");
}

static inline uint8_t inb(uint16_t port)
{
    uint8_t v;
    __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port) : "memory");
    return v;
}

static inline uint16_t inw(uint16_t port)
{
    uint16_t v;
    __asm__ volatile("inw %1, %0" : "=a"(v) : "Nd"(port) : "memory");
    return v;
}

static inline uint32_t inl(uint16_t port)
{
    uint32_t v;
    __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port) : "memory");
    return v;
}

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
}

static inline uint8_t rd8(uint32_t a) { return *(volatile uint8_t *)a; }
static inline uint16_t rd16(uint32_t a) { return *(volatile uint16_t *)a; }
static inline uint32_t rd32(uint32_t a) { return *(volatile uint32_t *)a; }
static inline uint64_t rd64(uint32_t a) { return rd32(a) | ((uint64_t)rd32(a + 4) << 32); }
static inline void wr8(uint32_t a, uint8_t v) { *(volatile uint8_t *)a = v; }
static inline void wr16(uint32_t a, uint16_t v) { *(volatile uint16_t *)a = v; }
static inline void wr32(uint32_t a, uint32_t v) { *(volatile uint32_t *)a = v; }

/* n / d for a 64-bit n and 32-bit d, with two 32-bit divisions (no libgcc). */
static uint64_t udiv64(uint64_t n, uint32_t d, uint32_t *rem)
{
    uint32_t hi = (uint32_t)(n >> 32), lo = (uint32_t)n;
    uint32_t qhi = hi / d, r = hi % d, qlo;
    __asm__("divl %4" : "=a"(qlo), "=d"(r) : "a"(lo), "d"(r), "rm"(d));
    if (rem)
        *rem = r;
    return ((uint64_t)qhi << 32) | qlo;
}

/* The C library functions the compiler may call. */
void *memcpy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}

void *memset(void *dst, int c, size_t n)
{
    uint8_t *d = dst;
    while (n--)
        *d++ = (uint8_t)c;
    return dst;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    for (; n; n--, x++, y++)
        if (*x != *y)
            return *x - *y;
    return 0;
}

size_t strlen(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

static int streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* Whether the n bytes at a equal the NUL-terminated s (of length n). */
static int word_is(const char *a, uint32_t n, const char *s)
{
    return strlen(s) == n && memcmp(a, s, n) == 0;
}

/* ---------------------------------------------------------------------------------- */
/* Output on COM1. */

static void serial_putc(char c)
{
    while (!(inb(COM1 + UART_LSR) & UART_LSR_THRE))
        ;
    outb(COM1 + UART_THR, (uint8_t)c);
}

static void emit_u64(uint64_t v, uint32_t base, int width, char pad)
{
    char buf[24];
    int n = 0;
    do {
        uint32_t r;
        v = udiv64(v, base, &r);
        buf[n++] = "0123456789abcdef"[r];
    } while (v);
    while (n < width && n < (int)sizeof(buf))
        buf[n++] = pad;
    while (n)
        serial_putc(buf[--n]);
}

/*
 * A small printf: %s (with .* precision), %c, %d, %u, %x, %llu, %llx, %%, the flags
 * '0' (zero padding) and '#' (0x prefix) and a width for the numbers.
 */
static void vprint(const char *fmt, va_list ap)
{
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            serial_putc(*fmt);
            continue;
        }
        fmt++;
        char pad = ' ';
        int width = 0, precision = -1, longlong = 0, alt = 0;
        for (;; fmt++) {
            if (*fmt == '0')
                pad = '0';
            else if (*fmt == '#')
                alt = 1;
            else
                break;
        }
        while (*fmt >= '0' && *fmt <= '9')
            width = width * 10 + (*fmt++ - '0');
        if (fmt[0] == '.' && fmt[1] == '*') {
            precision = va_arg(ap, int);
            fmt += 2;
        }
        if (fmt[0] == 'l' && fmt[1] == 'l') {
            longlong = 1;
            fmt += 2;
        }
        switch (*fmt) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            for (int i = 0; s[i] && (precision < 0 || i < precision); i++)
                serial_putc(s[i]);
            break;
        }
        case 'c':
            serial_putc((char)va_arg(ap, int));
            break;
        case 'd': {
            int32_t v = va_arg(ap, int32_t);
            if (v < 0) {
                serial_putc('-');
                emit_u64((uint64_t)(-(int64_t)v), 10, width, pad);
            } else {
                emit_u64((uint64_t)v, 10, width, pad);
            }
            break;
        }
        case 'u':
        case 'x': {
            uint64_t v = longlong ? va_arg(ap, uint64_t) : va_arg(ap, uint32_t);
            if (alt && *fmt == 'x') {
                serial_putc('0');
                serial_putc('x');
            }
            emit_u64(v, *fmt == 'u' ? 10 : 16, width, pad);
            break;
        }
        case '%':
            serial_putc('%');
            break;
        default:
            serial_putc('%');
            serial_putc(*fmt ? *fmt : '?');
            if (!*fmt)
                return;
        }
    }
}

static void print(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint(fmt, ap);
    va_end(ap);
}

/* The test running now, for FAIL lines. */
static const char *current_test = "boot";

static void fail_line(const char *fmt, ...)
{
    va_list ap;
    print("FAIL %s: ", current_test);
    va_start(ap, fmt);
    vprint(fmt, ap);
    va_end(ap);
    serial_putc('\n');
}

/* Check a condition inside a test function: on failure report it and return 0. */
#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fail_line(__VA_ARGS__);                                                       \
            return 0;                                                                     \
        }                                                                                 \
    } while (0)

static void __attribute__((noreturn)) debug_exit(uint32_t value)
{
    outl(DEBUG_EXIT_PORT, value);
    for (;;)
        __asm__ volatile("cli; hlt");
}

void exception_handler(struct exception_frame *f)
{
    fail_line("unexpected exception, vector %u, error code %#x at eip %08x",
              f->vector, f->error, f->eip);
    debug_exit(1);
}

/* ---------------------------------------------------------------------------------- */
/* The command line. */

static uint32_t boot_kind, boot_magic, boot_info;

/* The whole command line the loader passed, argv[0] (multiboot) and the rest. */
static const char *cmdline_full = "";
static const char *argv0 = "";
static uint32_t argv0_len;
static const char *cmdline_rest = "";

static struct {
    uint64_t ram_mib;
    uint32_t cpus;
    uint32_t tsc_khz;
    uint32_t initrd_len;
    uint32_t initrd_sum;
    uint32_t doorbells;
    int has_ram, has_cpus, has_tsc_khz, has_initrd;
} args;

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parses a decimal or 0x-prefixed hexadecimal number of n characters. */
static int parse_u64(const char *s, uint32_t n, uint64_t *out)
{
    uint64_t v = 0;
    uint32_t base = 10;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        n -= 2;
    }
    if (n == 0 || n > 16)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        char c = s[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return 0;
        v = v * base + d;
    }
    *out = v;
    return 1;
}

/* ---------------------------------------------------------------------------------- */
/* fw_cfg. */

static void fw_cfg_select(uint16_t key)
{
    outw(FW_CFG_SELECTOR, key);
}

static uint64_t fw_cfg_read_le(uint32_t bytes)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < bytes; i++)
        v |= (uint64_t)inb(FW_CFG_DATA) << (8 * i);
    return v;
}

static uint64_t fw_cfg_item(uint16_t key, uint32_t bytes)
{
    fw_cfg_select(key);
    return fw_cfg_read_le(bytes);
}

/* RAM the tests expect: ram= on the command line, else what fw_cfg reports. */
static uint64_t expected_ram(void)
{
    if (args.has_ram)
        return args.ram_mib << 20;
    return fw_cfg_item(FW_CFG_RAM_SIZE, 8);
}

static uint32_t tsc_khz_or_default(void)
{
    return args.has_tsc_khz ? args.tsc_khz : DEFAULT_TSC_KHZ;
}

static uint64_t ms_to_tsc(uint32_t ms)
{
    return (uint64_t)ms * tsc_khz_or_default();
}

static void delay_us(uint32_t us)
{
    uint64_t ticks = udiv64((uint64_t)us * tsc_khz_or_default(), 1000, NULL);
    uint64_t t0 = rdtsc();
    while (rdtsc() - t0 < ticks)
        ;
}

/* FNV-1a, 32 bits, as the host computes it over the initrd. */
static uint32_t fnv1a(uint32_t addr, uint32_t len)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < len; i++) {
        h ^= rd8(addr + i);
        h *= 16777619u;
    }
    return h;
}

/* ---------------------------------------------------------------------------------- */
/* The memory map exitlab documents, and where boot structures may be. */

struct range {
    uint64_t addr, len;
    uint32_t type;
};

#define MAX_RANGES 8

static uint32_t expected_map(uint64_t ram, struct range *out)
{
    uint32_t n = 0;
    uint64_t eff = ram & ~0xFFFULL;
    uint64_t low = eff < PCI_HOLE_START ? eff : PCI_HOLE_START;
    uint64_t conv = low < EBDA_START ? low : EBDA_START;
    out[n++] = (struct range){0, conv, 1};
    out[n++] = (struct range){EBDA_START, VGA_START - EBDA_START, 2};
    out[n++] = (struct range){BIOS_START, HIGH_MEMORY - BIOS_START, 2};
    if (low > HIGH_MEMORY)
        out[n++] = (struct range){HIGH_MEMORY, low - HIGH_MEMORY, 1};
    if (eff > PCI_HOLE_START)
        out[n++] = (struct range){FOUR_GIB, eff - PCI_HOLE_START, 1};
    return n;
}

static const char *type_name(uint32_t type)
{
    switch (type) {
    case 1: return "ram";
    case 2: return "reserved";
    case 3: return "acpi";
    case 4: return "nvs";
    default: return "other";
    }
}

/* Compares entry i of a boot memory map with the documented layout. */
static int check_map_entry(uint32_t i, uint32_t n_expected, const struct range *exp,
                           uint64_t addr, uint64_t len, uint32_t type)
{
    print("# map %u: %010llx..%010llx %s\n", i, addr, addr + len, type_name(type));
    CHECK(i < n_expected, "memory map entry %u (%#llx..%#llx type %u) is extra: expected %u entries",
          i, addr, addr + len, type, n_expected);
    CHECK(addr == exp[i].addr && len == exp[i].len && type == exp[i].type,
          "memory map entry %u is %#llx..%#llx type %u; expected %#llx..%#llx type %u", i, addr,
          addr + len, type, exp[i].addr, exp[i].addr + exp[i].len, exp[i].type);
    return 1;
}

struct region {
    const char *what;
    uint64_t start, end;
};

static int overlaps(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    return a0 < b1 && b0 < a1;
}

/* Each region: outside page 0 and the kernel image, in RAM, apart from the others. */
static int check_regions(const struct region *r, uint32_t n, const struct range *map,
                         uint32_t map_n)
{
    uint64_t img0 = (uint32_t)__image_start, img1 = (uint32_t)__bss_end;
    for (uint32_t i = 0; i < n; i++) {
        print("# %s at %08llx..%08llx\n", r[i].what, r[i].start, r[i].end);
        CHECK(r[i].start >= 0x1000, "%s at %#llx..%#llx is in page 0", r[i].what, r[i].start,
              r[i].end);
        CHECK(!overlaps(r[i].start, r[i].end, img0, img1),
              "%s at %#llx..%#llx overlaps the kernel image %#llx..%#llx", r[i].what,
              r[i].start, r[i].end, img0, img1);
        int in_ram = 0;
        for (uint32_t m = 0; m < map_n; m++)
            if (map[m].type == 1 && r[i].start >= map[m].addr &&
                r[i].end <= map[m].addr + map[m].len)
                in_ram = 1;
        CHECK(in_ram, "%s at %#llx..%#llx is not inside one RAM range of the memory map",
              r[i].what, r[i].start, r[i].end);
        for (uint32_t j = 0; j < i; j++)
            CHECK(!overlaps(r[i].start, r[i].end, r[j].start, r[j].end),
                  "%s at %#llx..%#llx overlaps %s at %#llx..%#llx", r[i].what, r[i].start,
                  r[i].end, r[j].what, r[j].start, r[j].end);
    }
    return 1;
}

/* Checks the initrd module's length and checksum against initrd_len=/initrd_sum=. */
static int check_module(uint64_t start, uint64_t len)
{
    CHECK(start + len <= PCI_HOLE_START, "module 0 at %#llx..%#llx is above the 32-bit range",
          start, start + len);
    uint32_t sum = fnv1a((uint32_t)start, (uint32_t)len);
    print("# module 0 at %08llx, %llu bytes, fnv1a %08x\n", start, len, sum);
    CHECK(len == args.initrd_len, "module 0 has %llu bytes; expected %u", len, args.initrd_len);
    CHECK(sum == args.initrd_sum, "module 0 has checksum %#x; expected %#x", sum,
          args.initrd_sum);
    return 1;
}

/* ---------------------------------------------------------------------------------- */
/* ACPI. */

struct acpi {
    uint32_t rsdp, rsdt, xsdt, fadt, madt, dsdt, facs;
    uint32_t pm_timer_bits;
    uint32_t ncpus;
    uint8_t apic_ids[256];
};

static uint8_t sum_bytes(uint32_t addr, uint32_t len)
{
    uint8_t s = 0;
    for (uint32_t i = 0; i < len; i++)
        s += rd8(addr + i);
    return s;
}

/* An RSDP with valid checksums at addr. */
static int check_rsdp(uint32_t addr)
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

static uint32_t scan_rsdp(void)
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
static int acpi_load(struct acpi *a)
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

static inline uint32_t lapic_read(uint32_t reg)
{
    return rd32(LAPIC_BASE + reg);
}

static inline void lapic_write(uint32_t reg, uint32_t v)
{
    wr32(LAPIC_BASE + reg, v);
}

static uint32_t lapic_id(void)
{
    return lapic_read(LAPIC_ID) >> 24;
}

/* ---------------------------------------------------------------------------------- */
/* Tests. */

/* Multiboot information fields (byte offsets). */
#define MBI_FLAGS        0
#define MBI_MEM_LOWER    4
#define MBI_MEM_UPPER    8
#define MBI_CMDLINE      16
#define MBI_MODS_COUNT   20
#define MBI_MODS_ADDR    24
#define MBI_MMAP_LENGTH  44
#define MBI_MMAP_ADDR    48
#define MBI_LOADER_NAME  64
#define MBI_SIZE         116

#define MBI_F_MEM        (1u << 0)
#define MBI_F_CMDLINE    (1u << 2)
#define MBI_F_MODS       (1u << 3)
#define MBI_F_MMAP       (1u << 6)
#define MBI_F_LOADER     (1u << 9)

static int test_mbinfo(void)
{
    uint32_t mbi = boot_info;
    CHECK(boot_magic == MULTIBOOT_BOOT_MAGIC, "EAX at entry was %#x, expected %#x", boot_magic,
          MULTIBOOT_BOOT_MAGIC);
    CHECK(mbi >= 0x1000 && mbi < PCI_HOLE_START, "EBX (the info address) is %#x", mbi);
    uint32_t flags = rd32(mbi + MBI_FLAGS);
    uint32_t need = MBI_F_MEM | MBI_F_CMDLINE | MBI_F_MMAP | MBI_F_LOADER;
    if (args.has_initrd)
        need |= MBI_F_MODS;
    print("# multiboot info at %x, flags %#x\n", mbi, flags);
    CHECK((flags & need) == need, "info flags %#x lack %#x", flags, need & ~flags);

    struct range exp[MAX_RANGES];
    uint64_t ram = expected_ram();
    uint32_t n = expected_map(ram, exp);
    uint32_t mmap = rd32(mbi + MBI_MMAP_ADDR), mmap_len = rd32(mbi + MBI_MMAP_LENGTH);
    uint32_t i = 0;
    for (uint32_t off = 0; off < mmap_len; i++) {
        uint32_t e = mmap + off;
        uint32_t size = rd32(e);
        CHECK(size >= 20 && off + size + 4 <= mmap_len,
              "memory map entry %u has size %u (map length %u)", i, size, mmap_len);
        if (!check_map_entry(i, n, exp, rd64(e + 4), rd64(e + 12), rd32(e + 20)))
            return 0;
        off += size + 4;
    }
    CHECK(i == n, "the memory map has %u entries; expected %u for %llu MiB", i, n, ram >> 20);

    uint32_t lower = rd32(mbi + MBI_MEM_LOWER), upper = rd32(mbi + MBI_MEM_UPPER);
    print("# mem_lower %u KiB, mem_upper %u KiB\n", lower, upper);
    CHECK((uint64_t)lower * 1024 == exp[0].len,
          "mem_lower is %u KiB but the memory map's RAM at 0 ends at %#llx", lower, exp[0].len);
    uint64_t above = n > 3 ? exp[3].len : 0;
    CHECK((uint64_t)upper * 1024 == above,
          "mem_upper is %u KiB but the memory map has %llu KiB of RAM from 1 MiB", upper,
          above / 1024);

    uint32_t cmd = rd32(mbi + MBI_CMDLINE);
    uint32_t name = rd32(mbi + MBI_LOADER_NAME);
    CHECK(streq((const char *)name, BOOT_LOADER_NAME), "boot_loader_name is \"%s\", expected \"%s\"",
          (const char *)name, BOOT_LOADER_NAME);

    struct region r[8];
    uint32_t nr = 0;
    r[nr++] = (struct region){"the multiboot info", mbi, mbi + MBI_SIZE};
    r[nr++] = (struct region){"the memory map", mmap, (uint64_t)mmap + mmap_len};
    r[nr++] = (struct region){"the command line", cmd, cmd + strlen((const char *)cmd) + 1};
    r[nr++] = (struct region){"the boot loader name", name, name + sizeof(BOOT_LOADER_NAME)};

    uint32_t mods = (flags & MBI_F_MODS) ? rd32(mbi + MBI_MODS_COUNT) : 0;
    if (args.has_initrd) {
        CHECK(mods == 1, "mods_count is %u, expected 1 (the initrd)", mods);
        uint32_t list = rd32(mbi + MBI_MODS_ADDR);
        uint32_t start = rd32(list), end = rd32(list + 4), str = rd32(list + 8);
        CHECK(end >= start, "module 0 ends at %#x before its start %#x", end, start);
        CHECK(!(start & 0xFFF), "module 0 at %#x is not page-aligned (header flag 0)", start);
        r[nr++] = (struct region){"the module list", list, list + 16};
        if (str) {
            print("# module 0 string \"%s\"\n", (const char *)str);
            r[nr++] = (struct region){"module 0's string", str,
                                      str + strlen((const char *)str) + 1};
        }
        r[nr++] = (struct region){"module 0", start, end};
        if (!check_module(start, end - start))
            return 0;
    } else {
        CHECK(mods == 0, "mods_count is %u without an initrd", mods);
    }
    return check_regions(r, nr, exp, n);
}

/* hvm_start_info fields (byte offsets). */
#define SI_MAGIC          0
#define SI_VERSION        4
#define SI_FLAGS          8
#define SI_NR_MODULES     12
#define SI_MODLIST        16
#define SI_CMDLINE        24
#define SI_RSDP           32
#define SI_MEMMAP         40
#define SI_MEMMAP_ENTRIES 48
#define SI_SIZE           56
#define PVH_MAGIC         0x336EC578u

static int test_pvhinfo(void)
{
    uint32_t si = boot_info;
    CHECK(si >= 0x1000 && si < PCI_HOLE_START, "EBX (the start info address) is %#x", si);
    CHECK(rd32(si + SI_MAGIC) == PVH_MAGIC, "start info magic is %#x, expected %#x",
          rd32(si + SI_MAGIC), PVH_MAGIC);
    uint32_t version = rd32(si + SI_VERSION);
    print("# hvm_start_info at %x, version %u, flags %#x\n", si, version, rd32(si + SI_FLAGS));
    CHECK(version >= 1, "start info version is %u; the memory map needs version 1", version);

    uint64_t cmd = rd64(si + SI_CMDLINE);
    uint64_t memmap = rd64(si + SI_MEMMAP);
    uint64_t modlist = rd64(si + SI_MODLIST);
    uint64_t rsdp = rd64(si + SI_RSDP);
    uint32_t entries = rd32(si + SI_MEMMAP_ENTRIES);
    uint32_t mods = rd32(si + SI_NR_MODULES);
    CHECK(cmd && cmd < PCI_HOLE_START, "cmdline_paddr is %#llx", cmd);
    CHECK(memmap && memmap < PCI_HOLE_START, "memmap_paddr is %#llx", memmap);

    struct range exp[MAX_RANGES];
    uint64_t ram = expected_ram();
    uint32_t n = expected_map(ram, exp);
    CHECK(entries == n, "memmap_entries is %u; expected %u for %llu MiB", entries, n, ram >> 20);
    for (uint32_t i = 0; i < entries; i++) {
        uint32_t e = (uint32_t)memmap + 24 * i;
        CHECK(rd32(e + 20) == 0, "memory map entry %u has a non-zero reserved field", i);
        if (!check_map_entry(i, n, exp, rd64(e), rd64(e + 8), rd32(e + 16)))
            return 0;
    }

    CHECK(rsdp != 0, "rsdp_paddr is 0");
    CHECK(rsdp < HIGH_MEMORY, "rsdp_paddr %#llx is outside the BIOS area", rsdp);
    if (!check_rsdp((uint32_t)rsdp))
        return 0;
    uint32_t scanned = scan_rsdp();
    CHECK(scanned == rsdp, "rsdp_paddr is %#llx but the BIOS-area scan finds the RSDP at %#x",
          rsdp, scanned);

    struct region r[6];
    uint32_t nr = 0;
    r[nr++] = (struct region){"the start info", si, si + SI_SIZE};
    r[nr++] = (struct region){"the memory map", memmap, memmap + 24ULL * entries};
    r[nr++] = (struct region){"the command line", cmd,
                              cmd + strlen((const char *)(uint32_t)cmd) + 1};
    if (args.has_initrd) {
        CHECK(mods == 1, "nr_modules is %u, expected 1 (the initrd)", mods);
        CHECK(modlist && modlist < PCI_HOLE_START, "modlist_paddr is %#llx", modlist);
        uint64_t start = rd64((uint32_t)modlist), size = rd64((uint32_t)modlist + 8);
        r[nr++] = (struct region){"the module list", modlist, modlist + 32};
        r[nr++] = (struct region){"module 0", start, start + size};
        if (!check_module(start, size))
            return 0;
    } else {
        CHECK(mods == 0, "nr_modules is %u without an initrd", mods);
    }
    return check_regions(r, nr, exp, n);
}

static int test_cmdline(void)
{
    if (boot_kind == BOOT_MULTIBOOT) {
        CHECK(rd32(boot_info + MBI_FLAGS) & MBI_F_CMDLINE, "the multiboot info has no command line");
        CHECK(argv0_len > 0, "the command line \"%s\" does not start with the kernel's path",
              cmdline_full);
        print("CMDLINE-ARGV0 %.*s\n", (int)argv0_len, argv0);
    }
    print("CMDLINE-REST %s\n", cmdline_rest);
    return 1;
}

static int test_fwcfg(void)
{
    char sig[5] = {0};
    fw_cfg_select(FW_CFG_SIGNATURE);
    for (int i = 0; i < 4; i++)
        sig[i] = (char)inb(FW_CFG_DATA);
    CHECK(streq(sig, "QEMU"), "signature is \"%s\" (%02x %02x %02x %02x), expected \"QEMU\"", sig,
          (uint8_t)sig[0], (uint8_t)sig[1], (uint8_t)sig[2], (uint8_t)sig[3]);
    uint32_t id = (uint32_t)fw_cfg_item(FW_CFG_ID, 4);
    CHECK(id & 1, "interface id %#x lacks bit 0 (traditional interface)", id);
    uint32_t cpus = (uint32_t)fw_cfg_item(FW_CFG_NB_CPUS, 2);
    uint32_t max = (uint32_t)fw_cfg_item(FW_CFG_MAX_CPUS, 2);
    uint64_t ram = fw_cfg_item(FW_CFG_RAM_SIZE, 8);
    uint64_t unused = fw_cfg_item(FW_CFG_UNUSED_KEY, 8);
    fw_cfg_select(FW_CFG_FILE_DIR);
    uint32_t files = 0;
    for (int i = 0; i < 4; i++)
        files = (files << 8) | inb(FW_CFG_DATA);
    print("# fw_cfg: id %#x, %u CPUs (max %u), RAM %llu bytes, %u files\n", id, cpus, max, ram,
          files);
    CHECK(files < 4096, "the file directory claims %u files", files);
    for (uint32_t f = 0; f < files && f < 8; f++) {
        uint32_t size = 0, key = 0;
        char fname[57];
        for (int i = 0; i < 4; i++)
            size = (size << 8) | inb(FW_CFG_DATA);
        for (int i = 0; i < 2; i++)
            key = (key << 8) | inb(FW_CFG_DATA);
        inb(FW_CFG_DATA);
        inb(FW_CFG_DATA);
        for (int i = 0; i < 56; i++)
            fname[i] = (char)inb(FW_CFG_DATA);
        fname[56] = 0;
        print("# fw_cfg file %#x \"%s\", %u bytes\n", key, fname, size);
    }
    CHECK(unused == 0, "unknown key %#x reads %#llx, expected zeros", FW_CFG_UNUSED_KEY, unused);
    CHECK(max >= cpus, "max CPUs %u is below the CPU count %u", max, cpus);
    if (args.has_cpus)
        CHECK(cpus == args.cpus, "CPU count is %u; cpus=%u on the command line", cpus, args.cpus);
    if (args.has_ram)
        CHECK(ram == args.ram_mib << 20, "RAM size is %llu bytes; ram=%llu MiB is %llu bytes",
              ram, args.ram_mib, args.ram_mib << 20);
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    CHECK(cpus == a.ncpus, "fw_cfg says %u CPUs, the MADT lists %u", cpus, a.ncpus);
    return 1;
}

static int test_acpi(void)
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

static uint32_t pm_timer_read(void)
{
    return inl(PM_TIMER_PORT);
}

/* A PM timer reading and the TSC when it was taken, to within +- width / 2. */
struct pm_sample {
    uint32_t pm;
    uint64_t tsc;
    uint64_t width;
};

/*
 * The best of a few TSC-bracketed reads: the VMM samples its clock somewhere between
 * the two TSC reads around the port access, so the narrowest bracket pins the reading
 * down best (a read whose exit was delayed by the host scheduler is discarded).
 */
static void pm_timer_sample(struct pm_sample *s, uint32_t mask)
{
    s->width = ~0ULL;
    for (int i = 0; i < 8; i++) {
        uint64_t a = rdtsc();
        uint32_t v = pm_timer_read() & mask;
        uint64_t b = rdtsc();
        if (b - a < s->width) {
            s->width = b - a;
            s->tsc = a + (b - a) / 2;
            s->pm = v;
        }
    }
}

static int test_pmtimer(void)
{
    CHECK(args.has_tsc_khz && args.tsc_khz,
          "needs tsc_khz= on the command line (exitlab host --json, tsc.khz)");
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    uint32_t bits = a.pm_timer_bits;
    uint32_t mask = bits == 32 ? 0xFFFFFFFFu : 0xFFFFFFu;
    uint64_t span = ms_to_tsc(PM_MEASURE_MS);
    struct pm_sample first, last;
    pm_timer_sample(&first, mask);
    uint32_t prev = first.pm, reads = 0;
    uint64_t t;
    do {
        uint32_t v = pm_timer_read() & mask;
        CHECK(((v - prev) & mask) < mask / 2, "went backwards: %#x after %#x (read %u)", v, prev,
              reads);
        prev = v;
        reads++;
        t = rdtsc();
    } while (t - first.tsc < span);
    pm_timer_sample(&last, mask);
    CHECK(((last.pm - prev) & mask) < mask / 2, "went backwards: %#x after %#x", last.pm, prev);
    uint64_t ticks = (last.pm - first.pm) & mask;
    uint64_t tsc = last.tsc - first.tsc;
    /* Hz = ticks * tsc_khz * 1000 / tsc; compare without dividing. */
    uint64_t lhs = ticks * args.tsc_khz * 1000ULL;
    uint64_t rhs = tsc * PM_TIMER_HZ;
    uint64_t hz = tsc && tsc <= 0xFFFFFFFFu ? udiv64(lhs, (uint32_t)tsc, NULL) : 0;
    uint64_t diff = lhs > rhs ? lhs - rhs : rhs - lhs;
    print("# pmtimer: %u reads, %llu ticks in %llu TSC cycles (%u ms; end reads bracketed by "
          "%llu and %llu cycles): about %llu Hz, %u bits\n",
          reads + 16, ticks, tsc, PM_MEASURE_MS, first.width, last.width, hz, bits);
    CHECK(ticks > 0, "did not advance in %u ms", PM_MEASURE_MS);
    CHECK(diff * 20 <= rhs, "runs at about %llu Hz, more than 5%% away from %u Hz", hz,
          PM_TIMER_HZ);
    return 1;
}

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

static int test_pci(void)
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

static int test_serial(void)
{
    uint8_t lsr = inb(COM1 + UART_LSR);
    CHECK((lsr & (UART_LSR_THRE | UART_LSR_TEMT)) == (UART_LSR_THRE | UART_LSR_TEMT),
          "LSR is %#x: THRE and TEMT should be set", lsr);
    outb(COM1 + UART_SCR, 0xA5);
    uint8_t scr = inb(COM1 + UART_SCR);
    outb(COM1 + UART_SCR, 0x5A);
    uint8_t scr2 = inb(COM1 + UART_SCR);
    CHECK(scr == 0xA5 && scr2 == 0x5A, "the scratch register read %#x, %#x after 0xa5, 0x5a", scr,
          scr2);
    print("SERIAL-PATTERN-BEGIN\n");
    for (int c = 0x20; c < 0x7F; c++)
        serial_putc((char)c);
    print("\r\n");
    for (int c = 0x7E; c >= 0x20; c--)
        serial_putc((char)c);
    print("\r\n\r\n\n\r\nSERIAL-PATTERN-END\n");
    return 1;
}

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

static int test_smp(void)
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

static int test_triplefault(void)
{
    print("# triplefault: loading an empty IDT and raising #UD\n");
    triple_fault();
}

static int test_timeout(void)
{
    print("# timeout: spinning until the VMM stops the guest\n");
    spin_forever();
}

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
    {"pci", test_pci, 0},
    {"serial", test_serial, 0},
    {"smp", test_smp, 0},
    {"triplefault", test_triplefault, T_NAMED},
    {"timeout", test_timeout, T_NAMED},
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
