//! A/B knobs that change the host, not the VMM: a KVM module parameter (`MODULE.PARAM`)
//! switched between side-runs. The switching itself is `exitlab_host`'s
//! ([`exitlab_host::ParamSession`]: refusals before anything changes, sysfs or a reload,
//! the state file, the restore); here the lab closes its own handle on `/dev/kvm` around
//! each switch (a reload cannot unload a module this process holds), opens it again
//! after, and records what each side-run ran with ([`HostSide`]).

use std::sync::Arc;
use std::time::Duration;

use exitlab_host::{Modprobe, ParamSession};
use exitlab_results::results::HostSide;
use exitlab_vmm::Kvm;

use crate::runner::RunError;

/// What one switch did.
#[derive(Debug, Clone, PartialEq)]
pub struct Switched {
    /// The value in force, read back.
    pub in_force: String,
    /// Whether the module was reloaded.
    pub reloaded: bool,
    /// How long the switch took.
    pub took: Duration,
    /// Other parameters that moved, the taint flags.
    pub warnings: Vec<String>,
}

/// Something that sets a host-side value between side-runs, with every handle on
/// `/dev/kvm` closed.
pub trait HostSwitch {
    /// `MODULE.PARAM`.
    fn knob(&self) -> String;
    /// Sets `value`.
    fn switch(&mut self, value: &str) -> Result<Switched, String>;
    /// What is in force: `MODULE.PARAM` -> value for the modules involved, and the
    /// build IDs (`kernel` and each module).
    fn provenance(
        &self,
    ) -> (
        std::collections::BTreeMap<String, String>,
        std::collections::BTreeMap<String, String>,
    );
}

impl HostSwitch for ParamSession<Modprobe> {
    fn knob(&self) -> String {
        self.facts().spec.to_string()
    }

    fn switch(&mut self, value: &str) -> Result<Switched, String> {
        let a = self.set(value).map_err(|e| e.to_string())?;
        Ok(Switched {
            in_force: a.in_force,
            reloaded: a.reloaded,
            took: a.took,
            warnings: a.warnings,
        })
    }

    fn provenance(
        &self,
    ) -> (
        std::collections::BTreeMap<String, String>,
        std::collections::BTreeMap<String, String>,
    ) {
        let f = self.in_force();
        let params = f
            .params
            .iter()
            .flat_map(|(m, ps)| ps.iter().map(move |(p, v)| (format!("{m}.{p}"), v.clone())))
            .collect();
        let mut ids: std::collections::BTreeMap<String, String> = f.build_ids.modules.clone();
        if let Some(k) = f.build_ids.kernel {
            ids.insert("kernel".into(), k);
        }
        (params, ids)
    }
}

/// The lab's handle on `/dev/kvm`, closed around host switches.
pub struct KvmHandle {
    kvm: Option<Arc<Kvm>>,
}

impl KvmHandle {
    /// A handle holding `kvm`.
    pub fn new(kvm: Arc<Kvm>) -> KvmHandle {
        KvmHandle { kvm: Some(kvm) }
    }

    /// The open handle, opened again after a switch.
    pub fn get(&mut self) -> Result<Arc<Kvm>, RunError> {
        if let Some(k) = &self.kvm {
            return Ok(k.clone());
        }
        let k = Arc::new(exitlab_vmm::open_kvm().map_err(|e| RunError::Reopen(e.to_string()))?);
        self.kvm = Some(k.clone());
        Ok(k)
    }

    /// Closes the handle (the caller holds no other), switches `host` to `value`, and
    /// records the side-run that follows (`round`, `side`); `switch` false records what
    /// is in force without switching (the side before ran with the same value).
    pub fn switch(
        &mut self,
        host: &mut dyn HostSwitch,
        value: &str,
        round: u32,
        side: &str,
        switch: bool,
    ) -> Result<HostSide, String> {
        let done = if switch {
            self.kvm = None;
            Some(host.switch(value)?)
        } else {
            None
        };
        let (params, build_ids) = host.provenance();
        let in_force = done.as_ref().map_or_else(
            || params.get(&host.knob()).cloned().unwrap_or_default(),
            |d| d.in_force.clone(),
        );
        Ok(HostSide {
            round,
            side: side.to_string(),
            asked: value.to_string(),
            in_force,
            switched: done.is_some(),
            reloaded: done.as_ref().is_some_and(|d| d.reloaded),
            seconds: done.as_ref().map_or(0.0, |d| d.took.as_secs_f64()),
            params,
            build_ids,
            warnings: done.map(|d| d.warnings).unwrap_or_default(),
        })
    }
}
