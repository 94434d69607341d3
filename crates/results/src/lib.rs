//! exitlab's results: the schema of a results file, the statistics and verdicts drawn
//! from samples, comparisons between runs, and every renderer (text, HTML, OpenMetrics,
//! trace and host reports). It needs no KVM: results can be read, compared and rendered
//! on any machine, and everything here is tested without /dev/kvm.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod compare;
pub mod comparison_report;
pub mod differences;
pub mod figures;
pub mod format;
pub mod host_report;
pub mod html;
pub mod identity;
pub mod irq;
pub mod openmetrics;
pub mod packed;
pub mod report;
pub mod results;
pub mod samples;
pub mod stats;
pub mod testing;
pub mod trace_report;
