//! `exitlab host`: what matters for exit cost on this host, and why KVM is unusable when
//! it is.

use exitlab_lab::host_report;

use crate::exit::EXIT_NO_KVM;

/// Prints the host report; exits with the KVM-unavailable code when /dev/kvm cannot be
/// used, so that scripts can test for it.
pub fn host_cmd(json: bool) -> i32 {
    let report = host_report::survey(None);
    if json {
        match serde_json::to_string_pretty(&host_report::to_json(&report)) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("exitlab: cannot encode the host description: {e}");
                return crate::exit::EXIT_INTERNAL;
            }
        }
    } else {
        print!("{}", host_report::render_text(&report));
    }
    if report.kvm.available {
        0
    } else {
        EXIT_NO_KVM
    }
}
