//! Resource hygiene: 1,000 create-run-destroy cycles of a small VM in one process keep
//! open file descriptors, threads and RSS flat. `cargo test -p exitlab-vmm --test soak --
//! --nocapture` prints the figures. (SIGINT and SIGTERM during `exitlab run` are the
//! binary's, in tests/signals.rs.)

use std::time::{Duration, Instant};

use exitlab_vmm::machine::{self, MachineConfig, RunEnd, SerialOut};

mod common;

/// A multiboot (a.out kludge) image loaded at 1 MiB whose code writes 0x2A to the
/// debug-exit port: `mov al, 0x2a; out 0xf4, al; hlt`.
fn tiny_image() -> Vec<u8> {
    const MAGIC: u32 = 0x1BAD_B002;
    const FLAGS: u32 = 1 << 16;
    let load = 0x10_0000u32;
    let code = [0xB0, 0x2A, 0xE6, 0xF4, 0xF4];
    let header_len = 32u32;
    let end = load + header_len + code.len() as u32;
    let mut img = Vec::new();
    for v in [
        MAGIC,
        FLAGS,
        0u32.wrapping_sub(MAGIC).wrapping_sub(FLAGS),
        load,
        load,
        end,
        end,
        load + header_len,
    ] {
        img.extend_from_slice(&v.to_le_bytes());
    }
    img.extend_from_slice(&code);
    img
}

/// (open fds, threads, VmRSS KiB) of this process.
fn resources() -> (usize, u64, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    (fds, field("Threads:"), field("VmRSS:"))
}

fn cycle(kvm: &std::sync::Arc<exitlab_vmm::Kvm>, image: &[u8]) {
    let r = machine::run(
        kvm.clone(),
        MachineConfig {
            kernel: image.to_vec(),
            kernel_path: "tiny".into(),
            cmdline: String::new(),
            initrd: None,
            cpus: 1,
            ram_bytes: 16 << 20,
            timeout: Some(Duration::from_secs(20)),
            serial: SerialOut::None,
            serial_input: false,
            prefer_pvh: true,
            cancel: None,
            platform: Default::default(),
        },
    )
    .expect("the tiny VM is created");
    assert!(matches!(r.end, RunEnd::DebugExit(0x2A)), "{:?}", r.end);
}

#[test]
fn a_thousand_vm_cycles_keep_fds_threads_and_rss_flat() {
    let kvm = common::kvm();
    let image = tiny_image();
    // Warm up: allocator arenas, the CPUID cache, lazily opened files.
    for _ in 0..20 {
        cycle(&kvm, &image);
    }
    let before = resources();
    let start = Instant::now();
    let mut mid = before;
    for i in 0..1000 {
        cycle(&kvm, &image);
        if i == 499 {
            mid = resources();
        }
    }
    // A joined thread may be listed for a moment while it finishes exiting: poll for up
    // to a second before judging.
    let mut after = resources();
    for _ in 0..100 {
        if after.0 <= before.0 && after.1 <= before.1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        after = resources();
    }
    eprintln!(
        "1,000 create-run-destroy cycles in {:.1} s: open fds {} -> {} -> {}, threads {} -> {} -> {}, \
         RSS {} -> {} -> {} KiB (after 20 warm-up cycles, after 500, after 1,000)",
        start.elapsed().as_secs_f64(),
        before.0,
        mid.0,
        after.0,
        before.1,
        mid.1,
        after.1,
        before.2,
        mid.2,
        after.2
    );
    // Other tests of this binary run in parallel (a child process, its pipes): they may
    // end during the soak, never add to it.
    assert!(after.0 <= before.0, "file descriptors leaked");
    assert!(after.1 <= before.1, "threads leaked");
    // Flat: the second 500 cycles must not grow RSS by more than 1 MiB (a leak of even
    // one 4 KiB page per VM would be 2 MiB).
    assert!(
        after.2 <= mid.2 + 1024,
        "RSS grew from {} to {} KiB over the last 500 cycles",
        mid.2,
        after.2
    );
}
