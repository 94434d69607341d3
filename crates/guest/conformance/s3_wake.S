/*
 * exitlab conformance kernel: the real-mode code the `s3` test leaves at the FACS
 * waking vector. Copied below 1 MiB and entered with CS = vector >> 4, IP = 0 after
 * the resume; it uses only relative jumps and segment-relative data. It prints
 * "# s3: resumed in real mode at the waking vector, CS <cs>, CR0.PE <pe>, RTC
 * register C <c>" and writes 0 to the debug-exit port.
 */
    .text
    .code16
    .globl s3_wake_start, s3_wake_end
s3_wake_start:
    cli
    movw %cs, %ax
    movw %ax, %ds
    movw $(1f - s3_wake_start), %si
    call s3_puts
    movw %cs, %ax
    call s3_hex16
    movw $(2f - s3_wake_start), %si
    call s3_puts
    smsw %ax
    andw $1, %ax
    addb $'0', %al
    call s3_putc
    movw $(3f - s3_wake_start), %si
    call s3_puts
    movb $0x0c, %al
    outb %al, $0x70
    inb $0x71, %al
    xorb %ah, %ah
    shlw $8, %ax
    movw $2, %cx
    call s3_hexn
    movb $'\n', %al
    call s3_putc
    movw $0xf4, %dx
    xorl %eax, %eax
    outl %eax, %dx
4:  hlt
    jmp 4b

s3_putc:
    movw $0x3f8, %dx
    outb %al, %dx
    ret

s3_puts:
    lodsb
    testb %al, %al
    jz 5f
    call s3_putc
    jmp s3_puts
5:  ret

/* AX as 4 hex digits. */
s3_hex16:
    movw $4, %cx
/* The top CX hex digits of AX. */
s3_hexn:
    movw %ax, %bx
6:  rolw $4, %bx
    movb %bl, %al
    andb $0xf, %al
    addb $'0', %al
    cmpb $'9', %al
    jbe 7f
    addb $('a' - '9' - 1), %al
7:  call s3_putc
    loop 6b
    ret

1:  .asciz "# s3: resumed in real mode at the waking vector, CS "
2:  .asciz ", CR0.PE "
3:  .asciz ", RTC register C "
s3_wake_end:
