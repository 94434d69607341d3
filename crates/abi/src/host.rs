//! The ABI's `#[repr(C)]` structs ([`crate`]) as the host reads and writes them in
//! guest memory: vm-memory's `read_obj`/`write_obj` at each struct's guest-physical
//! address, and a single field at its `core::mem::offset_of!`. There are no word
//! indices: the host and the guest kernel (compiled against `abi.h`, generated from the
//! same structs) share one layout, and a test below checks the header against it.

use core::mem::size_of;

use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemory};

use crate as abi;
use crate::{Control, PerCpu, Sample, Stamps};

// SAFETY: each of these is `#[repr(C)]` with only `u64` fields (c_header.rs refuses
// any other field type, since it must express each in C): no padding, no pointers, and
// every bit pattern is a valid value, which is what `ByteValued` requires.
unsafe impl ByteValued for Control {}
// SAFETY: as above.
unsafe impl ByteValued for PerCpu {}
// SAFETY: as above.
unsafe impl ByteValued for Stamps {}
// SAFETY: as above.
unsafe impl ByteValued for Sample {}

/// Where vCPU `vcpu`'s `PerCpu` record is.
pub fn percpu_gpa(vcpu: u32) -> GuestAddress {
    GuestAddress(abi::PERCPU_GPA + u64::from(vcpu) * abi::PERCPU_BYTES)
}

/// Where vCPU `vcpu`'s stamp page is.
pub fn stamps_gpa(vcpu: u32) -> GuestAddress {
    GuestAddress(abi::STAMPS_GPA + u64::from(vcpu) * abi::PAGE_SIZE)
}

/// Where record `i` of vCPU `vcpu`'s sample ring is.
pub fn sample_gpa(vcpu: u32, i: u64) -> GuestAddress {
    GuestAddress(
        abi::SAMPLES_GPA + u64::from(vcpu) * abi::SAMPLES_BYTES_PER_CPU + i * abi::SAMPLE_BYTES,
    )
}

/// Reads the control page.
pub fn read_control<M: GuestMemory>(mem: &M) -> Result<Control, vm_memory::GuestMemoryError> {
    mem.read_obj(GuestAddress(abi::CONTROL_GPA))
}

/// Writes the control page.
pub fn write_control<M: GuestMemory>(
    mem: &M,
    control: Control,
) -> Result<(), vm_memory::GuestMemoryError> {
    mem.write_obj(control, GuestAddress(abi::CONTROL_GPA))
}

/// Reads one `u64` field of the control page, given its `offset_of!(Control, field)`.
pub fn read_control_field<M: GuestMemory>(
    mem: &M,
    offset: usize,
) -> Result<u64, vm_memory::GuestMemoryError> {
    mem.read_obj(GuestAddress(abi::CONTROL_GPA + offset as u64))
}

/// The sample records in `bytes` (whole `SAMPLE_BYTES` records, as copied out of a
/// ring), in order.
pub fn samples(bytes: &[u8]) -> impl Iterator<Item = Sample> + '_ {
    bytes.chunks_exact(size_of::<Sample>()).map(|rec| {
        let mut s = Sample::default();
        s.as_mut_slice().copy_from_slice(rec);
        s
    })
}

#[cfg(test)]
mod tests {
    extern crate std;

    use core::mem::offset_of;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn structs_round_trip_through_guest_memory_at_their_addresses() {
        let mem = vm_memory::GuestMemoryMmap::<()>::from_ranges(&[(
            GuestAddress(0),
            abi::MIN_RAM_BYTES as usize,
        )])
        .unwrap();
        let c = Control {
            magic: abi::CONTROL_MAGIC,
            test: 7,
            cpus_online: 0b101,
            ..Control::default()
        };
        write_control(&mem, c).unwrap();
        assert_eq!(read_control(&mem).unwrap(), c);
        let online = read_control_field(&mem, offset_of!(Control, cpus_online)).unwrap();
        assert_eq!(online, 0b101);
        let cpus = read_control_field(&mem, offset_of!(Control, cpus)).unwrap();
        assert_eq!(cpus, 0, "the field beside it untouched");
        let p = PerCpu {
            apic_id: 3,
            wakes: 9,
            ..PerCpu::default()
        };
        mem.write_obj(p, percpu_gpa(3)).unwrap();
        assert_eq!(mem.read_obj::<PerCpu>(percpu_gpa(3)).unwrap(), p);
        assert_eq!(percpu_gpa(1).0 - percpu_gpa(0).0, abi::PERCPU_BYTES);
        assert_eq!(stamps_gpa(2).0, abi::STAMPS_GPA + 2 * abi::PAGE_SIZE);
        let s = Sample {
            g_end: 42,
            g_loop: 5,
            ..Sample::default()
        };
        mem.write_obj(s, sample_gpa(0, 2)).unwrap();
        let mut bytes = [0u8; 3 * 56];
        mem.read_slice(&mut bytes, sample_gpa(0, 0)).unwrap();
        let got: Vec<Sample> = samples(&bytes).collect();
        assert_eq!(got, [Sample::default(), Sample::default(), s]);
    }
}
