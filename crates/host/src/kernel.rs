//! The running kernel: release and version from `/proc/sys/kernel` (no `uname(2)`, so
//! this crate needs no `unsafe`), the command-line parameters that change exit cost, and
//! the CPU vulnerability mitigations in force.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::read_trimmed;

/// The running kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// `uname -s`.
    pub sysname: String,
    /// `uname -r`.
    pub release: String,
    /// `uname -v`.
    pub version: String,
    /// `uname -m`.
    pub machine: String,
    /// Kernel command-line parameters that change exit cost (mitigations, idle, kvm module options, ...).
    pub relevant_cmdline: Vec<String>,
    /// `/sys/devices/system/cpu/vulnerabilities/*`: vulnerability -> kernel status.
    pub vulnerabilities: BTreeMap<String, String>,
}

/// Kernel command-line parameter names (or prefixes ending in '.') that change exit cost.
const RELEVANT_CMDLINE: &[&str] = &[
    "mitigations",
    "idle",
    "isolcpus",
    "nohz_full",
    "rcu_nocbs",
    "clocksource",
    "tsc",
    "nested_pvm",
    "spectre_v2",
    "spec_rstack_overflow",
    "retbleed",
    "l1tf",
    "mds",
    "pti",
    "nopti",
    "nospectre_v2",
    "processor.max_cstate",
    "intel_idle.max_cstate",
    "intel_pstate",
    "kvm.",
    "kvm_intel.",
    "kvm_amd.",
    "kvm_pvm.",
];

/// Kernel command-line parameters (before any `--`) that change exit cost.
pub fn relevant_cmdline(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .take_while(|t| *t != "--")
        .filter(|t| {
            let key = t.split_once('=').map_or(*t, |(k, _)| k);
            RELEVANT_CMDLINE.iter().any(|r| {
                if r.ends_with('.') {
                    key.starts_with(r)
                } else {
                    key == *r
                }
            })
        })
        .map(str::to_string)
        .collect()
}

/// Reads every regular file in `dir` as `name -> trimmed content`. Unreadable files get an
/// explanatory value; a missing directory gives an empty map.
pub fn read_param_dir(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let value = match fs::read_to_string(&path) {
            Ok(s) => s.trim_end_matches('\n').to_string(),
            Err(e) => format!("<unreadable: {e}>"),
        };
        out.insert(name, value);
    }
    out
}

pub(crate) fn probe() -> KernelInfo {
    let proc_kernel = |file: &str| {
        read_trimmed(format!("/proc/sys/kernel/{file}"))
            .unwrap_or_else(|| format!("unknown (/proc/sys/kernel/{file} unreadable)"))
    };
    KernelInfo {
        sysname: proc_kernel("ostype"),
        release: proc_kernel("osrelease"),
        version: proc_kernel("version"),
        // /proc/sys/kernel/arch exists since Linux 6.1; before that the build target is
        // the machine this code runs on.
        machine: read_trimmed("/proc/sys/kernel/arch")
            .unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        relevant_cmdline: fs::read_to_string("/proc/cmdline")
            .map(|c| relevant_cmdline(&c))
            .unwrap_or_default(),
        vulnerabilities: read_param_dir(Path::new("/sys/devices/system/cpu/vulnerabilities")),
    }
}

/// The value of kernel command-line parameter `name` (before any `--`), if it is given:
/// `Some("")` for a bare flag.
pub fn cmdline_value<'a>(relevant: &'a [String], name: &str) -> Option<&'a str> {
    relevant.iter().rev().find_map(|t| match t.split_once('=') {
        Some((k, v)) if k == name => Some(v),
        None if t == name => Some(""),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_filter() {
        let c = "mitigations=auto console=ttyS0 kvm.halt_poll_ns=0 idle=poll nested_pvm=1 \
                 kvmfoo=1 -- --secret kvm.x=1";
        assert_eq!(
            relevant_cmdline(c),
            vec![
                "mitigations=auto",
                "kvm.halt_poll_ns=0",
                "idle=poll",
                "nested_pvm=1"
            ]
        );
    }

    #[test]
    fn cmdline_values() {
        let c = relevant_cmdline("tsc=reliable nopti tsc=unstable clocksource=hpet");
        assert_eq!(
            cmdline_value(&c, "tsc"),
            Some("unstable"),
            "the last one wins"
        );
        assert_eq!(cmdline_value(&c, "nopti"), Some(""));
        assert_eq!(cmdline_value(&c, "clocksource"), Some("hpet"));
        assert_eq!(cmdline_value(&c, "idle"), None);
    }

    #[test]
    fn this_kernel() {
        let k = probe();
        assert!(!k.release.starts_with("unknown"), "{k:?}");
        assert_eq!(k.sysname, "Linux");
        assert_eq!(k.machine, "x86_64");
    }
}
