//! The port and MMIO buses.
//!
//! A bus is a sorted, immutable snapshot of `(base, len, device)` ranges. Registering or
//! removing a device publishes a new snapshot and bumps a generation counter; it never
//! blocks a vCPU. Each vCPU looks devices up through its own [`BusView`], which holds the
//! snapshot it last saw and a most-recently-used index: a lookup is one range compare for
//! the common case and a binary search otherwise, touching nothing shared with other
//! vCPUs, taking no lock and allocating nothing.
//!
//! A vCPU thread *subscribes* its views: then a publish kicks it (the same signal that
//! stops vCPUs, which makes its next KVM_RUN return at once) and the vCPU refreshes its
//! views on that out-of-line path, so the per-exit lookup does not even read the shared
//! generation counter. The kick reaches the publishing thread too: a vCPU whose own
//! exit remapped a device (a PCI BAR write) refreshes before it re-enters the guest. An
//! access racing with a publish on another vCPU uses the old snapshot, as if it happened
//! just before. Views that are not subscribed check the generation on every lookup. A
//! device remapping itself from a vCPU thread publishes while that thread still holds
//! the old snapshot: there is no lock it could deadlock on.

use exitlab_devices::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use exitlab_devices::{BusDevice, IoAction};

/// Errors of bus registration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    /// The new range overlaps a registered one.
    #[error("bus range {base:#x}+{len:#x} overlaps the device already at {other_base:#x}+{other_len:#x}; choose a free range")]
    Overlap {
        /// Base of the rejected range.
        base: u64,
        /// Length of the rejected range.
        len: u64,
        /// Base of the range it overlaps.
        other_base: u64,
        /// Length of the range it overlaps.
        other_len: u64,
    },
    /// Zero length, or base + len overflows 64 bits.
    #[error("bus range {base:#x}+{len:#x} is empty or wraps around the address space")]
    InvalidRange {
        /// Base of the rejected range.
        base: u64,
        /// Length of the rejected range.
        len: u64,
    },
    /// Nothing is registered at that base.
    #[error("no device is registered at {0:#x}")]
    NotFound(u64),
}

#[derive(Clone)]
struct Range {
    base: u64,
    len: u64,
    dev: Arc<dyn BusDevice>,
}

impl Range {
    #[inline(always)]
    fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.base) < self.len
    }
}

/// An immutable, sorted snapshot of the ranges. A slice in one allocation: its length
/// travels in the (fat) pointer each view holds, so an empty or one-range bus is decided
/// without touching the heap.
type Snapshot = Arc<[Range]>;

/// A port or MMIO bus shared by every vCPU of a VM.
pub struct Bus {
    current: Mutex<Snapshot>,
    generation: AtomicU64,
    // Threads whose views wait for a kick instead of checking the generation: (id, thread).
    subscribers: Mutex<Vec<(u64, libc::pthread_t)>>,
    next_subscriber: AtomicU64,
}

impl Default for Bus {
    fn default() -> Self {
        Bus {
            current: Mutex::new(Arc::from(Vec::new())),
            generation: AtomicU64::new(0),
            subscribers: Mutex::new(Vec::new()),
            next_subscriber: AtomicU64::new(1),
        }
    }
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let snap = self.snapshot();
        let ranges: Vec<(u64, u64)> = snap.iter().map(|r| (r.base, r.len)).collect();
        f.debug_struct("Bus").field("ranges", &ranges).finish()
    }
}

impl Bus {
    /// An empty bus.
    pub fn new() -> Arc<Bus> {
        Arc::new(Bus::default())
    }

    fn snapshot(&self) -> Snapshot {
        lock(&self.current).clone()
    }

    fn publish(
        &self,
        edit: impl FnOnce(&mut Vec<Range>) -> Result<(), BusError>,
    ) -> Result<(), BusError> {
        {
            let mut guard = lock(&self.current);
            let mut ranges = guard.to_vec();
            edit(&mut ranges)?;
            *guard = Arc::from(ranges);
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        for &(_, thread) in lock(&self.subscribers).iter() {
            crate::sys::kick_thread(thread);
        }
        Ok(())
    }

    /// Registers `dev` for `[base, base + len)`.
    pub fn insert(&self, dev: Arc<dyn BusDevice>, base: u64, len: u64) -> Result<(), BusError> {
        if len == 0 || base.checked_add(len - 1).is_none() {
            return Err(BusError::InvalidRange { base, len });
        }
        self.publish(|ranges| {
            let last = base + (len - 1);
            if let Some(o) = ranges
                .iter()
                .find(|r| r.base <= last && base <= r.base + (r.len - 1))
            {
                return Err(BusError::Overlap {
                    base,
                    len,
                    other_base: o.base,
                    other_len: o.len,
                });
            }
            let at = ranges.partition_point(|r| r.base < base);
            ranges.insert(at, Range { base, len, dev });
            Ok(())
        })
    }

    /// Removes the device registered at `base`.
    pub fn remove(&self, base: u64) -> Result<(), BusError> {
        self.publish(|ranges| {
            let at = ranges
                .iter()
                .position(|r| r.base == base)
                .ok_or(BusError::NotFound(base))?;
            ranges.remove(at);
            Ok(())
        })
    }

    /// Moves the device at `old_base` to `new_base` (a BAR reprogrammed by the guest) in one
    /// published snapshot.
    pub fn relocate(&self, old_base: u64, new_base: u64) -> Result<(), BusError> {
        self.publish(|ranges| {
            let at = ranges
                .iter()
                .position(|r| r.base == old_base)
                .ok_or(BusError::NotFound(old_base))?;
            let moved = ranges.remove(at);
            let len = moved.len;
            if new_base.checked_add(len - 1).is_none() {
                return Err(BusError::InvalidRange {
                    base: new_base,
                    len,
                });
            }
            let last = new_base + (len - 1);
            if let Some(o) = ranges
                .iter()
                .find(|r| r.base <= last && new_base <= r.base + (r.len - 1))
            {
                return Err(BusError::Overlap {
                    base: new_base,
                    len,
                    other_base: o.base,
                    other_len: o.len,
                });
            }
            let pos = ranges.partition_point(|r| r.base < new_base);
            ranges.insert(
                pos,
                Range {
                    base: new_base,
                    ..moved
                },
            );
            Ok(())
        })
    }

    /// Number of registered ranges.
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A per-vCPU view for lookups.
    pub fn view(self: &Arc<Self>) -> BusView {
        let gen = self.generation.load(Ordering::Acquire);
        BusView {
            snap: self.snapshot(),
            bus: Arc::clone(self),
            gen,
            mru: 0,
            miss: NO_MISS,
            subscription: 0,
        }
    }
}

/// No address missed yet. The last address can hold a device too, so it is never taken
/// for a remembered miss.
const NO_MISS: u64 = u64::MAX;

/// One vCPU's view of a [`Bus`]: the snapshot it last saw, its last hit and its last
/// miss.
// The fields a lookup reads come first and the view is kept to 56 bytes, so that a vCPU
// can lay its views out next to its counters.
#[repr(C)]
pub struct BusView {
    snap: Snapshot,
    mru: usize,
    // The last address no device claimed in `snap` (reset with it): a guest that polls an
    // unclaimed port is answered without reading the snapshot, whose cache lines an exit
    // on this project's hosts finds cold (~55 cycles per exit; docs/exit-path.md).
    miss: u64,
    // Subscriber id, 0 when not subscribed.
    subscription: u64,
    gen: u64,
    bus: Arc<Bus>,
}

impl Drop for BusView {
    fn drop(&mut self) {
        self.unsubscribe();
    }
}

impl BusView {
    /// From now on the calling thread is kicked (see the module docs) when the bus
    /// changes, and this view stops checking the generation on each lookup: the thread
    /// must call [`BusView::refresh`] whenever it has been kicked. Refreshes once now.
    pub fn subscribe(&mut self) {
        if self.subscription == 0 {
            let id = self.bus.next_subscriber.fetch_add(1, Ordering::Relaxed);
            lock(&self.bus.subscribers).push((id, crate::sys::current_thread()));
            self.subscription = id;
        }
        self.refresh();
    }

    /// Stops the kicks (before the subscribed thread ends) and goes back to checking the
    /// generation on every lookup.
    pub fn unsubscribe(&mut self) {
        let id = std::mem::take(&mut self.subscription);
        if id != 0 {
            lock(&self.bus.subscribers).retain(|&(i, _)| i != id);
        }
    }

    /// Picks up the latest snapshot if the bus changed.
    #[inline]
    pub fn refresh(&mut self) {
        let gen = self.bus.generation.load(Ordering::SeqCst);
        if gen != self.gen {
            self.snap = self.bus.snapshot();
            self.gen = gen;
            self.mru = 0;
            self.miss = NO_MISS;
        }
    }

    #[inline(always)]
    fn lookup(&mut self, addr: u64) -> Option<(&Range, u64)> {
        if self.subscription == 0 {
            self.refresh();
        }
        if addr == self.miss && addr != NO_MISS {
            return None;
        }
        let ranges = &self.snap;
        if ranges.is_empty() {
            return None;
        }
        if let Some(r) = ranges.get(self.mru) {
            if r.contains(addr) {
                return Some((r, addr - r.base));
            }
        }
        let found = ranges
            .partition_point(|r| r.base <= addr)
            .checked_sub(1)
            .filter(|&i| ranges[i].contains(addr));
        match found {
            Some(idx) => {
                self.mru = idx;
                let r = &self.snap[idx];
                Some((r, addr - r.base))
            }
            None => {
                self.miss = addr;
                None
            }
        }
    }

    /// Dispatches a read at `addr`; returns false (leaving `data` untouched) when no device
    /// claims the address.
    #[inline]
    pub fn read(&mut self, addr: u64, data: &mut [u8]) -> bool {
        match self.lookup(addr) {
            Some((r, off)) => {
                r.dev.read(off, data);
                true
            }
            None => false,
        }
    }

    /// Dispatches a write at `addr`; `None` when no device claims the address.
    #[inline]
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Option<IoAction> {
        self.lookup(addr).map(|(r, off)| r.dev.write(off, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Records the last offset it saw; reads return the low byte of its id.
    struct Probe {
        id: u8,
        last: AtomicU64,
    }

    impl BusDevice for Probe {
        fn read(&self, offset: u64, data: &mut [u8]) {
            self.last.store(offset, Ordering::Relaxed);
            data.fill(self.id);
        }
        fn write(&self, offset: u64, _data: &[u8]) -> IoAction {
            self.last.store(offset, Ordering::Relaxed);
            IoAction::Exit(self.id as u32)
        }
    }

    fn probe(id: u8) -> Arc<Probe> {
        Arc::new(Probe {
            id,
            last: AtomicU64::new(u64::MAX),
        })
    }

    #[test]
    fn lookup_edges() {
        let bus = Bus::new();
        let a = probe(1);
        bus.insert(a.clone(), 0x100, 0x10).unwrap();
        let mut v = bus.view();
        let mut b = [0u8; 1];
        assert!(!v.read(0xff, &mut b));
        assert!(v.read(0x100, &mut b));
        assert_eq!(b[0], 1);
        assert_eq!(a.last.load(Ordering::Relaxed), 0);
        assert!(v.read(0x10f, &mut b));
        assert_eq!(a.last.load(Ordering::Relaxed), 0xf);
        assert!(!v.read(0x110, &mut b));
    }

    #[test]
    fn a_remembered_miss_is_forgotten_when_a_device_claims_the_address() {
        let bus = Bus::new();
        let a = probe(1);
        bus.insert(a, 0x100, 0x10).unwrap();
        let mut v = bus.view();
        let mut b = [0u8; 1];
        // The same unclaimed address twice (the second answered from the view), then
        // another: both misses.
        assert!(!v.read(0x200, &mut b));
        assert!(!v.read(0x200, &mut b));
        assert!(v.write(0x200, &b).is_none());
        assert!(!v.read(0x201, &mut b));
        // A device inserted at the remembered address is seen at once.
        assert!(!v.read(0x200, &mut b));
        bus.insert(probe(7), 0x200, 1).unwrap();
        assert!(v.read(0x200, &mut b));
        assert_eq!(b[0], 7);
        // A subscribed view sees it after the refresh its kick brings.
        let mut w = bus.view();
        w.subscribe();
        assert!(!w.read(0x300, &mut b));
        bus.insert(probe(9), 0x300, 1).unwrap();
        w.refresh();
        assert!(w.read(0x300, &mut b));
        assert_eq!(b[0], 9);
        w.unsubscribe();
    }

    #[test]
    fn overlaps_rejected_and_adjacent_accepted() {
        let bus = Bus::new();
        bus.insert(probe(1), 0x100, 0x10).unwrap();
        for (base, len) in [(0x100, 1), (0xf8, 0x9), (0x10f, 4), (0x0, 0x1000)] {
            assert!(matches!(
                bus.insert(probe(2), base, len),
                Err(BusError::Overlap { .. })
            ));
        }
        bus.insert(probe(2), 0xf0, 0x10).unwrap();
        bus.insert(probe(3), 0x110, 0x10).unwrap();
        assert_eq!(bus.len(), 3);
        let mut v = bus.view();
        let mut b = [0u8; 2];
        for (addr, id) in [
            (0xf0, 2),
            (0xff, 2),
            (0x100, 1),
            (0x10f, 1),
            (0x110, 3),
            (0x11f, 3),
        ] {
            assert!(v.read(addr, &mut b));
            assert_eq!(b[0], id, "addr {addr:#x}");
        }
    }

    #[test]
    fn invalid_ranges() {
        let bus = Bus::new();
        assert_eq!(
            bus.insert(probe(1), 5, 0),
            Err(BusError::InvalidRange { base: 5, len: 0 })
        );
        assert!(bus.insert(probe(1), u64::MAX, 2).is_err());
        bus.insert(probe(1), u64::MAX, 1).unwrap();
        let mut v = bus.view();
        assert_eq!(v.write(u64::MAX, &[0]), Some(IoAction::Exit(1)));
        assert_eq!(bus.remove(7), Err(BusError::NotFound(7)));
        // On an empty bus the last address misses, the second time too (it is also the
        // "no miss yet" marker, never taken for a remembered miss).
        let mut w = Bus::new().view();
        assert!(!w.read(u64::MAX, &mut [0]));
        assert!(!w.read(u64::MAX, &mut [0]));
    }

    #[test]
    fn views_see_new_snapshots() {
        let bus = Bus::new();
        let mut v = bus.view();
        let mut b = [0u8; 4];
        assert!(!v.read(0x40, &mut b));
        bus.insert(probe(9), 0x40, 4).unwrap();
        assert!(v.read(0x40, &mut b));
        assert_eq!(b, [9; 4]);
        bus.relocate(0x40, 0x80).unwrap();
        assert!(!v.read(0x40, &mut b));
        assert!(v.read(0x83, &mut b));
        bus.remove(0x80).unwrap();
        assert!(!v.read(0x83, &mut b));
        assert!(bus.is_empty());
    }

    #[test]
    fn relocate_rejects_overlap_and_keeps_old() {
        let bus = Bus::new();
        bus.insert(probe(1), 0x0, 0x10).unwrap();
        bus.insert(probe(2), 0x100, 0x10).unwrap();
        assert!(matches!(
            bus.relocate(0x100, 0x8),
            Err(BusError::Overlap { .. })
        ));
        let mut v = bus.view();
        let mut b = [0u8; 1];
        assert!(v.read(0x100, &mut b));
        assert_eq!(b[0], 2);
    }

    #[test]
    fn subscribed_views_refresh_when_told() {
        let bus = Bus::new();
        let mut v = bus.view();
        v.subscribe();
        let mut b = [0u8; 1];
        // The publish kicks this thread (a no-op outside a vCPU run loop); the view keeps
        // its snapshot until it refreshes, as a vCPU does on the kick.
        bus.insert(probe(5), 0x10, 1).unwrap();
        assert!(!v.read(0x10, &mut b));
        v.refresh();
        assert!(v.read(0x10, &mut b));
        v.unsubscribe();
        bus.remove(0x10).unwrap();
        assert!(
            !v.read(0x10, &mut b),
            "unsubscribed views check the generation again"
        );
        assert_eq!(lock(&bus.subscribers).len(), 0);
    }

    #[test]
    fn dropping_a_view_unsubscribes() {
        let bus = Bus::new();
        {
            let mut v = bus.view();
            v.subscribe();
            assert_eq!(lock(&bus.subscribers).len(), 1);
        }
        assert_eq!(lock(&bus.subscribers).len(), 0);
    }

    #[test]
    fn a_view_is_56_bytes() {
        assert_eq!(std::mem::size_of::<BusView>(), 56);
    }

    #[test]
    fn many_ranges_binary_search() {
        let bus = Bus::new();
        for i in 0..200u64 {
            bus.insert(probe(i as u8), i * 0x10, 8).unwrap();
        }
        let mut v = bus.view();
        let mut b = [0u8; 1];
        for i in (0..200u64).rev() {
            assert!(v.read(i * 0x10 + 7, &mut b));
            assert_eq!(b[0], i as u8);
            assert!(!v.read(i * 0x10 + 8, &mut b));
        }
    }
}
