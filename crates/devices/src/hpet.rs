//! The HPET of QEMU's pc machine: 1 KiB of MMIO at 0xFED00000 ([`crate::pc::HPET`]),
//! described to the guest by the ACPI HPET table, handled in userspace like any other
//! device (each access is one counted MMIO exit).
//!
//! # Registers (64-bit; 32-bit accesses reach either half)
//!
//! - 0x000 capabilities, read-only: revision 1, [`HPET_TIMERS`] timers, 64-bit
//!   counter, legacy replacement capable, vendor 0x8086, period [`HPET_PERIOD_FS`]
//!   femtoseconds (10 ns: the main counter runs at 100 MHz). The same value as QEMU.
//! - 0x010 general configuration: bit 0 enables the main counter and the timers,
//!   bit 1 selects legacy replacement routing.
//! - 0x020 general interrupt status: bit n is set while level-triggered timer n is
//!   asserted; writing 1 clears it (and deasserts the line).
//! - 0x0F0 main counter: counts from the host's monotonic clock while enabled;
//!   writable while halted.
//! - 0x100 + 0x20 n, timer n configuration: bit 1 level-triggered, bit 2 interrupt
//!   enable, bit 3 periodic, bit 6 set the periodic accumulator on the next comparator
//!   write, bit 8 32-bit mode, bits 13..9 the I/O APIC input; read-only: bit 4
//!   periodic capable, bit 5 64-bit capable, bits 63..32 the inputs it may route to
//!   (2, 8 and 16..23, as QEMU's pc machine). FSB delivery is not offered.
//! - 0x108 + 0x20 n, comparator: when the main counter reaches it the timer fires; a
//!   periodic timer then adds its period (written through the comparator register, as
//!   the specification and QEMU have it) until the comparator is ahead again.
//!
//! # Interrupts
//!
//! A firing timer with its interrupt enabled drives GSI `route` through [`IrqLine`]:
//! edge-triggered timers pulse it, level-triggered ones hold it until the guest clears
//! the status bit. With legacy replacement on, timer 0 drives GSI 2 (ISA IRQ 0 after
//! the MADT's override) and timer 1 GSI 8 (the RTC's IRQ), whatever their route.
//! Comparators fire from a thread the device starts when it is created (on the thread
//! that builds the platform: vCPU threads run under a seccomp filter that allows no new
//! threads); it sleeps until the next deadline, or until a timer is armed, and ends when
//! the device is dropped.
//!
//! Why hand-written: no maintained crate models an HPET (rust-vmm has none); the
//! register semantics follow the IA-PC HPET specification 1.0a and QEMU's hw/timer/hpet.c.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::{BusDevice, IoAction, IrqLine};

/// Number of comparators, as QEMU's default.
pub const HPET_TIMERS: usize = 3;
/// Main counter period in femtoseconds (10 ns, 100 MHz), as QEMU.
pub const HPET_PERIOD_FS: u64 = 10_000_000;
/// Main counter frequency in Hz.
pub const HPET_HZ: u64 = 1_000_000_000_000_000 / HPET_PERIOD_FS;
/// Length of the register block.
pub const HPET_LEN: u64 = 0x400;
/// GSI legacy replacement gives timer 0 (ISA IRQ 0 through the MADT override).
pub const LEGACY_GSI_TIMER0: u32 = 2;
/// GSI legacy replacement gives timer 1 (the RTC's ISA IRQ 8).
pub const LEGACY_GSI_TIMER1: u32 = 8;
/// I/O APIC inputs a timer may be routed to: 2, 8 and 16..23.
pub const ROUTE_CAP: u32 = 0x00FF_0104;

/// The low 32 bits of the capabilities register (the ACPI HPET table's event timer
/// block ID): revision 1, timers - 1 in bits 12..8, 64-bit counter, legacy capable,
/// vendor 0x8086.
pub const CAPABILITIES_LOW: u32 =
    0x8086_0000 | 0x8000 | 0x2000 | (((HPET_TIMERS as u32) - 1) << 8) | 0x01;

const REG_CAP: u64 = 0x000;
const REG_CONFIG: u64 = 0x010;
const REG_ISR: u64 = 0x020;
const REG_COUNTER: u64 = 0x0F0;
const REG_TIMER0: u64 = 0x100;
const TIMER_STRIDE: u64 = 0x20;

const CFG_ENABLE: u64 = 1 << 0;
const CFG_LEGACY: u64 = 1 << 1;

const TN_LEVEL: u64 = 1 << 1;
const TN_INT_ENABLE: u64 = 1 << 2;
const TN_PERIODIC: u64 = 1 << 3;
const TN_PERIODIC_CAP: u64 = 1 << 4;
const TN_SIZE_CAP: u64 = 1 << 5;
const TN_SETVAL: u64 = 1 << 6;
const TN_32BIT: u64 = 1 << 8;
const TN_ROUTE_SHIFT: u64 = 9;
const TN_ROUTE_MASK: u64 = 0x1F << TN_ROUTE_SHIFT;
const TN_WRITABLE: u64 =
    TN_LEVEL | TN_INT_ENABLE | TN_PERIODIC | TN_SETVAL | TN_32BIT | TN_ROUTE_MASK;
const TN_READ_ONLY: u64 = TN_PERIODIC_CAP | TN_SIZE_CAP | ((ROUTE_CAP as u64) << 32);

#[derive(Debug, Clone, Copy, Default)]
struct Timer {
    config: u64,
    cmp: u64,
    period: u64,
    /// Whether the comparator has fired and waits for the counter to wrap (one-shot).
    fired: bool,
}

impl Timer {
    fn periodic(&self) -> bool {
        self.config & TN_PERIODIC != 0
    }
}

#[derive(Debug)]
struct State {
    config: u64,
    isr: u64,
    /// The counter's value at `since` (or its value while halted).
    counter: u64,
    since: Option<Instant>,
    timers: [Timer; HPET_TIMERS],
    stop: bool,
    thread_started: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    irq: Arc<dyn IrqLine>,
}

/// The HPET (see the module documentation).
pub struct Hpet {
    shared: Arc<Shared>,
    // The comparator thread, joined when the device is dropped (so a torn-down VM
    // leaves no thread behind).
    thread: std::sync::Mutex<Option<thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Hpet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hpet").finish_non_exhaustive()
    }
}

fn ticks(d: Duration) -> u64 {
    (d.as_nanos() * u128::from(HPET_HZ) / 1_000_000_000) as u64
}

fn duration(ticks: u64) -> Duration {
    Duration::from_nanos((u128::from(ticks) * 1_000_000_000 / u128::from(HPET_HZ)) as u64)
}

impl State {
    fn now(&self, at: Instant) -> u64 {
        match self.since {
            Some(t) => self
                .counter
                .wrapping_add(ticks(at.saturating_duration_since(t))),
            None => self.counter,
        }
    }

    fn gsi(&self, n: usize) -> u32 {
        match (self.config & CFG_LEGACY != 0, n) {
            (true, 0) => LEGACY_GSI_TIMER0,
            (true, 1) => LEGACY_GSI_TIMER1,
            _ => ((self.timers[n].config & TN_ROUTE_MASK) >> TN_ROUTE_SHIFT) as u32,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    /// Fires every timer whose comparator the counter has reached; returns how long
    /// until the next one is due, if any is armed.
    fn service(&self, s: &mut State, at: Instant) -> Option<Duration> {
        if s.config & CFG_ENABLE == 0 {
            return None;
        }
        let now = s.now(at);
        let mut next: Option<u64> = None;
        for n in 0..HPET_TIMERS {
            let t = s.timers[n];
            let mask = if t.config & TN_32BIT != 0 {
                u64::from(u32::MAX)
            } else {
                u64::MAX
            };
            let due = |cmp: u64| (now & mask).wrapping_sub(cmp) & mask < mask / 2;
            if !t.fired && due(t.cmp) {
                self.fire(s, n);
                let t = &mut s.timers[n];
                if t.periodic() && t.period != 0 {
                    while due(t.cmp) {
                        t.cmp = t.cmp.wrapping_add(t.period) & mask;
                    }
                } else {
                    t.fired = true;
                }
            }
            let t = s.timers[n];
            if t.config & TN_INT_ENABLE != 0 && !t.fired {
                let left = t.cmp.wrapping_sub(now & mask) & mask;
                next = Some(next.map_or(left, |x| x.min(left)));
            }
        }
        next.map(duration)
    }

    fn fire(&self, s: &mut State, n: usize) {
        let t = s.timers[n];
        if t.config & TN_INT_ENABLE == 0 {
            return;
        }
        let gsi = s.gsi(n);
        if t.config & TN_LEVEL != 0 {
            s.isr |= 1 << n;
            self.irq.set_level(gsi, true);
        } else {
            self.irq.set_level(gsi, true);
            self.irq.set_level(gsi, false);
        }
    }
}

impl Hpet {
    /// A halted HPET whose timers drive `irq`.
    pub fn new(irq: Arc<dyn IrqLine>) -> Self {
        let timers = [Timer {
            config: TN_READ_ONLY,
            cmp: u64::MAX,
            period: 0,
            fired: false,
        }; HPET_TIMERS];
        let hpet = Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    config: 0,
                    isr: 0,
                    counter: 0,
                    since: None,
                    timers,
                    stop: false,
                    thread_started: false,
                }),
                wake: Condvar::new(),
                irq,
            }),
            thread: std::sync::Mutex::new(None),
        };
        let started = hpet.start_thread();
        hpet.shared.lock().thread_started = started;
        hpet
    }

    fn read_reg(&self, reg: u64) -> u64 {
        let s = self.shared.lock();
        match reg {
            REG_CAP => u64::from(CAPABILITIES_LOW) | (HPET_PERIOD_FS << 32),
            REG_CONFIG => s.config,
            REG_ISR => s.isr,
            REG_COUNTER => s.now(Instant::now()),
            r if r >= REG_TIMER0 && r < REG_TIMER0 + TIMER_STRIDE * HPET_TIMERS as u64 => {
                let t = &s.timers[((r - REG_TIMER0) / TIMER_STRIDE) as usize];
                match (r - REG_TIMER0) % TIMER_STRIDE {
                    0x00 => t.config,
                    0x08 => t.cmp,
                    _ => 0,
                }
            }
            _ => 0,
        }
    }

    /// Writes the bytes of `value` selected by `mask` to register `reg`.
    fn write_reg(&self, reg: u64, value: u64, mask: u64) {
        let now = Instant::now();
        let mut s = self.shared.lock();
        let merge = |old: u64| (old & !mask) | (value & mask);
        match reg {
            REG_CONFIG => {
                let new = merge(s.config) & (CFG_ENABLE | CFG_LEGACY);
                let was = s.config;
                if new & CFG_ENABLE != 0 && was & CFG_ENABLE == 0 {
                    s.since = Some(now);
                } else if new & CFG_ENABLE == 0 && was & CFG_ENABLE != 0 {
                    s.counter = s.now(now);
                    s.since = None;
                }
                if (new ^ was) & CFG_LEGACY != 0 || new & CFG_ENABLE == 0 {
                    self.lower_all(&mut s);
                }
                s.config = new;
            }
            REG_ISR => {
                let clear = value & mask & s.isr;
                for n in 0..HPET_TIMERS {
                    if clear & (1 << n) != 0 {
                        let gsi = s.gsi(n);
                        self.shared.irq.set_level(gsi, false);
                    }
                }
                s.isr &= !clear;
            }
            REG_COUNTER if s.config & CFG_ENABLE == 0 => {
                s.counter = merge(s.counter);
                for t in &mut s.timers {
                    t.fired = false;
                }
            }
            r if r >= REG_TIMER0 && r < REG_TIMER0 + TIMER_STRIDE * HPET_TIMERS as u64 => {
                let n = ((r - REG_TIMER0) / TIMER_STRIDE) as usize;
                match (r - REG_TIMER0) % TIMER_STRIDE {
                    0x00 => {
                        let old = s.timers[n].config;
                        let mut new = (merge(old) & TN_WRITABLE) | TN_READ_ONLY;
                        let route = ((new & TN_ROUTE_MASK) >> TN_ROUTE_SHIFT) as u32;
                        if ROUTE_CAP & (1 << route) == 0 {
                            new = (new & !TN_ROUTE_MASK) | (old & TN_ROUTE_MASK);
                        }
                        if old & TN_LEVEL != 0
                            && (new & (TN_LEVEL | TN_INT_ENABLE)) != (TN_LEVEL | TN_INT_ENABLE)
                            && s.isr & (1 << n) != 0
                        {
                            s.isr &= !(1 << n);
                            let gsi = s.gsi(n);
                            self.shared.irq.set_level(gsi, false);
                        }
                        s.timers[n].config = new;
                        if new & TN_32BIT != 0 {
                            s.timers[n].cmp &= u64::from(u32::MAX);
                        }
                    }
                    0x08 => {
                        let t = &mut s.timers[n];
                        let width = if t.config & TN_32BIT != 0 {
                            u64::from(u32::MAX)
                        } else {
                            u64::MAX
                        };
                        let v = merge(t.cmp) & width;
                        if !t.periodic() || t.config & TN_SETVAL != 0 {
                            t.cmp = v;
                        }
                        if t.periodic() {
                            t.period = merge(t.period) & (width >> 1);
                        }
                        t.config &= !TN_SETVAL;
                        t.fired = false;
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        let armed =
            s.config & CFG_ENABLE != 0 && s.timers.iter().any(|t| t.config & TN_INT_ENABLE != 0);
        if armed && !s.thread_started {
            s.thread_started = self.start_thread();
        }
        drop(s);
        self.shared.wake.notify_one();
    }

    fn lower_all(&self, s: &mut State) {
        for n in 0..HPET_TIMERS {
            if s.isr & (1 << n) != 0 {
                let gsi = s.gsi(n);
                self.shared.irq.set_level(gsi, false);
            }
        }
        s.isr = 0;
    }

    /// Starts the comparator thread; false if the host would not start it (the
    /// comparators then fire on the guest's next HPET access, and arming a timer tries
    /// again).
    fn start_thread(&self) -> bool {
        let shared = self.shared.clone();
        let spawned = thread::Builder::new()
            .name("exitlab-hpet".into())
            .spawn(move || {
                let mut s = shared.lock();
                while !s.stop {
                    let wait = shared.service(&mut s, Instant::now());
                    s = match wait {
                        Some(d) => match shared.wake.wait_timeout(s, d) {
                            Ok((g, _)) => g,
                            Err(e) => e.into_inner().0,
                        },
                        None => shared.wake.wait(s).unwrap_or_else(|e| e.into_inner()),
                    };
                }
            });
        match spawned {
            Ok(handle) => {
                *crate::lock(&self.thread) = Some(handle);
                true
            }
            Err(_) => false,
        }
    }

    /// Fires what is due now (the thread does this on its own; tests call it).
    pub fn service_now(&self) {
        let mut s = self.shared.lock();
        self.shared.service(&mut s, Instant::now());
    }
}

impl Drop for Hpet {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(handle) = crate::lock(&self.thread).take() {
            let _ = handle.join();
        }
    }
}

/// The 64-bit register an access at `offset` of `len` bytes falls in, and the shift of
/// its first byte; `None` for accesses that are not 4 or 8 bytes within one register.
fn decode(offset: u64, len: usize) -> Option<(u64, u32)> {
    let reg = offset & !7;
    let shift = ((offset & 7) * 8) as u32;
    let fits = matches!(len, 4 | 8) && (offset & 7) + len as u64 <= 8 && offset < HPET_LEN;
    fits.then_some((reg, shift))
}

impl BusDevice for Hpet {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let Some((reg, shift)) = decode(offset, data.len()) else {
            data.fill(0);
            return;
        };
        let v = self.read_reg(reg) >> shift;
        for (i, b) in data.iter_mut().enumerate() {
            *b = (v >> (8 * i)) as u8;
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        if let Some((reg, shift)) = decode(offset, data.len()) {
            let value = crate::le_value(data) << shift;
            let mask = (if data.len() == 8 {
                u64::MAX
            } else {
                u64::from(u32::MAX)
            }) << shift;
            self.write_reg(reg, value, mask);
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{hammer, Lines};

    fn hpet() -> (Hpet, Arc<Lines>) {
        let lines = Arc::new(Lines::default());
        (Hpet::new(lines.clone()), lines)
    }

    fn rd(h: &Hpet, off: u64) -> u64 {
        let mut b = [0u8; 8];
        h.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    fn wr(h: &Hpet, off: u64, v: u64) {
        h.write(off, &v.to_le_bytes());
    }

    #[test]
    fn capabilities_match_qemu() {
        let (h, _) = hpet();
        assert_eq!(rd(&h, 0), 0x0098_9680_8086_A201);
        let mut lo = [0u8; 4];
        h.read(4, &mut lo);
        assert_eq!(u32::from_le_bytes(lo), 10_000_000);
        assert_eq!(rd(&h, 0x100) >> 32, u64::from(ROUTE_CAP));
        assert_eq!(
            rd(&h, 0x100) & (TN_PERIODIC_CAP | TN_SIZE_CAP),
            TN_PERIODIC_CAP | TN_SIZE_CAP
        );
    }

    #[test]
    fn counter_runs_at_100_mhz_only_while_enabled() {
        let (h, _) = hpet();
        assert_eq!(rd(&h, REG_COUNTER), 0);
        wr(&h, REG_COUNTER, 1000);
        assert_eq!(rd(&h, REG_COUNTER), 1000);
        let t0 = Instant::now();
        wr(&h, REG_CONFIG, CFG_ENABLE);
        thread::sleep(Duration::from_millis(20));
        let c = rd(&h, REG_COUNTER);
        let elapsed = t0.elapsed();
        // 20 ms at 100 MHz is 2,000,000 ticks; the counter cannot run ahead of the
        // host's clock.
        assert!(c >= 1000 + 2_000_000, "{c}");
        assert!(c <= 1000 + ticks(elapsed), "{c} after {elapsed:?}");
        // Writes while running are ignored; halting freezes it.
        wr(&h, REG_COUNTER, 5);
        assert!(rd(&h, REG_COUNTER) > c);
        wr(&h, REG_CONFIG, 0);
        let frozen = rd(&h, REG_COUNTER);
        thread::sleep(Duration::from_millis(2));
        assert_eq!(rd(&h, REG_COUNTER), frozen);
    }

    #[test]
    fn one_shot_edge_comparator_pulses_its_route_once() {
        let (h, lines) = hpet();
        wr(
            &h,
            0x100 + 2 * TIMER_STRIDE,
            TN_INT_ENABLE | (16 << TN_ROUTE_SHIFT),
        );
        wr(&h, 0x108 + 2 * TIMER_STRIDE, 100);
        h.service_now();
        assert!(lines.0.lock().unwrap().is_empty(), "halted: nothing fires");
        wr(&h, REG_CONFIG, CFG_ENABLE);
        thread::sleep(Duration::from_millis(5));
        h.service_now();
        h.service_now();
        assert_eq!(*lines.0.lock().unwrap(), vec![(16, true), (16, false)]);
        assert_eq!(rd(&h, REG_ISR), 0);
    }

    #[test]
    fn level_triggered_holds_until_the_status_bit_is_cleared() {
        let (h, lines) = hpet();
        wr(&h, 0x100, TN_INT_ENABLE | TN_LEVEL | (17 << TN_ROUTE_SHIFT));
        wr(&h, 0x108, 1);
        wr(&h, REG_CONFIG, CFG_ENABLE);
        thread::sleep(Duration::from_millis(2));
        h.service_now();
        assert_eq!(rd(&h, REG_ISR), 1);
        assert_eq!(*lines.0.lock().unwrap(), vec![(17, true)]);
        wr(&h, REG_ISR, 1);
        assert_eq!(rd(&h, REG_ISR), 0);
        assert_eq!(*lines.0.lock().unwrap(), vec![(17, true), (17, false)]);
    }

    #[test]
    fn legacy_replacement_routes_timers_0_and_1_to_gsi_2_and_8() {
        let (h, lines) = hpet();
        wr(&h, 0x100, TN_INT_ENABLE | (20 << TN_ROUTE_SHIFT));
        wr(&h, 0x108, 1);
        wr(&h, 0x120, TN_INT_ENABLE | (20 << TN_ROUTE_SHIFT));
        wr(&h, 0x128, 1);
        wr(&h, REG_CONFIG, CFG_ENABLE | CFG_LEGACY);
        thread::sleep(Duration::from_millis(2));
        h.service_now();
        let seen = lines.0.lock().unwrap().clone();
        assert!(seen.contains(&(LEGACY_GSI_TIMER0, true)), "{seen:?}");
        assert!(seen.contains(&(LEGACY_GSI_TIMER1, true)), "{seen:?}");
        assert!(seen.iter().all(|(g, _)| *g != 20), "{seen:?}");
    }

    #[test]
    fn periodic_timer_reloads_by_its_period() {
        let (h, lines) = hpet();
        wr(
            &h,
            0x100,
            TN_INT_ENABLE | TN_PERIODIC | TN_SETVAL | (16 << TN_ROUTE_SHIFT),
        );
        wr(&h, 0x108, 100_000); // comparator 1 ms, period 1 ms
        assert_eq!(rd(&h, 0x108), 100_000);
        wr(&h, 0x108, 100_000); // period only (SETVAL cleared)
        wr(&h, REG_CONFIG, CFG_ENABLE);
        thread::sleep(Duration::from_millis(10));
        // Serviced and read under one lock at one instant: read one register after the
        // other, the counter could pass the comparator in between.
        let (cmp, now) = {
            let mut s = h.shared.lock();
            let at = Instant::now();
            h.shared.service(&mut s, at);
            (s.timers[0].cmp, s.now(at))
        };
        assert!(cmp > now && cmp - now <= 100_000, "cmp {cmp} now {now}");
        assert_eq!(cmp % 100_000, 0);
        assert!(lines.0.lock().unwrap().len() >= 2);
    }

    #[test]
    fn routes_outside_the_capability_are_ignored() {
        let (h, _) = hpet();
        wr(&h, 0x100, 5 << TN_ROUTE_SHIFT);
        assert_eq!(rd(&h, 0x100) & TN_ROUTE_MASK, 0);
        wr(&h, 0x100, 8 << TN_ROUTE_SHIFT);
        assert_eq!((rd(&h, 0x100) & TN_ROUTE_MASK) >> TN_ROUTE_SHIFT, 8);
    }

    #[test]
    fn the_comparator_thread_fires_without_guest_accesses() {
        let (h, lines) = hpet();
        wr(&h, 0x100, TN_INT_ENABLE | (16 << TN_ROUTE_SHIFT));
        wr(&h, 0x108, 200_000); // 2 ms
        wr(&h, REG_CONFIG, CFG_ENABLE);
        let t0 = Instant::now();
        // The thread raises the line and then lowers it (an edge): wait for both, or
        // the check races the second push (it did, in an emulated L1 guest).
        while lines.0.lock().unwrap().len() < 2 && t0.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(*lines.0.lock().unwrap(), vec![(16, true), (16, false)]);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        let (h, _) = hpet();
        hammer(&h, HPET_LEN + 8);
    }
}
