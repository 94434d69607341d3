//! A KVM module parameter switched between values, as a guard: [`ParamSession::open`]
//! looks at the host and refuses before anything changes; the first change writes the
//! state file; [`ParamSession::restore`] puts every original value back, reads each back
//! and removes the file; dropping the session restores too (best effort), so that every
//! error path and a SIGINT/SIGTERM that unwinds to it restores. A `kill -9` leaves the
//! state file, which [`crate::param_state::restore_pending`] finds at the next start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::buildid::{build_ids, BuildIds};
use crate::param_apply::{apply, ModuleValues, Outcome};
use crate::param_error::KnobError;
use crate::param_host::Host;
use crate::param_inspect::{inspect, module_facts, ParamFacts};
use crate::param_loader::{Modprobe, ModuleLoader};
use crate::param_spec::{same_value, ParamSpec};
use crate::param_state::{
    restore_pending, restore_saved, Owner, Pending, SavedState, STATE_VERSION,
};

/// What one switch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `MODULE.PARAM`.
    pub knob: String,
    /// The value asked.
    pub asked: String,
    /// The value in force, as read back.
    pub in_force: String,
    /// Whether the module was reloaded (the parameter is read-only at run time).
    pub reloaded: bool,
    /// Whether anything had to change (false: every value was in force already).
    pub changed: bool,
    /// How long the switch took, measured.
    pub took: Duration,
    /// Other parameters that no longer hold their original values, one line each.
    pub warnings: Vec<String>,
}

/// The parameters in force and the build IDs of the modules involved: what the lab
/// records with each round.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct InForce {
    /// Module -> parameter -> value.
    pub params: BTreeMap<String, BTreeMap<String, String>>,
    /// The kernel's and those modules' build IDs.
    pub build_ids: BuildIds,
}

/// The parameters in force of `modules` and their and the kernel's build IDs.
pub fn params_in_force<S: AsRef<str>>(host: &Host, modules: &[S]) -> InForce {
    InForce {
        params: modules
            .iter()
            .map(|m| {
                (
                    m.as_ref().to_string(),
                    module_facts(host, m.as_ref()).params,
                )
            })
            .collect(),
        build_ids: build_ids(&host.sys, modules),
    }
}

/// One parameter switched between values, restored when done or dropped.
pub struct ParamSession<L: ModuleLoader = Modprobe> {
    host: Host,
    loader: L,
    state_path: PathBuf,
    facts: ParamFacts,
    saved: SavedState,
    state_written: bool,
    finished: bool,
    notes: Vec<String>,
}

impl<L: ModuleLoader> std::fmt::Debug for ParamSession<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamSession")
            .field("knob", &self.saved.knob)
            .field("state_path", &self.state_path)
            .field("state_written", &self.state_written)
            .finish()
    }
}

impl ParamSession<Modprobe> {
    /// A session on this machine: modprobe, the state file at its default place.
    pub fn open_real(spec: &ParamSpec) -> Result<Self, KnobError> {
        ParamSession::open(
            Host::real(),
            Modprobe::find(),
            spec,
            crate::param_state::default_state_path(),
        )
    }
}

impl<L: ModuleLoader> ParamSession<L> {
    /// Looks at the host and refuses, before anything changes, when the parameter cannot
    /// or must not be switched here (see [`ParamFacts::refusals`]). A state file left by
    /// a process that is gone is restored first (its line is among [`Self::notes`]); one
    /// whose owner runs refuses ([`KnobError::Busy`]).
    pub fn open(
        host: Host,
        mut loader: L,
        spec: &ParamSpec,
        state_path: impl Into<PathBuf>,
    ) -> Result<Self, KnobError> {
        let state_path = state_path.into();
        let mut notes = Vec::new();
        if let Some(saved) = SavedState::read(&state_path)? {
            if saved.owner(&host) == Owner::Alive {
                return Err(KnobError::Busy {
                    path: state_path,
                    pid: saved.owner_pid,
                });
            }
            match restore_pending(&host, &mut loader, &state_path) {
                Some(Pending::Failed(line)) => {
                    return Err(KnobError::RestoreFailed {
                        failures: vec![line],
                        path: state_path,
                    })
                }
                Some(p) => notes.push(p.line().to_string()),
                None => {}
            }
        }
        let facts = inspect(&host, spec);
        facts.check(&loader)?;
        notes.extend(facts.notes());
        let saved = SavedState {
            version: STATE_VERSION,
            owner_pid: host.pid,
            owner_start_time: host.start_time(host.pid),
            knob: spec.to_string(),
            modules: facts.involved.iter().map(ModuleValues::from).collect(),
            loaded_modules: facts.kvm_modules.clone(),
            dev_kvm: host.node_state(),
        };
        Ok(ParamSession {
            host,
            loader,
            state_path,
            facts,
            saved,
            state_written: false,
            finished: false,
            notes,
        })
    }

    /// What was found at the start.
    pub fn facts(&self) -> &ParamFacts {
        &self.facts
    }

    /// The parameter's value at the start.
    pub fn original(&self) -> &str {
        self.facts.value.as_deref().unwrap_or("")
    }

    /// What to say about the session: a pending restore done at the start, a nested
    /// host's figures.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The state file.
    pub fn state_path(&self) -> &Path {
        &self.state_path
    }

    /// The values at the start, as the state file keeps them.
    pub fn saved(&self) -> &SavedState {
        &self.saved
    }

    /// Sets the parameter to `value`: written through sysfs when it is writable at run
    /// time, else by reloading the module (and those that need it) with every other
    /// parameter at its original value. Reads back the value in force; a value the
    /// module refuses or does not keep is an error, after which the originals are put
    /// back. The first change writes the state file.
    pub fn set(&mut self, value: &str) -> Result<Applied, KnobError> {
        let spec = self.facts.spec.clone();
        spec.check_value(value)?;
        // A VM may have started since the session opened.
        inspect(&self.host, &spec).check(&self.loader)?;
        if !self.state_written {
            self.saved.write(&self.state_path)?;
            self.state_written = true;
        }
        let mut wanted = self.saved.modules.clone();
        if let Some(m) = wanted.iter_mut().find(|m| m.name == spec.module) {
            m.params.insert(spec.param.clone(), value.to_string());
        }
        let outcome = match apply(
            &self.host,
            &mut self.loader,
            &wanted,
            self.saved.dev_kvm.as_ref(),
            Some((&spec, value)),
        ) {
            Ok(o) => o,
            Err(e) => {
                let _ = self.put_back();
                return Err(e);
            }
        };
        let knob = spec.to_string();
        let in_force = module_facts(&self.host, &spec.module)
            .params
            .get(&spec.param)
            .cloned()
            .unwrap_or_default();
        if !same_value(value, &in_force) {
            let _ = self.put_back();
            return Err(KnobError::NotKept {
                knob,
                asked: value.to_string(),
                kept: in_force,
            });
        }
        let mut warnings: Vec<String> = outcome
            .after
            .iter()
            .filter(|d| d.knob != knob)
            .map(|d| {
                format!(
                    "{} was {} before the switch and is {} in force now",
                    d.knob,
                    d.want,
                    d.found.as_deref().unwrap_or("absent")
                )
            })
            .collect();
        if let Some((was, now)) = &outcome.tainted {
            warnings.push(format!(
                "the kernel's taint flags went from {was} to {now} during the switch (a \
                 parameter passed may be one the kernel calls unsafe; see dmesg)"
            ));
        }
        Ok(Applied {
            knob,
            asked: value.to_string(),
            in_force,
            reloaded: !outcome.reloaded.is_empty(),
            changed: !outcome.before.is_empty(),
            took: outcome.took,
            warnings,
        })
    }

    /// Applies each of `values` once, reads it back and compares, then puts the original
    /// back: a value the module refuses or does not keep is an error before the first
    /// round.
    pub fn validate(&mut self, values: &[&str]) -> Result<Vec<Applied>, KnobError> {
        let mut applied = Vec::new();
        for v in values {
            applied.push(self.set(v)?);
        }
        if self.state_written {
            self.put_back()?;
        }
        Ok(applied)
    }

    /// The parameters in force of the modules involved and the build IDs, for the
    /// record of a round.
    pub fn in_force(&self) -> InForce {
        let names: Vec<&str> = self.saved.modules.iter().map(|m| m.name.as_str()).collect();
        params_in_force(&self.host, &names)
    }

    /// Puts every original value back (reloading if need be), reads each back, and
    /// removes the state file. What differed is in the outcome's `before`.
    pub fn restore(mut self) -> Result<Outcome, KnobError> {
        self.finish()
    }

    /// Puts the originals back, keeping the state file (the session goes on).
    fn put_back(&mut self) -> Result<Outcome, KnobError> {
        restore_saved(&self.host, &mut self.loader, &self.saved, &self.state_path)
    }

    fn finish(&mut self) -> Result<Outcome, KnobError> {
        if self.finished || !self.state_written {
            self.finished = true;
            return Ok(Outcome {
                before: Vec::new(),
                reloaded: Vec::new(),
                after: Vec::new(),
                took: Duration::ZERO,
                tainted: None,
            });
        }
        // One try: when it fails, the state file keeps the originals for the next start.
        self.finished = true;
        let outcome = self.put_back()?;
        std::fs::remove_file(&self.state_path)
            .map_err(|e| KnobError::io("remove the state file", &self.state_path, e))?;
        Ok(outcome)
    }
}

impl<L: ModuleLoader> Drop for ParamSession<L> {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            // Nothing else can carry it now: the state file keeps the originals for the
            // next start.
            eprintln!("exitlab: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param_loader::fake::{fixture, FakeLoader, Fixture};

    fn spec(s: &str) -> ParamSpec {
        ParamSpec::parse(s).unwrap()
    }

    fn value(f: &Fixture, module: &str, param: &str) -> String {
        module_facts(&f.host, module).params[param].clone()
    }

    /// A session on the fixture; the fixture keeps its tree, the session takes the
    /// loader (its calls are read back through [`calls`]).
    fn open(f: &mut Fixture, knob: &str) -> ParamSession<FakeLoader> {
        let loader = std::mem::replace(&mut f.loader, FakeLoader::new(&f.host, Default::default()));
        ParamSession::open(f.host.clone(), loader, &spec(knob), &f.state).unwrap()
    }

    fn calls(s: &ParamSession<FakeLoader>) -> Vec<String> {
        s.loader.calls.clone()
    }

    #[test]
    fn a_run_time_write_is_read_back_and_restored() {
        let mut f = fixture("kvm_amd");
        let mut s = open(&mut f, "kvm.halt_poll_ns");
        assert_eq!(s.original(), "200000");
        assert!(!f.state.exists(), "opening changes nothing");
        let a = s.set("0").unwrap();
        assert_eq!((a.in_force.as_str(), a.reloaded), ("0", false));
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "0");
        assert!(
            f.state.exists(),
            "the state file is written by the first change"
        );
        assert!(calls(&s).is_empty(), "no reload: {:?}", calls(&s));
        let saved = SavedState::read(&f.state).unwrap().unwrap();
        assert_eq!(saved.owner_pid, f.host.pid);
        assert_eq!(
            saved.owner_start_time,
            Some(crate::param_loader::fake::OWN_START)
        );
        assert_eq!(saved.modules[0].params["halt_poll_ns"], "200000");
        assert_eq!(saved.loaded_modules, ["kvm", "kvm_amd"]);
        assert_eq!(saved.dev_kvm, Some(f.node));
        let out = s.restore().unwrap();
        assert_eq!(out.before.len(), 1);
        assert_eq!(out.before[0].to_string(), "kvm.halt_poll_ns 0 -> 200000");
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "200000");
        assert!(!f.state.exists(), "restore removes the state file");
    }

    #[test]
    fn a_reload_passes_every_other_original_and_keeps_dev_kvm() {
        let mut f = fixture("kvm_amd");
        let mut s = open(&mut f, "kvm_amd.npt");
        s.loader.watch = Some(f.state.clone());
        let a = s.set("0").unwrap();
        assert_eq!(a.in_force, "N", "0 asked of a bool: shown as N");
        assert!(a.reloaded);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        // modprobe -r kvm_amd took kvm with it (nothing else used it): both come back,
        // kvm first, each with its original values; the (null) string is left out.
        assert_eq!(
            calls(&s),
            [
                "unload kvm_amd",
                "load kvm halt_poll_ns=200000 nx_huge_pages=N tdp_mmu=Y",
                "load kvm_amd avic=N nested=0 npt=0 pause_filter_count=3000",
            ]
        );
        assert_eq!(
            s.loader.saw,
            [true, true, true],
            "state file written before the first change"
        );
        assert_eq!(
            value(&f, "kvm_amd", "nested"),
            "0",
            "not the module's default, 1"
        );
        assert_eq!(value(&f, "kvm", "nx_huge_pages"), "N");
        assert_eq!(
            f.host.node_state(),
            Some(f.node),
            "/dev/kvm owner, group and mode kept"
        );
        let a = s.set("1").unwrap();
        assert_eq!((a.in_force.as_str(), a.reloaded), ("Y", true));
        let out = s.restore().unwrap();
        assert!(
            out.before.is_empty(),
            "already at the originals: {:?}",
            out.before
        );
        assert_eq!(value(&f, "kvm_amd", "npt"), "Y");
        assert_eq!(value(&f, "kvm_amd", "nested"), "0");
        assert_eq!(f.host.node_state(), Some(f.node));
        assert!(!f.state.exists());
    }

    #[test]
    fn a_parameter_of_kvm_reloads_the_vendor_module_first() {
        let mut f = fixture("kvm_amd");
        let mut s = open(&mut f, "kvm.tdp_mmu");
        s.loader.remove_unused_deps = false;
        let a = s.set("N").unwrap();
        assert_eq!((a.in_force.as_str(), a.reloaded), ("N", true));
        assert_eq!(
            calls(&s),
            [
                "unload kvm_amd",
                "unload kvm",
                "load kvm halt_poll_ns=200000 nx_huge_pages=N tdp_mmu=N",
                "load kvm_amd avic=N nested=0 npt=Y pause_filter_count=3000",
            ]
        );
        drop(s);
        assert_eq!(
            value(&f, "kvm", "tdp_mmu"),
            "Y",
            "dropping the session restores"
        );
        assert!(!f.state.exists());
    }

    #[test]
    fn a_value_the_module_does_not_keep_is_an_error_and_the_original_comes_back() {
        let mut f = fixture("kvm_intel");
        // This CPU lacks IPI virtualization: the module keeps N whatever it is given.
        f.loader.keeps = |m, p, v| {
            Ok(if (m, p) == ("kvm_intel", "enable_ipiv") {
                "N"
            } else {
                v
            }
            .to_string())
        };
        let mut s = open(&mut f, "kvm_intel.enable_ipiv");
        let e = s.validate(&["0", "1"]).unwrap_err();
        assert!(matches!(e, KnobError::NotKept { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "kvm_intel.enable_ipiv: asked 1, the module keeps N in force (this CPU lacks the \
             feature, or the module ignores the value); leave this value out of the A/B"
        );
        assert_eq!(value(&f, "kvm_intel", "enable_ipiv"), "N");
        assert_eq!(
            value(&f, "kvm_intel", "nested"),
            "N",
            "the fixture loaded it with nested=0"
        );
        assert_eq!(f.host.node_state(), Some(f.node));
        s.restore().unwrap();
        assert!(!f.state.exists());
    }

    #[test]
    fn a_value_the_module_refuses_is_an_error_and_kvm_stays_usable() {
        let mut f = fixture("kvm_amd");
        f.loader.keeps = |m, p, v| {
            if (m, p, v) == ("kvm_amd", "pause_filter_count", "-5") {
                Err("modprobe: ERROR: could not insert 'kvm_amd': Invalid argument".into())
            } else {
                Ok(v.to_string())
            }
        };
        let mut s = open(&mut f, "kvm_amd.pause_filter_count");
        let e = s.set("-5").unwrap_err();
        assert_eq!(
            e.to_string(),
            "kvm_amd.pause_filter_count: the module refused the value -5: modprobe: ERROR: \
             could not insert 'kvm_amd': Invalid argument; give a value this parameter takes"
        );
        assert_eq!(value(&f, "kvm_amd", "pause_filter_count"), "3000");
        assert_eq!(value(&f, "kvm_amd", "nested"), "0");
        assert_eq!(f.host.node_state(), Some(f.node));
        // The values that it takes: validated, each read back, the original put back.
        let applied = s.validate(&["0", "100"]).unwrap();
        let kept: Vec<&str> = applied.iter().map(|a| a.in_force.as_str()).collect();
        assert_eq!(kept, ["0", "100"]);
        assert_eq!(value(&f, "kvm_amd", "pause_filter_count"), "3000");
        assert!(f.state.exists(), "the session goes on after validate");
        s.restore().unwrap();
        assert!(!f.state.exists());
    }

    #[test]
    fn other_parameters_that_change_are_warned_about_and_fail_the_restore() {
        let mut f = fixture("kvm_amd");
        let mut s = open(&mut f, "kvm_amd.npt");
        // From now on the module ignores nested=0 and keeps its default.
        s.loader
            .forced
            .insert(("kvm_amd".into(), "nested".into()), "1".into());
        let a = s.set("0").unwrap();
        assert_eq!(
            a.warnings,
            ["kvm_amd.nested was 0 before the switch and is 1 in force now"]
        );
        let e = s.restore().unwrap_err();
        assert!(matches!(e, KnobError::RestoreFailed { .. }));
        assert_eq!(
            e.to_string(),
            format!(
                "could not restore every KVM module parameter: kvm_amd.nested is 1 in force, it \
                 was 0; exitlab tries again at its next start as root (the originals stay in {})",
                f.state.display()
            )
        );
        assert!(f.state.exists(), "the originals stay for the next start");
        assert_eq!(value(&f, "kvm_amd", "npt"), "Y");
    }

    #[test]
    fn a_module_that_does_not_unload_is_an_error_and_nothing_is_left_unloaded() {
        let mut f = fixture("kvm_amd");
        // Something the refusals cannot see keeps kvm from unloading, once kvm_amd is
        // gone already.
        f.root.write("sys/module/kvm/holders/ghost", "");
        let mut s = open(&mut f, "kvm.tdp_mmu");
        s.loader.remove_unused_deps = false;
        let e = s.set("N").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unloading kvm (modprobe -r kvm) failed: modprobe: FATAL: Module kvm is in use.; \
             the kernel log (dmesg) may say more"
        );
        assert_eq!(
            calls(&s),
            [
                "unload kvm_amd",
                "unload kvm",
                "load kvm_amd avic=N nested=0 npt=Y pause_filter_count=3000",
            ],
            "kvm_amd is loaded again at once"
        );
        assert_eq!(value(&f, "kvm", "tdp_mmu"), "Y");
        assert_eq!(value(&f, "kvm_amd", "nested"), "0");
        assert_eq!(f.host.node_state(), Some(f.node));
        std::fs::remove_file(f.root.0.join("sys/module/kvm/holders/ghost")).unwrap();
        s.restore().unwrap();
        assert!(!f.state.exists());
    }

    #[test]
    fn a_bad_value_is_refused_before_anything_changes() {
        let mut f = fixture("kvm_amd");
        let mut s = open(&mut f, "kvm.halt_poll_ns");
        let e = s.set("1 2").unwrap_err();
        assert!(matches!(e, KnobError::BadValue { .. }));
        assert!(!f.state.exists());
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "200000");
    }

    #[test]
    fn a_live_owner_of_the_state_file_makes_a_new_session_wait() {
        let mut f = fixture("kvm_amd");
        let mut first = open(&mut f, "kvm.halt_poll_ns");
        first.set("0").unwrap();
        let loader = FakeLoader::new(&f.host, Default::default());
        let e =
            ParamSession::open(f.host.clone(), loader, &spec("kvm_amd.npt"), &f.state).unwrap_err();
        assert!(matches!(e, KnobError::Busy { .. }) && e.is_refusal());
        assert_eq!(
            e.to_string(),
            format!(
                "another exitlab process (pid {}) is switching KVM module parameters now ({}): \
                 wait for it to end, or stop it; it restores them when it ends",
                f.host.pid,
                f.state.display()
            )
        );
        drop(first);
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "200000");
    }

    #[test]
    fn the_record_of_a_round_has_the_values_in_force_and_the_build_ids() {
        let mut f = fixture("kvm_amd");
        let note = crate::buildid::tests::note(b"GNU\0", 3, &[0xbe, 0xef]);
        let dir = f.host.module_dir("kvm_amd").join("notes");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".note.gnu.build-id"), &note).unwrap();
        std::fs::create_dir_all(f.host.sys.join("kernel")).unwrap();
        std::fs::write(f.host.sys.join("kernel/notes"), &note).unwrap();
        let mut s = open(&mut f, "kvm.halt_poll_ns");
        s.set("5000").unwrap();
        let r = s.in_force();
        assert_eq!(r.params["kvm"]["halt_poll_ns"], "5000");
        assert_eq!(r.params["kvm_amd"]["npt"], "Y");
        assert_eq!(r.build_ids.kernel.as_deref(), Some("beef"));
        assert_eq!(r.build_ids.modules["kvm_amd"], "beef");
        assert!(
            !r.build_ids.modules.contains_key("kvm"),
            "no notes for kvm here"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["build_ids"]["modules"]["kvm_amd"], "beef");
    }
}
