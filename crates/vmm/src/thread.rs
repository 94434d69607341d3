//! vCPU threads: one OS thread per vCPU, optional pinning, and kicks out of KVM_RUN.
//!
//! A kick sets the vCPU's stop flag and sends it a signal whose handler only sets
//! `immediate_exit` in its kvm_run and issues a fence; KVM_RUN then returns EINTR (or
//! does not enter at all) and the run loop sees the flag.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vmm_sys_util::signal::Killable;

use crate::sys;
use crate::vcpu::{ExitHook, Handler, Vcpu, VcpuStop};
use crate::VmmError;

/// What a finished vCPU thread hands back.
pub struct Finished<H> {
    /// The vCPU, for registers and counters.
    pub vcpu: Vcpu,
    /// The hook, with whatever it collected.
    pub hook: H,
    /// Why the vCPU stopped.
    pub stop: VcpuStop,
    /// Pinning failure, if pinning was asked and failed.
    pub pin_error: Option<std::io::Error>,
}

impl<H> Finished<H> {
    /// Why the vCPU stopped, in one line, with the bytes at RIP when KVM could not
    /// emulate an instruction and did not say which.
    pub fn describe(&self) -> String {
        let mut s = self.stop.describe();
        if let VcpuStop::InternalError { insn, .. } = &self.stop {
            if insn.is_empty() {
                if let Some(b) = self.vcpu.bytes_at_rip() {
                    s += &format!("; bytes at rip: {}", crate::hook::bytes_named(&b));
                }
            }
        }
        s
    }

    /// When KVM's instruction emulator could not run an instruction
    /// (KVM_INTERNAL_ERROR_EMULATION): the instruction's bytes as KVM gave them, else
    /// those at RIP, else none. `None` for any other stop.
    pub fn emulation_failure(&self) -> Option<Vec<u8>> {
        match &self.stop {
            VcpuStop::InternalError { suberror, insn, .. }
                if *suberror == crate::hook::EMULATION_FAILURE =>
            {
                Some(if insn.is_empty() {
                    self.vcpu.bytes_at_rip().unwrap_or_default()
                } else {
                    insn.clone()
                })
            }
            _ => None,
        }
    }
}

/// A running vCPU thread.
pub struct VcpuThread<H> {
    handle: JoinHandle<()>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: mpsc::Receiver<Finished<H>>,
}

/// Starts `vcpu` on a new thread (machines start theirs through
/// [`crate::builder::MachineBuilder::start`]) named `vcpu<N>`, pinned to host CPU `pin` if given,
/// running the exit handler `handler`.
pub(crate) fn spawn<H: ExitHook + Send + 'static>(
    mut vcpu: Vcpu,
    mut hook: H,
    pin: Option<usize>,
    handler: Handler,
) -> Result<VcpuThread<H>, VmmError> {
    sys::install_kick_handler()
        .map_err(|e| VmmError::Os("installing the vCPU kick signal handler", e))?;
    let stop = vcpu.stop_flag();
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(format!("vcpu{}", vcpu.id()))
        .spawn(move || {
            let pin_error = pin.and_then(|cpu| sys::pin_current_thread(cpu).err());
            // Only a cost is at stake: a thread left on the shared table (ENOMEM) runs
            // as before, paying the fd lookup's reference counting on every KVM_RUN.
            let fd_table = sys::private_fd_table().ok();
            let stop = match crate::seccomp::apply(crate::seccomp::ThreadKind::Vcpu) {
                Err(e) => VcpuStop::RunError(std::io::Error::other(e.to_string())),
                Ok(()) => vcpu.run_with(handler, &mut hook),
            };
            let _ = tx.send(Finished {
                vcpu,
                hook,
                stop,
                pin_error,
            });
            // The vCPU and its hook are the receiver's now: the copy's references go
            // before this thread is reported ended.
            if let Some(t) = fd_table {
                t.release();
            }
        })
        .map_err(|e| VmmError::Os("spawning a vCPU thread", e))?;
    Ok(VcpuThread {
        handle,
        stop,
        done: rx,
    })
}

impl<H> VcpuThread<H> {
    /// Asks the vCPU to stop and kicks it out of KVM_RUN.
    pub fn kick(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.handle.kill(sys::kick_signal());
    }

    /// Waits up to `timeout` for the vCPU to stop on its own.
    pub fn wait(&self, timeout: Duration) -> Option<Finished<H>> {
        self.done.recv_timeout(timeout).ok()
    }

    /// Kicks the vCPU and waits up to `grace` for it to leave KVM_RUN. A vCPU the host
    /// never lets out of KVM_RUN is left behind (its thread ends with the process) and
    /// `None` is returned.
    pub fn stop(self, grace: Duration) -> Option<Finished<H>> {
        let deadline = Instant::now() + grace;
        loop {
            self.kick();
            match self.done.recv_timeout(Duration::from_millis(20)) {
                Ok(f) => {
                    let _ = self.handle.join();
                    return Some(f);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= deadline => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Joins the thread of a vCPU whose [`Finished`] was already taken with
    /// [`VcpuThread::wait`] (it ends right after handing it over).
    pub fn reap(self) {
        let _ = self.handle.join();
    }

    /// Waits for the vCPU to stop, then joins its thread.
    pub fn join(self) -> Option<Finished<H>> {
        let f = self.done.recv().ok();
        let _ = self.handle.join();
        f
    }
}
