//! ACPI S3 for the PC platform: the guest writes SLP_TYP=S3|SLP_EN to PM1a_CNT
//! (`exitlab_devices::pm`), every vCPU stops, the machine sleeps until the RTC alarm
//! the guest armed is due, and then resumes as QEMU with its firmware does: the boot
//! vCPU starts in real mode at the FACS firmware waking vector, the others wait for
//! INIT/SIPI. Guest RAM, the devices and the in-kernel irqchip keep their state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use exitlab_boot::entry::EntryState;
use exitlab_devices::cmos::Cmos;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::vcpu::Vcpu;

/// Offset of the 32-bit firmware waking vector in the FACS.
pub const FACS_FIRMWARE_WAKING_VECTOR: u64 = 12;

/// How a sleep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepEnd {
    /// The RTC alarm fired: resume.
    Alarm,
    /// The run's deadline passed first.
    Timeout,
    /// The caller cancelled the run.
    Cancelled,
}

/// Sleeps until the guest's RTC alarm is due (and records that it fired), the
/// deadline passes or `cancel` is set. With no alarm armed only the deadline or the
/// cancel flag ends the sleep, as on a machine with no wake-up source.
pub fn sleep(cmos: &Cmos, deadline: Option<Instant>, cancel: Option<&AtomicBool>) -> SleepEnd {
    let wake_at = cmos.alarm_wait().map(|d| Instant::now() + d);
    loop {
        let now = Instant::now();
        if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
            return SleepEnd::Cancelled;
        }
        if wake_at.is_some_and(|w| now >= w) {
            cmos.alarm_fired();
            return SleepEnd::Alarm;
        }
        if deadline.is_some_and(|d| now >= d) {
            return SleepEnd::Timeout;
        }
        let until = [wake_at, deadline]
            .into_iter()
            .flatten()
            .min()
            .map_or(Duration::from_millis(20), |t| {
                t.saturating_duration_since(now)
            });
        std::thread::sleep(until.min(Duration::from_millis(20)));
    }
}

/// Prepares the vCPUs to resume: the boot vCPU (id 0) in real mode at the FACS waking
/// vector, the others in wait-for-SIPI. Returns the vector, or what prevents resuming.
pub fn resume(
    mem: &GuestMemoryMmap,
    facs: Option<u64>,
    vcpus: &[(u32, Vcpu)],
) -> Result<u32, String> {
    let facs = facs.ok_or("the guest entered S3, but it has no ACPI FACS to resume from")?;
    let vector: u32 = mem
        .read_obj(GuestAddress(facs + FACS_FIRMWARE_WAKING_VECTOR))
        .map_err(|e| format!("cannot read the FACS waking vector at {facs:#x}: {e}"))?;
    if vector == 0 || vector >= 0x10_0000 {
        return Err(format!(
            "the guest entered S3 with the FACS firmware waking vector at {vector:#x}: \
             a real-mode address below 1 MiB is needed to resume"
        ));
    }
    for (id, vcpu) in vcpus {
        let set = if *id == 0 {
            vcpu.set_entry(&EntryState::real16(vector))
        } else {
            vcpu.wait_for_sipi()
        };
        set.map_err(|e| format!("cannot reset vCPU {id} for the resume: {e}"))?;
    }
    Ok(vector)
}
