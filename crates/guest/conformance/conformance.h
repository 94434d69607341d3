/*
 * exitlab conformance kernel: definitions shared by the assembly and the C code.
 *
 * The kernel runs in 32-bit protected mode with paging off, flat segments and
 * interrupts disabled, exactly as multiboot and PVH hand it over; every address it
 * touches is physical.
 */
#ifndef EXITLAB_CONFORMANCE_H
#define EXITLAB_CONFORMANCE_H

/* Selectors of the kernel's own GDT. */
#define SEL_CODE          0x08
#define SEL_DATA          0x10

/* How the kernel was entered (first argument of cmain). */
#define BOOT_MULTIBOOT    1
#define BOOT_PVH          2

/* Multiboot v1. */
#define MULTIBOOT_HEADER_MAGIC  0x1BADB002
#define MULTIBOOT_BOOT_MAGIC    0x2BADB002
/* Header flags: page-aligned modules, memory information. */
#define MULTIBOOT_FLAGS_BASE    0x00000003
/* Header flag: the a.out kludge address fields are valid. */
#define MULTIBOOT_AOUT_KLUDGE   0x00010000

/* PVH: Xen ELF note type of the 32-bit physical entry point. */
#define XEN_ELFNOTE_PHYS32_ENTRY 18

/* Stacks. */
#define BSP_STACK_BYTES   16384
#define AP_STACK_SHIFT    10              /* 1 KiB per application processor */
#define MAX_CPUS          64
#define MAX_APS           (MAX_CPUS - 1)

/* Physical address the application processors start at (SIPI vector 0). */
#define AP_TRAMPOLINE_ADDR 0x0

#ifndef __ASSEMBLER__
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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


struct args {
    uint64_t ram_mib;
    uint32_t cpus;
    uint32_t tsc_khz;
    uint32_t initrd_len;
    uint32_t initrd_sum;
    uint32_t doorbells;
    int has_ram, has_cpus, has_tsc_khz, has_initrd;
};
extern struct args args;


struct acpi {
    uint32_t rsdp, rsdt, xsdt, fadt, madt, dsdt, facs, hpet;
    uint32_t pm_timer_bits;
    uint32_t ncpus;
    uint8_t apic_ids[256];
};


/* Check a condition inside a test function: on failure report it and return 0. */
#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fail_line(__VA_ARGS__);                                                       \
            return 0;                                                                     \
        }                                                                                 \
    } while (0)


/* lib.c: arithmetic, the C library, COM1 output, the command line and fw_cfg. */
uint64_t udiv64(uint64_t n, uint32_t d, uint32_t *rem);
int streq(const char *a, const char *b);
int word_is(const char *a, uint32_t n, const char *s);
int is_space(char c);
int parse_u64(const char *s, uint32_t n, uint64_t *out);
void serial_putc(char c);
void print(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void debug_exit(uint32_t value) __attribute__((noreturn));
void fw_cfg_select(uint16_t key);
uint64_t fw_cfg_read_le(uint32_t bytes);
uint64_t fw_cfg_item(uint16_t key, uint32_t bytes);
uint64_t expected_ram(void);
uint32_t tsc_khz_or_default(void);
uint64_t ms_to_tsc(uint32_t ms);
void delay_us(uint32_t us);
uint32_t fnv1a(uint32_t addr, uint32_t len);

/* The test running now, for FAIL lines. */
extern const char *current_test;
/* How the kernel was entered: BOOT_*, EAX and EBX. */
extern uint32_t boot_kind, boot_magic, boot_info;
/* The whole command line the loader passed, argv[0] (multiboot) and the rest. */
extern const char *cmdline_full;
extern const char *argv0;
extern uint32_t argv0_len;
extern const char *cmdline_rest;

void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);

/* acpi.c */
int acpi_load(struct acpi *a);
int check_rsdp(uint32_t addr);
uint32_t scan_rsdp(void);

static inline uint32_t lapic_read(uint32_t reg)
{
    return rd32(LAPIC_BASE + reg);
}

static inline void lapic_write(uint32_t reg, uint32_t v)
{
    wr32(LAPIC_BASE + reg, v);
}

static inline uint32_t lapic_id(void)
{
    return lapic_read(LAPIC_ID) >> 24;
}


/*
 * The tests, one area per file: a test is a function that returns 1 when it passed
 * and 0 after printing its FAIL line (CHECK does both). main.c lists them in a table.
 */
int test_mbinfo(void);      /* boot.c */
int test_pvhinfo(void);     /* boot.c */
int test_cmdline(void);     /* boot.c */
int test_fwcfg(void);       /* fwcfg.c */
int test_acpi(void);        /* acpi.c */
int test_pmtimer(void);     /* timers.c */
int test_hpet(void);        /* timers.c */
int test_firmware(void);    /* timers.c */
int test_pci(void);         /* pci.c */
int test_pcicfg(void);      /* pci.c */
int test_serial(void);      /* serial.c */
int test_smp(void);         /* smp.c */
int test_nmi(void);         /* nmi.c */
int test_strio(void);       /* strio.c */
int test_mce(void);         /* mce.c */
int test_s3(void);          /* s3.c */
int test_s5(void);          /* s3.c */
int test_triplefault(void); /* faults.c */
int test_timeout(void);     /* faults.c */
int test_badfetch(void);    /* faults.c */
int test_reset92(void);     /* faults.c */
int test_ioapic(void);      /* ioapic.c */

/* What the exception stubs push, lowest address first. */
struct exception_frame {
    uint32_t vector;
    uint32_t error;
    uint32_t eip;
    uint32_t cs;
    uint32_t eflags;
};

void cmain(uint32_t boot, uint32_t magic, uint32_t info) __attribute__((noreturn));
void ap_main(uint32_t index) __attribute__((noreturn));
void exception_handler(struct exception_frame *frame) __attribute__((noreturn));
void triple_fault(void) __attribute__((noreturn));
void spin_forever(void) __attribute__((noreturn));

extern char __image_start[], __bss_end[];
extern char isr_stubs[];
extern char ap_trampoline_start[], ap_trampoline_end[];
extern uint64_t idt[256];
extern volatile uint32_t ap_next;
#endif

#endif /* EXITLAB_CONFORMANCE_H */
