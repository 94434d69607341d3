//! Synthetic inputs with known answers, for the tests of this crate and of the lab
//! (which turns the guest's samples into results).

use exitlab_abi::Sample;

/// A sample of `total` guest cycles starting at `g_start` (guest TSC), with the empty
/// loop at `g_loop`, and host stamps that put the exit `exit` cycles after the start and
/// the re-entry `handle` cycles later, for a vCPU whose guest TSC is the host's plus
/// `offset`; one userspace exit.
pub fn sample(
    g_start: u64,
    total: u64,
    g_loop: u64,
    exit: u64,
    handle: u64,
    offset: i64,
) -> Sample {
    let host_start = g_start.wrapping_sub(offset as u64);
    Sample {
        g_start,
        g_end: g_start + total,
        h_prev_reenter: host_start.saturating_sub(5_000),
        h_return: host_start + exit,
        h_reenter: host_start + exit + handle,
        seq_delta: 1,
        g_loop,
    }
}
