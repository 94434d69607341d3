//! exitlab's exit lab: benchmark catalogue, runner, statistics, results and reports.
#![deny(missing_docs)]

pub mod agreement;
pub mod analysis;
pub mod bench;
pub mod catalogue;
pub mod compare;
mod kernel;
pub mod report;
pub mod results;
pub mod runner;
pub mod stats;
pub mod trace_report;
