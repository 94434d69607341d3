//! Arithmetic on a test's raw samples, whatever ran them: cycles per iteration, net of
//! the paired empty loop, the spread between rounds, and the
//! per-exit host timelines (exit leg, handling, entry leg).

use exitlab_abi::Sample;

use crate::stats::describe::{summarize, Summary};

/// One round of a test (one VM): how many of the measurement's samples it holds, and its
/// vCPU's TSC offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Samples of this round (consecutive in the measurement's samples).
    pub samples: usize,
    /// Guest TSC minus host TSC for the round's vCPU, when the host exposes it.
    pub tsc_offset: Option<i64>,
}

/// Kept samples of a round below which its median does not count in the spread.
const MIN_ROUND_SAMPLES: usize = 30;

/// max / min − 1 of the medians of the rounds with at least [`MIN_ROUND_SAMPLES`]
/// samples (cycles per iteration); NaN with fewer than two.
pub fn round_spread(samples: &[Sample], rounds: &[Round], batch: u64) -> f64 {
    let mut medians = Vec::new();
    let mut at = 0;
    for r in rounds {
        let end = (at + r.samples).min(samples.len());
        if end - at >= MIN_ROUND_SAMPLES {
            if let Some(s) = per_iteration(&samples[at..end], batch)
                .ok()
                .as_deref()
                .and_then(summary_of)
            {
                medians.push(s.median);
            }
        }
        at = end;
    }
    let lo = medians.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if medians.len() < 2 || lo <= 0.0 {
        f64::NAN
    } else {
        hi / lo - 1.0
    }
}

/// Cycles per iteration of each sample; an error if a sample is not a forward interval.
pub fn per_iteration(samples: &[Sample], batch: u64) -> Result<Vec<f64>, String> {
    let b = batch.max(1) as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if s.g_end <= s.g_start {
                Err(format!(
                    "sample {i} is implausible: end TSC {} is not after start TSC {}",
                    s.g_end, s.g_start
                ))
            } else {
                Ok((s.g_end - s.g_start) as f64 / b)
            }
        })
        .collect()
}

/// Cycles per iteration of each sample minus its paired empty-loop measurement.
pub fn paired_net(samples: &[Sample], batch: u64) -> Vec<f64> {
    let b = batch.max(1) as f64;
    samples
        .iter()
        .filter(|s| s.g_end > s.g_start)
        .map(|s| ((s.g_end - s.g_start) as f64 - s.g_loop as f64) / b)
        .collect()
}

/// The summary of `values`; `None` when there are none.
pub fn summary_of(values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        None
    } else {
        summarize(values).ok()
    }
}

/// Per-exit host timelines of userspace exits (batch 1, exactly one userspace exit in the
/// sample): (exit leg, VMM handling, entry leg), in host cycles.
pub fn phase_values(samples: &[Sample], tsc_offset: i64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut exit = Vec::new();
    let mut handle = Vec::new();
    let mut entry = Vec::new();
    for s in samples.iter().filter(|s| s.seq_delta == 1) {
        let start = s.g_start.wrapping_sub(tsc_offset as u64);
        let end = s.g_end.wrapping_sub(tsc_offset as u64);
        if !(start <= s.h_return && s.h_return <= s.h_reenter && s.h_reenter <= end) {
            continue;
        }
        exit.push((s.h_return - start) as f64);
        handle.push((s.h_reenter - s.h_return) as f64);
        entry.push((end - s.h_reenter) as f64);
    }
    (exit, handle, entry)
}

/// [`phase_values`] of every round, each with its own VM's TSC offset; rounds whose
/// offset is unknown contribute nothing.
pub fn phase_values_by_round(
    samples: &[Sample],
    rounds: &[Round],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut exit, mut handle, mut entry) = (Vec::new(), Vec::new(), Vec::new());
    let mut at = 0;
    for r in rounds {
        let end = (at + r.samples).min(samples.len());
        if let Some(off) = r.tsc_offset {
            let (e, h, n) = phase_values(&samples[at..end], off);
            exit.extend(e);
            handle.extend(h);
            entry.extend(n);
        }
        at = end;
    }
    (exit, handle, entry)
}

/// The VMM's userspace time of each userspace exit (KVM_RUN returned → re-entered), and
/// the duration of the KVM_RUN that ended in it (re-entered before → returned).
pub fn host_values(samples: &[Sample]) -> (Vec<f64>, Vec<f64>) {
    let mut share = Vec::new();
    let mut run = Vec::new();
    for s in samples.iter().filter(|s| s.seq_delta == 1) {
        if s.h_reenter >= s.h_return && s.h_return > 0 {
            share.push((s.h_reenter - s.h_return) as f64);
        }
        if s.h_prev_reenter > 0 && s.h_return >= s.h_prev_reenter {
            run.push((s.h_return - s.h_prev_reenter) as f64);
        }
    }
    (share, run)
}

#[cfg(test)]
mod tests {
    //! Synthetic samples with known answers.
    use super::*;
    use crate::testing::sample;

    #[test]
    fn per_iteration_divides_by_the_batch_and_rejects_backward_samples() {
        let s = [
            sample(1000, 700, 0, 1, 1, 0),
            sample(5000, 1400, 0, 1, 1, 0),
        ];
        assert_eq!(per_iteration(&s, 7).unwrap(), vec![100.0, 200.0]);
        let mut bad = s;
        bad[1].g_end = bad[1].g_start;
        let e = per_iteration(&bad, 1).unwrap_err();
        assert!(e.contains("sample 1 is implausible"), "{e}");
    }

    #[test]
    fn phase_arithmetic_uses_the_tsc_offset_and_skips_unordered_stamps() {
        let off = -123_456_789i64;
        let mut s = vec![
            sample(1_000_000, 900, 0, 400, 100, off),
            sample(2_000_000, 1000, 0, 450, 150, off),
        ];
        // Host stamps after the guest's end: not a timeline, left out.
        s.push(sample(3_000_000, 500, 0, 400, 200, off));
        let (e, h, n) = phase_values(&s, off);
        assert_eq!(e, vec![400.0, 450.0]);
        assert_eq!(h, vec![100.0, 150.0]);
        assert_eq!(n, vec![400.0, 400.0]);
        // With the wrong offset nothing is ordered.
        assert!(phase_values(&s, off + 10_000_000).0.is_empty());
    }
}
