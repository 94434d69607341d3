//! Guest memory: anonymous mappings from vm-memory, registered with KVM as memory slots.

use std::sync::Arc;

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use vm_memory::{Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::VmmError;

/// Allocates guest RAM for `regions` (guest address, bytes) and registers each region as
/// a KVM memory slot.
pub fn create(vm: &VmFd, regions: &[(u64, u64)]) -> Result<Arc<GuestMemoryMmap>, VmmError> {
    let ranges: Vec<(GuestAddress, usize)> = regions
        .iter()
        .map(|&(base, len)| {
            usize::try_from(len)
                .map(|l| (GuestAddress(base), l))
                .map_err(|_| VmmError::RegionTooLarge(len))
        })
        .collect::<Result<_, _>>()?;
    let mem = GuestMemoryMmap::<()>::from_ranges(&ranges).map_err(VmmError::MemoryAlloc)?;
    for (slot, region) in mem.iter().enumerate() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(|_| VmmError::Unmapped(region.start_addr().raw_value()))?;
        let slot_region = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().raw_value(),
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // Guest RAM stays out of core dumps, and its mapping keeps flags of its own, so
        // the kernel never merges it with a neighbouring anonymous mapping of the process
        // (a malloc arena): `sys::memory_outside_guest` counts memory by mapping and would
        // otherwise leave the merged part of the VMM's own memory out.
        // SAFETY: madvise only sets a flag on pages of the live mapping owned by `mem`.
        if unsafe {
            libc::madvise(
                host.cast::<libc::c_void>(),
                region.len() as usize,
                libc::MADV_DONTDUMP,
            )
        } != 0
        {
            return Err(VmmError::Kvm(
                "madvise(MADV_DONTDUMP) of guest RAM",
                kvm_ioctls::Error::last(),
            ));
        }
        // SAFETY: the slot describes a live anonymous mapping owned by `mem`; the returned
        // Arc is stored in the `Vm` next to the VM fd and dropped only after its vCPUs
        // have stopped, so the mapping outlives every access a vCPU or the VMM makes
        // through the slot. A VM whose closing is deferred (`crate::teardown`) keeps its
        // fd, and so its slot, after the mapping is gone: it never runs again, and KVM's
        // MMU notifier drops its mappings of the range when it is unmapped.
        unsafe { vm.set_user_memory_region(slot_region) }
            .map_err(|e| VmmError::Kvm("KVM_SET_USER_MEMORY_REGION", e))?;
    }
    Ok(Arc::new(mem))
}
