/*
 * exitlab guest kernel: multiboot entry, switch to long mode, static page tables,
 * GDT, TSS, IDT, exception reporting and the drop to ring 3.
 *
 * Everything the CPU needs is static data laid out by the assembler and linker: the
 * boot path is a few dozen instructions, because ring-0 guest code may be emulated.
 */
#include "abi.h"
#include "kernel.h"

#define MULTIBOOT_MAGIC       0x1BADB002
#define MULTIBOOT_FLAGS       ((1 << 16) | (1 << 1))

#define CR0_PE                (1 << 0)

/* Page-table entry bits. */
#define PTE_P                 (1 << 0)
#define PTE_RW                (1 << 1)
#define PTE_US                (1 << 2)
#define PTE_PWT               (1 << 3)
#define PTE_PCD               (1 << 4)
#define PTE_PS                (1 << 7)
#define PTE_TABLE             (PTE_P | PTE_RW | PTE_US)
#define PTE_2M                (PTE_P | PTE_RW | PTE_US | PTE_PS)
#define PTE_2M_UC             (PTE_2M | PTE_PCD | PTE_PWT)

/* ---------------------------------------------------------------------------------- */
    .section .multiboot, "a"
    .balign 4
    .globl multiboot_header
multiboot_header:
    .long MULTIBOOT_MAGIC
    .long MULTIBOOT_FLAGS
    .long -(MULTIBOOT_MAGIC + MULTIBOOT_FLAGS)
    .long multiboot_header          /* header_addr */
    .long __image_start             /* load_addr */
    .long __load_end                /* load_end_addr */
    .long __bss_end                 /* bss_end_addr */
    .long _start32                  /* entry_addr */

/* ---------------------------------------------------------------------------------- */
    .section .text.boot, "ax"
    .code32
    .globl _start32
_start32:
    /* Multiboot state: flat 32-bit segments, paging off, IF=0; no valid GDT, IDT or stack. */
    cli
    cld
    lgdt gdt_ptr
    /* The flat data segments of multiboot are still loaded. */
    ENTER_LONG_MODE start64

    .code64
start64:
    LOAD_SEGMENTS_64
    movq $kernel_stack_top, %rsp
    lidt idt_ptr
    movl $SEL_TSS, %eax
    ltr %ax
    call kmain
1:  cli
    hlt
    jmp 1b

/*
 * void enter_user(void (*fn)(void), uint64_t stack_top): iretq to `fn` in ring 3 with
 * IOPL=3 and IF=0, on the given stack, as if `fn` had been called. Port I/O from ring 3
 * is also allowed by the TSS I/O bitmap, for hypervisors that do not honour a guest's
 * IOPL in ring 3.
 */
    .globl enter_user
enter_user:
    subq $8, %rsi
    pushq $SEL_USER_DATA
    pushq %rsi
    pushq $USER_RFLAGS
    pushq $SEL_USER_CODE
    pushq %rdi
    iretq

/*
 * void load_empty_idt_and_fault(void): an IDT with limit 0, then #UD: the CPU cannot
 * deliver it, nor the #GP or #DF that follow, and shuts down (triple fault).
 */
    .globl load_empty_idt_and_fault
load_empty_idt_and_fault:
    lidt empty_idt_ptr
    ud2
    jmp load_empty_idt_and_fault

/* ---------------------------------------------------------------------------------- */
/*
 * Exception stubs: 16 bytes each, starting at __isr_stubs, so the IDT can be filled in
 * statically (stub v is at __isr_stubs + 16 * v). Each pushes an error code (0 for
 * vectors without one) and the vector, then reports the fault.
 */
    .section .text.isr, "ax"
    .balign 16
    .globl __isr_stubs
__isr_stubs:
.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .balign 16
    .if (\v == 8) || (\v == 10) || (\v == 11) || (\v == 12) || (\v == 13) || (\v == 14) || (\v == 17) || (\v == 21) || (\v == 29) || (\v == 30)
    pushq $\v
    .else
    pushq $0
    pushq $\v
    .endif
    jmp isr_common
.endr
    .balign 16
__isr_stubs_end:

isr_common:
    /* Stack: vector, error code, RIP, CS, RFLAGS, RSP, SS. */
    movq 0(%rsp), %rax
    movq %rax, CONTROL_GPA + OFFSETOF_CONTROL_FAULT_VECTOR
    movq 8(%rsp), %rax
    movq %rax, CONTROL_GPA + OFFSETOF_CONTROL_FAULT_ERROR
    movq 16(%rsp), %rax
    movq %rax, CONTROL_GPA + OFFSETOF_CONTROL_FAULT_RIP
    movq %cr2, %rax
    movq %rax, CONTROL_GPA + OFFSETOF_CONTROL_FAULT_CR2
    movl $DOORBELL_FAULT, %eax
    movl $DOORBELL_PORT, %edx
    outl %eax, %dx
1:  cli
    hlt
    jmp 1b

/* ---------------------------------------------------------------------------------- */
    .section .rodata.boot, "a"
    .balign 16
    .word 0, 0, 0
    .globl gdt_ptr
gdt_ptr:
    .word gdt_end - gdt - 1
    .quad gdt

    .word 0, 0, 0
    .globl idt_ptr
idt_ptr:
    .word idt_end - idt - 1
    .quad idt

    .word 0, 0, 0
empty_idt_ptr:
    .word 0
    .quad 0

/* ---------------------------------------------------------------------------------- */
    .section .data.boot, "aw"
    .balign 16
    .globl gdt, gdt_end
gdt:
    .quad 0                             /* 0x00 null */
    .quad 0x00AF9A000000FFFF            /* 0x08 kernel code, 64-bit, DPL 0 */
    .quad 0x00CF92000000FFFF            /* 0x10 kernel data, DPL 0 */
    .quad 0x00CFF2000000FFFF            /* 0x18 user data, DPL 3 */
    .quad 0x00AFFA000000FFFF            /* 0x20 user code, 64-bit, DPL 3 */
    /* 0x28 available 64-bit TSS; the base bytes come from the linker script. */
    .word tss_end - tss - 1
    .word __tss_base_0_15
    .byte __tss_base_16_23
    .byte 0x89
    .byte 0x00
    .byte __tss_base_24_31
    .long __tss_base_32_63
    .long 0
    .quad 0x00CF9A000000FFFF            /* 0x38 kernel code, 32-bit (the AP trampoline's step) */
gdt_end:

    .balign 16
    .globl idt
idt:
.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .word __isr_stubs_0_15 + 16 * \v     /* offset 15:0 */
    .word SEL_KERNEL_CODE
    .byte 0                             /* IST */
    .byte 0x8E                          /* present, DPL 0, 64-bit interrupt gate */
    .word __isr_stubs_16_31             /* offset 31:16 */
    .long __isr_stubs_32_63             /* offset 63:32 */
    .long 0
.endr
    /* Vectors 32..255 are not present (delivering one raises #GP, which is reported)
       until apic.c installs the interrupt handlers. */
    .fill (256 - 32) * 2, 8, 0
idt_end:

    .balign 16
    .globl tss
tss:
    .long 0
    .quad fault_stack_top               /* RSP0: faults from ring 3 */
    .quad 0                             /* RSP1 */
    .quad 0                             /* RSP2 */
    .quad 0
    .quad 0, 0, 0, 0, 0, 0, 0           /* IST1..7 */
    .quad 0
    .word 0
    .word tss_io_bitmap - tss           /* I/O permission bitmap offset */
tss_io_bitmap:
    .fill 65536 / 8, 1, 0               /* every port allowed in ring 3 */
    .byte 0xff
tss_end:

/* ---------------------------------------------------------------------------------- */
/*
 * Page tables: identity map of the first 4 GiB with 2 MiB pages, user-accessible;
 * the fourth GiB (0xC0000000.., MMIO) uncached.
 */
    .section .data.pagetables, "aw"
    .balign 4096
    .globl pml4
pml4:
    .quad pdpt + PTE_TABLE
    .fill 511, 8, 0

    .balign 4096
pdpt:
    .quad pd + 0 * 4096 + PTE_TABLE
    .quad pd + 1 * 4096 + PTE_TABLE
    .quad pd + 2 * 4096 + PTE_TABLE
    .quad pd + 3 * 4096 + PTE_TABLE
    .fill 508, 8, 0

    .balign 4096
pd:
    .set page, 0
    .rept 3 * 512
    .quad (page << 21) + PTE_2M
    .set page, page + 1
    .endr
    .rept 512
    .quad (page << 21) + PTE_2M_UC
    .set page, page + 1
    .endr

/* ---------------------------------------------------------------------------------- */
    .section .bss.stacks, "aw", @nobits
    .balign 16
kernel_stack:
    .skip KERNEL_STACK_BYTES
    .globl kernel_stack_top
kernel_stack_top:
fault_stack:
    .skip FAULT_STACK_BYTES
fault_stack_top:
    .globl user_stack
user_stack:
    .skip USER_STACK_BYTES
    .globl user_stack_top
user_stack_top:

    .section .note.GNU-stack, "", @progbits
