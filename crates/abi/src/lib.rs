//! The contract between exitlab's host side and its guest kernels: the constants and the
//! `#[repr(C)]` structs (`abi.rs`) that the host reads and writes in guest memory and the
//! guest kernels (C and assembly) are compiled against, through the header that
//! [`c_header`] generates from them. One set of typed structs on both sides.
//!
//! This crate has no build script and needs no C toolchain, so that the results crate,
//! which reads sample records, builds where gcc is missing. The guest kernels themselves
//! are built by `exitlab-guest`.
#![deny(unsafe_code)]
#![no_std]

extern crate alloc;

#[allow(missing_docs)]
mod abi {
    include!("abi.rs");
}
pub use abi::*;

pub mod c_header;
// The one place of this crate with `unsafe`: the ABI structs as plain bytes for the host.
#[cfg(feature = "host")]
#[allow(unsafe_code)]
pub mod host;

// The per-vCPU page lies between the last stamp page and the first sample ring.
const _: () = assert!(PERCPU_GPA + MAX_CPUS * PERCPU_BYTES <= SAMPLES_GPA);
const _: () = assert!(PERCPU_GPA >= STAMPS_GPA + MAX_CPUS * PAGE_SIZE);
// The kernel region ends below the control page; a sample ring holds a batch of records.
const _: () = {
    assert!(KERNEL_END_GPA <= CONTROL_GPA);
    assert!(core::mem::size_of::<Sample>() as u64 == SAMPLE_BYTES);
    assert!(SAMPLES_PER_BATCH * SAMPLE_BYTES <= SAMPLES_BYTES_PER_CPU);
};

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn abi_layout_is_stable() {
        assert_eq!(core::mem::size_of::<Control>(), 224);
        assert_eq!(core::mem::offset_of!(Control, probe_user_after), 216);
        assert_eq!(core::mem::offset_of!(Control, apic_mode), 128);
        assert_eq!(core::mem::offset_of!(Control, cpus_online), 152);
        assert_eq!(core::mem::offset_of!(Control, work_cycles), 160);
        assert_eq!(core::mem::offset_of!(Control, work_spent), 176);
        assert_eq!(core::mem::size_of::<PerCpu>() as u64, PERCPU_BYTES);
        assert_eq!(core::mem::size_of::<Stamps>(), 24);
        assert_eq!(core::mem::offset_of!(Control, batch_count), 72);
        assert_eq!(core::mem::offset_of!(Sample, seq_delta), 40);
    }

    #[test]
    fn the_c_header_declares_every_constant_and_struct_of_the_abi() {
        let g = c_header::generate().expect("every item of abi.rs is exported");
        for line in [
            std::format!("#define ABI_VERSION ABI_U64({ABI_VERSION:#x})"),
            std::format!("#define SAMPLE_BYTES ABI_U64({SAMPLE_BYTES:#x})"),
            std::format!("#define SIZEOF_CONTROL {}", size_of::<Control>()),
            std::format!(
                "#define OFFSETOF_SAMPLE_SEQ_DELTA {}",
                core::mem::offset_of!(Sample, seq_delta)
            ),
            "    uint64_t work_spent;".into(),
        ] {
            assert!(g.header.lines().any(|l| l == line), "abi.h lacks {line:?}");
        }
        for s in ["control", "percpu", "stamps", "sample"] {
            assert!(g.header.contains(&std::format!("struct {s} {{")), "{s}");
        }
        assert!(g
            .linker_symbols
            .lines()
            .any(|l| l == std::format!("ABI_KERNEL_GPA = {KERNEL_GPA:#x};")));
        assert!(g.layout.contains(
            "(\"OFFSETOF_CONTROL_BATCH_COUNT\", core::mem::offset_of!(exitlab_abi::Control, batch_count)),"
        ));
    }
}
