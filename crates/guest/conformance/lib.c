/*
 * exitlab conformance kernel. The library every test uses: 64-bit division, the C functions the compiler
 * may call, formatted output on COM1, FAIL lines, the debug-exit port, the command
 * line's key=value words and fw_cfg.
 */
#include "conformance.h"

/* n / d for a 64-bit n and 32-bit d, with two 32-bit divisions (no libgcc). */
uint64_t udiv64(uint64_t n, uint32_t d, uint32_t *rem)
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

int streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* Whether the n bytes at a equal the NUL-terminated s (of length n). */
int word_is(const char *a, uint32_t n, const char *s)
{
    return strlen(s) == n && memcmp(a, s, n) == 0;
}

/* Output on COM1. */

void serial_putc(char c)
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

void print(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint(fmt, ap);
    va_end(ap);
}

/* The test running now, for FAIL lines. */
const char *current_test = "boot";

struct args args;

void fail_line(const char *fmt, ...)
{
    va_list ap;
    print("FAIL %s: ", current_test);
    va_start(ap, fmt);
    vprint(fmt, ap);
    va_end(ap);
    serial_putc('\n');
}

void debug_exit(uint32_t value)
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


uint32_t boot_kind, boot_magic, boot_info;

/* The whole command line the loader passed, argv[0] (multiboot) and the rest. */
const char *cmdline_full = "";
const char *argv0 = "";
uint32_t argv0_len;
const char *cmdline_rest = "";

int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parses a decimal or 0x-prefixed hexadecimal number of n characters. */
int parse_u64(const char *s, uint32_t n, uint64_t *out)
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

/* fw_cfg. */

void fw_cfg_select(uint16_t key)
{
    outw(FW_CFG_SELECTOR, key);
}

uint64_t fw_cfg_read_le(uint32_t bytes)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < bytes; i++)
        v |= (uint64_t)inb(FW_CFG_DATA) << (8 * i);
    return v;
}

uint64_t fw_cfg_item(uint16_t key, uint32_t bytes)
{
    fw_cfg_select(key);
    return fw_cfg_read_le(bytes);
}

/* RAM the tests expect: ram= on the command line, else what fw_cfg reports. */
uint64_t expected_ram(void)
{
    if (args.has_ram)
        return args.ram_mib << 20;
    return fw_cfg_item(FW_CFG_RAM_SIZE, 8);
}

uint32_t tsc_khz_or_default(void)
{
    return args.has_tsc_khz ? args.tsc_khz : DEFAULT_TSC_KHZ;
}

uint64_t ms_to_tsc(uint32_t ms)
{
    return (uint64_t)ms * tsc_khz_or_default();
}

void delay_us(uint32_t us)
{
    uint64_t ticks = udiv64((uint64_t)us * tsc_khz_or_default(), 1000, NULL);
    uint64_t t0 = rdtsc();
    while (rdtsc() - t0 < ticks)
        ;
}

/* FNV-1a, 32 bits, as the host computes it over the initrd. */
uint32_t fnv1a(uint32_t addr, uint32_t len)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < len; i++) {
        h ^= rd8(addr + i);
        h *= 16777619u;
    }
    return h;
}

