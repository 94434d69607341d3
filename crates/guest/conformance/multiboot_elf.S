/*
 * Multiboot v1 header without the a.out kludge, for the ELF32 image: the loader takes
 * the segments from the program headers and enters at e_entry, as for the
 * kvm-unit-tests x86 images.
 */
#include "conformance.h"

#define FLAGS MULTIBOOT_FLAGS_BASE

    .section .multiboot, "a"
    .balign 4
    .long MULTIBOOT_HEADER_MAGIC
    .long FLAGS
    .long -(MULTIBOOT_HEADER_MAGIC + FLAGS)

    .section .note.GNU-stack, "", @progbits
