//! exitlab-trace: the kernel's view of a KVM process, read from tracefs.
//!
//! [`tracefs::Session`] creates a private tracefs instance (under `instances/`, so the
//! global buffer and anyone else's tracing are left alone), selects the `x86-tsc` trace
//! clock, enables the KVM tracepoints (`kvm_exit`, `kvm_entry`, `kvm_userspace_exit`,
//! `kvm_pio`, `kvm_mmio`, `kvm_msr`) and `raw_syscalls:sys_enter` filtered to `ioctl`,
//! optionally restricted to some processes and their children, and streams the text of
//! `trace_pipe` into [`parse::Record`]s until it is finished; the instance is removed
//! when the session ends, also on error. [`parse`] turns trace text into records and
//! needs neither root nor KVM.
//!
//! The crate knows nothing of VMs or statistics beyond what it parses: pairing events
//! into exits and summarising them is the lab's job.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod parse;
pub mod tracefs;

pub use parse::{parse_line, Event, Line, MmioKind, Record};
pub use tracefs::{Capture, EventStatus, Session, SessionConfig, TraceError};
