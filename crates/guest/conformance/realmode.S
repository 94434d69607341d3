/*
 * exitlab conformance: a real-mode test kernel linked at 0x8000, below 1 MiB, as
 * kvm-unit-tests' real-mode tests are. Multiboot (ELF, no a.out kludge) enters it in
 * 32-bit protected mode; it drops to 16-bit real mode, prints one line on COM1 that
 * shows CR0.PE is clear and where it runs, and writes 0 to the debug-exit port.
 */
#include "conformance.h"

    .section .multiboot, "a"
    .balign 4
    .long MULTIBOOT_HEADER_MAGIC
    .long MULTIBOOT_FLAGS_BASE
    .long -(MULTIBOOT_HEADER_MAGIC + MULTIBOOT_FLAGS_BASE)

    .text
    .code32
    .globl rm_entry
rm_entry:
    cli
    lgdt rm_gdt_ptr
    ljmp $0x08, $1f
    .code16
1:  movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl %cr0, %eax
    andl $~1, %eax
    movl %eax, %cr0
    ljmp $0, $2f
2:  xorw %ax, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw $0x7c00, %sp
    lidt rm_ivt_ptr
    movw $rm_hello, %si
    call rm_puts
    smsw %ax
    andb $1, %al
    addb $'0', %al
    call rm_putc
    movw $rm_where, %si
    call rm_puts
    call 3f
3:  popw %ax                    /* the IP of label 3, to print where the code runs */
    call rm_puthex16
    movb $'\n', %al
    call rm_putc
    movw $0xf4, %dx
    xorl %eax, %eax
    outl %eax, %dx
4:  hlt
    jmp 4b

/* Writes AL on COM1 (no flow control: exitlab's 16550A is always ready). */
rm_putc:
    movw $0x3f8, %dx
    outb %al, %dx
    ret

/* Writes the NUL-terminated string at DS:SI. */
rm_puts:
    lodsb
    testb %al, %al
    jz 1f
    call rm_putc
    jmp rm_puts
1:  ret

/* Writes AX as four hexadecimal digits. */
rm_puthex16:
    movw $4, %cx
    movw %ax, %bx
1:  rolw $4, %bx
    movb %bl, %al
    andb $0xf, %al
    addb $'0', %al
    cmpb $'9', %al
    jbe 2f
    addb $('a' - '9' - 1), %al
2:  call rm_putc
    loop 1b
    ret

    .section .rodata
rm_hello:
    .asciz "# realmode: hello from real mode, CR0.PE="
rm_where:
    .asciz ", IP 0x"
    .balign 8
rm_gdt:
    .quad 0
    .quad 0x00009a000000ffff    /* 0x08: 16-bit code, base 0, limit 64 KiB */
    .quad 0x000092000000ffff    /* 0x10: 16-bit data, base 0, limit 64 KiB */
rm_gdt_end:
rm_gdt_ptr:
    .word rm_gdt_end - rm_gdt - 1
    .long rm_gdt
rm_ivt_ptr:
    .word 0x3ff
    .long 0
