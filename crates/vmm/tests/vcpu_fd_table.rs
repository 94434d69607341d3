//! A vCPU thread runs on its own copy of the process's file descriptor table, so that
//! the kernel's fd lookup of every KVM_RUN takes no reference (docs/exit-path.md): a
//! file the main thread opens while the vCPU runs is in the process's table and not in
//! the vCPU thread's, while the vCPU keeps running on the fds it was started with.
//!
//! The only test of this binary: it finds the vCPU thread by its name, `vcpu0`, which
//! another test's machine on a thread of the same process would share.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use exitlab_vmm::builder::{MachineBuilder, VcpuSpec};
use exitlab_vmm::hook::{DoorbellCtx, ExitHook, HookReply};
use exitlab_vmm::testing::{
    kvm_or_fail, reset_vector_ram, test_vcpu_config, write_at_reset_vector,
};
use exitlab_vmm::vcpu::VcpuStop;
use exitlab_vmm::vm::VmConfig;

/// Real mode at the reset vector: `mov dx, 0x700; out dx, al` (the doorbell), twice,
/// then `jmp $`.
const TWO_DOORBELLS: [u8; 10] = [0xBA, 0x00, 0x07, 0xEE, 0xEE, 0xEB, 0xFE, 0, 0, 0];

/// At each doorbell: says so, then waits until the test has looked at the tables.
struct Rendezvous {
    at_doorbell: mpsc::Sender<u32>,
    go_on: mpsc::Receiver<()>,
    rung: u32,
}

impl ExitHook for Rendezvous {
    fn doorbell(&mut self, _ctx: &DoorbellCtx<'_>) -> HookReply {
        self.rung += 1;
        if self.at_doorbell.send(self.rung).is_err() || self.go_on.recv().is_err() {
            return HookReply::Stop(0);
        }
        if self.rung == 2 {
            HookReply::Stop(2)
        } else {
            HookReply::Resume
        }
    }
}

fn fds(dir: &str) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The task directory of this process's thread called `name`.
fn thread_dir(name: &str) -> String {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let found: Vec<String> = tasks
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            (comm.trim() == name).then(|| dir.to_string_lossy().into_owned())
        })
        .collect();
    assert_eq!(found.len(), 1, "threads called {name}: {found:?}");
    found[0].clone()
}

#[test]
fn a_vcpu_thread_has_its_own_fd_table_and_keeps_running_on_it() {
    let kvm = Arc::new(kvm_or_fail());
    let mut b = MachineBuilder::new(
        kvm,
        VmConfig {
            ram: reset_vector_ram(),
            ..VmConfig::default()
        },
    )
    .expect("a VM");
    write_at_reset_vector(b.vm().memory(), &TWO_DOORBELLS);
    let (at_doorbell, rung) = mpsc::channel();
    let (go_on, wait) = mpsc::channel();
    let hook = Rendezvous {
        at_doorbell,
        go_on: wait,
        rung: 0,
    };
    let spec = VcpuSpec::new(test_vcpu_config(0));
    b.add_vcpu(spec, hook).expect("a vCPU");
    let mut m = b.start().expect("started");

    // The vCPU is in its first doorbell, past its thread's setup: a file opened now is
    // the process's, not the vCPU thread's.
    assert_eq!(rung.recv_timeout(Duration::from_secs(30)), Ok(1));
    let vcpu_fds = thread_dir("vcpu0") + "/fd";
    let before = fds(&vcpu_fds);
    let opened = std::fs::File::open("/proc/self/status").expect("a file to hold open");
    let n = std::os::fd::AsRawFd::as_raw_fd(&opened) as u32;
    assert!(
        fds("/proc/self/fd").contains(&n),
        "fd {n} in the process's table"
    );
    assert!(
        !fds(&vcpu_fds).contains(&n),
        "fd {n}, opened while the vCPU ran, is in the vCPU thread's table too: the table is shared"
    );
    assert_eq!(
        fds(&vcpu_fds),
        before,
        "the vCPU thread's table did not change"
    );
    // And the copy serves the vCPU: it goes back into the guest, which rings again.
    go_on.send(()).unwrap();
    assert_eq!(rung.recv_timeout(Duration::from_secs(30)), Ok(2));
    go_on.send(()).unwrap();
    let f = m
        .wait_for(0, Duration::from_secs(30))
        .expect("vCPU 0 stopped");
    assert!(matches!(f.stop, VcpuStop::Hook(2)), "{}", f.describe());
    assert_eq!(f.vcpu.counts().doorbell, 2);
}
