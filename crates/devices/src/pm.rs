//! The ACPI PM1a control register (the FADT's PM1a_CNT_BLK, 2 ports at 0xB004), as on
//! QEMU's pc machine (PIIX4 PM).
//!
//! Writing SLP_EN (bit 13) puts the machine in the sleep state SLP_TYP (bits 12..10)
//! names, with the values the DSDT's `\_S3` and `\_S5` packages give (QEMU's): type 1
//! is S3, suspend to RAM ([`IoAction::Suspend`]: the VMM stops the vCPUs until the RTC
//! alarm fires, then resumes the boot vCPU at the FACS waking vector in real mode);
//! type 0 is S5, soft off ([`IoAction::Reset`]: the run ends as on a shutdown). Other
//! types are ignored, as QEMU ignores them without S4. SLP_EN reads as 0; the other
//! bits (SCI_EN, SLP_TYP) read back as written.

use std::sync::atomic::{AtomicU16, Ordering};

use crate::{BusDevice, IoAction};

/// SLP_EN.
pub const SLP_EN: u16 = 1 << 13;
/// SLP_TYP's shift.
pub const SLP_TYP_SHIFT: u16 = 10;
/// SLP_TYP of S3 (the DSDT's `\_S3`).
pub const SLP_TYP_S3: u16 = 1;
/// SLP_TYP of S5 (the DSDT's `\_S5`).
pub const SLP_TYP_S5: u16 = 0;

/// PM1a_CNT.
#[derive(Debug, Default)]
pub struct PmControl {
    value: AtomicU16,
}

impl PmControl {
    /// A control register reading 0.
    pub fn new() -> Self {
        Self::default()
    }
}

impl BusDevice for PmControl {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let v = self.value.load(Ordering::Relaxed).to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| v.get(o.checked_add(i)?))
                .copied()
                .unwrap_or(0);
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        let mut v = self.value.load(Ordering::Relaxed).to_le_bytes();
        for (i, b) in data.iter().enumerate() {
            if let Some(slot) = usize::try_from(offset)
                .ok()
                .and_then(|o| v.get_mut(o.checked_add(i)?))
            {
                *slot = *b;
            }
        }
        let v = u16::from_le_bytes(v);
        self.value.store(v & !SLP_EN, Ordering::Relaxed);
        if v & SLP_EN == 0 {
            return IoAction::Continue;
        }
        match (v >> SLP_TYP_SHIFT) & 7 {
            SLP_TYP_S3 => IoAction::Suspend,
            SLP_TYP_S5 => IoAction::Reset,
            _ => IoAction::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;

    #[test]
    fn s3_suspends_s5_powers_off() {
        let p = PmControl::new();
        assert_eq!(p.write(0, &(1u16).to_le_bytes()), IoAction::Continue); // SCI_EN
        let s3 = SLP_EN | (SLP_TYP_S3 << SLP_TYP_SHIFT) | 1;
        assert_eq!(p.write(0, &s3.to_le_bytes()), IoAction::Suspend);
        let mut b = [0u8; 2];
        p.read(0, &mut b);
        assert_eq!(u16::from_le_bytes(b), s3 & !SLP_EN);
        let s5 = SLP_EN | (SLP_TYP_S5 << SLP_TYP_SHIFT);
        assert_eq!(p.write(0, &s5.to_le_bytes()), IoAction::Reset);
        // SLP_TYP without SLP_EN, and S4 (type 2), do nothing.
        assert_eq!(
            p.write(0, &(SLP_TYP_S3 << SLP_TYP_SHIFT).to_le_bytes()),
            IoAction::Continue
        );
        assert_eq!(
            p.write(0, &(SLP_EN | (2 << SLP_TYP_SHIFT)).to_le_bytes()),
            IoAction::Continue
        );
        // Byte writes: SLP_EN in the high byte.
        assert_eq!(
            p.write(1, &[((SLP_EN | (1 << SLP_TYP_SHIFT)) >> 8) as u8]),
            IoAction::Suspend
        );
        hammer(&p, 2);
    }
}
