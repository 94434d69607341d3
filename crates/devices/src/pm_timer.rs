//! ACPI power-management timer.
//!
//! A free-running counter at 3.579545 MHz, read-only, 24 or 32 bits wide (the FADT's
//! `TMR_VAL_EXT` flag tells the guest which). QEMU's PIIX4 puts it at PM base + 8;
//! exitlab registers it at port 0xB008 ([`crate::pc::PM_TIMER`]), 4 bytes long.
//!
//! The count is derived from the host's monotonic clock (`Instant`, i.e.
//! `CLOCK_MONOTONIC`) at each read, so a read takes no lock and touches no shared
//! mutable state.

use std::time::Instant;

use crate::{BusDevice, IoAction};

/// The PM timer's frequency, in Hz.
pub const PM_TIMER_FREQUENCY_HZ: u64 = 3_579_545;

/// How many bits of the counter a guest sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PmTimerWidth {
    /// 24-bit counter (FADT flag `TMR_VAL_EXT` clear); wraps after about 4.7 s.
    Bits24,
    /// 32-bit counter (FADT flag `TMR_VAL_EXT` set); wraps after about 20 min.
    #[default]
    Bits32,
}

impl PmTimerWidth {
    /// The mask applied to the counter.
    pub fn mask(self) -> u32 {
        match self {
            PmTimerWidth::Bits24 => 0x00FF_FFFF,
            PmTimerWidth::Bits32 => 0xFFFF_FFFF,
        }
    }
}

/// The ACPI PM timer.
#[derive(Debug, Clone)]
pub struct PmTimer {
    start: Instant,
    mask: u32,
}

impl Default for PmTimer {
    fn default() -> Self {
        Self::new(PmTimerWidth::default())
    }
}

impl PmTimer {
    /// A timer that reads 0 now and counts up from there.
    pub fn new(width: PmTimerWidth) -> Self {
        Self {
            start: Instant::now(),
            mask: width.mask(),
        }
    }

    /// The counter's value now (already masked to the configured width).
    pub fn counter(&self) -> u32 {
        let nanos = self.start.elapsed().as_nanos();
        let ticks = nanos * u128::from(PM_TIMER_FREQUENCY_HZ) / 1_000_000_000;
        (ticks as u32) & self.mask
    }
}

impl BusDevice for PmTimer {
    /// The counter's little-endian bytes from `offset` on; bytes past the 32-bit
    /// register read as zero.
    fn read(&self, offset: u64, data: &mut [u8]) {
        let value = self.counter().to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = offset
                .checked_add(i as u64)
                .and_then(|o| usize::try_from(o).ok())
                .and_then(|o| value.get(o).copied())
                .unwrap_or(0);
        }
    }

    /// The register is read-only; writes are ignored.
    fn write(&self, _offset: u64, _data: &[u8]) -> IoAction {
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;
    use std::time::Duration;

    fn read32(t: &PmTimer) -> u32 {
        let mut b = [0u8; 4];
        t.read(0, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn monotonic_between_reads() {
        let t = PmTimer::default();
        let mut last = read32(&t);
        for _ in 0..1000 {
            let now = read32(&t);
            assert!(now >= last, "{now} < {last}");
            last = now;
        }
    }

    #[test]
    fn frequency_is_about_3_58_mhz() {
        let t = PmTimer::default();
        let c0 = read32(&t);
        let i0 = Instant::now();
        std::thread::sleep(Duration::from_millis(50));
        let c1 = read32(&t);
        let elapsed = i0.elapsed().as_secs_f64();
        let hz = f64::from(c1.wrapping_sub(c0)) / elapsed;
        assert!((2.5e6..5.0e6).contains(&hz), "measured {hz} Hz");
    }

    #[test]
    fn narrow_reads_and_24_bit_mask() {
        let t = PmTimer::new(PmTimerWidth::Bits24);
        std::thread::sleep(Duration::from_millis(2));
        let mut b = [0u8; 4];
        t.read(0, &mut b);
        assert_eq!(b[3], 0);
        let mut hi = [0u8; 1];
        t.read(3, &mut hi);
        assert_eq!(hi[0], 0);
        let mut w = [0xFFu8; 2];
        t.read(2, &mut w);
        assert_eq!(w[1], 0);
        let mut past = [0xFFu8; 4];
        t.read(4, &mut past);
        assert_eq!(past, [0; 4]);
        let t32 = PmTimer::new(PmTimerWidth::Bits32);
        std::thread::sleep(Duration::from_millis(2));
        let mut lo = [0u8; 2];
        t32.read(0, &mut lo);
        assert!(u16::from_le_bytes(lo) > 0 || t32.counter() > 0xFFFF);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        hammer(&PmTimer::default(), 8);
    }
}
