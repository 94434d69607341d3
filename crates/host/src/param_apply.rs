//! Bringing KVM modules to a wanted set of parameter values: one path for switching a
//! value, validating values and restoring the originals (from a session or from the state
//! file a killed process left). A parameter writable at run time is written through
//! sysfs; a read-only one that differs reloads its module: the modules from it on are
//! unloaded in reverse load order (the modules that need it first), then every module
//! not loaded is loaded in order with all its wanted values (those that can be passed),
//! `/dev/kvm` is given back its owner and mode, and every value is read back.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::param_error::KnobError;
use crate::param_host::{Host, NodeState};
use crate::param_inspect::{module_facts, ModuleFacts};
use crate::param_loader::ModuleLoader;
use crate::param_spec::{parse_bool, same_value, unpassable, ParamSpec};

/// A module's parameters as they were (or should be).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ModuleValues {
    /// The module.
    pub name: String,
    /// Built into the kernel: never unloaded.
    pub built_in: bool,
    /// Every readable parameter and its value.
    pub params: BTreeMap<String, String>,
    /// The parameters writable at run time.
    pub writable: BTreeSet<String>,
}

impl From<&ModuleFacts> for ModuleValues {
    fn from(m: &ModuleFacts) -> Self {
        ModuleValues {
            name: m.name.clone(),
            built_in: m.built_in,
            params: m.params.clone(),
            writable: m.writable.clone(),
        }
    }
}

/// Parameters declared with `module_param_unsafe`: passing one at all taints the kernel
/// (TAINT_USER), even at its default value, so a reload passes it only when it is on
/// (someone passed it before, and the kernel is tainted already).
const UNSAFE_PARAMS: &[(&str, &str)] = &[("kvm_amd", "force_avic")];

impl ModuleValues {
    /// The parameters a load passes: every value that can be passed as it is (not an
    /// empty or `(null)` string, nothing modprobe would split), less the unsafe ones
    /// that are off.
    pub fn load_params(&self) -> Vec<(String, String)> {
        self.params
            .iter()
            .filter(|(_, v)| unpassable(v).is_none())
            .filter(|(k, v)| {
                !UNSAFE_PARAMS.contains(&(self.name.as_str(), k.as_str()))
                    || parse_bool(v) == Some(true)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// A value that was not what it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// `MODULE.PARAM`.
    pub knob: String,
    /// The value wanted.
    pub want: String,
    /// The value found (`None`: the module was not loaded or the parameter not there).
    pub found: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.found {
            Some(v) => write!(f, "{} {v} -> {}", self.knob, self.want),
            None => write!(f, "{} (absent) -> {}", self.knob, self.want),
        }
    }
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The values that differed before, each with what it was.
    pub before: Vec<Difference>,
    /// The modules loaded again, in load order.
    pub reloaded: Vec<String>,
    /// The values that still differ after, each with what is in force.
    pub after: Vec<Difference>,
    /// How long it took, from the first look to the last read-back.
    pub took: Duration,
    /// `/proc/sys/kernel/tainted` before and after, when a reload changed it (a parameter
    /// passed is one the kernel calls unsafe).
    pub tainted: Option<(String, String)>,
}

/// Every value of `want` that `now` does not show.
fn differences(want: &ModuleValues, now: &ModuleFacts) -> Vec<Difference> {
    want.params
        .iter()
        .filter_map(|(p, v)| {
            let found = now.params.get(p);
            (!found.is_some_and(|f| same_value(v, f))).then(|| Difference {
                knob: format!("{}.{p}", want.name),
                want: v.clone(),
                found: found.cloned(),
            })
        })
        .collect()
}

/// The error for a failed load of `module`: the module refused the value when it is the
/// one being switched to another value, else modprobe failed.
fn load_error(module: &str, switched: Option<(&ParamSpec, &str)>, detail: String) -> KnobError {
    match switched {
        Some((spec, value)) if spec.module == module => KnobError::ValueRefused {
            knob: spec.to_string(),
            value: value.to_string(),
            detail,
        },
        _ => KnobError::Modprobe {
            action: format!("loading {module}"),
            detail,
        },
    }
}

/// Brings `modules` (in load order) to their values and `/dev/kvm` to `node`.
/// `switched` names the parameter being set to another value, for the errors. A module
/// that fails to load with its values is loaded without them, so that KVM stays usable;
/// the first error is returned after the rest is done.
pub fn apply(
    host: &Host,
    loader: &mut dyn ModuleLoader,
    modules: &[ModuleValues],
    node: Option<&NodeState>,
    switched: Option<(&ParamSpec, &str)>,
) -> Result<Outcome, KnobError> {
    let start = Instant::now();
    let tainted_path = host.proc_root.join("sys/kernel/tainted");
    let tainted_before = crate::read_trimmed(&tainted_path);
    let now: Vec<ModuleFacts> = modules
        .iter()
        .map(|m| module_facts(host, &m.name))
        .collect();
    let mut before = Vec::new();
    let mut reload_from = None;
    for (i, (want, now)) in modules.iter().zip(&now).enumerate() {
        let diff = differences(want, now);
        let read_only = diff.iter().any(|d| {
            let param = &d.knob[want.name.len() + 1..];
            !now.writable.contains(param)
        });
        if (!now.loaded || read_only) && reload_from.is_none() {
            reload_from = Some(i);
        }
        before.extend(diff);
    }
    let mut reloaded = Vec::new();
    let mut first_error = None;
    if let Some(from) = reload_from {
        if let Some(b) = modules[from..].iter().find(|m| m.built_in) {
            return Err(KnobError::Modprobe {
                action: format!("reloading {}", b.name),
                detail: format!("{} is built into the kernel and cannot be unloaded", b.name),
            });
        }
        for m in modules[from..].iter().rev() {
            if !host.module_dir(&m.name).is_dir() {
                continue;
            }
            if let Err(detail) = loader.unload(&m.name) {
                // What was unloaded already is loaded again below: KVM stays usable.
                first_error.get_or_insert(KnobError::Modprobe {
                    action: format!("unloading {} (modprobe -r {})", m.name, m.name),
                    detail,
                });
                break;
            }
        }
        // modprobe -r also removes what the modules needed if nothing else does: every
        // module not loaded now is loaded, in order, the ones needed first.
        for m in modules {
            if host.module_dir(&m.name).is_dir() {
                continue;
            }
            if let Err(detail) = loader.load(&m.name, &m.load_params()) {
                first_error.get_or_insert(load_error(&m.name, switched, detail));
                if let Err(detail) = loader.load(&m.name, &[]) {
                    return Err(KnobError::Modprobe {
                        action: format!("loading {} without parameters after that failed", m.name),
                        detail,
                    });
                }
            }
            reloaded.push(m.name.clone());
        }
        if let Some(node) = node {
            if let Err(e) = host.restore_node(node) {
                first_error.get_or_insert(e);
            }
        }
    }
    for (want, now) in modules.iter().zip(&now) {
        if reloaded.contains(&want.name) {
            continue;
        }
        for d in differences(want, now) {
            let param = &d.knob[want.name.len() + 1..];
            // A read-only one differs here only when its module's reload failed above.
            if !now.writable.contains(param) {
                continue;
            }
            let path = host.module_dir(&want.name).join("parameters").join(param);
            if let Err(e) = fs::write(&path, &d.want) {
                let err = if e.raw_os_error() == Some(libc::EINVAL) {
                    match switched {
                        Some((spec, value)) if spec.to_string() == d.knob => {
                            KnobError::ValueRefused {
                                knob: d.knob.clone(),
                                value: value.to_string(),
                                detail: format!("writing it to {} failed: {e}", path.display()),
                            }
                        }
                        _ => KnobError::io("write", path, e),
                    }
                } else {
                    KnobError::io("write", path, e)
                };
                first_error.get_or_insert(err);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let after = modules
        .iter()
        .flat_map(|m| differences(m, &module_facts(host, &m.name)))
        .collect();
    let took = start.elapsed();
    let tainted = match (tainted_before, crate::read_trimmed(&tainted_path)) {
        (Some(a), Some(b)) if a != b => Some((a, b)),
        _ => None,
    };
    Ok(Outcome {
        before,
        reloaded,
        after,
        took,
        tainted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_passes_what_can_be_passed_and_no_unsafe_parameter_that_is_off() {
        let mut m = ModuleValues {
            name: "kvm_amd".into(),
            built_in: false,
            params: [
                ("npt", "Y"),
                ("force_avic", "N"),
                ("empty", ""),
                ("unset", "(null)"),
                ("words", "not required"),
                ("nested", "0"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            writable: BTreeSet::new(),
        };
        let names = |m: &ModuleValues| -> Vec<String> {
            m.load_params()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        };
        assert_eq!(names(&m), ["nested=0", "npt=Y"]);
        m.params.insert("force_avic".into(), "Y".into());
        assert_eq!(names(&m), ["force_avic=Y", "nested=0", "npt=Y"]);
        // Another module's parameter of that name is not the unsafe one.
        m.name = "kvm_other".into();
        m.params.insert("force_avic".into(), "N".into());
        assert_eq!(names(&m), ["force_avic=N", "nested=0", "npt=Y"]);
    }
}
