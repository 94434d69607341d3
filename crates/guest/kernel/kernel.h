/* exitlab guest kernel: definitions shared by boot.S and kmain.c. */
#ifndef EXITLAB_KERNEL_H
#define EXITLAB_KERNEL_H

/* GDT selectors. */
#define SEL_KERNEL_CODE   0x08
#define SEL_KERNEL_DATA   0x10
#define SEL_USER_DATA     (0x18 | 3)
#define SEL_USER_CODE     (0x20 | 3)
#define SEL_TSS           0x28

/* RFLAGS in ring 3: reserved bit 1 and IOPL=3 (port I/O allowed); IF=0. */
#define USER_RFLAGS       0x3002

#define KERNEL_STACK_BYTES 16384
#define FAULT_STACK_BYTES  8192
#define USER_STACK_BYTES   16384

#ifndef __ASSEMBLER__
#include <stdint.h>

void enter_user(void (*fn)(void), uint64_t stack_top) __attribute__((noreturn));
void load_empty_idt_and_fault(void) __attribute__((noreturn));
void kmain(void) __attribute__((noreturn));
extern char user_stack_top[];
#endif

#endif /* EXITLAB_KERNEL_H */
