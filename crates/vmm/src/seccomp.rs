//! Seccomp filters (seccompiler) for the VMM's threads: each vCPU thread and the serial
//! input thread may make only the system calls their loops need; anything else fails
//! with EPERM (and so never happens), whatever a guest makes the VMM do. vCPU threads
//! may only issue KVM ioctls (type 0xAE). Filters are on by default;
//! [`set_enabled`]`(false)` (`--no-seccomp`) turns them off for debugging.
//!
//! The main thread is not filtered: it creates a fresh VM for every test (files, KVM
//! fds, memory maps, threads), which is most of what a process can do.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::VmmError;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the filters on (default) or off for threads started from now on.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether threads started now get a filter.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Which thread a filter is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadKind {
    /// A vCPU thread: KVM_RUN and the exit handling around it.
    Vcpu,
    /// The thread that forwards standard input to the serial port.
    SerialInput,
}

/// System calls every filtered thread needs: memory, locks, signals (kicks), time,
/// output, and ending the thread.
const COMMON: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_futex,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_sched_yield,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// What a vCPU thread needs on top: KVM ioctls only, KVM's binary stats (pread), and
/// kicking other vCPUs when it republishes a bus (tgkill).
const VCPU_EXTRA: &[libc::c_long] = &[libc::SYS_pread64, libc::SYS_tgkill];

/// The ioctl type byte of every KVM ioctl.
const KVMIO: u64 = 0xAE;

fn build(kind: ThreadKind) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in COMMON {
        rules.insert(nr, Vec::new());
    }
    if kind == ThreadKind::Vcpu {
        for &nr in VCPU_EXTRA {
            rules.insert(nr, Vec::new());
        }
        // ioctl(fd, request, ...) with request's type byte (bits 8..15) == KVMIO.
        let kvm_only = SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(0xFF00),
            KVMIO << 8,
        )
        .map_err(|e| e.to_string())?;
        rules.insert(
            libc::SYS_ioctl,
            vec![SeccompRule::new(vec![kvm_only]).map_err(|e| e.to_string())?],
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        std::env::consts::ARCH
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

fn program(kind: ThreadKind) -> Result<&'static BpfProgram, VmmError> {
    static VCPU: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    static SERIAL: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    let cell = match kind {
        ThreadKind::Vcpu => &VCPU,
        ThreadKind::SerialInput => &SERIAL,
    };
    cell.get_or_init(|| build(kind))
        .as_ref()
        .map_err(|e| VmmError::Seccomp(format!("building it failed: {e}")))
}

/// Installs the filter for `kind` on the calling thread, unless filters are off.
pub fn apply(kind: ThreadKind) -> Result<(), VmmError> {
    if !enabled() {
        return Ok(());
    }
    seccompiler::apply_filter(program(kind)?)
        .map_err(|e| VmmError::Seccomp(format!("installing it failed: {e}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::builder::{MachineBuilder, VcpuSpec};
    use crate::vcpu::{DoorbellCtx, ExitHook, HltPolicy, HookReply, VcpuConfig, VcpuStop};
    use crate::vm::VmConfig;

    /// On the guest's doorbell, tries what a compromised vCPU thread might: open a file,
    /// open a socket.
    #[derive(Default)]
    struct Intruder {
        open: Option<std::io::Result<()>>,
        socket: Option<std::io::Result<()>>,
    }

    impl ExitHook for Intruder {
        fn doorbell(&mut self, _: &DoorbellCtx<'_>) -> HookReply {
            self.open = Some(std::fs::File::open("/etc/hostname").map(drop));
            self.socket = Some(std::net::UdpSocket::bind("127.0.0.1:0").map(drop));
            HookReply::Stop(0)
        }
    }

    /// A VM whose vCPU, from reset, writes to port 0x700 (the doorbell) once.
    fn run_doorbell_guest() -> Intruder {
        let kvm = Arc::new(crate::testing::kvm_or_fail());
        let mut b = MachineBuilder::new(
            kvm,
            VmConfig {
                ram: crate::testing::reset_vector_ram(),
                irqchip: crate::irqchip::IrqChip::Kernel,
                pit: false,
                ..VmConfig::default()
            },
        )
        .unwrap();
        // At the reset vector (0xFFFFFFF0, real mode): mov dx, 0x700; out dx, al; jmp $.
        crate::testing::write_at_reset_vector(
            b.vm().memory(),
            &[0xBA, 0x00, 0x07, 0xEE, 0xEB, 0xFE],
        );
        let spec = VcpuSpec::new(VcpuConfig {
            id: 0,
            stamp_gpa: None,
            run_log: 0,
            doorbell_port: Some(0x700),
            hlt: HltPolicy::Stop,
        });
        b.add_vcpu(spec, Intruder::default()).unwrap();
        let mut m = b.start().unwrap();
        let f = m
            .wait_for(0, std::time::Duration::from_secs(60))
            .expect("the vCPU stopped at its doorbell");
        assert!(matches!(f.stop, VcpuStop::Hook(0)), "{}", f.stop.describe());
        f.hook
    }

    #[test]
    fn a_vcpu_thread_cannot_open_files_or_sockets_unless_seccomp_is_off() {
        assert!(enabled(), "filters are on by default");
        let h = run_doorbell_guest();
        for (what, r) in [("open", h.open), ("socket", h.socket)] {
            let e = r.unwrap().expect_err(what);
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{what}: {e}");
        }
        set_enabled(false);
        let h = run_doorbell_guest();
        set_enabled(true);
        assert!(h.open.unwrap().is_ok(), "--no-seccomp: open works again");
        assert!(h.socket.unwrap().is_ok());
    }

    #[test]
    fn both_filters_compile() {
        assert!(build(ThreadKind::Vcpu).unwrap().len() > 20);
        assert!(build(ThreadKind::SerialInput).unwrap().len() > 20);
    }
}
