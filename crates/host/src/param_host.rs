//! The parts of the host the module-parameter knob reads and changes, behind injectable
//! roots (`/sys`, `/proc`, `/dev`) so that its unit tests run on a made-up tree: who this
//! process is, which processes hold KVM files, and `/dev/kvm` itself (recorded, waited
//! for after a module reload, recreated if need be, given back its owner and mode).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::param_error::KnobError;

/// Where a session keeps the original parameter values while it runs.
pub const DEFAULT_STATE_PATH: &str = "/run/exitlab/host-params.json";
/// How long a reload may take to bring `/dev/kvm` back before exitlab creates it.
pub const DEV_WAIT: Duration = Duration::from_secs(5);
/// The KVM misc device's numbers when sysfs does not say (`10:232`, fixed since Linux 2.6).
const KVM_DEV_NUMBERS: (u32, u32) = (10, 232);

/// The host as the knob sees it: where its trees are, who this process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// sysfs (`/sys`).
    pub sys: PathBuf,
    /// procfs (`/proc`).
    pub proc_root: PathBuf,
    /// The device directory (`/dev`).
    pub dev: PathBuf,
    /// Effective uid of this process.
    pub euid: u32,
    /// This process's pid (its KVM files are its own, not another user's).
    pub pid: u32,
    /// Longest wait for `/dev/kvm` after a reload ([`DEV_WAIT`]).
    pub dev_wait: Duration,
}

impl Host {
    /// This machine.
    pub fn real() -> Host {
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        Host {
            sys: PathBuf::from("/sys"),
            proc_root: PathBuf::from("/proc"),
            dev: PathBuf::from("/dev"),
            // Unreadable: taken as not root, so nothing is tried.
            euid: crate::access::status_field(&status, "Uid:")
                .get(1)
                .copied()
                .unwrap_or(u32::MAX),
            pid: std::process::id(),
            dev_wait: DEV_WAIT,
        }
    }

    /// A made-up host under `root` (`root/sys`, `root/proc`, `root/dev`), as root, with
    /// this process's pid.
    pub fn under(root: &Path) -> Host {
        Host {
            sys: root.join("sys"),
            proc_root: root.join("proc"),
            dev: root.join("dev"),
            euid: 0,
            pid: std::process::id(),
            dev_wait: DEV_WAIT,
        }
    }

    /// `/sys/module`.
    pub fn sys_module(&self) -> PathBuf {
        self.sys.join("module")
    }

    /// `/sys/module/MODULE`.
    pub fn module_dir(&self, module: &str) -> PathBuf {
        self.sys_module().join(module)
    }

    /// `/dev/kvm`.
    pub fn kvm_node(&self) -> PathBuf {
        self.dev.join("kvm")
    }

    /// The start time of process `pid` (clock ticks after boot, `/proc/PID/stat` field
    /// 22); `None` when no such process runs.
    pub fn start_time(&self, pid: u32) -> Option<u64> {
        let stat = fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: count the fields
        // after its closing parenthesis (field 3 is the first of them).
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(19)?.parse().ok()
    }

    /// The command name of process `pid`.
    pub fn comm(&self, pid: u32) -> Option<String> {
        crate::read_trimmed(self.proc_root.join(pid.to_string()).join("comm"))
    }

    /// Whether this host is a guest with hardware virtualization (the `hypervisor` flag
    /// and `vmx` or `svm` in `/proc/cpuinfo`): its KVM is a nested one.
    pub fn is_nested_guest(&self) -> bool {
        let text = fs::read_to_string(self.proc_root.join("cpuinfo")).unwrap_or_default();
        let info = crate::cpu::parse_cpuinfo(&text);
        let flags: Vec<&str> = info
            .get("flags")
            .map(|f| f.split_whitespace().collect())
            .unwrap_or_default();
        let has = |f: &str| flags.contains(&f);
        has("hypervisor") && (has("vmx") || has("svm"))
    }

    /// Every process holding KVM files (`/dev/kvm`, VMs, vCPUs), this one included, by
    /// pid.
    pub fn kvm_holders(&self) -> Vec<KvmHolder> {
        let Ok(procs) = fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let mut holders: Vec<KvmHolder> = procs
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let fds = fs::read_dir(self.proc_root.join(pid.to_string()).join("fd")).ok()?;
                let mut files = KvmFiles::default();
                for fd in fds.flatten() {
                    if let Ok(target) = fs::read_link(fd.path()) {
                        files.count(&target.to_string_lossy());
                    }
                }
                (!files.is_empty()).then(|| KvmHolder {
                    pid,
                    comm: self.comm(pid).unwrap_or_else(|| "?".to_string()),
                    files,
                })
            })
            .collect();
        holders.sort_by_key(|h| h.pid);
        holders
    }

    /// `/dev/kvm` as it is now; `None` when it does not exist.
    pub fn node_state(&self) -> Option<NodeState> {
        crate::access::node_of(&self.kvm_node()).map(|n| NodeState {
            uid: n.uid,
            gid: n.gid,
            mode: n.mode,
        })
    }

    /// Brings `/dev/kvm` back as `want` after a module load: waits up to
    /// [`Host::dev_wait`] for devtmpfs to create it, creates it (`mknod`, the numbers
    /// from `/sys/class/misc/kvm/dev`) if it did not, then sets its owner, group and mode.
    pub fn restore_node(&self, want: &NodeState) -> Result<(), KnobError> {
        let node = self.kvm_node();
        let start = Instant::now();
        while !node.exists() && start.elapsed() < self.dev_wait {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !node.exists() {
            let (major, minor) = crate::read_trimmed(self.sys.join("class/misc/kvm/dev"))
                .and_then(|d| {
                    let (a, b) = d.split_once(':')?;
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .unwrap_or(KVM_DEV_NUMBERS);
            let out = Command::new("mknod")
                .arg(&node)
                .args(["c", &major.to_string(), &minor.to_string()])
                .output()
                .map_err(|e| KnobError::DevNode {
                    detail: format!(
                        "it did not reappear within {:?} and mknod could not be started: {e}",
                        self.dev_wait
                    ),
                })?;
            if !out.status.success() {
                return Err(KnobError::DevNode {
                    detail: format!(
                        "it did not reappear within {:?} and mknod {} c {major} {minor} failed: {}",
                        self.dev_wait,
                        node.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                });
            }
        }
        let failed = |what: &str, e: std::io::Error| KnobError::DevNode {
            detail: format!("{what} {}: {e}", node.display()),
        };
        std::os::unix::fs::chown(&node, Some(want.uid), Some(want.gid))
            .map_err(|e| failed("chown", e))?;
        fs::set_permissions(&node, fs::Permissions::from_mode(want.mode))
            .map_err(|e| failed("chmod", e))?;
        match self.node_state() {
            Some(now) if now == *want => Ok(()),
            now => Err(KnobError::DevNode {
                detail: format!("it is {} after setting {want}", describe_node(now.as_ref())),
            }),
        }
    }
}

/// `/dev/kvm`'s owner, group and permission bits.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeState {
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "owner {}, group {}, mode {:04o}",
            self.uid, self.gid, self.mode
        )
    }
}

/// `/dev/kvm`'s state in words, `missing` when there is none.
pub fn describe_node(node: Option<&NodeState>) -> String {
    node.map_or_else(|| "missing".to_string(), |n| n.to_string())
}

/// The KVM files one process holds, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvmFiles {
    /// `/dev/kvm` opened.
    pub dev: u32,
    /// VMs (`anon_inode:kvm-vm`).
    pub vms: u32,
    /// Other KVM files: vCPUs, devices, statistics.
    pub other: u32,
}

impl KvmFiles {
    /// Counts the file an fd link points to, if it is a KVM one.
    fn count(&mut self, target: &str) {
        if target == "/dev/kvm" || target.starts_with("/dev/kvm ") {
            // `/dev/kvm (deleted)`: a node a reload replaced, still open.
            self.dev += 1;
        } else if target == "anon_inode:kvm-vm" {
            self.vms += 1;
        } else if target.starts_with("anon_inode:kvm-") {
            self.other += 1;
        }
    }

    /// No KVM file.
    pub fn is_empty(&self) -> bool {
        self.dev + self.vms + self.other == 0
    }

    /// The most module references these files can hold: one each, two a VM (its file's,
    /// and the one the VM itself may take on the module for as long as it lives). Counted
    /// generously so that this process's own files never read as another user: on Linux
    /// 6.1 (the L1), `/dev/kvm` and a VM hold one reference each and a vCPU none, so a
    /// hidden user can go unseen only while this process itself holds VMs or vCPUs.
    pub fn module_refs(&self) -> u32 {
        self.dev + 2 * self.vms + self.other
    }

    /// `/dev/kvm, 1 VM, 2 other KVM files`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.dev > 0 {
            parts.push("/dev/kvm".to_string());
        }
        if self.vms > 0 {
            parts.push(format!("{} VM(s)", self.vms));
        }
        if self.other > 0 {
            parts.push(format!("{} vCPU or other KVM file(s)", self.other));
        }
        parts.join(", ")
    }
}

/// A process that holds KVM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvmHolder {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// What it holds.
    pub files: KvmFiles,
}

impl std::fmt::Display for KvmHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} ({}) holds {}",
            self.pid,
            self.comm,
            self.files.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn start_time_and_comm_from_a_proc_tree() {
        let root = TempDir::new("phost");
        root.write(
            "proc/42/stat",
            "42 (a (b) c) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 987654 1 2\n",
        );
        root.write("proc/42/comm", "a (b) c\n");
        let host = Host::under(&root.0);
        assert_eq!(host.start_time(42), Some(987654));
        assert_eq!(host.comm(42).as_deref(), Some("a (b) c"));
        assert_eq!(host.start_time(43), None);
        // This process, on the real /proc.
        let real = Host::real();
        assert!(real.start_time(std::process::id()).is_some());
    }

    #[test]
    fn kvm_holders_by_kind() {
        let root = TempDir::new("holders");
        let host = Host::under(&root.0);
        let link = |pid: u32, fd: u32, target: &str| {
            let dir = root.0.join(format!("proc/{pid}/fd"));
            fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(target, dir.join(fd.to_string())).unwrap();
        };
        link(7, 3, "/dev/kvm");
        link(7, 4, "anon_inode:kvm-vm");
        link(7, 5, "anon_inode:kvm-vcpu:0");
        link(7, 6, "/dev/null");
        link(9, 0, "/dev/kvmfoo");
        link(11, 9, "/dev/kvm (deleted)");
        root.write("proc/7/comm", "qemu-system-x86\n");
        let h = host.kvm_holders();
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(
            h[0].files,
            KvmFiles {
                dev: 1,
                vms: 1,
                other: 1
            }
        );
        assert_eq!(h[0].files.module_refs(), 4);
        assert_eq!(
            h[0].to_string(),
            "pid 7 (qemu-system-x86) holds /dev/kvm, 1 VM(s), 1 vCPU or other KVM file(s)"
        );
        assert_eq!(h[1].pid, 11);
        assert_eq!(h[1].to_string(), "pid 11 (?) holds /dev/kvm");
    }

    #[test]
    fn nested_guest_from_cpuinfo_flags() {
        let root = TempDir::new("nested");
        let host = Host::under(&root.0);
        root.write(
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu svm hypervisor\n\n",
        );
        assert!(host.is_nested_guest());
        root.write(
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu hypervisor\n\n",
        );
        assert!(!host.is_nested_guest(), "no vmx/svm: not a nested KVM");
        root.write("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vmx\n\n");
        assert!(!host.is_nested_guest(), "bare metal");
    }

    #[test]
    fn the_node_gets_its_owner_and_mode_back() {
        let root = TempDir::new("node");
        let mut host = Host::under(&root.0);
        host.dev_wait = Duration::from_millis(20);
        // A plain file stands in for the node: devtmpfs recreated it 0600.
        root.write("dev/kvm", "");
        fs::set_permissions(host.kvm_node(), fs::Permissions::from_mode(0o600)).unwrap();
        // Root gives the file to another owner and group; anyone else keeps its own.
        let own = host.node_state().unwrap();
        let (uid, gid) = if Host::real().euid == 0 {
            (1234, 5678)
        } else {
            (own.uid, own.gid)
        };
        let want = NodeState {
            uid,
            gid,
            mode: 0o666,
        };
        host.restore_node(&want).unwrap();
        assert_eq!(host.node_state(), Some(want));
    }

    #[test]
    fn a_node_that_does_not_come_back_is_created_where_root() {
        let root = TempDir::new("mknod");
        let mut host = Host::under(&root.0);
        host.dev_wait = Duration::from_millis(20);
        fs::create_dir_all(&host.dev).unwrap();
        root.write("sys/class/misc/kvm/dev", "10:232\n");
        let want = NodeState {
            uid: 0,
            gid: 0,
            mode: 0o660,
        };
        let r = host.restore_node(&want);
        if Host::real().euid == 0 {
            r.unwrap();
            let m = fs::metadata(host.kvm_node()).unwrap();
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            assert!(m.file_type().is_char_device());
            assert_eq!(m.rdev(), libc::makedev(10, 232));
            assert_eq!(host.node_state(), Some(want));
        } else {
            // mknod needs root (CAP_MKNOD): the error says what to do.
            let e = r.unwrap_err();
            assert!(matches!(e, KnobError::DevNode { .. }));
            assert!(e.to_string().contains("mknod /dev/kvm c 10 232"), "{e}");
        }
    }
}
