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
#include <stdint.h>

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
