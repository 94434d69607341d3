//! How much the user asked to hear (`--quiet`, `--verbose`), set once from the command
//! line and read by every subcommand.

use std::sync::atomic::{AtomicI8, Ordering};

/// -1 with --quiet, 0 by default, N with N times --verbose.
static VERBOSITY: AtomicI8 = AtomicI8::new(0);

/// The level of a command line: `quiet` wins (clap keeps the two apart anyway).
fn level_of(quiet: bool, verbose: u8) -> i8 {
    if quiet {
        -1
    } else {
        verbose.min(i8::MAX as u8) as i8
    }
}

/// Records the command line's choice.
pub fn set(quiet: bool, verbose: u8) {
    VERBOSITY.store(level_of(quiet, verbose), Ordering::Relaxed);
}

/// -1 quiet, 0 normal, 1+ verbose.
pub fn level() -> i8 {
    VERBOSITY.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_is_minus_one_and_verbose_counts_up_to_the_limit() {
        assert_eq!(level_of(false, 0), 0);
        assert_eq!(level_of(false, 2), 2);
        assert_eq!(level_of(false, u8::MAX), i8::MAX);
        assert_eq!(level_of(true, 0), -1);
    }
}
