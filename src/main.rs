//! The `exitlab` command: a KVM VMM built to make VM exits cheap and to measure them.
#![deny(unsafe_code)]

mod agree_cmd;
mod bench_cmd;
mod chaos_cmd;
mod cli;
mod common;
mod host_cmd;
mod input;
mod qemu;
mod report_cmd;
mod run;
mod signals;
mod status;
mod trace_cmd;
mod verbosity;
mod workload_cmd;

/// When `main` was entered: `run -v` counts the time to the first guest instruction from
/// here (the exec and dynamic loading before it are what `cargo bench --bench startup`
/// adds, measured from outside).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// When the process entered `main`.
pub fn started() -> std::time::Instant {
    *STARTED.get_or_init(std::time::Instant::now)
}

fn main() {
    started();
    std::process::exit(cli::main());
}
