//! exitlab's exit lab: the benchmark catalogue, the runner and the experiments that run
//! it (bench, A/B, workload, agreement, SMP, chaos). What they produce is `exitlab-results`'.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod ab;
pub mod agreement;
pub mod analysis;
pub mod bench;
pub mod catalogue;
pub mod chaos;
pub mod floor;
pub mod host_knob;
pub mod host_survey;
mod kernel;
pub mod knobs;
pub mod names;
pub mod rounds;
pub mod runner;
pub mod smp;
pub mod workload;
