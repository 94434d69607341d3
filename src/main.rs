//! The `exitlab` command: a KVM VMM built to make VM exits cheap and to measure them.

mod cli;
mod run;

fn main() {
    std::process::exit(cli::main());
}
