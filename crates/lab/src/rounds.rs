//! The interleaved-rounds driver: the loop `bench --ab`, the Linux workload, `agree` and
//! the overhead experiment against the floor share. Each round runs every side once;
//! with [`Order::Alternate`] two sides run A B in the first round, B A in the second, and
//! so on, so that neither side always runs first (a host that drifts, warms up or is
//! interrupted weighs on both alike). The driver checks for a cancel before each side and
//! stops where a side asks it to.

use std::sync::atomic::{AtomicBool, Ordering};

/// The order of the sides within each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The sides' order, reversed every other round (A B, B A, A B, ...).
    Alternate,
    /// The sides' order in every round.
    Fixed,
    /// Sides in pairs (0 1, 2 3, ...), pair after pair; within each pair A B in the first
    /// round, B A in the second, and so on: the A/B run of several tests, each test's two
    /// sides back to back.
    AlternatePairs,
}

impl Order {
    /// The sides (indices below `sides`) in the order round `round` (1-based) runs them.
    pub fn sequence(self, round: u32, sides: usize) -> Vec<usize> {
        let mut s: Vec<usize> = (0..sides).collect();
        let even = round.is_multiple_of(2);
        match self {
            Order::Alternate if even => s.reverse(),
            Order::AlternatePairs if even => s.chunks_mut(2).for_each(<[usize]>::reverse),
            _ => {}
        }
        s
    }
}

/// What the driver asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Round `n` (1-based) begins.
    Round(u32),
    /// Run side `side` in round `round`.
    Side {
        /// The round, 1-based.
        round: u32,
        /// The side's index.
        side: usize,
    },
}

/// What the caller tells the driver after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop here (the side could not complete, or the run was interrupted inside it).
    Stop,
}

/// How the rounds ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every round ran every side.
    Completed,
    /// The cancel flag was set before a side of round `round` began.
    Cancelled {
        /// The round, 1-based.
        round: u32,
    },
    /// The caller stopped the rounds during round `round`.
    Stopped {
        /// The round, 1-based.
        round: u32,
    },
}

impl Ended {
    /// The round the rounds ended in, if they ended early.
    pub fn round(self) -> Option<u32> {
        match self {
            Ended::Completed => None,
            Ended::Cancelled { round } | Ended::Stopped { round } => Some(round),
        }
    }
}

/// Runs `rounds` rounds of `sides` sides in `order`, calling `step` at the start of each
/// round and for each side, and checking `cancel` before each side. An error from
/// `step` ends the rounds and is returned.
pub fn run<E>(
    rounds: u32,
    sides: usize,
    order: Order,
    cancel: Option<&AtomicBool>,
    mut step: impl FnMut(Step) -> Result<Flow, E>,
) -> Result<Ended, E> {
    for round in 1..=rounds {
        if step(Step::Round(round))? == Flow::Stop {
            return Ok(Ended::Stopped { round });
        }
        for side in order.sequence(round, sides) {
            if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                return Ok(Ended::Cancelled { round });
            }
            if step(Step::Side { round, side })? == Flow::Stop {
                return Ok(Ended::Stopped { round });
            }
        }
    }
    Ok(Ended::Completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(
        rounds: u32,
        order: Order,
        cancel_at: Option<usize>,
        stop_at: Option<usize>,
    ) -> (Vec<Step>, Ended) {
        let flag = AtomicBool::new(false);
        let mut steps = Vec::new();
        let ended = run::<()>(rounds, 2, order, Some(&flag), |s| {
            steps.push(s);
            if Some(steps.len()) == cancel_at {
                flag.store(true, Ordering::SeqCst);
            }
            Ok(if Some(steps.len()) == stop_at {
                Flow::Stop
            } else {
                Flow::Continue
            })
        })
        .unwrap();
        (steps, ended)
    }

    fn sides(steps: &[Step]) -> Vec<(u32, usize)> {
        steps
            .iter()
            .filter_map(|s| match *s {
                Step::Side { round, side } => Some((round, side)),
                Step::Round(_) => None,
            })
            .collect()
    }

    #[test]
    fn alternate_rounds_run_a_b_then_b_a() {
        let (steps, ended) = trace(3, Order::Alternate, None, None);
        assert_eq!(ended, Ended::Completed);
        assert_eq!(steps[0], Step::Round(1));
        assert_eq!(
            sides(&steps),
            [(1, 0), (1, 1), (2, 1), (2, 0), (3, 0), (3, 1)]
        );
        assert_eq!(steps.len(), 9, "a Round step per round");
    }

    #[test]
    fn paired_sides_alternate_within_each_pair() {
        assert_eq!(Order::AlternatePairs.sequence(1, 6), [0, 1, 2, 3, 4, 5]);
        assert_eq!(Order::AlternatePairs.sequence(2, 6), [1, 0, 3, 2, 5, 4]);
        assert_eq!(Order::AlternatePairs.sequence(3, 4), [0, 1, 2, 3]);
    }

    #[test]
    fn fixed_rounds_keep_the_sides_order() {
        let (steps, _) = trace(2, Order::Fixed, None, None);
        assert_eq!(sides(&steps), [(1, 0), (1, 1), (2, 0), (2, 1)]);
    }

    #[test]
    fn a_cancel_or_a_stop_ends_the_rounds_where_it_happened() {
        // Cancelled during round 2's first side: its second side never starts.
        let (steps, ended) = trace(3, Order::Alternate, Some(5), None);
        assert_eq!(ended, Ended::Cancelled { round: 2 });
        assert_eq!(sides(&steps), [(1, 0), (1, 1), (2, 1)]);
        let (steps, ended) = trace(3, Order::Alternate, None, Some(2));
        assert_eq!(ended, Ended::Stopped { round: 1 });
        assert_eq!(sides(&steps), [(1, 0)]);
        assert_eq!(ended.round(), Some(1));
        let e = run(2, 2, Order::Alternate, None, |s| match s {
            Step::Side { round: 2, .. } => Err("boom"),
            _ => Ok(Flow::Continue),
        });
        assert_eq!(e, Err("boom"));
    }
}
