/*
 * Multiboot v1 header with the a.out kludge (flag 16), for the flat binary image:
 * the loader copies the file to load_addr, zeroes up to bss_end_addr and jumps to
 * entry_addr, without reading any ELF structure.
 */
#include "conformance.h"

#define FLAGS (MULTIBOOT_FLAGS_BASE | MULTIBOOT_AOUT_KLUDGE)

    .section .multiboot, "a"
    .balign 4
multiboot_header:
    .long MULTIBOOT_HEADER_MAGIC
    .long FLAGS
    .long -(MULTIBOOT_HEADER_MAGIC + FLAGS)
    .long multiboot_header          /* header_addr */
    .long __image_start             /* load_addr */
    .long __load_end                /* load_end_addr */
    .long __bss_end                 /* bss_end_addr */
    .long mb_entry                  /* entry_addr */

    .section .note.GNU-stack, "", @progbits
