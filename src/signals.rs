//! SIGINT and SIGTERM during a run: the first one sets a flag the run loop watches (the
//! vCPUs are kicked out of KVM_RUN and the VM is torn down); a second one ends the
//! process at once, in case teardown itself hangs.

use std::io::{IsTerminal, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};

/// Sets `flag` on SIGINT or SIGTERM; a second signal after the flag is set exits with
/// status 130.
pub fn cancel_on_sigint_sigterm(flag: &Arc<AtomicBool>) -> std::io::Result<()> {
    for sig in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as it was before this signal.
        signal_hook::flag::register_conditional_shutdown(
            sig,
            crate::exit::EXIT_INTERRUPTED,
            flag.clone(),
        )?;
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(())
}

/// Undoes what guest output may have left on the terminal: resets colours and
/// attributes and shows the cursor again (exitlab itself never changes terminal modes).
pub fn restore_terminal() {
    let mut out = std::io::stdout();
    if out.is_terminal() {
        let _ = out.write_all(b"\x1b[0m\x1b[?25h\n");
        let _ = out.flush();
    }
}
