//! Compiles `floor.c` into the executable `$OUT_DIR/exitlab-floor` with the C compiler
//! the `cc` crate finds (the system's gcc or clang), optimised as a C program would be.
#![deny(unsafe_code)]

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=floor.c");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let exe = out.join("exitlab-floor");
    let compiler = cc::Build::new()
        .opt_level(2)
        .debug(false)
        .warnings(true)
        .extra_warnings(true)
        .cargo_metadata(false)
        .get_compiler();
    let status = compiler
        .to_command()
        .args(["-std=gnu11", "-Werror", "-o"])
        .arg(&exe)
        .arg("floor.c")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("error: compiling floor.c failed ({s}); it needs a C compiler and the kernel's <linux/kvm.h> (Debian: build-essential linux-libc-dev)");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!(
                "error: cannot run the C compiler {:?}: {e}; install one (Debian: build-essential)",
                compiler.path()
            );
            std::process::exit(1);
        }
    }
}
