/*
 * The PVH entry note: ELF note "Xen", type XEN_ELFNOTE_PHYS32_ENTRY, whose 4-byte
 * descriptor is the physical address of the 32-bit entry point.
 */
#include "conformance.h"

    .section .note.Xen, "a", @note
    .balign 4
    .long 2f - 1f                   /* namesz */
    .long 4f - 3f                   /* descsz */
    .long XEN_ELFNOTE_PHYS32_ENTRY  /* type */
1:  .asciz "Xen"
2:  .balign 4
3:  .long pvh_entry
4:  .balign 4

    .section .note.GNU-stack, "", @progbits
