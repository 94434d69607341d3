//! exitlab-floor: the independent floor of a userspace exit.
//!
//! `floor.c` is a bare KVM_RUN loop in C, written against the kernel's `<linux/kvm.h>`
//! and sharing no code with exitlab's VMM: it creates a VM, loads a multiboot ELF32
//! kernel (the harness), runs it, and per exit only switches on the exit reason and the
//! port, with no seccomp filter, no signal handling and no device bus. The build
//! compiles it with the system C compiler; this crate carries the executable and
//! puts it where it can be run ([`path`]). Being C, it cannot share a line of Rust with
//! the VMM it measures, nor its crates (kvm-ioctls, seccompiler), nor its runtime.
//!
//! Command line and output are documented at the top of `floor.c`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The executable, as the build compiled it.
pub static BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/exitlab-floor"));

/// Where the build left the executable (present while the build directory exists).
const BUILT: &str = concat!(env!("OUT_DIR"), "/exitlab-floor");

/// The name the executable's lines on standard error start with.
pub const NAME: &str = "exitlab-floor";

/// What the floor program reported at its end (its last line on standard error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorCounts {
    /// Reads from unclaimed ports (each one a userspace exit).
    pub ins: u64,
    /// Writes to unclaimed ports.
    pub outs: u64,
    /// Writes to the serial port.
    pub serial: u64,
    /// The value written to the debug-exit port.
    pub debug_exit: u32,
    /// The process's seccomp mode as the kernel gave it at the end (`PR_GET_SECCOMP`:
    /// 0 none, 2 a filter, as with `--seccomp`).
    pub seccomp: u32,
}

/// Reads the floor program's final line (`exitlab-floor: in=N out=N serial=N
/// debug-exit=V seccomp=M`) out of its standard error.
pub fn parse_counts(stderr: &str) -> Option<FloorCounts> {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("exitlab-floor: in="))?;
    let mut words = line.split_whitespace();
    let ins = words.next()?.parse().ok()?;
    let mut field = |key: &str| -> Option<u64> { words.next()?.strip_prefix(key)?.parse().ok() };
    let outs = field("out=")?;
    let serial = field("serial=")?;
    let debug_exit = u32::try_from(field("debug-exit=")?).ok()?;
    let seccomp = u32::try_from(field("seccomp=")?).ok()?;
    Some(FloorCounts {
        ins,
        outs,
        serial,
        debug_exit,
        seccomp,
    })
}

/// A path the floor program can be run from: the build's own copy when it is still
/// there, else a copy of [`BINARY`] written (once, atomically) into the temporary
/// directory under a name that depends on its contents.
pub fn path() -> std::io::Result<PathBuf> {
    let built = Path::new(BUILT);
    if std::fs::metadata(built).is_ok_and(|m| m.len() == BINARY.len() as u64) {
        return Ok(built.to_path_buf());
    }
    let dir = std::env::temp_dir();
    let target = dir.join(format!("{NAME}-{:016x}", fnv1a(BINARY)));
    if std::fs::metadata(&target).is_ok_and(|m| m.len() == BINARY.len() as u64) {
        return Ok(target);
    }
    let tmp = dir.join(format!(".{NAME}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(BINARY)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &target)?;
    Ok(target)
}

/// FNV-1a, 64 bits: names the copy after its contents.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_line_is_read_back() {
        let err = "noise\nexitlab-floor: in=567 out=1234 serial=80 debug-exit=0 seccomp=2\n";
        assert_eq!(
            parse_counts(err),
            Some(FloorCounts {
                ins: 567,
                outs: 1234,
                serial: 80,
                debug_exit: 0,
                seccomp: 2,
            })
        );
        assert_eq!(parse_counts("exitlab-floor: the guest halted"), None);
    }

    #[test]
    fn the_binary_is_an_executable_elf() {
        assert_eq!(&BINARY[..4], b"\x7fELF");
        let p = path().unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_ne!(mode & 0o111, 0, "{} is executable", p.display());
    }
}
