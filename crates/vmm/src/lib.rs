//! exitlab's VMM core: VMs and vCPUs on /dev/kvm (rust-vmm crates), guest memory, the
//! vCPU run loop and exit dispatch, the lock-free device bus, CPUID and KVM's capabilities
//! (`caps`) asked once per process, and the small amount of raw system code KVM needs.
#![deny(missing_docs)]
// Raw `unsafe` is allowed in two modules only, each block with a `// SAFETY:` note.
#![deny(unsafe_code)]

pub mod builder;
pub mod bus;
pub mod caps;
pub use exitlab_counts as counts;
pub mod cpuid;
mod error;
pub mod exit;
pub mod hook;
pub mod irqchip;
pub mod knobs;
pub mod kvmstats;
pub mod machine;
pub mod mce;
#[allow(unsafe_code)]
mod memory;
pub mod msr;
pub mod regs;
pub mod seccomp;
pub mod suspend;
#[allow(unsafe_code)]
pub mod sys;
pub mod teardown;
pub mod testing;
pub mod thread;
pub mod vcpu;
pub mod vm;

pub use caps::Capabilities;
pub use error::VmmError;
/// The open /dev/kvm, as the layers above hold it (they never issue ioctls on it).
pub use kvm_ioctls::Kvm;
pub use vm::open_kvm;
