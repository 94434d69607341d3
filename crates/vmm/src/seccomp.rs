//! Seccomp filters (seccompiler) for the VMM's threads: each vCPU thread and the serial
//! input thread may make only the system calls their loops need; anything else fails
//! with EPERM (and so never happens), whatever a guest makes the VMM do: no thread that
//! runs guest-driven code can open a file or a socket, start a process or a thread, or
//! map memory executable (`mmap`/`mprotect` with PROT_EXEC), and `tgkill` reaches only
//! this process's threads. Filters are on by default; [`set_enabled`]`(false)`
//! (`--no-seccomp`) turns them off for debugging.
//!
//! The vCPU thread's `ioctl` is allowed by its number alone, so that the filter does not
//! run on the hot path: Linux's seccomp action cache (5.11+) lets a system call that a
//! thread's filters allow whatever its arguments skip the filters, and `ioctl(KVM_RUN)`
//! is made once per exit. Checking the request's type byte (KVM ioctls only, type 0xAE)
//! makes every KVM_RUN run the filter, which costs ~150-200 cycles per exit on this
//! project's hosts against ~20 for the cached allow (docs/exit-path.md has the A/B);
//! [`set_strict_ioctl`]`(true)` (`--strict-ioctl`) turns that check back on. What the
//! unchecked ioctl gives a compromised vCPU thread is ioctls on the descriptors the
//! process already has open (its terminal's among them, e.g. TIOCSTI where the kernel
//! still allows it); it can still open no new one.
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
static STRICT_IOCTL: AtomicBool = AtomicBool::new(false);

/// Checks every ioctl of vCPU threads started from now on against the KVM type byte
/// (`true`), or allows ioctl by number so that the kernel's action cache skips the filter
/// on KVM_RUN (`false`, the default).
pub fn set_strict_ioctl(on: bool) {
    STRICT_IOCTL.store(on, Ordering::Relaxed);
}

/// Whether vCPU threads started now get the ioctl argument check.
pub fn strict_ioctl() -> bool {
    STRICT_IOCTL.load(Ordering::Relaxed)
}

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
/// output, and ending the thread (`mmap` and `mprotect` are added with their check).
const COMMON: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_futex,
    libc::SYS_munmap,
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

/// What a vCPU thread needs on top: KVM's binary stats (pread), and closing its own fd
/// table's copy as it ends (close_range, `sys::PrivateFdTable::release`); ioctl and
/// tgkill are added with their checks.
const VCPU_EXTRA: &[libc::c_long] = &[libc::SYS_pread64, libc::SYS_close_range];

/// The ioctl type byte of every KVM ioctl.
const KVMIO: u64 = 0xAE;

/// One rule of one condition.
fn rule(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<Vec<SeccompRule>, String> {
    let c = SeccompCondition::new(arg, len, op, value).map_err(|e| e.to_string())?;
    Ok(vec![SeccompRule::new(vec![c]).map_err(|e| e.to_string())?])
}

fn build(kind: ThreadKind, strict_ioctl: bool) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in COMMON {
        rules.insert(nr, Vec::new());
    }
    // mmap(addr, len, prot, ...) and mprotect(addr, len, prot) without PROT_EXEC.
    let no_exec = || {
        rule(
            2,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(libc::PROT_EXEC as u64),
            0,
        )
    };
    rules.insert(libc::SYS_mmap, no_exec()?);
    rules.insert(libc::SYS_mprotect, no_exec()?);
    if kind == ThreadKind::Vcpu {
        for &nr in VCPU_EXTRA {
            rules.insert(nr, Vec::new());
        }
        // tgkill(tgid, tid, sig) to this process's threads only (kicking other vCPUs).
        rules.insert(
            libc::SYS_tgkill,
            rule(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                u64::from(std::process::id()),
            )?,
        );
        // ioctl by number (the action cache then skips the filter on KVM_RUN), or, when
        // strict, with the request's type byte (bits 8..15) == KVMIO.
        let ioctl = if strict_ioctl {
            rule(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(0xFF00),
                KVMIO << 8,
            )?
        } else {
            Vec::new()
        };
        rules.insert(libc::SYS_ioctl, ioctl);
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

fn program(kind: ThreadKind, strict_ioctl: bool) -> Result<&'static BpfProgram, VmmError> {
    static VCPU: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    static VCPU_STRICT: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    static SERIAL: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    let cell = match (kind, strict_ioctl) {
        (ThreadKind::Vcpu, false) => &VCPU,
        (ThreadKind::Vcpu, true) => &VCPU_STRICT,
        (ThreadKind::SerialInput, _) => &SERIAL,
    };
    cell.get_or_init(|| build(kind, strict_ioctl))
        .as_ref()
        .map_err(|e| VmmError::Seccomp(format!("building it failed: {e}")))
}

/// Installs the filter for `kind` on the calling thread, unless filters are off.
pub fn apply(kind: ThreadKind) -> Result<(), VmmError> {
    if !enabled() {
        return Ok(());
    }
    seccompiler::apply_filter(program(kind, strict_ioctl())?)
        .map_err(|e| VmmError::Seccomp(format!("installing it failed: {e}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::builder::{MachineBuilder, VcpuSpec};
    use crate::vcpu::{DoorbellCtx, ExitHook, HookReply, VcpuStop};
    use crate::vm::VmConfig;

    /// On the guest's doorbell, tries what a compromised vCPU thread might: open a file,
    /// open a socket, map memory executable, and a non-KVM ioctl (FIONBIO on a socket
    /// the process opened before).
    struct Intruder {
        open: Option<std::io::Result<()>>,
        socket: Option<std::io::Result<()>>,
        exec_map: Option<Result<(), vm_memory::mmap::MmapRegionError>>,
        ioctl: Option<std::io::Result<()>>,
        sock: std::net::UdpSocket,
    }

    impl Default for Intruder {
        fn default() -> Self {
            Intruder {
                open: None,
                socket: None,
                exec_map: None,
                ioctl: None,
                sock: std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP socket"),
            }
        }
    }

    impl ExitHook for Intruder {
        fn doorbell(&mut self, _: &DoorbellCtx<'_>) -> HookReply {
            self.open = Some(std::fs::File::open("/etc/hostname").map(drop));
            self.socket = Some(std::net::UdpSocket::bind("127.0.0.1:0").map(drop));
            self.exec_map = Some(
                vm_memory::mmap::MmapRegion::<()>::build(
                    None,
                    4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                )
                .map(drop),
            );
            // std sets O_NONBLOCK on a socket with ioctl(FIONBIO), a tty-type ioctl.
            self.ioctl = Some(self.sock.set_nonblocking(true));
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
        let spec = VcpuSpec::new(crate::testing::test_vcpu_config(0));
        b.add_vcpu(spec, Intruder::default()).unwrap();
        let mut m = b.start().unwrap();
        let f = m
            .wait_for(0, std::time::Duration::from_secs(60))
            .expect("the vCPU stopped at its doorbell");
        assert!(matches!(f.stop, VcpuStop::Hook(0)), "{}", f.stop.describe());
        f.hook
    }

    fn eperm<T: std::fmt::Debug, E: std::fmt::Display>(what: &str, r: Option<Result<T, E>>) {
        let e = r.unwrap().expect_err(what).to_string();
        assert!(
            e.contains(&std::io::Error::from_raw_os_error(libc::EPERM).to_string()),
            "{what}: {e}"
        );
    }

    // One test, because the switches are process-wide.
    #[test]
    fn a_vcpu_thread_cannot_open_files_or_sockets_or_map_code_unless_seccomp_is_off() {
        assert!(enabled(), "filters are on by default");
        assert!(!strict_ioctl(), "ioctl by number by default");
        let h = run_doorbell_guest();
        eperm("open", h.open);
        eperm("socket", h.socket);
        eperm("mmap PROT_EXEC", h.exec_map);
        assert!(h.ioctl.unwrap().is_ok(), "ioctl is allowed by number");
        set_strict_ioctl(true);
        let h = run_doorbell_guest();
        set_strict_ioctl(false);
        eperm("open (strict)", h.open);
        eperm("FIONBIO (strict)", h.ioctl);
        set_enabled(false);
        let h = run_doorbell_guest();
        set_enabled(true);
        assert!(h.open.unwrap().is_ok(), "--no-seccomp: open works again");
        assert!(h.socket.unwrap().is_ok());
        assert!(h.exec_map.unwrap().is_ok());
    }

    #[test]
    fn both_filters_compile() {
        for strict in [false, true] {
            assert!(build(ThreadKind::Vcpu, strict).unwrap().len() > 20);
            assert!(build(ThreadKind::SerialInput, strict).unwrap().len() > 20);
        }
    }
}
