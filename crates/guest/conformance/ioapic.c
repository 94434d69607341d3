/*
 * exitlab conformance kernel. The I/O APIC and the PICs as a guest programs them, the
 * same under both irqchips (KVM's own, or exitlab's userspace I/O APIC and PIC with
 * `exitlab run --irqchip split`):
 *
 * - The PICs are initialised (ICW1..ICW4, vectors 0x20/0x28) and masked (OCW1), and
 *   their mask registers and OCW3's IRR/ISR reads are checked.
 * - The I/O APIC's version register names 24 entries.
 * - Input 10, level-triggered, is driven high through the pc-testdev IRQ port and
 *   left high: the handler takes the interrupt and EOIs it at the local APIC, and the
 *   I/O APIC, seeing the line still asserted, delivers it again after each EOI; on its
 *   third run the handler lowers the line before the EOI, and no fourth comes. Remote
 *   IRR then reads clear.
 * - Input 11, edge-triggered: two pulses, two interrupts. Input 12, masked: a pulse,
 *   no interrupt.
 *
 * Every I/O APIC register access goes through io_rd/io_wr, which count them: the run
 * prints `# ioapic: N MMIO accesses (R reads, W writes)`, so that the host can check
 * that with a split irqchip each of them reached exitlab, and with KVM's none did.
 */
#include "conformance.h"

#define IOREGSEL          0x00
#define IOWIN             0x10
#define IOAPIC_VER        0x01
#define RTE_MASKED        (1u << 16)
#define RTE_LEVEL         (1u << 15)
#define RTE_REMOTE_IRR    (1u << 14)
#define LAPIC_EOI         0x0B0
#define TESTDEV_IRQ_PORT  0x2000
#define PIN_LEVEL         10
#define PIN_EDGE          11
#define PIN_MASKED        12
#define VEC_LEVEL         0x61
#define VEC_EDGE          0x62
#define VEC_MASKED        0x63
#define LEVEL_RUNS        3
#define WAIT_MS           2000u

static uint32_t io_reads, io_writes;
static volatile uint32_t level_runs, edge_runs, masked_runs;

static uint32_t io_rd(uint32_t reg)
{
    wr32(IOAPIC_BASE + IOREGSEL, reg);
    io_writes++;
    io_reads++;
    return rd32(IOAPIC_BASE + IOWIN);
}

static void io_wr(uint32_t reg, uint32_t v)
{
    wr32(IOAPIC_BASE + IOREGSEL, reg);
    wr32(IOAPIC_BASE + IOWIN, v);
    io_writes += 2;
}

static void route(uint32_t pin, uint32_t low)
{
    io_wr(0x11 + 2 * pin, lapic_id() << 24);
    io_wr(0x10 + 2 * pin, low);
}

static void line(uint32_t pin, uint8_t level)
{
    outb(TESTDEV_IRQ_PORT + pin, level);
}

void ioapic_irq(uint32_t vector);

void ioapic_irq(uint32_t vector)
{
    if (vector == VEC_LEVEL) {
        if (++level_runs >= LEVEL_RUNS)
            line(PIN_LEVEL, 0);
    } else if (vector == VEC_EDGE) {
        edge_runs++;
    } else {
        masked_runs++;
    }
    lapic_write(LAPIC_EOI, 0);
}

/*
 * One entry stub per vector: saves the caller-clobbered registers, calls the C handler
 * with the vector and returns to the interrupted code without IRET, which kvm_pvm (it
 * emulates guest ring 0) cannot run in protected mode. The frame is taken apart by hand:
 * EIP into irq_return, CS dropped, EFLAGS restored with IF clear, then `sti` (whose
 * one-instruction shadow keeps the next interrupt out until the jump is done) and the
 * jump back. The interrupted code always had IF set: an interrupt was taken.
 */
#define IRQ_STUB(v)                                                                       \
    __asm__(".text\n"                                                                     \
            ".globl ioapic_entry_" #v "\n"                                                \
            "ioapic_entry_" #v ":\n"                                                      \
            "    pushl %eax\n"                                                            \
            "    pushl %ecx\n"                                                            \
            "    pushl %edx\n"                                                            \
            "    cld\n"                                                                   \
            "    pushl $" #v "\n"                                                         \
            "    call ioapic_irq\n"                                                       \
            "    addl $4, %esp\n"                                                         \
            "    popl %edx\n"                                                             \
            "    popl %ecx\n"                                                             \
            "    popl %eax\n"                                                             \
            "    popl irq_return\n"                                                       \
            "    addl $4, %esp\n"                                                         \
            "    andl $~0x200, (%esp)\n"                                                  \
            "    popfl\n"                                                                 \
            "    sti\n"                                                                   \
            "    jmp *irq_return\n")
uint32_t irq_return;
IRQ_STUB(0x61);
IRQ_STUB(0x62);
IRQ_STUB(0x63);
extern char ioapic_entry_0x61[], ioapic_entry_0x62[], ioapic_entry_0x63[];

static void set_gate(uint32_t vector, char *entry)
{
    uint32_t a = (uint32_t)entry;
    idt[vector] = (a & 0xFFFF) | ((uint64_t)SEL_CODE << 16) | (0x8EULL << 40) |
                  ((uint64_t)(a >> 16) << 48);
}

/* Waits with interrupts on until *count reaches want (or WAIT_MS pass). */
static uint32_t wait_for(volatile uint32_t *count, uint32_t want)
{
    uint64_t t0 = rdtsc();
    __asm__ volatile("sti" ::: "memory");
    while (*count < want && rdtsc() - t0 < ms_to_tsc(WAIT_MS))
        __asm__ volatile("pause");
    /* Long enough for one more delivery, if one were (wrongly) coming. */
    delay_us(20000);
    __asm__ volatile("cli" ::: "memory");
    return *count;
}

static int pic_init_and_mask(void)
{
    static const struct { uint16_t cmd, data; uint8_t base, cascade; } pics[2] = {
        {0x20, 0x21, 0x20, 0x04},
        {0xA0, 0xA1, 0x28, 0x02},
    };
    for (int i = 0; i < 2; i++) {
        outb(pics[i].cmd, 0x11);         /* ICW1: edge, cascade, ICW4 */
        outb(pics[i].data, pics[i].base); /* ICW2 */
        outb(pics[i].data, pics[i].cascade); /* ICW3 */
        outb(pics[i].data, 0x01);        /* ICW4: 8086 mode */
        outb(pics[i].data, 0xFF);        /* OCW1: mask everything */
    }
    for (int i = 0; i < 2; i++) {
        uint8_t imr = inb(pics[i].data);
        outb(pics[i].cmd, 0x0B);         /* OCW3: read ISR */
        uint8_t isr = inb(pics[i].cmd);
        outb(pics[i].cmd, 0x0A);         /* OCW3: read IRR */
        CHECK(imr == 0xFF, "PIC at %#x: the mask reads %#x after OCW1 0xff", pics[i].cmd, imr);
        CHECK(isr == 0, "PIC at %#x: ISR %#x right after initialisation", pics[i].cmd, isr);
    }
    return 1;
}

int test_ioapic(void)
{
    io_reads = io_writes = 0;
    level_runs = edge_runs = masked_runs = 0;
    if (!pic_init_and_mask())
        return 0;
    set_gate(VEC_LEVEL, ioapic_entry_0x61);
    set_gate(VEC_EDGE, ioapic_entry_0x62);
    set_gate(VEC_MASKED, ioapic_entry_0x63);
    lapic_write(LAPIC_SVR, lapic_read(LAPIC_SVR) | 0x1FF);

    uint32_t ver = io_rd(IOAPIC_VER);
    print("# ioapic: version register %#x\n", ver);
    CHECK(((ver >> 16) & 0xFF) == 23, "the version register %#x names %u entries, expected 24",
          ver, ((ver >> 16) & 0xFF) + 1);

    /* Level-triggered input held high: delivered again after each EOI. */
    route(PIN_LEVEL, VEC_LEVEL | RTE_LEVEL);
    line(PIN_LEVEL, 1);
    uint32_t runs = wait_for(&level_runs, LEVEL_RUNS);
    line(PIN_LEVEL, 0);
    uint32_t rte = io_rd(0x10 + 2 * PIN_LEVEL);
    io_wr(0x10 + 2 * PIN_LEVEL, RTE_MASKED);

    /* Edge-triggered input: one interrupt per pulse (each taken before the next: two
     * pending deliveries of one vector would be one in the local APIC's IRR). */
    route(PIN_EDGE, VEC_EDGE);
    uint32_t edges = 0;
    for (uint32_t i = 1; i <= 2; i++) {
        line(PIN_EDGE, 1);
        line(PIN_EDGE, 0);
        edges = wait_for(&edge_runs, i);
    }
    io_wr(0x10 + 2 * PIN_EDGE, RTE_MASKED);

    /* Masked input: nothing. */
    route(PIN_MASKED, VEC_MASKED | RTE_MASKED);
    line(PIN_MASKED, 1);
    line(PIN_MASKED, 0);
    uint32_t masked = wait_for(&masked_runs, 1);

    print("# ioapic: level input %u: %u handler runs (line lowered in run %u); edge input "
          "%u: %u runs for 2 pulses; masked input %u: %u runs\n", PIN_LEVEL, runs, LEVEL_RUNS,
          PIN_EDGE, edges, PIN_MASKED, masked);
    print("# ioapic: %u MMIO accesses (%u reads, %u writes)\n", io_reads + io_writes, io_reads,
          io_writes);
    CHECK(runs == LEVEL_RUNS, "the level-triggered input held high ran the handler %u times, "
          "expected %u (once, then again after each EOI until the line dropped)", runs,
          LEVEL_RUNS);
    CHECK(!(rte & RTE_REMOTE_IRR), "remote IRR still set after the last EOI (entry %#x)", rte);
    CHECK(edges == 2, "two edges on input %u ran the handler %u times", PIN_EDGE, edges);
    CHECK(masked == 0, "a masked input delivered %u interrupts", masked);
    return 1;
}
