//! The `exitlab` command: a KVM VMM built to make VM exits cheap and to measure them.

mod agree_cmd;
mod bench_cmd;
mod chaos;
mod cli;
mod exit;
mod host_cmd;
mod input;
mod qemu;
mod report_cmd;
mod run;
mod signals;
mod trace_cmd;

fn main() {
    std::process::exit(cli::main());
}
