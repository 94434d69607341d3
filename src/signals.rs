//! SIGINT and SIGTERM during a run: the first one sets a flag the run loop watches (the
//! vCPUs are kicked out of KVM_RUN and the VM is torn down); a second one ends the
//! process at once, in case teardown itself hangs.

use std::io::{IsTerminal, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};

use crate::status::EXIT_VMM_FAILED;

/// Sets `flag` on SIGINT or SIGTERM; a second signal after the flag is set exits with
/// status 130.
pub fn cancel_on_sigint_sigterm(flag: &Arc<AtomicBool>) -> std::io::Result<()> {
    for sig in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as it was before this signal.
        signal_hook::flag::register_conditional_shutdown(
            sig,
            crate::status::EXIT_INTERRUPTED,
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

/// Opens /dev/kvm and arms SIGINT/SIGTERM to set the returned cancel flag: how `run` and
/// `run --builtin chaos` start; the error is the exit code, its message already printed.
pub fn open_kvm_cancellable() -> Result<(Arc<exitlab_vmm::Kvm>, Arc<AtomicBool>), i32> {
    let kvm = match exitlab_vmm::open_kvm() {
        Ok(k) => Arc::new(k),
        Err(e) => return Err(crate::common::kvm_unusable(&e)),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    if let Err(e) = cancel_on_sigint_sigterm(&cancel) {
        eprintln!("exitlab: cannot install the SIGINT/SIGTERM handlers: {e}");
        return Err(EXIT_VMM_FAILED);
    }
    Ok((kvm, cancel))
}
