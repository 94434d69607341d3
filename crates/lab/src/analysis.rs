//! Turns a raw [`Measurement`] into a [`TestResult`]: per-iteration cycles, the
//! exit-count check, where the exit was handled, the phase breakdown of userspace exits,
//! KVM_RUN as seen from the VMM, and the VMM's userspace share.

use std::collections::BTreeMap;

use exitlab_guest::abi::Sample;

use crate::catalogue::{TestDef, Where};
use crate::results::{ExitCheck, Handling, Phases, TestResult, TestStatus};
use crate::runner::{Measurement, Outcome};
use crate::stats::{summarize, Summary};

/// Context from other tests of the same run that one test's analysis needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Baseline {
    /// KVM exits per iteration of `loop_overhead` (what the loop alone costs in
    /// in-kernel exits on this host; 0 on hardware).
    pub loop_kvm_exits_per_iter: Option<f64>,
}

fn expected_handling(w: Where) -> Handling {
    match w {
        Where::Kernel => Handling::Kernel,
        Where::User => Handling::User,
        Where::Nowhere => Handling::None,
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

/// The exit-count check: a `User` test must cause exactly one userspace exit of its kind
/// per iteration (warm-up included) and no other userspace exit except the doorbells;
/// any other test must cause no userspace exit but the doorbells. The host's per-exit
/// sequence numbers, as the guest saw them, must add up the same way.
pub fn exit_check(m: &Measurement) -> ExitCheck {
    let p = &m.params;
    let iterations = p.warmup + p.samples * p.batch;
    let measured_iterations = p.samples * p.batch;
    let counts: BTreeMap<&str, u64> = m.counts.entries().into_iter().collect();
    let kind = m.def.user_exit.map(|k| k.name());
    let expected = if kind.is_some() { iterations } else { 0 };
    let observed = kind.and_then(|k| counts.get(k).copied()).unwrap_or(0);
    let mut problems = Vec::new();
    if observed != expected {
        problems.push(format!(
            "{} {} exits, expected {expected}",
            observed,
            kind.unwrap_or("userspace")
        ));
    }
    for (name, &n) in &counts {
        if Some(*name) == kind || *name == "doorbell" || n == 0 {
            continue;
        }
        problems.push(format!("{n} unexpected {name} exits"));
    }
    if counts.get("doorbell").copied().unwrap_or(0) != m.doorbells {
        problems.push(format!(
            "{} doorbell exits for {} doorbells",
            counts.get("doorbell").copied().unwrap_or(0),
            m.doorbells
        ));
    }
    let seq_sum: u64 = m.samples.iter().map(|s| s.seq_delta).sum();
    let seq_expected = if kind.is_some() {
        measured_iterations
    } else {
        0
    };
    if seq_sum != seq_expected {
        problems.push(format!(
            "the guest saw {seq_sum} userspace exits inside its samples, expected {seq_expected}"
        ));
    }
    let passed = problems.is_empty();
    let detail = if passed {
        match kind {
            Some(k) => format!("{observed} {k} exits for {iterations} iterations, none other"),
            None => format!(
                "no userspace exit in {iterations} iterations (besides {} doorbells)",
                m.doorbells
            ),
        }
    } else {
        problems.join("; ")
    };
    let observed_user = if kind.is_some() {
        observed
    } else {
        m.counts.total() - m.counts.doorbell
    };
    ExitCheck {
        expected_user_exits: expected,
        observed_user_exits: observed_user,
        passed,
        detail,
    }
}

/// KVM exits per iteration above the empty loop's, from KVM's binary statistics.
pub fn kvm_exits_per_iteration(m: &Measurement, base: &Baseline) -> Option<f64> {
    let p = &m.params;
    let iterations = (p.warmup + p.samples * p.batch).max(1) as f64;
    m.kvm_exits
        .map(|k| k as f64 / iterations - base.loop_kvm_exits_per_iter.unwrap_or(0.0))
}

/// Where the exit was handled, as observed: in userspace if the VMM saw one exit of the
/// test's kind per iteration; in the kernel if KVM's exit counter grew by at least half an
/// exit per iteration more than the empty loop's, or if the instruction is one that never
/// runs natively in a guest and no userspace exit happened (KVM handled it without a
/// counted exit, as a host that emulates guest ring 0 does); otherwise nowhere.
pub fn observed_handling(m: &Measurement, base: &Baseline) -> Handling {
    let p = &m.params;
    let iterations = (p.warmup + p.samples * p.batch).max(1);
    if let Some(k) = m.def.user_exit {
        let n = m
            .counts
            .entries()
            .into_iter()
            .find(|(name, _)| *name == k.name())
            .map(|e| e.1);
        if n.unwrap_or(0) >= iterations {
            return Handling::User;
        }
    }
    if kvm_exits_per_iteration(m, base).is_some_and(|x| x >= 0.5) {
        return Handling::Kernel;
    }
    match m.def.expected {
        Where::Kernel => Handling::Kernel,
        Where::User | Where::Nowhere => Handling::None,
    }
}

/// True when a kernel-handled test's exits did not show in KVM's exit counter.
pub fn kernel_exits_uncounted(m: &Measurement, base: &Baseline) -> bool {
    m.def.expected == Where::Kernel && kvm_exits_per_iteration(m, base).is_some_and(|x| x < 0.5)
}

fn summary_of(values: &[f64]) -> Option<Summary> {
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

/// Builds the result of one test.
pub fn analyse(m: &Measurement, base: &Baseline, tsc_khz: u64, raw: bool) -> TestResult {
    let def: &TestDef = m.def;
    let mut r = TestResult {
        name: def.name.to_string(),
        ring: m.params.ring,
        status: TestStatus::Ok,
        handled: None,
        expected_handling: expected_handling(def.expected),
        samples: m.params.samples,
        batch: m.params.batch,
        cycles: None,
        net_median_cycles: None,
        median_ns: None,
        median_ns_is_net: false,
        exits: BTreeMap::new(),
        kvm_exits: None,
        exit_check: None,
        phases: None,
        kvm_run_cycles: None,
        userspace_share: None,
        raw_samples: None,
        rounds: Vec::new(),
        net_percentiles: None,
        irq: Some(crate::smp::IrqResult {
            apic: m.apic,
            cpus: m.params.irq.cpus_for(def),
            per_vcpu: m.per_vcpu.clone(),
        }),
    };
    match &m.outcome {
        Outcome::Completed => {}
        Outcome::Skipped(reason) => {
            r.status = TestStatus::Skipped {
                reason: reason.clone(),
            };
            return r;
        }
        Outcome::DidNotComplete(reason) => {
            r.status = TestStatus::DidNotComplete {
                reason: reason.clone(),
            };
            return r;
        }
        Outcome::Failed(reason) => {
            r.status = TestStatus::Failed {
                reason: reason.clone(),
            };
            return r;
        }
    }
    let values = match per_iteration(&m.samples, m.params.batch) {
        Ok(v) => v,
        Err(e) => {
            r.status = TestStatus::Failed { reason: e };
            return r;
        }
    };
    r.cycles = summary_of(&values);
    r.exits = m
        .counts
        .entries()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    r.kvm_exits = m.kvm_exits;
    r.exit_check = Some(exit_check(m));
    if let Some(c) = r.exit_check.as_mut() {
        crate::smp::check_disabled_exits(m, c);
    }
    r.handled = Some(observed_handling(m, base));
    if let Some(c) = &r.cycles {
        // Net of the loop: the median of each sample minus the empty loop measured just
        // before it in the same VM (paired, so host drift between tests cancels out).
        let net = if def.name == "loop_overhead" {
            None
        } else {
            summary_of(&paired_net(&m.samples, m.params.batch)).map(|n| n.median)
        };
        r.net_median_cycles = net;
        if tsc_khz > 0 {
            let cycles = net.unwrap_or(c.median);
            r.median_ns = Some(cycles * 1e6 / tsc_khz as f64);
            r.median_ns_is_net = net.is_some();
        }
    }
    if def.user_exit.is_some() && m.params.batch == 1 {
        let (share, run) = host_values(&m.samples);
        r.userspace_share = summary_of(&share);
        r.kvm_run_cycles = summary_of(&run);
        if def.phases {
            if let Some(off) = m.tsc_offset {
                let (e, h, n) = phase_values(&m.samples, off);
                if let (Some(exit_leg), Some(handling), Some(entry_leg)) =
                    (summary_of(&e), summary_of(&h), summary_of(&n))
                {
                    r.phases = Some(Phases {
                        exit_leg,
                        handling,
                        entry_leg,
                    });
                }
            }
        }
    }
    if def.user_exit.is_some() && !m.kvm_run_log.is_empty() {
        // The VMM's own log: every KVM_RUN of the measured iterations, back to back when
        // batch > 1 (with batch 1 each one also spans the guest's sample bookkeeping).
        let log: Vec<f64> = m.kvm_run_log.iter().map(|&d| d as f64).collect();
        r.kvm_run_cycles = summary_of(&log);
    }
    if raw {
        r.raw_samples = Some(
            m.samples
                .iter()
                .map(|s| s.g_end.wrapping_sub(s.g_start))
                .collect(),
        );
    }
    r
}
