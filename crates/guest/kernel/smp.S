/*
 * exitlab guest kernel: the AP trampoline (real mode -> 32-bit protected mode -> long
 * mode, copied to AP_TRAMPOLINE_GPA, where the SIPI starts each AP) and the interrupt
 * entry stubs of the local APIC vectors.
 */
#include "abi.h"
#include "kernel.h"

#define CR0_PE                (1 << 0)

/* Address of trampoline label `x` once copied to AP_TRAMPOLINE_GPA. */
#define TRAMP(x)              (AP_TRAMPOLINE_GPA + (x) - ap_trampoline_start)

/* ---------------------------------------------------------------------------------- */
/*
 * Position-dependent on AP_TRAMPOLINE_GPA only: apic.c copies the bytes between
 * ap_trampoline_start and ap_trampoline_end there before the SIPIs.
 */
    .section .rodata.trampoline, "a"
    .balign 16
    .globl ap_trampoline_start, ap_trampoline_end
    .code16
ap_trampoline_start:
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl TRAMP(tramp_gdt_ptr)
    movl %cr0, %eax
    orl $CR0_PE, %eax
    movl %eax, %cr0
    ljmpl $SEL_KERNEL_CODE32, $TRAMP(tramp32)

    .code32
tramp32:
    movl $SEL_KERNEL_DATA, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %ss
    ENTER_LONG_MODE ap_start64

    .balign 8
    .word 0, 0, 0
tramp_gdt_ptr:
    .word __gdt_limit
    .long gdt
ap_trampoline_end:

/* ---------------------------------------------------------------------------------- */
    .text
    .code64
/*
 * The AP's first 64-bit instruction: segments, IDT, a stack chosen by its initial APIC
 * id (CPUID leaf 1 EBX[31:24]), then ap_main(id), which never returns.
 */
ap_start64:
    LOAD_SEGMENTS_64
    lidt idt_ptr
    movl $1, %eax
    xorl %ecx, %ecx
    cpuid
    shrl $24, %ebx
    movl %ebx, %edi
    leaq 1(%rbx), %rax
    imulq $AP_STACK_BYTES, %rax
    leaq ap_stacks(%rax), %rsp
    call ap_main
1:  cli
    hlt
    jmp 1b

/*
 * Interrupt entry: save the registers the C ABI lets a callee clobber, call the C
 * handler, restore, iretq. On entry RSP is 16-byte aligned plus the 40-byte frame; the
 * nine pushes make it 16-byte aligned again at the call.
 */
.macro IRQ_STUB name, handler
    .globl \name
\name:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    cld
    call \handler
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    iretq
.endm

IRQ_STUB irq_ipi_entry, irq_ipi
IRQ_STUB irq_self_entry, irq_self
IRQ_STUB irq_lock_entry, irq_lock
IRQ_STUB irq_timer_entry, irq_timer

/* Spurious interrupts need no EOI. */
    .globl irq_spurious_entry
irq_spurious_entry:
    iretq

/* ---------------------------------------------------------------------------------- */
    .section .bss.apstacks, "aw", @nobits
    .balign 16
ap_stacks:
    .skip AP_STACK_BYTES * (MAX_CPUS + 1)

    .section .note.GNU-stack, "", @progbits
