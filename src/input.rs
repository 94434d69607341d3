//! Reading input files with a bound: only regular files are read, never more than a
//! limit, and a FIFO or a device (`/dev/zero`) is refused without blocking on it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` for reading without blocking (a FIFO with no writer would block a plain
/// open) and checks that it is a regular file of at most `max` bytes. `what` names the
/// file in messages ("the kernel image").
pub fn open_regular(path: &Path, what: &str, max: u64) -> Result<(File, u64), String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let md = f
        .metadata()
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        Some("a directory")
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_socket() {
        Some("a socket")
    } else if !ft.is_file() {
        Some("not a regular file")
    } else {
        None
    };
    if let Some(kind) = kind {
        return Err(format!(
            "{what} {} is {kind}: give a regular file",
            path.display()
        ));
    }
    if md.len() > max {
        return Err(format!(
            "{what} {} is {} bytes, more than the {} bytes exitlab reads: give a smaller file",
            path.display(),
            md.len(),
            max
        ));
    }
    Ok((f, md.len()))
}

/// Reads the regular file `path`, at most `max` bytes (see [`open_regular`]). A file that
/// grows past `max` while being read is refused too.
pub fn read_bounded(path: &Path, what: &str, max: u64) -> Result<Vec<u8>, String> {
    let (f, len) = open_regular(path, what, max)?;
    let mut buf = Vec::with_capacity(len as usize);
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    if buf.len() as u64 > max {
        return Err(format!(
            "{what} {} grew past {max} bytes while being read",
            path.display()
        ));
    }
    Ok(buf)
}

/// Memory this host can give a guest, in bytes: physical RAM plus swap (from
/// /proc/meminfo), when known.
pub fn host_memory_limit() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let l = s.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some(field("MemTotal:")? + field("SwapTotal:").unwrap_or(0))
}

/// The CPUs this process may run on (its affinity mask, from /proc/self/status), in
/// the kernel's list format ("0-3,8") and as a membership test.
pub fn allowed_cpus() -> Option<(String, Vec<usize>)> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = s
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim()
        .to_string();
    Some((list.clone(), parse_cpu_list(&list)?))
}

/// Parses a CPU list such as "0-3,8,10-11".
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse::<usize>().ok()?;
                (a, a)
            }
        };
        if b < a || b - a > 1 << 16 {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// Checks `--pin CPU` against the process's affinity mask (a CPU the mask excludes
/// cannot be pinned to, even if the host has it).
pub fn check_pin(cpu: usize) -> Result<(), String> {
    match allowed_cpus() {
        Some((list, cpus)) if !cpus.contains(&cpu) => Err(format!(
            "--pin {cpu}: this host has only CPUs {list} available to exitlab (its affinity \
             mask); choose one of them"
        )),
        Some(_) => Ok(()),
        None => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cpu >= n {
                Err(format!(
                    "--pin {cpu}: this host has only {n} CPU(s) available (0..{}); choose one of them",
                    n - 1
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Parses `--serial`: `stdio`, `none` or `file:PATH`.
pub fn parse_serial(s: &str) -> Result<exitlab_vmm::machine::SerialOut, String> {
    match s {
        "stdio" => Ok(exitlab_vmm::machine::SerialOut::Stdio),
        "none" => Ok(exitlab_vmm::machine::SerialOut::None),
        _ => match s.strip_prefix("file:") {
            Some(p) if !p.is_empty() => Ok(exitlab_vmm::machine::SerialOut::File(
                std::path::PathBuf::from(p),
            )),
            _ => Err(format!("--serial {s}: use stdio, file:PATH or none")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_the_affinity_mask() {
        assert_eq!(parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        let (_, cpus) = allowed_cpus().expect("Linux has /proc/self/status");
        assert!(check_pin(cpus[0]).is_ok());
        let e = check_pin(100_000).unwrap_err();
        assert!(e.contains("affinity mask"), "{e}");
    }

    #[test]
    fn devices_fifos_directories_and_big_files_are_refused() {
        let e = read_bounded(Path::new("/dev/zero"), "the image", 1 << 20).unwrap_err();
        assert!(e.contains("is a character device"), "{e}");
        let e = read_bounded(Path::new("/"), "the image", 1 << 20).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let dir = std::env::temp_dir().join(format!("exitlab-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        // Refused at once, not blocked on a writer that never comes.
        let e = read_bounded(&fifo, "the image", 1 << 20).unwrap_err();
        assert!(e.contains("is a FIFO"), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, vec![7u8; 4097]).unwrap();
        let e = read_bounded(&big, "the initrd", 4096).unwrap_err();
        assert!(e.contains("4097 bytes, more than the 4096"), "{e}");
        assert_eq!(read_bounded(&big, "the initrd", 4097).unwrap().len(), 4097);
        let e = read_bounded(&dir.join("missing"), "the initrd", 10).unwrap_err();
        assert!(e.contains("cannot read the initrd"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn host_memory_is_known_here() {
        assert!(host_memory_limit().is_some_and(|m| m > 1 << 20));
    }
}
