//! Build step (included by `build.rs`): the Linux workload initramfs.
//!
//! `initrd/hackbench.c` is compiled as a static program with the host's gcc and glibc
//! (libc6-dev, part of build-essential), and packed as `/init` into a newc cpio archive
//! (the cpio crate) with the `/dev/console` node Linux opens for init's standard streams.
//! The archive is `$OUT_DIR/hackbench-initrd.cpio`.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

/// Builds `$OUT_DIR/hackbench-initrd.cpio`.
pub fn build(manifest: &Path, out: &Path) -> Result<(), String> {
    println!("cargo:rerun-if-changed=initrd/hackbench.c");
    println!("cargo:rerun-if-changed=initrd/build_initrd.rs");
    let bin = out.join("hackbench");
    let status = Command::new("gcc")
        .args(["-static", "-O2", "-Wall", "-Wextra", "-o"])
        .arg(&bin)
        .arg(manifest.join("initrd/hackbench.c"))
        .status()
        .map_err(|e| format!("cannot run gcc for initrd/hackbench.c: {e}"))?;
    if !status.success() {
        return Err(format!(
            "gcc -static initrd/hackbench.c failed ({status}): the static C library is needed \
             (apt-get install libc6-dev, part of build-essential)"
        ));
    }
    let init = fs::read(&bin).map_err(|e| format!("cannot read {}: {e}", bin.display()))?;
    let archive = pack(&init)?;
    let path = out.join("hackbench-initrd.cpio");
    fs::write(&path, archive).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A newc archive holding `/dev`, `/dev/console` (char 5:1) and `/init`.
fn pack(init: &[u8]) -> Result<Vec<u8>, String> {
    use cpio::newc::Builder;
    let err = |e: std::io::Error| format!("writing the initrd archive: {e}");
    let mut buf = Vec::new();
    let entries = [
        Builder::new("dev").ino(1).mode(0o040_755).nlink(2),
        Builder::new("dev/console")
            .ino(2)
            .mode(0o020_600)
            .nlink(1)
            .rdev_major(5)
            .rdev_minor(1),
    ];
    for e in entries {
        buf = e.write(buf, 0).finish().map_err(err)?;
    }
    let size =
        u32::try_from(init.len()).map_err(|_| "the init program is over 4 GiB".to_string())?;
    let mut w = Builder::new("init")
        .ino(3)
        .mode(0o100_755)
        .nlink(1)
        .write(buf, size);
    w.write_all(init).map_err(err)?;
    buf = w.finish().map_err(err)?;
    cpio::newc::trailer(buf).map_err(err)
}
