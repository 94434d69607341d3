//! exitlab's VMM core: VMs and vCPUs on /dev/kvm (rust-vmm crates), guest memory, the
//! vCPU run loop and exit dispatch, the lock-free device bus, CPUID cached once per
//! process, and the small amount of raw system code KVM needs.
#![deny(missing_docs)]

pub mod bus;
pub mod counts;
pub mod cpuid;
mod error;
pub mod exit;
pub mod host;
pub mod knobs;
pub mod kvmstats;
pub mod machine;
pub mod mce;
mod memory;
pub mod msr;
pub mod regs;
pub mod suspend;
pub mod sys;
pub mod thread;
pub mod vcpu;
pub mod vm;

pub use error::VmmError;
pub use vm::open_kvm;
