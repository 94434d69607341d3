//! Everything the knob looks at before it changes anything: whether the module is loaded
//! and built in, whether the parameter exists and is writable at run time, the values of
//! every parameter of the modules involved, who else uses KVM, and what kind of KVM this
//! host runs. [`ParamFacts::refusals`] turns those facts into the reasons not to go on.
//!
//! Refusals come in a fixed order, from the most lasting to the most passing, so that the
//! first one is the one to act on: a paravirtual host (nothing to switch here), a module
//! or parameter that does not exist, a read-only parameter of a built-in module (only a
//! reboot changes it), not root, no modprobe or module file (for a reload), and last
//! other users of the module (they may be gone later). On the project's kvm_pvm host,
//! `kvm.halt_poll_ns` is refused first as paravirtual, then as built in and read-only.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::kernel::read_param_dir;
use crate::modules::{is_kvm_module, kvm_modules};
use crate::param_error::KnobError;
use crate::param_host::{Host, KvmHolder};
use crate::param_loader::{LoaderProblem, ModuleLoader};
use crate::param_spec::ParamSpec;

/// The modules whose parameters do not govern a paravirtual KVM's exits.
const HARDWARE_KVM: &[&str] = &["kvm", "kvm_intel", "kvm_amd"];

/// One module as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModuleFacts {
    /// The module.
    pub name: String,
    /// `/sys/module/M` exists.
    pub loaded: bool,
    /// Loaded but built into the kernel (no `/sys/module/M/initstate`): it cannot be
    /// unloaded.
    pub built_in: bool,
    /// `/sys/module/M/refcnt` (modules only).
    pub refcnt: Option<u32>,
    /// `/sys/module/M/holders`: the modules that need this one.
    pub holders: Vec<String>,
    /// Every readable parameter and its value.
    pub params: BTreeMap<String, String>,
    /// The parameters writable at run time (owner-write bit set).
    pub writable: BTreeSet<String>,
}

/// Reads module `name` under `host`'s sysfs.
pub fn module_facts(host: &Host, name: &str) -> ModuleFacts {
    let dir = host.module_dir(name);
    if !dir.is_dir() {
        return ModuleFacts {
            name: name.to_string(),
            ..ModuleFacts::default()
        };
    }
    let params = read_param_dir(&dir.join("parameters"))
        .into_iter()
        .filter(|(_, v)| !v.starts_with("<unreadable"))
        .collect();
    let writable = fs::read_dir(dir.join("parameters"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.metadata()
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o200 != 0)
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut holders: Vec<String> = fs::read_dir(dir.join("holders"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    holders.sort();
    ModuleFacts {
        name: name.to_string(),
        loaded: true,
        built_in: !dir.join("initstate").exists(),
        refcnt: crate::read_trimmed(dir.join("refcnt")).and_then(|v| v.parse().ok()),
        holders,
        params,
        writable,
    }
}

/// The modules involved in changing a parameter of `module`, in load order: the KVM
/// modules it needs (those that list it as a holder), itself, then the modules that need
/// it. A reload unloads them from the end and loads them from the start.
pub fn involved_modules(host: &Host, module: &str) -> Vec<ModuleFacts> {
    let own = module_facts(host, module);
    let mut order: Vec<ModuleFacts> = kvm_modules(&host.sys_module())
        .into_iter()
        .filter(|m| m != module)
        .map(|m| module_facts(host, &m))
        .filter(|m| m.holders.iter().any(|h| h == module))
        .collect();
    let holders: Vec<ModuleFacts> = own
        .holders
        .iter()
        .map(|h| module_facts(host, h))
        .filter(|h| h.loaded)
        .collect();
    order.push(own);
    order.extend(holders);
    order
}

/// Everything looked at before a parameter is changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamFacts {
    /// The parameter.
    pub spec: ParamSpec,
    /// Its module.
    pub module: ModuleFacts,
    /// `/sys/module/M/parameters/P` exists.
    pub exists: bool,
    /// The parameter can be written at run time (else a change reloads the module).
    pub writable: bool,
    /// Its value now.
    pub value: Option<String>,
    /// The modules involved, in load order (see [`involved_modules`]); each with every
    /// parameter's value now.
    pub involved: Vec<ModuleFacts>,
    /// The loaded KVM modules.
    pub kvm_modules: Vec<String>,
    /// `kvm_pvm` is loaded: this host's KVM is paravirtual.
    pub paravirtual: bool,
    /// This host is a guest with hardware virtualization: its KVM is nested.
    pub nested: bool,
    /// The effective uid of this process.
    pub euid: u32,
    /// The processes other than this one that hold KVM files.
    pub others: Vec<KvmHolder>,
    /// This process's own KVM files, if any.
    pub own: Option<KvmHolder>,
}

/// Looks at the host for a change of `spec`; changes nothing.
pub fn inspect(host: &Host, spec: &ParamSpec) -> ParamFacts {
    let module = module_facts(host, &spec.module);
    let path = host
        .module_dir(&spec.module)
        .join("parameters")
        .join(&spec.param);
    let meta = fs::metadata(&path).ok().filter(|m| m.is_file());
    let kvm = kvm_modules(&host.sys_module());
    let (own, others): (Vec<KvmHolder>, Vec<KvmHolder>) = host
        .kvm_holders()
        .into_iter()
        .partition(|h| h.pid == host.pid);
    ParamFacts {
        spec: spec.clone(),
        exists: meta.is_some(),
        writable: meta.is_some_and(|m| m.permissions().mode() & 0o200 != 0),
        value: module.params.get(&spec.param).cloned(),
        involved: if module.loaded {
            involved_modules(host, &spec.module)
        } else {
            Vec::new()
        },
        module,
        paravirtual: kvm.iter().any(|m| m == "kvm_pvm"),
        kvm_modules: kvm,
        nested: host.is_nested_guest(),
        euid: host.euid,
        others,
        own: own.into_iter().next(),
    }
}

impl ParamFacts {
    /// Whether a change reloads the module (the parameter is read-only at run time).
    pub fn needs_reload(&self) -> bool {
        !self.writable
    }

    /// The modules a reload unloads, in the order it unloads them: the holders, then the
    /// module itself. Empty when the parameter is writable at run time.
    pub fn reloaded(&self) -> Vec<&ModuleFacts> {
        if !self.needs_reload() {
            return Vec::new();
        }
        let at = self
            .involved
            .iter()
            .position(|m| m.name == self.spec.module)
            .unwrap_or(0);
        self.involved[at..].iter().rev().collect()
    }

    /// Every reason not to change the parameter, the one to act on first (see the
    /// module's documentation for the order). Empty when the change may go ahead.
    pub fn refusals(&self, loader: &dyn ModuleLoader) -> Vec<KnobError> {
        let knob = self.spec.to_string();
        let module = &self.spec.module;
        let mut out = Vec::new();
        if self.paravirtual && HARDWARE_KVM.contains(&module.as_str()) {
            out.push(KnobError::Paravirtual { knob: knob.clone() });
        }
        if !self.module.loaded {
            out.push(KnobError::NoSuchModule {
                knob,
                module: module.clone(),
                loaded: list_or_none(&self.kvm_modules),
            });
            return out;
        }
        if !self.exists {
            out.push(KnobError::NoSuchParameter {
                knob,
                module: module.clone(),
                param: self.spec.param.clone(),
                known: list_or_none(&self.module.params.keys().cloned().collect::<Vec<_>>()),
            });
            return out;
        }
        let built_in = self.reloaded().into_iter().find(|m| m.built_in);
        if let Some(b) = built_in {
            out.push(KnobError::BuiltInReadOnly {
                knob: knob.clone(),
                module: b.name.clone(),
                param: self.spec.param.clone(),
            });
        }
        if self.euid != 0 {
            out.push(KnobError::NotRoot {
                knob: knob.clone(),
                euid: self.euid,
            });
        }
        if built_in.is_none() {
            for m in self.reloaded() {
                match loader.check(&m.name) {
                    Ok(()) => {}
                    Err(LoaderProblem::NoModprobe) => {
                        out.push(KnobError::ModprobeMissing {
                            knob: knob.clone(),
                            module: m.name.clone(),
                            param: self.spec.param.clone(),
                        });
                        break;
                    }
                    Err(LoaderProblem::NoModuleFile(detail)) => {
                        out.push(KnobError::ModuleFileMissing {
                            knob: knob.clone(),
                            module: m.name.clone(),
                            detail,
                        });
                        break;
                    }
                }
            }
        }
        if let Some(users) = self.users() {
            out.push(KnobError::InUse {
                knob,
                module: self.vendor_module().to_string(),
                users,
            });
        }
        out
    }

    /// The first refusal, if any.
    pub fn check(&self, loader: &dyn ModuleLoader) -> Result<(), KnobError> {
        match self.refusals(loader).into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The vendor module (the one that owns `/dev/kvm`: kvm_intel, kvm_amd, ...) among
    /// the modules involved; the parameter's own module when there is none.
    fn vendor_module(&self) -> &str {
        self.involved
            .iter()
            .map(|m| m.name.as_str())
            .find(|m| *m != "kvm" && is_kvm_module(m))
            .unwrap_or(&self.spec.module)
    }

    /// Who uses the module besides this process's own use, in words; `None` when nobody.
    /// Other processes' KVM files are named. A module's reference count beyond its
    /// holders and the KVM files in sight (the vendor module holds one reference per
    /// `/dev/kvm` or vCPU file and two per VM) is a user this process cannot see, such
    /// as a VM in another PID namespace. A reload also needs this process's own KVM
    /// files closed.
    fn users(&self) -> Option<String> {
        let mut users: Vec<String> = self.others.iter().map(ToString::to_string).collect();
        let vendor = self.vendor_module();
        let seen: u32 = self
            .others
            .iter()
            .chain(self.own.iter())
            .map(|h| h.files.module_refs())
            .sum();
        for m in &self.involved {
            let Some(refcnt) = m.refcnt else { continue };
            let explained = m.holders.len() as u32 + if m.name == vendor { seen } else { 0 };
            if refcnt > explained {
                users.push(format!(
                    "{} has {refcnt} reference(s), {} more than its holders{} explain (a VM \
                     this process cannot see, e.g. in a container?)",
                    m.name,
                    refcnt - explained,
                    if m.name == vendor {
                        " and the KVM files in sight"
                    } else {
                        ""
                    }
                ));
            }
        }
        if self.needs_reload() {
            if let Some(own) = &self.own {
                users.push(format!(
                    "this process ({}) holds {}, which a reload of {} cannot wait for: close \
                     it before switching",
                    own.pid,
                    own.files.describe(),
                    self.spec.module
                ));
            }
        }
        (!users.is_empty()).then(|| users.join("; "))
    }

    /// What to keep in mind about figures taken with this parameter switched: on a
    /// nested host, that they are not hardware figures.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.nested && !self.paravirtual {
            notes.push(format!(
                "this host is itself a guest with hardware virtualization: {} governs its \
                 nested KVM, whose exit costs are not hardware figures",
                self.spec
            ));
        }
        notes
    }
}

/// `a, b, c`, or `none`.
fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param_loader::fake::{fixture, Fixture};

    fn spec(s: &str) -> ParamSpec {
        ParamSpec::parse(s).unwrap()
    }

    /// The refusals of `knob` on the fixture, as messages.
    fn refusals(f: &Fixture, knob: &str) -> Vec<String> {
        inspect(&f.host, &spec(knob))
            .refusals(&f.loader)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_loadable_kvm_may_be_switched() {
        let f = fixture("kvm_amd");
        let facts = inspect(&f.host, &spec("kvm_amd.npt"));
        assert!(facts.module.loaded && !facts.module.built_in);
        assert!(facts.exists && !facts.writable && facts.needs_reload());
        assert_eq!(facts.value.as_deref(), Some("Y"));
        let names: Vec<&str> = facts.involved.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["kvm", "kvm_amd"], "load order: what it needs first");
        let reloaded: Vec<&str> = facts.reloaded().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(reloaded, ["kvm_amd"]);
        assert_eq!(facts.involved[0].params["nx_huge_pages"], "N");
        assert_eq!(facts.involved[1].params["nested"], "0");
        assert!(facts.refusals(&f.loader).is_empty());

        let facts = inspect(&f.host, &spec("kvm.halt_poll_ns"));
        assert!(facts.writable && !facts.needs_reload());
        assert!(facts.reloaded().is_empty());
        let names: Vec<&str> = facts.involved.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["kvm", "kvm_amd"], "kvm, then what needs it");

        let facts = inspect(&f.host, &spec("kvm.tdp_mmu"));
        let reloaded: Vec<&str> = facts.reloaded().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(reloaded, ["kvm_amd", "kvm"], "the vendor module goes first");
        assert!(facts.check(&f.loader).is_ok());
    }

    #[test]
    fn a_paravirtual_kvm_is_refused_first() {
        let f = fixture("kvm_amd");
        std::fs::create_dir_all(f.host.module_dir("kvm_pvm").join("parameters")).unwrap();
        let r = refusals(&f, "kvm.halt_poll_ns");
        assert_eq!(
            r,
            [
                "kvm.halt_poll_ns: this host's KVM is paravirtual (kvm_pvm is loaded), and the \
              kvm, kvm_intel and kvm_amd parameters do not govern its exits, so switching \
              kvm.halt_poll_ns would measure nothing: run the A/B on a host with hardware \
              virtualization (VT-x/AMD-V), or inside a VM with a hardware-assisted KVM (for \
              example through run-in-l1)"
            ]
        );
        let e = inspect(&f.host, &spec("kvm_intel.enable_ipiv"))
            .check(&f.loader)
            .unwrap_err();
        assert!(matches!(e, KnobError::Paravirtual { .. }), "{e:?}");
        assert!(e.is_refusal());
    }

    #[test]
    fn a_missing_module_or_parameter_is_named_with_what_there_is() {
        let f = fixture("kvm_amd");
        assert_eq!(
            refusals(&f, "kvm_intel.enable_ipiv"),
            ["kvm_intel.enable_ipiv: module kvm_intel is not loaded (no /sys/module/kvm_intel); \
              loaded KVM modules: kvm, kvm_amd; load it first (modprobe kvm_intel) or name one \
              of those"]
        );
        assert_eq!(
            refusals(&f, "kvm_amd.ept"),
            ["kvm_amd.ept: module kvm_amd has no parameter ept (no \
              /sys/module/kvm_amd/parameters/ept); its parameters: avic, nested, npt, \
              pause_filter_count"]
        );
        let e = inspect(&f.host, &spec("kvm_amd.ept"))
            .check(&f.loader)
            .unwrap_err();
        assert!(matches!(e, KnobError::NoSuchParameter { .. }));
        let e = inspect(&f.host, &spec("nosuch.x"))
            .check(&f.loader)
            .unwrap_err();
        assert!(matches!(e, KnobError::NoSuchModule { .. }));
    }

    #[test]
    fn a_read_only_parameter_of_a_built_in_module_is_refused() {
        let f = fixture("kvm_amd");
        std::fs::remove_file(f.host.module_dir("kvm").join("initstate")).unwrap();
        assert_eq!(
            refusals(&f, "kvm.tdp_mmu"),
            [
                "kvm.tdp_mmu: kvm is built into the kernel and tdp_mmu is read-only at run time, \
              so it cannot be switched between rounds: set it on the kernel command line \
              (kvm.tdp_mmu=VALUE) and reboot, or use a kernel that builds kvm as a module"
            ]
        );
        // A run-time-writable parameter of a built-in module is fine.
        assert!(refusals(&f, "kvm.halt_poll_ns").is_empty());
    }

    #[test]
    fn not_root_is_refused() {
        let mut f = fixture("kvm_amd");
        f.host.euid = 1000;
        assert_eq!(
            refusals(&f, "kvm.halt_poll_ns"),
            [
                "kvm.halt_poll_ns: changing a KVM module parameter needs root (this process runs \
              as uid 1000): run exitlab as root (sudo)"
            ]
        );
    }

    #[test]
    fn a_reload_needs_modprobe_and_the_module_file() {
        let mut f = fixture("kvm_amd");
        f.loader.problem = Some(LoaderProblem::NoModprobe);
        assert_eq!(
            refusals(&f, "kvm_amd.npt"),
            ["kvm_amd.npt: npt is read-only at run time, so switching it reloads kvm_amd, which \
              needs modprobe: none on PATH nor in /sbin or /usr/sbin; install kmod"]
        );
        assert!(
            refusals(&f, "kvm.halt_poll_ns").is_empty(),
            "no reload, no modprobe"
        );
        f.loader.problem = Some(LoaderProblem::NoModuleFile(
            "modprobe: FATAL: Module kvm_amd not found in directory /lib/modules/6.1.0".into(),
        ));
        assert_eq!(
            refusals(&f, "kvm_amd.npt"),
            ["kvm_amd.npt: switching it reloads kvm_amd, whose module file modprobe cannot find \
              in the running kernel's module tree (modprobe: FATAL: Module kvm_amd not found in \
              directory /lib/modules/6.1.0); install the modules of the running kernel \
              (/lib/modules/$(uname -r))"]
        );
        let e = inspect(&f.host, &spec("kvm_amd.npt"))
            .check(&f.loader)
            .unwrap_err();
        assert!(matches!(e, KnobError::ModuleFileMissing { .. }) && e.is_refusal());
    }

    #[test]
    fn other_users_of_kvm_are_named() {
        let f = fixture("kvm_amd");
        let fd = f.root.0.join("proc/4242/fd");
        std::fs::create_dir_all(&fd).unwrap();
        std::os::unix::fs::symlink("/dev/kvm", fd.join("7")).unwrap();
        std::os::unix::fs::symlink("anon_inode:kvm-vm", fd.join("8")).unwrap();
        f.root.write("proc/4242/comm", "qemu-system-x86\n");
        // The vendor module counts their references: explained, so only the process is
        // named.
        f.root.write("sys/module/kvm_amd/refcnt", "3\n");
        assert_eq!(
            refusals(&f, "kvm.halt_poll_ns"),
            [
                "kvm.halt_poll_ns: kvm_amd is in use: pid 4242 (qemu-system-x86) holds /dev/kvm, \
              1 VM(s); stop those VMs (or wait for them to end) and run again: changing it now \
              would change them, and they would disturb the measurement"
            ]
        );
        let e = inspect(&f.host, &spec("kvm_amd.npt"))
            .check(&f.loader)
            .unwrap_err();
        assert!(matches!(e, KnobError::InUse { .. }) && e.is_refusal());
    }

    #[test]
    fn references_nobody_in_sight_explains_are_users() {
        let f = fixture("kvm_amd");
        f.root.write("sys/module/kvm_amd/refcnt", "2\n");
        assert_eq!(
            refusals(&f, "kvm_amd.npt"),
            [
                "kvm_amd.npt: kvm_amd is in use: kvm_amd has 2 reference(s), 2 more than its \
              holders and the KVM files in sight explain (a VM this process cannot see, e.g. in \
              a container?); stop those VMs (or wait for them to end) and run again: changing \
              it now would change them, and they would disturb the measurement"
            ]
        );
        // kvm's one reference is kvm_amd's, its holder.
        f.root.write("sys/module/kvm_amd/refcnt", "0\n");
        assert!(refusals(&f, "kvm_amd.npt").is_empty());
    }

    #[test]
    fn this_process_may_hold_kvm_for_a_write_but_not_for_a_reload() {
        let f = fixture("kvm_amd");
        let fd = f.root.0.join(format!("proc/{}/fd", f.host.pid));
        std::fs::create_dir_all(&fd).unwrap();
        std::os::unix::fs::symlink("/dev/kvm", fd.join("3")).unwrap();
        f.root.write("sys/module/kvm_amd/refcnt", "1\n");
        assert!(refusals(&f, "kvm.halt_poll_ns").is_empty());
        assert_eq!(
            refusals(&f, "kvm_amd.npt"),
            [format!(
                "kvm_amd.npt: kvm_amd is in use: this process ({}) holds /dev/kvm, which a \
                 reload of kvm_amd cannot wait for: close it before switching; stop those VMs \
                 (or wait for them to end) and run again: changing it now would change them, \
                 and they would disturb the measurement",
                f.host.pid
            )]
        );
    }

    #[test]
    fn refusals_come_most_lasting_first() {
        let mut f = fixture("kvm_amd");
        std::fs::create_dir_all(f.host.module_dir("kvm_pvm")).unwrap();
        std::fs::remove_file(f.host.module_dir("kvm").join("initstate")).unwrap();
        f.host.euid = 1000;
        f.root.write("sys/module/kvm_amd/refcnt", "5\n");
        let r = inspect(&f.host, &spec("kvm.tdp_mmu")).refusals(&f.loader);
        let kinds: Vec<&str> = r
            .iter()
            .map(|e| match e {
                KnobError::Paravirtual { .. } => "paravirtual",
                KnobError::BuiltInReadOnly { .. } => "built in",
                KnobError::NotRoot { .. } => "not root",
                KnobError::InUse { .. } => "in use",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["paravirtual", "built in", "not root", "in use"]);
    }

    #[test]
    fn a_nested_host_gets_a_note() {
        let f = fixture("kvm_amd");
        f.root.write(
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu svm hypervisor\n\n",
        );
        let facts = inspect(&f.host, &spec("kvm_amd.npt"));
        assert!(facts.nested);
        assert!(
            facts.refusals(&f.loader).is_empty(),
            "a nested host is allowed"
        );
        assert_eq!(
            facts.notes(),
            [
                "this host is itself a guest with hardware virtualization: kvm_amd.npt governs \
              its nested KVM, whose exit costs are not hardware figures"
            ]
        );
        f.root
            .write("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu svm\n\n");
        assert!(inspect(&f.host, &spec("kvm_amd.npt")).notes().is_empty());
    }
}
