/*
 * exitlab chaos kernel: a hostile guest for `exitlab run --builtin chaos`. Multiboot v1
 * (ELF32), 32-bit protected mode, paging off, interrupts off. Every exception lands in
 * one handler that counts it and restarts the chaos loop on a fresh stack, so the guest
 * keeps going after #GP from a random MSR, #UD, #PF-free faults and NMIs alike.
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
    .globl chaos_entry
chaos_entry:
    cli
    cld
    movl %eax, %esi         /* multiboot magic and info survive the calls below */
    movl %ebx, %edi
    lgdt gdt_ptr
    ljmp $0x08, $1f
1:  movl $0x10, %ecx
    movl %ecx, %ds
    movl %ecx, %es
    movl %ecx, %fs
    movl %ecx, %gs
    movl %ecx, %ss
    movl $stack_top, %esp
    call build_idt
    lidt idt_ptr
    pushl %edi              /* multiboot info */
    pushl %esi              /* multiboot magic */
    call chaos_main
2:  cli
    hlt
    jmp 2b

/* Exception and interrupt stubs: vector in %eax, then the common path. */
    .globl stub_table
    .balign 16
stub_table:
    .set vec, 0
    .rept 256
    .balign 16
    movl $vec, %eax
    jmp fault_common
    .set vec, vec + 1
    .endr

fault_common:
    movl $0x10, %ecx
    movl %ecx, %ds
    movl %ecx, %es
    movl %ecx, %ss
    movl $stack_top, %esp
    pushl %eax
    call chaos_fault        /* counts the fault and resumes the loop; never returns */
3:  cli
    hlt
    jmp 3b

/* void chaos_triple_fault(void): an IDT with limit 0, then #UD (not int3, which some
 * hosts' instruction emulators cannot run in ring 0): #UD, #GP and #DF cannot be
 * delivered, so the CPU shuts down. */
    .globl chaos_triple_fault
chaos_triple_fault:
    lidt null_idt
    ud2
    jmp chaos_triple_fault

    .section .rodata
    .balign 8
gdt:
    .quad 0
    .quad 0x00CF9A000000FFFF    /* 0x08: code, flat 4 GiB */
    .quad 0x00CF92000000FFFF    /* 0x10: data, flat 4 GiB */
gdt_end:
gdt_ptr:
    .word gdt_end - gdt - 1
    .long gdt
null_idt:
    .word 0
    .long 0

    .data
    .balign 8
    .globl idt_ptr
idt_ptr:
    .word 256 * 8 - 1
    .long idt

    .bss
    .balign 16
    .globl idt
idt:
    .skip 256 * 8
    .balign 16
stack:
    .skip 16384
stack_top:

    .section .note.GNU-stack, "", @progbits
