/*
 * exitlab conformance kernel: the multiboot and PVH entry points, the exception stubs,
 * the application processors' real-mode trampoline and the deliberate endings.
 *
 * Both boot protocols enter in 32-bit protected mode with paging off; the kernel keeps
 * that mode, loads its own GDT and IDT, switches to its own stack and calls cmain().
 */
#include "conformance.h"

    .section .text.entry, "ax"
    .code32

/* Multiboot: EAX = 0x2BADB002, EBX = physical address of the multiboot info. */
    .globl mb_entry
mb_entry:
    cli
    cld
    movl %eax, %esi
    movl %ebx, %edi
    movl $BOOT_MULTIBOOT, %ecx
    jmp common_entry

/* PVH: EBX = physical address of the hvm_start_info; EAX carries nothing. */
    .globl pvh_entry
pvh_entry:
    cli
    cld
    xorl %esi, %esi
    movl %ebx, %edi
    movl $BOOT_PVH, %ecx

common_entry:
    lgdt gdt_ptr
    ljmp $SEL_CODE, $1f
1:  movl $SEL_DATA, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %fs
    movl %eax, %gs
    movl %eax, %ss
    movl $bsp_stack_top, %esp
    xorl %ebp, %ebp
    lidt idt_ptr
    pushl %edi
    pushl %esi
    pushl %ecx
    call cmain
2:  cli
    hlt
    jmp 2b

/*
 * Application processors arrive here from the trampoline in 32-bit protected mode
 * with the kernel's GDT. Each takes the next index, its stack, and calls ap_main().
 */
ap_entry32:
    movl $SEL_DATA, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %fs
    movl %eax, %gs
    movl %eax, %ss
    movl $1, %eax
    lock xaddl %eax, ap_next
    cmpl $MAX_APS, %eax
    jae 2f
    movl %eax, %ebx
    incl %eax
    shll $AP_STACK_SHIFT, %eax
    addl $ap_stacks, %eax
    movl %eax, %esp
    xorl %ebp, %ebp
    lidt idt_ptr
    pushl %ebx
    call ap_main
2:  cli
    hlt
    jmp 2b

/* void triple_fault(void): an IDT with limit 0, then #UD: #UD, #GP and #DF cannot be
 * delivered, so the processor shuts down. */
    .globl triple_fault
triple_fault:
    lidt null_idt_ptr
    ud2
    jmp triple_fault

/* void spin_forever(void): never ends; the VMM's timeout has to. */
    .globl spin_forever
spin_forever:
    cli
1:  jmp 1b

/*
 * Exception stubs, 16 bytes apart from isr_stubs: each pushes an error code (0 where
 * the processor pushes none) and its vector, then hands the frame to C.
 */
    .balign 16
    .globl isr_stubs
isr_stubs:
.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .balign 16
    .if (\v == 8) || (\v == 10) || (\v == 11) || (\v == 12) || (\v == 13) || (\v == 14) || (\v == 17) || (\v == 21) || (\v == 29) || (\v == 30)
    pushl $\v
    .else
    pushl $0
    pushl $\v
    .endif
    jmp isr_common
.endr

isr_common:
    movl %esp, %eax
    pushl %eax
    call exception_handler
1:  cli
    hlt
    jmp 1b

/*
 * The real-mode trampoline, copied to AP_TRAMPOLINE_ADDR (page 0, SIPI vector 0) and
 * run there with CS = DS = 0: load the kernel's GDT, enable protection and jump to
 * ap_entry32 at its linked address.
 */
    .code16
    .globl ap_trampoline_start
ap_trampoline_start:
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl (ap_trampoline_gdt_ptr - ap_trampoline_start + AP_TRAMPOLINE_ADDR)
    movl %cr0, %eax
    orl $1, %eax
    movl %eax, %cr0
    ljmpl $SEL_CODE, $ap_entry32
    .balign 4
    .word 0
ap_trampoline_gdt_ptr:
    .word gdt_end - gdt - 1
    .long gdt
    .globl ap_trampoline_end
ap_trampoline_end:
    .code32

/* ---------------------------------------------------------------------------------- */
    .section .rodata.entry, "a"
    .balign 8
    .word 0
gdt_ptr:
    .word gdt_end - gdt - 1
    .long gdt

    .balign 8
    .word 0
    .globl idt_ptr
idt_ptr:
    .word 256 * 8 - 1
    .long idt

    .balign 8
    .word 0
null_idt_ptr:
    .word 0
    .long 0

    .balign 8
gdt:
    .quad 0                         /* 0x00 null */
    .quad 0x00CF9A000000FFFF        /* 0x08 flat 32-bit code */
    .quad 0x00CF92000000FFFF        /* 0x10 flat data */
gdt_end:

/* ---------------------------------------------------------------------------------- */
    .section .bss.entry, "aw", @nobits
    .balign 16
    .globl idt
idt:
    .skip 256 * 8
bsp_stack:
    .skip BSP_STACK_BYTES
bsp_stack_top:
ap_stacks:
    .skip MAX_APS << AP_STACK_SHIFT

    .section .note.GNU-stack, "", @progbits
