//! What can go wrong when a KVM module parameter is switched as an A/B knob: every
//! refusal (found before anything on the host changes) and every failure, each saying
//! what went wrong and what to do.

use std::path::PathBuf;

/// An error of the module-parameter knob.
#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    /// The knob is not of the form `MODULE.PARAM`.
    #[error("cannot read `{spec}` as MODULE.PARAM: {why}; write it as e.g. kvm.halt_poll_ns or kvm_amd.npt")]
    BadSpec {
        /// What was given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A value that cannot be passed to the kernel as it is.
    #[error("{knob}: cannot use the value `{value}`: {why}; give it as the kernel shows it, e.g. 0, 1, Y, N or 200000")]
    BadValue {
        /// `MODULE.PARAM`.
        knob: String,
        /// What was given.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// The host's KVM is paravirtual (`kvm_pvm`): the kvm/kvm_intel/kvm_amd parameters do
    /// not govern its exits.
    #[error("{knob}: this host's KVM is paravirtual (kvm_pvm is loaded), and the kvm, kvm_intel and kvm_amd parameters do not govern its exits, so switching {knob} would measure nothing: run the A/B on a host with hardware virtualization (VT-x/AMD-V), or inside a VM with a hardware-assisted KVM (for example through run-in-l1)")]
    Paravirtual {
        /// `MODULE.PARAM`.
        knob: String,
    },
    /// No such module is loaded.
    #[error("{knob}: module {module} is not loaded (no /sys/module/{module}); loaded KVM modules: {loaded}; load it first (modprobe {module}) or name one of those")]
    NoSuchModule {
        /// `MODULE.PARAM`.
        knob: String,
        /// The module.
        module: String,
        /// The KVM modules that are loaded, comma-separated (or `none`).
        loaded: String,
    },
    /// The module has no such parameter.
    #[error("{knob}: module {module} has no parameter {param} (no /sys/module/{module}/parameters/{param}); its parameters: {known}")]
    NoSuchParameter {
        /// `MODULE.PARAM`.
        knob: String,
        /// The module.
        module: String,
        /// The parameter.
        param: String,
        /// The module's parameters, comma-separated (or `none`).
        known: String,
    },
    /// A read-only parameter of a module built into the kernel: only the kernel command
    /// line sets it.
    #[error("{knob}: {module} is built into the kernel and {param} is read-only at run time, so it cannot be switched between rounds: set it on the kernel command line ({knob}=VALUE) and reboot, or use a kernel that builds {module} as a module")]
    BuiltInReadOnly {
        /// `MODULE.PARAM`.
        knob: String,
        /// The module.
        module: String,
        /// The parameter.
        param: String,
    },
    /// Writing parameters and reloading modules needs root.
    #[error("{knob}: changing a KVM module parameter needs root (this process runs as uid {euid}): run exitlab as root (sudo)")]
    NotRoot {
        /// `MODULE.PARAM`.
        knob: String,
        /// The effective uid of this process.
        euid: u32,
    },
    /// Someone else uses the module: another process holds /dev/kvm or a VM, or the
    /// module's reference count shows users this process cannot see.
    #[error("{knob}: {module} is in use: {users}; stop those VMs (or wait for them to end) and run again: changing it now would change them, and they would disturb the measurement")]
    InUse {
        /// `MODULE.PARAM`.
        knob: String,
        /// The module in use.
        module: String,
        /// Who uses it, e.g. `pid 123 (qemu-system-x86) holds /dev/kvm`.
        users: String,
    },
    /// A reload needs `modprobe`, and there is none.
    #[error("{knob}: {param} is read-only at run time, so switching it reloads {module}, which needs modprobe: none on PATH nor in /sbin or /usr/sbin; install kmod")]
    ModprobeMissing {
        /// `MODULE.PARAM`.
        knob: String,
        /// The module.
        module: String,
        /// The parameter.
        param: String,
    },
    /// A reload needs the module's file in the running kernel's module tree.
    #[error("{knob}: switching it reloads {module}, whose module file modprobe cannot find in the running kernel's module tree ({detail}); install the modules of the running kernel (/lib/modules/$(uname -r))")]
    ModuleFileMissing {
        /// `MODULE.PARAM`.
        knob: String,
        /// The module.
        module: String,
        /// What modprobe said.
        detail: String,
    },
    /// Another live exitlab process is switching module parameters now.
    #[error("another exitlab process (pid {pid}) is switching KVM module parameters now ({path}): wait for it to end, or stop it; it restores them when it ends")]
    Busy {
        /// The state file.
        path: PathBuf,
        /// Its owner.
        pid: u32,
    },
    /// The module refused the value (the write failed, or modprobe could not load it).
    #[error(
        "{knob}: the module refused the value {value}: {detail}; give a value this parameter takes"
    )]
    ValueRefused {
        /// `MODULE.PARAM`.
        knob: String,
        /// The value asked.
        value: String,
        /// What the kernel or modprobe said.
        detail: String,
    },
    /// The module took the value but keeps another one in force.
    #[error("{knob}: asked {asked}, the module keeps {kept} in force (this CPU lacks the feature, or the module ignores the value); leave this value out of the A/B")]
    NotKept {
        /// `MODULE.PARAM`.
        knob: String,
        /// The value asked.
        asked: String,
        /// The value read back.
        kept: String,
    },
    /// Unloading or loading a module failed.
    #[error("{action} failed: {detail}; the kernel log (dmesg) may say more")]
    Modprobe {
        /// The command, e.g. `modprobe -r kvm_amd`.
        action: String,
        /// What it said.
        detail: String,
    },
    /// `/dev/kvm` could not be brought back as it was.
    #[error("/dev/kvm could not be restored as it was ({detail}): create it with mknod /dev/kvm c 10 232, then set its owner and mode as before")]
    DevNode {
        /// What failed.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done, e.g. `write the state file`.
        what: String,
        /// The file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// The state file is not one exitlab wrote.
    #[error("the state file {path} cannot be read ({detail}): check what it holds, put the KVM module parameters it lists back by hand if needed, and remove it")]
    BadState {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Restoring the original values failed for some of them.
    #[error("could not restore every KVM module parameter: {}; exitlab tries again at its next start as root (the originals stay in {})", .failures.join("; "), .path.display())]
    RestoreFailed {
        /// What could not be restored, one entry each.
        failures: Vec<String>,
        /// The state file that keeps the originals.
        path: PathBuf,
    },
}

impl KnobError {
    /// True for the refusals: the host was left alone because the change cannot or must
    /// not be made here (exit code 14 when the CLI wires the knob).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            KnobError::Paravirtual { .. }
                | KnobError::NoSuchModule { .. }
                | KnobError::NoSuchParameter { .. }
                | KnobError::BuiltInReadOnly { .. }
                | KnobError::NotRoot { .. }
                | KnobError::InUse { .. }
                | KnobError::ModprobeMissing { .. }
                | KnobError::ModuleFileMissing { .. }
                | KnobError::Busy { .. }
        )
    }

    /// An [`KnobError::Io`] for `what` on `path`.
    pub(crate) fn io(what: &str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        KnobError::Io {
            what: what.to_string(),
            path: path.into(),
            source,
        }
    }
}
