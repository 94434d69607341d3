/*
 * exitlab's second harness: multiboot v1 entry. The loader enters in 32-bit protected
 * mode with paging off, flat segments and EAX = 0x2BADB002, EBX = the multiboot info;
 * the harness keeps that mode and the loader's segments, takes its own stack and calls
 * harness_main(magic, info). No IDT: a fault ends the run as a triple fault.
 */
#define MB_MAGIC 0x1BADB002
#define MB_FLAGS 0x00000003

    .section .multiboot, "a"
    .balign 4
    .long MB_MAGIC
    .long MB_FLAGS
    .long -(MB_MAGIC + MB_FLAGS)

    .section .text.entry, "ax"
    .code32
    .globl harness_entry
harness_entry:
    cli
    cld
    movl $harness_stack_top, %esp
    xorl %ebp, %ebp
    pushl %ebx
    pushl %eax
    call harness_main
1:  cli
    hlt
    jmp 1b

    .section .bss, "aw", @nobits
    .balign 16
    .skip 16384
harness_stack_top:

    .section .note.GNU-stack, "", @progbits
