//! Helpers shared by the lab crate's integration tests.

use std::sync::Arc;

/// Opens /dev/kvm, or fails the calling test with one line naming /dev/kvm and what to do.
pub fn kvm() -> Arc<exitlab_vmm::Kvm> {
    Arc::new(exitlab_vmm::testing::kvm_or_fail())
}
