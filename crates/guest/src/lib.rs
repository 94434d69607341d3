//! exitlab's guest test kernel and its ABI.
//!
//! [`IMAGE`] is the kernel as a flat binary, built from the C and assembly sources in
//! `kernel/` by this crate's build script. It is linked at [`abi::KERNEL_GPA`] and opens
//! with a multiboot v1 header using the a.out kludge (flags bit 16): load the file at
//! `load_addr`, zero memory up to `bss_end_addr`, and enter at `entry_addr` in 32-bit
//! protected mode with EAX = 0x2BADB002, flat 4 GiB code and data segments, paging off
//! and IF = 0, as multiboot prescribes. The kernel sets up its own GDT, IDT, TSS, page
//! tables and stack. [`image_info`] has the header's addresses.
#![no_std]

#[allow(missing_docs)]
pub mod abi {
    include!("abi.rs");
}

/// The addresses in the image's multiboot header, as the build checked them.
pub mod image_info {
    include!(concat!(env!("OUT_DIR"), "/image_info.rs"));
}

/// The guest kernel as a flat binary, to be loaded at [`abi::KERNEL_GPA`].
pub static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/exitlab-guest.bin"));

/// The guest kernel as a flat binary (same as [`IMAGE`]).
pub fn image() -> &'static [u8] {
    IMAGE
}

// Layout facts the host relies on, checked when the crate compiles.
const _: () = {
    assert!(image_info::BSS_END_ADDR <= abi::KERNEL_END_GPA);
    assert!(abi::KERNEL_END_GPA <= abi::CONTROL_GPA);
    assert!(image_info::LOAD_ADDR == abi::KERNEL_GPA);
    assert!(image_info::LOAD_ADDR <= image_info::ENTRY_ADDR);
    assert!(image_info::ENTRY_ADDR < image_info::LOAD_END_ADDR);
    assert!(core::mem::size_of::<abi::Sample>() as u64 == abi::SAMPLE_BYTES);
    assert!(abi::SAMPLES_PER_BATCH * abi::SAMPLE_BYTES <= abi::SAMPLES_BYTES_PER_CPU);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn le32(off: usize) -> u64 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&IMAGE[off..off + 4]);
        u64::from(u32::from_le_bytes(b))
    }

    #[test]
    fn multiboot_header_matches_the_layout() {
        let off = image_info::MULTIBOOT_HEADER_OFFSET;
        assert!(off + 32 <= 8192 && off & 3 == 0);
        let field = |i: usize| le32(off + 4 * i);
        assert_eq!(field(0), 0x1BAD_B002);
        let flags = field(1);
        assert_ne!(flags & (1 << 16), 0);
        assert_ne!(flags & (1 << 1), 0);
        assert_eq!((field(0) + flags + field(2)) & 0xffff_ffff, 0);
        assert_eq!(field(3), abi::KERNEL_GPA + off as u64);
        assert_eq!(field(4), image_info::LOAD_ADDR);
        assert_eq!(field(5), image_info::LOAD_END_ADDR);
        assert_eq!(field(6), image_info::BSS_END_ADDR);
        assert_eq!(field(7), image_info::ENTRY_ADDR);
        assert_eq!(image_info::LOAD_ADDR, abi::KERNEL_GPA);
    }

    #[test]
    fn image_fits_below_the_control_page() {
        assert_eq!(
            IMAGE.len() as u64,
            image_info::LOAD_END_ADDR - image_info::LOAD_ADDR
        );
    }

    #[test]
    fn abi_layout_is_stable() {
        assert_eq!(core::mem::size_of::<abi::Control>(), 128);
        assert_eq!(core::mem::size_of::<abi::Stamps>(), 24);
        assert_eq!(core::mem::offset_of!(abi::Control, batch_count), 72);
        assert_eq!(core::mem::offset_of!(abi::Sample, seq_delta), 40);
    }
}
