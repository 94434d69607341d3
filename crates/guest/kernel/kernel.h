/* exitlab guest kernel: definitions shared by boot.S and kmain.c. */
#ifndef EXITLAB_KERNEL_H
#define EXITLAB_KERNEL_H

/* GDT selectors. */
#define SEL_KERNEL_CODE   0x08
#define SEL_KERNEL_DATA   0x10
#define SEL_USER_DATA     (0x18 | 3)
#define SEL_USER_CODE     (0x20 | 3)
#define SEL_TSS           0x28
#define SEL_KERNEL_CODE32 0x38

/* RFLAGS in ring 3: reserved bit 1 and IOPL=3 (port I/O allowed); IF=0. */
#define USER_RFLAGS       0x3002

#define KERNEL_STACK_BYTES 16384
#define FAULT_STACK_BYTES  8192
#define USER_STACK_BYTES   16384
#define AP_STACK_BYTES     8192

#ifdef __ASSEMBLER__
/*
 * From 32-bit protected mode with flat data segments loaded: PAE, the static page
 * tables, EFER.LME, paging on, then a far jump to `target` in 64-bit code.
 */
.macro ENTER_LONG_MODE target
    movl $(1 << 5), %eax                /* CR4.PAE */
    movl %eax, %cr4
    movl $pml4, %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx              /* EFER */
    xorl %edx, %edx
    movl $(1 << 8), %eax                /* EFER.LME */
    wrmsr
    movl %cr0, %eax
    orl $((1 << 31) | (1 << 0)), %eax   /* CR0.PG | CR0.PE */
    movl %eax, %cr0
    ljmp $SEL_KERNEL_CODE, $\target
.endm

/* The data segments of 64-bit ring 0 (FS and GS null; GS's base is set by MSR). */
.macro LOAD_SEGMENTS_64
    movl $SEL_KERNEL_DATA, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %ss
    xorl %eax, %eax
    movl %eax, %fs
    movl %eax, %gs
.endm
#else
#include <stdint.h>

void enter_user(void (*fn)(void), uint64_t stack_top) __attribute__((noreturn));
void load_empty_idt_and_fault(void) __attribute__((noreturn));
void kmain(void) __attribute__((noreturn));
extern char user_stack_top[];
#endif

#endif /* EXITLAB_KERNEL_H */
