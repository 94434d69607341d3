//! Can this process use `/dev/kvm`, and if not, why not and what to do.
//!
//! The survey opens the device node (an `open(2)`, no ioctl) and, when that fails, gathers
//! the evidence a user would look for: whether the node exists and is a character device,
//! whether the kernel registered a KVM device at all (`/sys/class/misc/kvm`), which KVM
//! modules are loaded, what KVM said in the kernel log (a module that refused to bind, such
//! as `kvm_pvm` on a host whose page-table isolation it cannot work with), whether this is
//! a container, and who owns the node. [`diagnose`] turns those [`AccessFacts`] into one
//! [`Diagnosis`]; it is a pure function so that every case is tested with made-up facts.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cpu::CpuInfo;
use crate::modules::Virtualization;
use crate::KvmInfo;

/// Path of the KVM device node.
pub const KVM_DEVICE: &str = "/dev/kvm";
/// Where the kernel publishes the KVM misc device's numbers when it registered one.
const KVM_MISC_DEV: &str = "/sys/class/misc/kvm/dev";
/// Most kernel log lines kept.
const KERNEL_LOG_MAX: usize = 200;

/// What keeps this process from using `/dev/kvm`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// No KVM module for this CPU's virtualization extensions is loaded.
    ModuleNotLoaded,
    /// The CPU shows neither VT-x nor AMD-V and no paravirtual KVM is loaded.
    NoHardwareVirtualization,
    /// A KVM module refused to load or bind; the kernel log says why.
    ModuleRefused,
    /// The kernel has KVM, but this filesystem has no `/dev/kvm` node (a container started
    /// without the device, or no udev).
    NoDeviceNode,
    /// The node exists but this user may not open it.
    PermissionDenied,
    /// `/dev/kvm` exists but is not a character device.
    NotADevice,
    /// Something else; the reason has the system error.
    Other,
}

/// Why `/dev/kvm` cannot be used, what to do, and what the conclusion rests on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// The kind of problem.
    pub problem: Problem,
    /// One sentence: what is wrong.
    pub reason: String,
    /// What to do about it.
    pub advice: String,
    /// The facts the diagnosis rests on, one per line.
    pub evidence: Vec<String>,
}

/// The device node as `stat(2)` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// A character device (as `/dev/kvm` must be).
    pub char_device: bool,
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// Everything [`diagnose`] looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessFacts {
    /// `errno` of opening `/dev/kvm` read-write; `None` when it opened.
    pub open_errno: Option<i32>,
    /// The node, `None` when it does not exist.
    pub node: Option<Node>,
    /// `/sys/class/misc/kvm/dev` (e.g. `10:232`): the kernel registered a KVM device.
    pub registered: Option<String>,
    /// Loaded KVM modules (`kvm`, `kvm_intel`, `kvm_amd`, `kvm_pvm`, ...).
    pub kvm_modules: Vec<String>,
    /// The CPU shows VT-x.
    pub vmx: bool,
    /// The CPU shows AMD-V.
    pub svm: bool,
    /// KVM's lines from the kernel log; `None` when the log could not be read.
    pub kernel_log: Option<Vec<String>>,
    /// What shows that this process runs in a container, if anything does.
    pub container: Option<String>,
    /// Effective user id of this process.
    pub uid: Option<u32>,
    /// Effective and supplementary group ids of this process.
    pub groups: Vec<u32>,
    /// Name of the node's group, from `/etc/group`.
    pub group_name: Option<String>,
    /// `/etc/group` lists this process's user in the node's group.
    pub listed_in_group: bool,
}

/// A kernel log line written by KVM itself (not `kvm-clock` or `kvm-guest`, which are the
/// host's own guest side).
fn is_kvm_line(line: &str) -> bool {
    let prefix = line.split(':').next().unwrap_or("");
    matches!(
        prefix,
        "kvm" | "kvm_intel" | "kvm_amd" | "kvm-intel" | "kvm-amd" | "kvm_pvm" | "kvm-pvm"
    )
}

/// A KVM log line that says a module could not be used.
fn is_refusal(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    [
        "not binding",
        "disabled by bios",
        "no hardware support",
        "not supported",
        "cannot",
        "failed",
        "refus",
        "error",
    ]
    .iter()
    .any(|w| l.contains(w))
}

/// `crw-rw----` style rendering of a node's type and permission bits.
fn mode_string(node: &Node) -> String {
    let kind = if node.char_device { 'c' } else { '?' };
    let bits: String = (0..9)
        .map(|i| {
            let set = node.mode & (0o400 >> i) != 0;
            match (set, i % 3) {
                (false, _) => '-',
                (true, 0) => 'r',
                (true, 1) => 'w',
                (true, _) => 'x',
            }
        })
        .collect();
    format!("{kind}{bits}")
}

/// What to do when no KVM driver serves the device, from the log and the loaded modules.
fn driver_missing(facts: &AccessFacts, what: String, mut evidence: Vec<String>) -> Diagnosis {
    let kvm_lines: Vec<&String> = facts
        .kernel_log
        .iter()
        .flatten()
        .filter(|l| is_kvm_line(l))
        .collect();
    if let Some(line) = kvm_lines.iter().rev().find(|l| is_refusal(l)) {
        evidence.push(format!("kernel log: {line}"));
        let lower = line.to_ascii_lowercase();
        let advice = if lower.contains("disabled by bios") {
            "enable VT-x/AMD-V in the firmware setup, then load the module again".to_string()
        } else if lower.starts_with("kvm-pvm") || lower.starts_with("kvm_pvm") {
            "kvm_pvm (KVM without hardware virtualization) cannot run guests on this host for \
             the reason it gives: change what it names (a kernel boot option such as the \
             page-table isolation setting) and reboot, or run exitlab where KVM works: \
             on a host with VT-x/AMD-V, or inside a VM that has KVM (see the README, \
             \"Without /dev/kvm\")"
                .to_string()
        } else {
            "fix what the kernel log names, then load the module again (modprobe)".to_string()
        };
        return Diagnosis {
            problem: Problem::ModuleRefused,
            reason: format!("{what}: a KVM module refused to work: {line}"),
            advice,
            evidence,
        };
    }
    if facts.kernel_log.is_none() {
        evidence.push(
            "the kernel log could not be read (run `exitlab host` as root to see whether a \
             KVM module refused to load)"
                .to_string(),
        );
    }
    let driver = facts
        .kvm_modules
        .iter()
        .find(|m| matches!(m.as_str(), "kvm_intel" | "kvm_amd" | "kvm_pvm"));
    if let Some(m) = driver {
        return Diagnosis {
            problem: Problem::Other,
            reason: format!("{what}, although {m} is loaded"),
            advice: "check the kernel log (dmesg) for KVM errors; reload the module".to_string(),
            evidence,
        };
    }
    let (problem, advice) = if facts.vmx {
        (
            Problem::ModuleNotLoaded,
            "load KVM for Intel VT-x: sudo modprobe kvm_intel".to_string(),
        )
    } else if facts.svm {
        (
            Problem::ModuleNotLoaded,
            "load KVM for AMD-V: sudo modprobe kvm_amd".to_string(),
        )
    } else {
        (
            Problem::NoHardwareVirtualization,
            "this CPU shows no vmx/svm flag: enable VT-x/AMD-V in the firmware, or nested \
             virtualization on the outer hypervisor if this host is a VM, then load \
             kvm_intel/kvm_amd (or a paravirtual KVM such as kvm_pvm if this kernel has one); \
             without KVM, run exitlab inside a VM that has it (see the README)"
                .to_string(),
        )
    };
    Diagnosis {
        problem,
        reason: format!("{what}: no KVM driver is loaded"),
        advice,
        evidence,
    }
}

/// Why `/dev/kvm` cannot be used, from `facts`; `None` when it opened.
pub fn diagnose(facts: &AccessFacts) -> Option<Diagnosis> {
    let errno = facts.open_errno?;
    let mut evidence = Vec::new();
    evidence.push(format!(
        "KVM modules loaded: {}",
        if facts.kvm_modules.is_empty() {
            "none".to_string()
        } else {
            facts.kvm_modules.join(", ")
        }
    ));
    if let Some(c) = &facts.container {
        evidence.push(format!("container: {c}"));
    }
    let Some(node) = facts.node else {
        if let Some(dev) = &facts.registered {
            evidence.push(format!("the kernel registered the KVM device as {dev}"));
            let (major, minor) = dev.split_once(':').unwrap_or(("10", "232"));
            let advice = match &facts.container {
                Some(_) => "this is a container started without the device: start it with \
                            /dev/kvm passed in (docker/podman run --device /dev/kvm, or a \
                            bind mount), or run exitlab on the host"
                    .to_string(),
                None => format!(
                    "create the node (udev normally does): sudo mknod {KVM_DEVICE} c {major} \
                     {minor} && sudo chgrp kvm {KVM_DEVICE} && sudo chmod 660 {KVM_DEVICE}"
                ),
            };
            return Some(Diagnosis {
                problem: Problem::NoDeviceNode,
                reason: format!("the kernel has KVM, but {KVM_DEVICE} does not exist here"),
                advice,
                evidence,
            });
        }
        return Some(driver_missing(
            facts,
            format!("{KVM_DEVICE} does not exist"),
            evidence,
        ));
    };
    evidence.push(format!(
        "{KVM_DEVICE}: {} {}:{}, owner uid {}, group {}",
        mode_string(&node),
        node.major,
        node.minor,
        node.uid,
        match &facts.group_name {
            Some(g) => format!("{g} (gid {})", node.gid),
            None => format!("gid {}", node.gid),
        }
    ));
    if !node.char_device {
        return Some(Diagnosis {
            problem: Problem::NotADevice,
            reason: format!("{KVM_DEVICE} is not a character device"),
            advice: format!(
                "remove it (something created a plain file or directory in its place) and \
                 let udev recreate it, or create it: sudo mknod {KVM_DEVICE} c 10 232"
            ),
            evidence,
        });
    }
    match errno {
        libc::EACCES | libc::EPERM => {
            if let Some(uid) = facts.uid {
                evidence.push(format!(
                    "this process: uid {uid}, groups {}",
                    facts
                        .groups
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
            }
            let group = facts.group_name.clone().unwrap_or_else(|| "kvm".into());
            let advice = if facts.listed_in_group && !facts.groups.contains(&node.gid) {
                format!(
                    "you are in group {group}, but this session started before you were added: \
                     log out and in again (or run `newgrp {group}`)"
                )
            } else if node.gid == 0 || node.mode & 0o060 != 0o060 {
                format!(
                    "run as root, or open the node to a kvm group: sudo chgrp kvm {KVM_DEVICE} \
                     && sudo chmod 660 {KVM_DEVICE} (a udev rule makes it last), then add your \
                     user to it"
                )
            } else {
                format!(
                    "run as root, or add your user to group {group}: sudo usermod -aG {group} \
                     $USER, then log in again"
                )
            };
            Some(Diagnosis {
                problem: Problem::PermissionDenied,
                reason: format!("permission denied opening {KVM_DEVICE}"),
                advice,
                evidence,
            })
        }
        libc::ENXIO | libc::ENODEV => Some(driver_missing(
            facts,
            format!("{KVM_DEVICE} exists but no KVM driver serves it"),
            evidence,
        )),
        other => Some(Diagnosis {
            problem: Problem::Other,
            reason: format!(
                "opening {KVM_DEVICE} failed: {}",
                std::io::Error::from_raw_os_error(other)
            ),
            advice: "check the kernel log (dmesg) for KVM errors".to_string(),
            evidence,
        }),
    }
}

/// Reads the kernel log (`/dev/kmsg`, without blocking): the lines of KVM and of the TSC,
/// at most the last [`KERNEL_LOG_MAX`]. `None` when it cannot be read (usually: not root
/// and `kernel.dmesg_restrict` set).
pub fn read_kernel_log() -> Option<Vec<String>> {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut lines = std::collections::VecDeque::new();
    let mut buf = vec![0u8; 8192];
    // Every read returns one record; the end of the log reads as EAGAIN. A record
    // overwritten while we read reads as EPIPE: skip it. The bound stops a log that grows
    // as fast as we read.
    for _ in 0..100_000 {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        };
        let record = String::from_utf8_lossy(&buf[..n]);
        let message = record
            .split_once(';')
            .map_or(record.as_ref(), |(_, m)| m)
            .lines()
            .next()
            .unwrap_or("")
            .trim();
        if is_kvm_line(message) || message.contains("TSC") {
            lines.push_back(message.to_string());
            if lines.len() > KERNEL_LOG_MAX {
                lines.pop_front();
            }
        }
    }
    Some(lines.into())
}

/// What shows that this process runs in a container, if anything does.
fn container_evidence(dockerenv: bool, containerenv: bool, cgroup: &str) -> Option<String> {
    if dockerenv {
        return Some("/.dockerenv exists (Docker)".into());
    }
    if containerenv {
        return Some("/run/.containerenv exists (Podman)".into());
    }
    ["docker", "kubepods", "containerd", "libpod", "lxc"]
        .iter()
        .find(|m| cgroup.contains(*m))
        .map(|m| format!("/proc/self/cgroup names {m}"))
}

/// A `Name:\tv1\tv2...` field of `/proc/self/status`.
pub(crate) fn status_field(status: &str, name: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `(group name, members)` of `gid` in an `/etc/group` text.
fn group_entry(etc_group: &str, gid: u32) -> Option<(String, Vec<String>)> {
    etc_group.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        let id: u32 = f.next()?.parse().ok()?;
        let members = f.next().unwrap_or("");
        (id == gid).then(|| {
            (
                name.to_string(),
                members
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        })
    })
}

/// The user name of `uid` in an `/etc/passwd` text.
fn user_name(etc_passwd: &str, uid: u32) -> Option<String> {
    etc_passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[0].to_string())
    })
}

pub(crate) fn node_of(path: &Path) -> Option<Node> {
    let m = fs::metadata(path).ok()?;
    let rdev = m.rdev();
    Some(Node {
        char_device: m.file_type().is_char_device(),
        major: (((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff)) as u32,
        minor: ((rdev & 0xff) | ((rdev >> 12) & !0xff)) as u32,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
    })
}

/// Gathers the facts about `/dev/kvm` from this machine.
pub fn gather(cpu_flags: Option<&BTreeMap<String, bool>>, kvm_modules: &[String]) -> AccessFacts {
    let has = |f: &str| cpu_flags.and_then(|m| m.get(f)).copied().unwrap_or(false);
    let path = Path::new(KVM_DEVICE);
    let open_errno = match fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(_) => None,
        Err(e) => Some(e.raw_os_error().unwrap_or(libc::EIO)),
    };
    let mut facts = AccessFacts {
        open_errno,
        node: node_of(path),
        registered: crate::read_trimmed(KVM_MISC_DEV),
        kvm_modules: kvm_modules.to_vec(),
        vmx: has("vmx"),
        svm: has("svm"),
        ..AccessFacts::default()
    };
    if open_errno.is_none() {
        return facts;
    }
    facts.container = container_evidence(
        Path::new("/.dockerenv").exists(),
        Path::new("/run/.containerenv").exists(),
        &fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
    );
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    facts.uid = status_field(&status, "Uid:").get(1).copied();
    facts.groups = status_field(&status, "Gid:")
        .get(1)
        .copied()
        .into_iter()
        .collect();
    facts.groups.extend(status_field(&status, "Groups:"));
    if let Some(node) = facts.node {
        let etc_group = fs::read_to_string("/etc/group").unwrap_or_default();
        if let Some((name, members)) = group_entry(&etc_group, node.gid) {
            let me = facts.uid.and_then(|uid| {
                user_name(&fs::read_to_string("/etc/passwd").unwrap_or_default(), uid)
            });
            facts.listed_in_group = me.is_some_and(|me| members.contains(&me));
            facts.group_name = Some(name);
        }
    }
    facts
}

/// The device part of the report: whether `/dev/kvm` opens and, when not, the diagnosis.
/// KVM's own answers are added later (see [`crate::HostReport::record_kvm`]).
pub(crate) fn probe(
    cpu: &CpuInfo,
    virt: &Virtualization,
    kernel_log: &Option<Vec<String>>,
) -> KvmInfo {
    let mut facts = gather(cpu.flags.as_ref(), &virt.kvm_modules);
    facts.kernel_log = kernel_log.clone();
    let diagnosis = diagnose(&facts);
    KvmInfo {
        device: KVM_DEVICE.to_string(),
        device_exists: facts.node.is_some(),
        error: diagnosis.as_ref().map(|d| d.reason.clone()),
        advice: diagnosis.as_ref().map(|d| d.advice.clone()),
        diagnosis,
        ..KvmInfo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(mode: u32, gid: u32) -> Node {
        Node {
            char_device: true,
            major: 10,
            minor: 232,
            mode,
            uid: 0,
            gid,
        }
    }

    fn facts(errno: i32) -> AccessFacts {
        AccessFacts {
            open_errno: Some(errno),
            kernel_log: Some(Vec::new()),
            ..AccessFacts::default()
        }
    }

    #[test]
    fn no_diagnosis_when_the_device_opens() {
        let f = AccessFacts {
            open_errno: None,
            ..facts(0)
        };
        assert_eq!(diagnose(&f), None);
    }

    #[test]
    fn missing_module_names_the_module_for_the_cpu() {
        let mut f = facts(libc::ENOENT);
        f.vmx = true;
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::ModuleNotLoaded);
        assert!(d.advice.contains("modprobe kvm_intel"), "{d:?}");
        f.vmx = false;
        f.svm = true;
        assert!(diagnose(&f).unwrap().advice.contains("modprobe kvm_amd"));
        f.svm = false;
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::NoHardwareVirtualization);
        assert!(d.advice.contains("nested"), "{d:?}");
        assert!(d.evidence.contains(&"KVM modules loaded: none".to_string()));
    }

    #[test]
    fn a_kvm_pvm_refusal_is_quoted_from_the_kernel_log() {
        let mut f = facts(libc::ENOENT);
        f.kvm_modules = vec!["kvm".into()];
        let refusal = "kvm-pvm: cannot run guests natively on this host (needs PTI=0; has \
                       PTI=1); not binding";
        f.kernel_log = Some(vec![
            "kvm-clock: Using msrs 4b564d01 and 4b564d00".into(),
            "kvm-guest: setup PV IPIs".into(),
            refusal.into(),
        ]);
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::ModuleRefused);
        assert!(d.reason.ends_with(refusal), "{d:?}");
        assert!(d.advice.contains("kvm_pvm"), "{d:?}");
        assert!(d
            .evidence
            .iter()
            .any(|e| e == &format!("kernel log: {refusal}")));
    }

    #[test]
    fn a_firmware_refusal_says_to_enable_it_in_the_firmware() {
        let mut f = facts(libc::ENOENT);
        f.vmx = true;
        f.kernel_log = Some(vec!["kvm: disabled by bios".into()]);
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::ModuleRefused);
        assert!(d.advice.contains("firmware"), "{d:?}");
    }

    #[test]
    fn guest_side_kvm_lines_are_not_refusals() {
        let mut f = facts(libc::ENOENT);
        f.svm = true;
        f.kernel_log = Some(vec!["kvm-clock: cannot do something harmless".into()]);
        assert_eq!(diagnose(&f).unwrap().problem, Problem::ModuleNotLoaded);
    }

    #[test]
    fn an_unreadable_kernel_log_is_said() {
        let mut f = facts(libc::ENOENT);
        f.kernel_log = None;
        let d = diagnose(&f).unwrap();
        assert!(d.evidence.iter().any(|e| e.contains("as root")), "{d:?}");
    }

    #[test]
    fn a_container_without_the_node_is_told_to_pass_it_in() {
        let mut f = facts(libc::ENOENT);
        f.registered = Some("10:232".into());
        f.container = container_evidence(true, false, "");
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::NoDeviceNode);
        assert!(d.advice.contains("--device /dev/kvm"), "{d:?}");
        assert!(d.evidence.iter().any(|e| e.contains("Docker")), "{d:?}");
        f.container = None;
        let d = diagnose(&f).unwrap();
        assert!(d.advice.contains("mknod /dev/kvm c 10 232"), "{d:?}");
    }

    #[test]
    fn container_markers() {
        assert_eq!(container_evidence(false, false, "0::/init.scope\n"), None);
        assert!(container_evidence(false, true, "")
            .unwrap()
            .contains("Podman"));
        assert!(
            container_evidence(false, false, "0::/kubepods/besteffort/pod1\n")
                .unwrap()
                .contains("kubepods")
        );
    }

    #[test]
    fn permission_problems() {
        let mut f = facts(libc::EACCES);
        f.node = Some(node(0o660, 993));
        f.group_name = Some("kvm".into());
        f.uid = Some(1000);
        f.groups = vec![1000, 27];
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::PermissionDenied);
        assert!(d.advice.contains("usermod -aG kvm"), "{d:?}");
        assert!(
            d.evidence
                .iter()
                .any(|e| e.contains("crw-rw---- 10:232") && e.contains("kvm (gid 993)")),
            "{d:?}"
        );
        // In /etc/group, but not in this session's groups: log in again.
        f.listed_in_group = true;
        assert!(diagnose(&f)
            .unwrap()
            .advice
            .contains("log out and in again"));
        // Root-only node: make a group first.
        f.node = Some(node(0o600, 0));
        f.group_name = Some("root".into());
        f.listed_in_group = false;
        assert!(diagnose(&f).unwrap().advice.contains("chgrp kvm"));
    }

    #[test]
    fn a_node_without_a_driver_looks_at_the_modules() {
        let mut f = facts(libc::ENXIO);
        f.node = Some(node(0o660, 993));
        f.svm = true;
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::ModuleNotLoaded);
        assert!(d.reason.contains("no KVM driver serves it"), "{d:?}");
        f.kvm_modules = vec!["kvm".into(), "kvm_amd".into()];
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::Other);
        assert!(d.reason.contains("kvm_amd is loaded"), "{d:?}");
    }

    #[test]
    fn a_plain_file_is_not_a_device() {
        let mut f = facts(libc::ENXIO);
        f.node = Some(Node {
            char_device: false,
            ..node(0o644, 0)
        });
        assert_eq!(diagnose(&f).unwrap().problem, Problem::NotADevice);
    }

    #[test]
    fn other_errors_carry_the_system_error() {
        let mut f = facts(libc::EBUSY);
        f.node = Some(node(0o666, 0));
        let d = diagnose(&f).unwrap();
        assert_eq!(d.problem, Problem::Other);
        assert!(d.reason.contains("busy"), "{d:?}");
    }

    #[test]
    fn credential_and_group_parsing() {
        let status = "Name:\tx\nUid:\t1000\t1001\t1000\t1000\nGid:\t100\t100\t100\t100\n\
                      Groups:\t27 993 \n";
        assert_eq!(status_field(status, "Uid:"), vec![1000, 1001, 1000, 1000]);
        assert_eq!(status_field(status, "Groups:"), vec![27, 993]);
        assert!(status_field(status, "Missing:").is_empty());
        let group = "root:x:0:\nkvm:x:993:alice,bob\nsudo:x:27:alice\n";
        assert_eq!(
            group_entry(group, 993),
            Some((
                "kvm".to_string(),
                vec!["alice".to_string(), "bob".to_string()]
            ))
        );
        assert_eq!(group_entry(group, 0), Some(("root".to_string(), vec![])));
        assert_eq!(group_entry(group, 5), None);
        let passwd = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(user_name(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(user_name(passwd, 7), None);
    }

    #[test]
    fn this_machine_agrees_with_the_filesystem() {
        let f = gather(None, &[]);
        assert_eq!(f.node.is_some(), Path::new(KVM_DEVICE).exists());
        let opens = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(KVM_DEVICE)
            .is_ok();
        assert_eq!(f.open_errno.is_none(), opens);
        assert_eq!(diagnose(&f).is_none(), opens);
    }
}
