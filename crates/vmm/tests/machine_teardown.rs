//! A machine's teardown gives back everything it took: after machines are built,
//! started, stopped (or dropped while running) and dropped, the process holds exactly
//! the file descriptors and threads it held before.
//!
//! The only test of this binary: libtest runs the tests of one binary on threads of one
//! process, and any other test would move the counts.

use std::sync::Arc;
use std::time::Duration;

use exitlab_vmm::builder::{MachineBuilder, VcpuSpec};
use exitlab_vmm::testing::{
    kvm_or_fail, reset_vector_ram, test_vcpu_config, write_at_reset_vector,
};
use exitlab_vmm::vcpu::{NoHook, VcpuStop};
use exitlab_vmm::vm::{IoSpace, IrqChip, VmConfig};
use exitlab_vmm::Kvm;

/// Real mode at the reset vector: `mov dx, 0x700; out dx, al` (the doorbell), `jmp $`.
const DOORBELL_THEN_SPIN: [u8; 6] = [0xBA, 0x00, 0x07, 0xEE, 0xEB, 0xFE];

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .count()
}

/// Open file descriptors and threads of this process.
fn census() -> (usize, usize) {
    (count("/proc/self/fd"), count("/proc/self/task"))
}

/// Two vCPUs (vCPU 1 waits for a SIPI that never comes), the in-kernel irqchip and
/// PIT, an ioeventfd: every kind of fd a machine holds.
fn builder(kvm: &Arc<Kvm>) -> MachineBuilder<NoHook> {
    let mut b = MachineBuilder::new(
        kvm.clone(),
        VmConfig {
            ram: reset_vector_ram(),
            irqchip: IrqChip::Kernel,
            pit: true,
            cpus: 2,
            ..VmConfig::default()
        },
    )
    .expect("a VM");
    write_at_reset_vector(b.vm().memory(), &DOORBELL_THEN_SPIN);
    b.vm_mut()
        .add_ioeventfd(IoSpace::Mmio, 0xF_0000, 4, None)
        .expect("an ioeventfd");
    for id in 0..2 {
        let spec = VcpuSpec::new(test_vcpu_config(id));
        b.add_vcpu(spec, NoHook).expect("a vCPU");
    }
    b
}

/// Every way a machine ends: stopped vCPU by vCPU, dropped with vCPUs running, and a
/// builder dropped before its start.
fn machines(kvm: &Arc<Kvm>) {
    let mut m = builder(kvm).start().expect("started");
    let f = m.wait_for(0, Duration::from_secs(30)).expect("vCPU 0 rang");
    assert!(matches!(f.stop, VcpuStop::Hook(_)), "{}", f.describe());
    drop(f);
    let rest = m.stop_all(Duration::from_secs(2));
    assert!(rest.iter().all(|(_, f)| f.is_some()), "every vCPU let out");
    drop(rest);
    drop(m);

    let m = builder(kvm).start().expect("started");
    std::thread::sleep(Duration::from_millis(20));
    drop(m);

    drop(builder(kvm));
}

#[test]
fn machines_give_back_every_file_descriptor_and_thread_they_took() {
    let kvm = Arc::new(kvm_or_fail());
    // Process-wide state made once (the kick signal handler, KVM's CPUID and
    // capabilities) is made here, before the first count.
    machines(&kvm);
    let before = census();
    for _ in 0..3 {
        machines(&kvm);
    }
    let m = builder(&kvm).start().expect("started");
    let during = census();
    drop(m);
    // A joined thread has cleared its id, but the kernel may still list it for a moment
    // while it finishes exiting: poll for up to a second before judging.
    let mut after = census();
    for _ in 0..100 {
        if after == before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        after = census();
    }
    // vCPU 1 waits for a SIPI until it is stopped, so the machine has at least its
    // thread; vCPU 0 may have rung and ended by now, and the kernel may add a thread of
    // its own to a process with a VM (KVM's NX huge page recovery worker is a vhost
    // task since Linux 6.13), so the count during the run is a lower bound. The census
    // after the teardown counts every thread.
    assert!(
        during.0 > before.0 && during.1 > before.1,
        "the census sees a running machine's fds and its vCPU threads: before {before:?}, during {during:?}"
    );
    assert_eq!(
        after, before,
        "(fds, threads) after the machines are gone, against before"
    );
}
