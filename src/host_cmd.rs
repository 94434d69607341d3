//! `exitlab host`: what matters for exit cost on this host, and why KVM is unusable when
//! it is.

use exitlab_host::Pending;
use exitlab_results::host_report;

use crate::common::JsonArg;
use crate::status::{usage_error, EXIT_NO_KVM};

/// Prints the host report (as text, or as JSON with `--json`); exits with the
/// KVM-unavailable code when /dev/kvm cannot be used, so that scripts can test for it.
pub fn host_cmd(json: JsonArg) -> i32 {
    if let Err(e) = json.check() {
        return usage_error(e);
    }
    let report = exitlab_lab::host_survey::survey(None);
    if !json.to_stdout() {
        print!("{}", host_report::render_text(&report));
    }
    if let Err(code) = json.write(&host_report::to_json(&report), "host description") {
        return code;
    }
    if report.kvm.available {
        0
    } else {
        EXIT_NO_KVM
    }
}

/// At the start of every subcommand that may touch KVM: when an exitlab killed while it
/// had a KVM module parameter switched left its state file, restores the originals (as
/// root) or says that a restore is pending, on stderr (`-q` hides the line when it only
/// reports a restore done or a live owner left alone).
pub fn restore_pending_module_params() {
    let path = exitlab_host::param_state::default_state_path();
    // One stat on the way to a VM; the rest only when there is something to do.
    if !path.exists() {
        return;
    }
    let host = exitlab_host::Host::real();
    let Some(p) = exitlab_host::restore_pending(&host, &mut exitlab_host::Modprobe::find(), &path)
    else {
        return;
    };
    let quiet = crate::verbosity::level() < 0;
    if !quiet || matches!(p, Pending::NeedsRoot(_) | Pending::Failed(_)) {
        eprintln!("exitlab: {}", p.line());
    }
}

/// Opens the module parameter `spec` of an A/B run as a session: every refusal comes
/// before anything on the host changes (exit 14; a value the module does not take or
/// keep, 2), each of `values` is set once and read back, and the originals are put back.
pub fn open_host_knob(
    spec: &exitlab_host::ParamSpec,
    values: Option<[&str; 2]>,
) -> Result<exitlab_host::ParamSession, i32> {
    use exitlab_host::KnobError;
    let code = |e: &KnobError| match e {
        KnobError::BadSpec { .. }
        | KnobError::BadValue { .. }
        | KnobError::NotKept { .. }
        | KnobError::ValueRefused { .. } => crate::status::EXIT_USAGE,
        KnobError::RestoreFailed { .. } => crate::status::EXIT_HOST_NOT_RESTORED,
        _ => crate::status::EXIT_HOST_REFUSED,
    };
    let mut s = exitlab_host::ParamSession::open_real(spec).map_err(|e| {
        eprintln!("exitlab: {e}");
        code(&e)
    })?;
    if let Some(v) = values {
        let tried = s.validate(&v).map_err(|e| {
            eprintln!("exitlab: {e}");
            code(&e)
        })?;
        if crate::verbosity::level() >= 0 {
            for a in tried {
                eprintln!(
                    "exitlab: {} = {} tried: {} in force ({} in {:.2} s)",
                    a.knob,
                    a.asked,
                    a.in_force,
                    match (a.reloaded, a.changed) {
                        (true, _) => "reloaded",
                        (false, true) => "written",
                        (false, false) => "already in force, checked",
                    },
                    a.took.as_secs_f64()
                );
            }
        }
    }
    Ok(s)
}
