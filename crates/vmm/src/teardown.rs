//! VM teardowns put off to a moment of the caller's choosing, and then done all at once.
//!
//! Closing a VM's last fd destroys the VM in the kernel, and that waits: here (kvm_pvm,
//! kernel 6.18) 12-24 ms a VM under strace, nearly all of it asleep in SRCU grace
//! periods (freeing the PIT, the I/O bus devices and the MMU notifier each wait for
//! one). A lab that runs every
//! test round in a fresh VM spends that much per round doing nothing. A [`Teardown`]
//! keeps the fds of dropped VMs ([`crate::builder::MachineBuilder::defer_teardown`]) and
//! closes them together, one thread each, when told ([`Teardown::finish`]) or when it is
//! dropped, so that the waits overlap (`docs/notebook/2026-11-statistics.md`: a default bench's rounds
//! took half the time).
//!
//! Only the VM fd waits. Everything else of a dropped VM goes at once, in its usual
//! order: its vCPU threads are stopped and joined, its buses and devices dropped, its
//! guest memory unmapped (KVM keeps a memory slot whose mapping is gone, which is safe
//! for a VM that never runs again). What a kept VM still holds is kernel memory: its
//! vCPUs, irqchip and page tables, and its MMU notifier, so that later changes to this
//! process's mappings (the next VM's guest memory) also visit the kept VMs. A timer the
//! guest left armed would go on firing on the host until the VM is closed, so a caller
//! defers only VMs whose guests arm no periodic timer. Kept VMs sit, idle, beside the
//! rounds that follow them; only their closing is kept away from a running VM.

use std::sync::{Arc, Mutex, PoisonError};

use kvm_ioctls::VmFd;

/// Fds of dropped VMs, kept to be closed together ([`Teardown::finish`]).
#[derive(Debug, Default)]
pub struct Teardown {
    kept: Mutex<Vec<Arc<VmFd>>>,
}

impl Teardown {
    /// An empty teardown, to be shared with the builders of the VMs it is to keep.
    pub fn new() -> Arc<Teardown> {
        Arc::new(Teardown::default())
    }

    /// Keeps `fd` (a dropped VM's) until [`Teardown::finish`].
    pub(crate) fn keep(&self, fd: Arc<VmFd>) {
        self.lock().push(fd);
    }

    /// How many VMs are kept, waiting to be closed.
    pub fn kept(&self) -> usize {
        self.lock().len()
    }

    /// Closes every VM kept so far, each on a thread of its own so that their waits
    /// overlap, and returns once all are closed (a thread that cannot be spawned closes
    /// its VM on this one). Returns how many were closed.
    pub fn finish(&self) -> usize {
        let fds = std::mem::take(&mut *self.lock());
        let n = fds.len();
        std::thread::scope(|s| {
            for fd in fds {
                // The closure owns the fd: it closes when the thread ends. If the
                // thread cannot be spawned, the error drops the closure, and with it the
                // fd, here.
                let _ = std::thread::Builder::new()
                    .name("vm-teardown".into())
                    .spawn_scoped(s, move || drop(fd));
            }
        });
        n
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<VmFd>>> {
        // A panic while the lock was held cannot leave the list half-changed.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.finish();
    }
}
