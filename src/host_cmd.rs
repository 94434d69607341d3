//! `exitlab host`: what matters for exit cost on this host, and why KVM is unusable when
//! it is.

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
