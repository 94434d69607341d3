//! exitlab's exit lab: benchmark catalogue, runner, statistics, results and reports.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod ab;
pub mod agreement;
pub mod analysis;
pub mod bench;
pub mod catalogue;
pub mod compare;
pub mod figures;
pub mod floor;
pub mod host_report;
pub mod html;
mod kernel;
pub mod knobs;
pub mod openmetrics;
pub mod packed;
pub mod report;
pub mod results;
pub mod runner;
pub mod smp;
pub mod stats;
pub mod trace_report;
pub mod verdict;
pub mod workload;
