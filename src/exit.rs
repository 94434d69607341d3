//! Process exit codes and the one way every subcommand reports bad input.
//!
//! Every subcommand maps its outcome to one of these codes here, so that no two meanings
//! share a number.

/// Exit code for bad input.
pub const EXIT_USAGE: i32 = 2;
/// Exit code when KVM cannot be used on this host.
pub const EXIT_NO_KVM: i32 = 3;
/// Exit code when a test failed or an exit-count check did not hold.
pub const EXIT_TEST_FAILED: i32 = 1;

/// Exit code when `bench` was interrupted by SIGINT or SIGTERM (128 + SIGINT, as a
/// shell reports it); the results of the completed rounds were still written.
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit code of `compare` when a test got slower beyond the threshold with confidence.
pub const EXIT_REGRESSION: i32 = 1;

/// Exit code when the timeout expired (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code for a triple fault.
pub const EXIT_TRIPLE_FAULT: i32 = 125;
/// Exit code when KVM could not run the guest (internal error, failed entry).
pub const EXIT_KVM_FAILURE: i32 = 126;

/// Prints `msg` as exitlab's error and returns the bad-input exit code.
pub fn usage_error(msg: impl std::fmt::Display) -> i32 {
    eprintln!("exitlab: {msg}");
    EXIT_USAGE
}
