//! CMOS RAM and real-time clock (MC146818), at ports 0x70 (index) and 0x71 (data).
//!
//! Writing port 0x70 selects a register with bits 0..6; bit 7 is the NMI mask, kept
//! but without effect (the in-kernel irqchip owns NMIs). Reading port 0x70 returns
//! 0xFF, as on QEMU. Port 0x71 reads and writes the selected register.
//!
//! Clock registers are computed from the host's UTC clock at each read:
//!
//! | reg  | contents                                   |
//! |------|--------------------------------------------|
//! | 0x00 | seconds                                    |
//! | 0x02 | minutes                                    |
//! | 0x04 | hours (bit 7 = PM in 12-hour mode)         |
//! | 0x06 | day of week, 1 = Sunday                    |
//! | 0x07 | day of month                               |
//! | 0x08 | month                                      |
//! | 0x09 | year within the century                    |
//! | 0x32 | century                                    |
//!
//! They are encoded as register B asks: BCD unless bit 2 (DM) is set, 24-hour when
//! bit 1 is set. Writes to them are ignored (the clock cannot be set); the alarm
//! registers 0x01, 0x03 and 0x05 are plain storage.
//!
//! Status registers:
//! - A (0x0A): 0x26 at reset (32.768 kHz time base, 1024 Hz rate); bits 0..6 are
//!   writable; bit 7 (update in progress) reads as set during the last 244 µs of each
//!   host second, so a guest that waits for the update edge finds one.
//! - B (0x0B): 0x02 at reset (24-hour, BCD, no interrupts); writable.
//! - C (0x0C): interrupt flags: AF (0x20) and IRQF (0x80) are set when the alarm woke
//!   the machine from ACPI S3 ([`Cmos::alarm_fired`]); reading clears them. No RTC
//!   interrupt is raised otherwise.
//!
//! The alarm (registers 0x01, 0x03, 0x05, enabled by AIE, bit 5 of register B) wakes
//! the machine from S3: [`Cmos::alarm_wait`] says how long until the host clock
//! matches it (a byte with its two top bits set matches any value, as on the
//! MC146818).
//! - D (0x0D): 0x80 (valid RAM and time).
//!
//! Memory-size bytes, as QEMU's PC machine sets them:
//! - 0x15/0x16: base memory in KiB, 640 (low byte first);
//! - 0x17/0x18 and 0x30/0x31: memory between 1 MiB and 4 GiB in KiB, capped at 0xFFFF;
//! - 0x34/0x35: memory between 16 MiB and 4 GiB in 64 KiB units, capped at 0xFFFF;
//! - 0x5B/0x5C/0x5D: memory above 4 GiB in 64 KiB units (24 bits);
//! - 0x5F: number of CPUs minus one.
//!
//! Also 0x14 (equipment byte: FPU and PS/2 mouse present, no floppy, 0x06) and
//! 0x2E/0x2F (checksum of 0x10..=0x2D, high byte first). Every other byte of the
//! 128-byte RAM reads 0 until the guest writes it.
//!
//! Why hand-written: vm-superio's RTC is the ARM PL031, and no maintained crate models
//! the PC's MC146818 with the CMOS bytes QEMU's pc machine sets. The calendar is the
//! `time` crate's.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{BusDevice, IoAction};

/// Offset of the index port (0x70).
pub const INDEX_OFFSET: u64 = 0;
/// Offset of the data port (0x71).
pub const DATA_OFFSET: u64 = 1;

const REG_SECONDS: u8 = 0x00;
const REG_MINUTES: u8 = 0x02;
const REG_HOURS: u8 = 0x04;
const REG_WEEKDAY: u8 = 0x06;
const REG_DAY: u8 = 0x07;
const REG_MONTH: u8 = 0x08;
const REG_YEAR: u8 = 0x09;
const REG_A: u8 = 0x0A;
const REG_B: u8 = 0x0B;
const REG_C: u8 = 0x0C;
const REG_D: u8 = 0x0D;
const REG_CENTURY: u8 = 0x32;

const REG_A_UIP: u8 = 0x80;
const REG_B_24H: u8 = 0x02;
const REG_B_BINARY: u8 = 0x04;

const CMOS_SIZE: usize = 128;
/// How long before the end of a second register A reports an update in progress.
const UIP_NANOS: u32 = 244_000;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// A calendar time, as the RTC shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtcTime {
    /// Full year, e.g. 2026.
    pub year: u32,
    /// 1..=12.
    pub month: u8,
    /// 1..=31.
    pub day: u8,
    /// 0..=23.
    pub hour: u8,
    /// 0..=59.
    pub minute: u8,
    /// 0..=59.
    pub second: u8,
    /// 1 = Sunday ..= 7 = Saturday.
    pub weekday: u8,
}

impl RtcTime {
    /// The UTC calendar time `secs` seconds after 1970-01-01 00:00:00 (the `time`
    /// crate's calendar; a clock too far ahead for it reads as the epoch).
    pub fn from_unix(secs: u64) -> Self {
        let t = i64::try_from(secs)
            .ok()
            .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        Self {
            year: u32::try_from(t.year()).unwrap_or(0),
            month: u8::from(t.month()),
            day: t.day(),
            hour: t.hour(),
            minute: t.minute(),
            second: t.second(),
            weekday: t.weekday().number_from_sunday(),
        }
    }
}

fn to_bcd(v: u8) -> u8 {
    ((v / 10) << 4) | (v % 10)
}

#[derive(Debug)]
struct State {
    index: u8,
    nmi_masked: bool,
    flags: u8,
    ram: [u8; CMOS_SIZE],
}

/// Register B: alarm interrupt enable.
pub const REG_B_AIE: u8 = 0x20;
/// Register C: alarm flag.
pub const REG_C_AF: u8 = 0x20;
/// Register C: interrupt request flag.
pub const REG_C_IRQF: u8 = 0x80;
const REG_ALARM_SECONDS: u8 = 0x01;
const REG_ALARM_MINUTES: u8 = 0x03;
const REG_ALARM_HOURS: u8 = 0x05;

/// The CMOS RAM and RTC.
#[derive(Debug)]
pub struct Cmos {
    state: Mutex<State>,
}

impl Cmos {
    /// A CMOS for a guest with `below_4g` bytes of RAM under 4 GiB (counted from
    /// address 0), `above_4g` bytes from 4 GiB up, and `cpus` vCPUs.
    pub fn new(below_4g: u64, above_4g: u64, cpus: u32) -> Self {
        let mut ram = [0u8; CMOS_SIZE];
        ram[REG_A as usize] = 0x26;
        ram[REG_B as usize] = REG_B_24H;
        ram[REG_D as usize] = 0x80;
        ram[0x14] = 0x06;

        ram[0x15] = 0x80; // 640 KiB
        ram[0x16] = 0x02;
        let ext_kib = (below_4g / KIB).saturating_sub(1024).min(0xFFFF) as u16;
        ram[0x17..=0x18].copy_from_slice(&ext_kib.to_le_bytes());
        ram[0x30..=0x31].copy_from_slice(&ext_kib.to_le_bytes());
        let ext16_64k = (below_4g.saturating_sub(16 * MIB) / (64 * KIB)).min(0xFFFF) as u16;
        ram[0x34..=0x35].copy_from_slice(&ext16_64k.to_le_bytes());
        let high_64k = (above_4g / (64 * KIB)).min(0xFF_FFFF) as u32;
        ram[0x5B..=0x5D].copy_from_slice(&high_64k.to_le_bytes()[..3]);
        ram[0x5F] = cpus.saturating_sub(1).min(0xFF) as u8;

        let sum: u16 = ram[0x10..=0x2D].iter().map(|b| u16::from(*b)).sum();
        ram[0x2E..=0x2F].copy_from_slice(&sum.to_be_bytes());

        Self {
            state: Mutex::new(State {
                index: 0,
                nmi_masked: false,
                flags: 0,
                ram,
            }),
        }
    }

    /// Whether the guest last wrote the index port with bit 7 (NMI disable) set.
    pub fn nmi_masked(&self) -> bool {
        self.lock().nmi_masked
    }

    /// How long from now until the host clock matches the alarm, if the guest enabled
    /// it (AIE); within the next 24 hours, since the alarm names no date.
    pub fn alarm_wait(&self) -> Option<std::time::Duration> {
        let st = self.lock();
        let reg_b = st.ram[REG_B as usize];
        if reg_b & REG_B_AIE == 0 {
            return None;
        }
        let decode = |v: u8| -> Option<u8> {
            if v & 0xC0 == 0xC0 {
                None
            } else if reg_b & REG_B_BINARY != 0 {
                Some(v)
            } else {
                Some((v >> 4) * 10 + (v & 0xF))
            }
        };
        let want_s = decode(st.ram[REG_ALARM_SECONDS as usize]);
        let want_m = decode(st.ram[REG_ALARM_MINUTES as usize]);
        let raw_h = st.ram[REG_ALARM_HOURS as usize];
        let want_h = if reg_b & REG_B_24H != 0 || raw_h & 0xC0 == 0xC0 {
            decode(raw_h)
        } else {
            decode(raw_h & 0x7F).map(|h| h % 12 + if raw_h & 0x80 != 0 { 12 } else { 0 })
        };
        drop(st);
        let (secs, nanos) = Self::now();
        (1..=86_400u64).find_map(|d| {
            let t = RtcTime::from_unix(secs + d);
            let hit = want_s.is_none_or(|s| s == t.second)
                && want_m.is_none_or(|m| m == t.minute)
                && want_h.is_none_or(|h| h == t.hour);
            hit.then(|| {
                std::time::Duration::from_secs(d)
                    .saturating_sub(std::time::Duration::from_nanos(u64::from(nanos)))
            })
        })
    }

    /// Records that the alarm fired (register C reads AF | IRQF until read).
    pub fn alarm_fired(&self) {
        self.lock().flags |= REG_C_AF | REG_C_IRQF;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    fn now() -> (u64, u32) {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs(), d.subsec_nanos()),
            Err(_) => (0, 0),
        }
    }

    fn encode(reg_b: u8, v: u8) -> u8 {
        if reg_b & REG_B_BINARY != 0 {
            v
        } else {
            to_bcd(v)
        }
    }

    fn read_reg(st: &mut State, reg: u8) -> u8 {
        let reg_b = st.ram[REG_B as usize];
        let clock = || {
            let (secs, _) = Self::now();
            RtcTime::from_unix(secs)
        };
        match reg {
            REG_SECONDS => Self::encode(reg_b, clock().second),
            REG_MINUTES => Self::encode(reg_b, clock().minute),
            REG_HOURS => {
                let h = clock().hour;
                if reg_b & REG_B_24H != 0 {
                    Self::encode(reg_b, h)
                } else {
                    let h12 = match h % 12 {
                        0 => 12,
                        x => x,
                    };
                    Self::encode(reg_b, h12) | if h >= 12 { 0x80 } else { 0 }
                }
            }
            REG_WEEKDAY => Self::encode(reg_b, clock().weekday),
            REG_DAY => Self::encode(reg_b, clock().day),
            REG_MONTH => Self::encode(reg_b, clock().month),
            REG_YEAR => Self::encode(reg_b, (clock().year % 100) as u8),
            REG_CENTURY => Self::encode(reg_b, (clock().year / 100 % 100) as u8),
            REG_A => {
                let (_, nanos) = Self::now();
                let uip = if nanos >= 1_000_000_000 - UIP_NANOS {
                    REG_A_UIP
                } else {
                    0
                };
                (st.ram[REG_A as usize] & !REG_A_UIP) | uip
            }
            REG_C => std::mem::take(&mut st.flags),
            REG_D => 0x80,
            _ => st.ram.get(usize::from(reg)).copied().unwrap_or(0xFF),
        }
    }

    fn write_reg(st: &mut State, reg: u8, value: u8) {
        match reg {
            REG_SECONDS | REG_MINUTES | REG_HOURS | REG_WEEKDAY | REG_DAY | REG_MONTH
            | REG_YEAR | REG_CENTURY | REG_C | REG_D => {}
            REG_A => st.ram[REG_A as usize] = value & !REG_A_UIP,
            _ => {
                if let Some(b) = st.ram.get_mut(usize::from(reg)) {
                    *b = value;
                }
            }
        }
    }
}

impl BusDevice for Cmos {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let mut st = self.lock();
        for (i, b) in data.iter_mut().enumerate() {
            *b = match offset.checked_add(i as u64) {
                Some(DATA_OFFSET) => {
                    let reg = st.index;
                    Self::read_reg(&mut st, reg)
                }
                _ => 0xFF,
            };
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        let mut st = self.lock();
        for (i, b) in data.iter().enumerate() {
            match offset.checked_add(i as u64) {
                Some(INDEX_OFFSET) => {
                    st.index = b & 0x7F;
                    st.nmi_masked = b & 0x80 != 0;
                }
                Some(DATA_OFFSET) => {
                    let reg = st.index;
                    Self::write_reg(&mut st, reg, *b);
                }
                _ => {}
            }
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;

    const GIB: u64 = 1024 * MIB;

    fn reg(c: &Cmos, r: u8) -> u8 {
        c.write(INDEX_OFFSET, &[r]);
        let mut b = [0u8];
        c.read(DATA_OFFSET, &mut b);
        b[0]
    }

    fn from_bcd(v: u8) -> u32 {
        u32::from(v >> 4) * 10 + u32::from(v & 0x0F)
    }

    fn is_bcd(v: u8) -> bool {
        (v >> 4) < 10 && (v & 0x0F) < 10
    }

    #[test]
    fn civil_date_conversion() {
        let t = RtcTime::from_unix(0);
        assert_eq!((t.year, t.month, t.day, t.weekday), (1970, 1, 1, 5));
        // 2000-02-29 12:34:56 UTC, a Tuesday.
        let t = RtcTime::from_unix(951_827_696);
        assert_eq!(
            (t.year, t.month, t.day, t.hour, t.minute, t.second, t.weekday),
            (2000, 2, 29, 12, 34, 56, 3)
        );
        // 2024-12-31 23:59:59 UTC, a Tuesday.
        let t = RtcTime::from_unix(1_735_689_599);
        assert_eq!(
            (t.year, t.month, t.day, t.hour, t.minute, t.second, t.weekday),
            (2024, 12, 31, 23, 59, 59, 3)
        );
    }

    #[test]
    fn time_is_bcd_and_matches_host() {
        let c = Cmos::new(512 * MIB, 0, 1);
        assert_eq!(reg(&c, REG_B), 0x02);
        // Retry if a second boundary falls between the reads.
        for _ in 0..5 {
            let before = RtcTime::from_unix(Cmos::now().0);
            let regs: Vec<u8> = [0x00, 0x02, 0x04, 0x06, 0x07, 0x08, 0x09, 0x32]
                .iter()
                .map(|r| reg(&c, *r))
                .collect();
            let after = RtcTime::from_unix(Cmos::now().0);
            if before != after {
                continue;
            }
            assert!(regs.iter().all(|v| is_bcd(*v)), "{regs:x?}");
            assert_eq!(from_bcd(regs[0]), u32::from(before.second));
            assert_eq!(from_bcd(regs[1]), u32::from(before.minute));
            assert_eq!(from_bcd(regs[2]), u32::from(before.hour));
            assert_eq!(from_bcd(regs[3]), u32::from(before.weekday));
            assert_eq!(from_bcd(regs[4]), u32::from(before.day));
            assert_eq!(from_bcd(regs[5]), u32::from(before.month));
            assert_eq!(from_bcd(regs[7]) * 100 + from_bcd(regs[6]), before.year);
            return;
        }
        panic!("clock kept crossing second boundaries");
    }

    #[test]
    fn binary_and_12_hour_modes() {
        let c = Cmos::new(512 * MIB, 0, 1);
        c.write(INDEX_OFFSET, &[REG_B]);
        c.write(DATA_OFFSET, &[REG_B_BINARY]);
        let h = reg(&c, REG_HOURS);
        assert!((1..=12).contains(&(h & 0x7F)), "{h:#x}");
        let y = reg(&c, REG_YEAR);
        assert!(y < 100);
    }

    #[test]
    fn status_registers() {
        let c = Cmos::new(512 * MIB, 0, 1);
        assert_eq!(reg(&c, REG_A) & 0x7F, 0x26);
        assert_eq!(reg(&c, REG_C), 0);
        assert_eq!(reg(&c, REG_D), 0x80);
        c.write(INDEX_OFFSET, &[REG_D]);
        c.write(DATA_OFFSET, &[0]);
        assert_eq!(reg(&c, REG_D), 0x80);
    }

    #[test]
    fn memory_bytes_small_guest() {
        // 32 MiB, 2 CPUs.
        let c = Cmos::new(32 * MIB, 0, 2);
        assert_eq!((reg(&c, 0x15), reg(&c, 0x16)), (0x80, 0x02));
        let ext = (32 * 1024 - 1024) as u16;
        assert_eq!(u16::from_le_bytes([reg(&c, 0x17), reg(&c, 0x18)]), ext);
        assert_eq!(u16::from_le_bytes([reg(&c, 0x30), reg(&c, 0x31)]), ext);
        assert_eq!(
            u16::from_le_bytes([reg(&c, 0x34), reg(&c, 0x35)]),
            ((32 - 16) * 16) as u16
        );
        assert_eq!((reg(&c, 0x5B), reg(&c, 0x5C), reg(&c, 0x5D)), (0, 0, 0));
        assert_eq!(reg(&c, 0x5F), 1);
    }

    #[test]
    fn memory_bytes_large_guest_are_capped() {
        // 3 GiB below 4 GiB, 5 GiB above, 8 CPUs.
        let c = Cmos::new(3 * GIB, 5 * GIB, 8);
        assert_eq!(u16::from_le_bytes([reg(&c, 0x17), reg(&c, 0x18)]), 0xFFFF);
        assert_eq!(
            u16::from_le_bytes([reg(&c, 0x34), reg(&c, 0x35)]),
            ((3 * GIB - 16 * MIB) / (64 * KIB)) as u16
        );
        let high = u32::from_le_bytes([reg(&c, 0x5B), reg(&c, 0x5C), reg(&c, 0x5D), 0]);
        assert_eq!(u64::from(high), 5 * GIB / (64 * KIB));
        assert_eq!(reg(&c, 0x5F), 7);
        let sum: u16 = (0x10..=0x2D).map(|r| u16::from(reg(&c, r))).sum();
        assert_eq!(u16::from_be_bytes([reg(&c, 0x2E), reg(&c, 0x2F)]), sum);
    }

    #[test]
    fn ram_is_writable_and_index_masks_nmi() {
        let c = Cmos::new(64 * MIB, 0, 1);
        c.write(INDEX_OFFSET, &[0x80 | 0x40]);
        assert!(c.nmi_masked());
        c.write(DATA_OFFSET, &[0xA5]);
        assert_eq!(reg(&c, 0x40), 0xA5);
        assert!(!c.nmi_masked());
        let mut b = [0u8];
        c.read(INDEX_OFFSET, &mut b);
        assert_eq!(b[0], 0xFF);
        // A 16-bit write sets the index and writes the data port.
        c.write(INDEX_OFFSET, &[0x41, 0x5A]);
        assert_eq!(reg(&c, 0x41), 0x5A);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        let c = Cmos::new(0, 0, 0);
        hammer(&c, 4);
        for r in 0..=255u8 {
            c.write(INDEX_OFFSET, &[r]);
            let mut b = [0u8; 4];
            c.read(DATA_OFFSET, &mut b);
        }
    }

    #[test]
    fn alarm_wait_matches_the_host_clock_and_dont_care_bytes() {
        let c = Cmos::new(64 * MIB, 0, 1);
        assert_eq!(c.alarm_wait(), None, "AIE clear: no alarm");
        c.write(INDEX_OFFSET, &[REG_B]);
        c.write(DATA_OFFSET, &[REG_B_24H | REG_B_BINARY | REG_B_AIE]);
        let (secs, _) = Cmos::now();
        let target = RtcTime::from_unix(secs + 3);
        for (r, v) in [
            (REG_ALARM_SECONDS, target.second),
            (REG_ALARM_MINUTES, 0xC0),
            (REG_ALARM_HOURS, 0xFF),
        ] {
            c.write(INDEX_OFFSET, &[r]);
            c.write(DATA_OFFSET, &[v]);
        }
        let w = c.alarm_wait().expect("armed");
        assert!(
            w <= std::time::Duration::from_secs(3) && w > std::time::Duration::from_secs(1),
            "{w:?}"
        );
        // Every byte "don't care": the next second.
        c.write(INDEX_OFFSET, &[REG_ALARM_SECONDS]);
        c.write(DATA_OFFSET, &[0xC0]);
        assert!(c.alarm_wait().expect("armed") <= std::time::Duration::from_secs(1));
        // Register C: AF | IRQF once after the alarm fired, then 0.
        c.alarm_fired();
        assert_eq!(reg(&c, REG_C), REG_C_AF | REG_C_IRQF);
        assert_eq!(reg(&c, REG_C), 0);
    }
}
