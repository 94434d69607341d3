//! The statistical model, in one place (stated in a paragraph in `docs/model.md`).
//!
//! A comparison walks one way: the design's units ([`units`]: a test's round figures,
//! the pairs of an A/B run, the runs of a side) → one interval procedure ([`interval`]:
//! an estimate on logarithms, its standard error from one seeded bootstrap over the
//! units, Student's t) → a verdict with one threshold and a gate over many tests
//! ([`verdict`]), with signs of trouble reported beside it ([`diagnostics`]) and never
//! acting on the data. [`plan`] fixes how many units a planned design takes; [`model`]
//! holds every number the model uses; [`describe`] describes samples (percentiles,
//! summaries), never a figure's uncertainty.

pub mod describe;
pub mod diagnostics;
pub mod interval;
pub mod model;
pub mod plan;
pub mod units;
pub mod verdict;
