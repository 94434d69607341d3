//! Exit dispatch: what the run loop does with each exit KVM hands to userspace.
//!
//! There is one run loop ([`crate::vcpu::Vcpu::run`]); what differs between the full VMM
//! and the bare floor it is measured against is only the [`ExitHandler`] the loop is
//! instantiated with:
//! - [`Devices`]: the platform. Port and MMIO accesses go through the vCPU's own bus
//!   views to the devices, every exit is counted by reason, HLT and MSRs routed to
//!   userspace are answered by policy, and KVM_EXIT_IOAPIC_EOI (split irqchip) ends
//!   the level-triggered interrupts of its vector in the userspace I/O APIC.
//! - [`Bare`]: the floor of a userspace exit on this host. Every read is answered with
//!   all ones, every write dropped, nothing looked up and nothing counted; any exit that
//!   is not a port or MMIO access (or a kick) stops the vCPU.
//!
//! Both hand doorbell writes (the lab kernel's guest → host channel) to the same
//! [`ExitHook`], so that an overhead experiment compares exactly the handlers.
//!
//! [`dispatch`] decodes nothing itself: it takes kvm-ioctls' [`VcpuExit`] plus the access
//! size of a port exit, which is what lets the unit tests below feed recorded exits to a
//! handler without a VM.

use exitlab_devices::ioapic::Ioapic;
use exitlab_devices::IoAction;
use kvm_ioctls::VcpuExit;
use vm_memory::GuestMemoryMmap;

use crate::bus::BusView;
use crate::counts::ExitCounts;
use crate::hook::{DoorbellCtx, ExitHook, HltPolicy, HookReply, VcpuStop};
use crate::kvmstats::KvmStats;
use crate::msr::{self, UserMsr};

/// What the loop does after an exit.
#[derive(Debug)]
pub enum Next {
    /// Enter the guest again.
    Resume,
    /// A doorbell was handled; the hook replied this.
    Doorbell(HookReply),
    /// Stop the vCPU.
    Stop(VcpuStop),
    /// KVM_EXIT_INTERNAL_ERROR: the loop reads the details from kvm_run and stops.
    InternalError,
    /// KVM_RUN was interrupted (a kick, or a bus change): the loop refreshes and checks
    /// whether it was asked to stop.
    Interrupted,
}

/// The per-exit work of the run loop.
pub trait ExitHandler {
    /// A port read of `data.len()` bytes: one access, or a string of accesses of `size`
    /// bytes each. Fill `data`.
    fn port_in(&mut self, port: u16, size: usize, data: &mut [u8]);
    /// A port write (one access or a string of `size`-byte accesses). `Some` stops the
    /// vCPU.
    fn port_out(&mut self, port: u16, size: usize, data: &[u8]) -> Option<VcpuStop>;
    /// An MMIO read. Fill `data`.
    fn mmio_read(&mut self, addr: u64, data: &mut [u8]);
    /// An MMIO write. `Some` stops the vCPU.
    fn mmio_write(&mut self, addr: u64, data: &[u8]) -> Option<VcpuStop>;
    /// A write to the doorbell port.
    fn doorbell(&mut self, data: &[u8]) -> HookReply;
    /// Every other exit, and KVM_RUN errors. Kept out of the device path.
    fn out_of_line(&mut self, exit: Result<VcpuExit<'_>, kvm_ioctls::Error>) -> Next;
    /// After an interrupted KVM_RUN: pick up what changed (bus snapshots).
    fn refresh(&mut self) {}
}

/// Dispatches one exit to `h`. `io_size` is the size of one element of a port access
/// (kvm_run's `io.size`; meaningless for other exits), `doorbell` the port whose writes
/// go to the hook.
#[inline(always)]
pub fn dispatch<H: ExitHandler>(
    h: &mut H,
    exit: Result<VcpuExit<'_>, kvm_ioctls::Error>,
    io_size: usize,
    doorbell: Option<u16>,
) -> Next {
    match exit {
        Ok(VcpuExit::IoIn(port, data)) => {
            h.port_in(port, io_size, data);
            Next::Resume
        }
        Ok(VcpuExit::MmioRead(addr, data)) => {
            h.mmio_read(addr, data);
            Next::Resume
        }
        Ok(VcpuExit::IoOut(port, data)) if Some(port) != doorbell => {
            stop_or_resume(h.port_out(port, io_size, data))
        }
        Ok(VcpuExit::MmioWrite(addr, data)) => stop_or_resume(h.mmio_write(addr, data)),
        Ok(VcpuExit::IoOut(_, data)) => Next::Doorbell(h.doorbell(data)),
        other => h.out_of_line(other),
    }
}

#[inline(always)]
fn stop_or_resume(stop: Option<VcpuStop>) -> Next {
    match stop {
        None => Next::Resume,
        Some(s) => Next::Stop(s),
    }
}

/// The value every unclaimed read returns (an open bus).
const OPEN_BUS: u8 = 0xff;

/// Fills an unclaimed read with all ones. Accesses of 1, 2, 4 or 8 bytes (nearly all) are
/// one store each, not a call into the C library's memset.
#[inline(always)]
pub(crate) fn open_bus(data: &mut [u8]) {
    match data.len() {
        1 => data[0] = OPEN_BUS,
        2 => data.copy_from_slice(&[OPEN_BUS; 2]),
        4 => data.copy_from_slice(&[OPEN_BUS; 4]),
        8 => data.copy_from_slice(&[OPEN_BUS; 8]),
        _ => data.fill(OPEN_BUS),
    }
}

/// The element size to split a port access by: `size` when the access is a string of
/// several 1-, 2- or 4-byte elements, else the whole access (a single access, or a size
/// KVM never reports).
#[inline(always)]
fn element_size(size: usize, len: usize) -> usize {
    if len > size && matches!(size, 1 | 2 | 4) && len.is_multiple_of(size) {
        size
    } else {
        len.max(1)
    }
}

/// Where doorbell writes go, and what the hook may look at.
pub struct DoorbellRoute<'a> {
    /// The hook.
    pub hook: &'a mut dyn ExitHook,
    /// vCPU index.
    pub vcpu_id: u32,
    /// Guest memory.
    pub mem: &'a GuestMemoryMmap,
    /// KVM's binary statistics of the vCPU.
    pub stats: Option<&'a KvmStats>,
}

impl DoorbellRoute<'_> {
    /// Counts a doorbell exit and hands the value written (up to 32 bits,
    /// little-endian) to the hook.
    fn ring(&mut self, data: &[u8], counts: &mut ExitCounts) -> HookReply {
        counts.doorbell += 1;
        let mut v = [0u8; 4];
        let n = data.len().min(4);
        v[..n].copy_from_slice(&data[..n]);
        self.hook.doorbell(&DoorbellCtx {
            vcpu_id: self.vcpu_id,
            value: u32::from_le_bytes(v),
            mem: self.mem,
            counts,
            stats: self.stats,
        })
    }
}

/// The platform handler: buses, devices, accounting, MSR and HLT policy.
pub struct Devices<'a> {
    /// The vCPU's view of the port bus.
    pub pio: &'a mut BusView,
    /// The vCPU's view of the MMIO bus.
    pub mmio: &'a mut BusView,
    /// The vCPU's exit counters.
    pub counts: &'a mut ExitCounts,
    /// MSRs answered in userspace.
    pub user_msrs: &'a [UserMsr],
    /// What a userspace HLT does.
    pub hlt: HltPolicy,
    /// The userspace I/O APIC of a split irqchip, which KVM_EXIT_IOAPIC_EOI ends
    /// level-triggered interrupts of.
    pub ioapic: Option<&'a Ioapic>,
    /// Doorbells.
    pub doorbell: DoorbellRoute<'a>,
}

fn device_stop(a: IoAction) -> Option<VcpuStop> {
    match a {
        IoAction::Continue => None,
        IoAction::Exit(v) => Some(VcpuStop::DebugExit(v)),
        IoAction::Reset => Some(VcpuStop::Reset),
        IoAction::Suspend => Some(VcpuStop::Suspend),
    }
}

impl ExitHandler for Devices<'_> {
    #[inline(always)]
    fn port_in(&mut self, port: u16, size: usize, data: &mut [u8]) {
        self.counts.io_in += 1;
        // One device read per element, in the order the instruction performed them:
        // KVM fills the buffer in that order, whatever the direction flag.
        let elem = element_size(size, data.len());
        for e in data.chunks_exact_mut(elem) {
            if !self.pio.read(u64::from(port), e) {
                open_bus(e);
            }
        }
    }

    #[inline(always)]
    fn port_out(&mut self, port: u16, size: usize, data: &[u8]) -> Option<VcpuStop> {
        self.counts.io_out += 1;
        let elem = element_size(size, data.len());
        for e in data.chunks_exact(elem) {
            if let Some(stop) = self.pio.write(u64::from(port), e).and_then(device_stop) {
                return Some(stop);
            }
        }
        None
    }

    #[inline(always)]
    fn mmio_read(&mut self, addr: u64, data: &mut [u8]) {
        self.counts.mmio_read += 1;
        if !self.mmio.read(addr, data) {
            open_bus(data);
        }
    }

    #[inline(always)]
    fn mmio_write(&mut self, addr: u64, data: &[u8]) -> Option<VcpuStop> {
        self.counts.mmio_write += 1;
        self.mmio.write(addr, data).and_then(device_stop)
    }

    fn doorbell(&mut self, data: &[u8]) -> HookReply {
        self.doorbell.ring(data, self.counts)
    }

    #[cold]
    #[inline(never)]
    fn out_of_line(&mut self, exit: Result<VcpuExit<'_>, kvm_ioctls::Error>) -> Next {
        let counts = &mut *self.counts;
        let exit = match exit {
            Ok(e) => e,
            Err(e) => return run_error(e, Some(counts)),
        };
        match exit {
            VcpuExit::Hlt => {
                counts.hlt += 1;
                match self.hlt {
                    HltPolicy::Resume => Next::Resume,
                    HltPolicy::Stop => Next::Stop(VcpuStop::Halted),
                }
            }
            VcpuExit::X86Rdmsr(m) => {
                counts.rdmsr += 1;
                match msr::read(self.user_msrs, m.index) {
                    Some(v) => *m.data = v,
                    None => *m.error = 1,
                }
                Next::Resume
            }
            VcpuExit::X86Wrmsr(m) => {
                counts.wrmsr += 1;
                if !msr::write_accepted(self.user_msrs, m.index) {
                    *m.error = 1;
                }
                Next::Resume
            }
            VcpuExit::Intr => {
                counts.intr += 1;
                Next::Interrupted
            }
            VcpuExit::IoapicEoi(vector) => {
                counts.ioapic_eoi += 1;
                // KVM reports EOIs only for the routes the I/O APIC set, so there is one
                // whenever this exit comes; without one there is nothing to end.
                if let Some(io) = self.ioapic {
                    io.end_of_interrupt(vector);
                }
                Next::Resume
            }
            other => {
                counts.other += 1;
                ending(other)
            }
        }
    }

    fn refresh(&mut self) {
        self.pio.refresh();
        self.mmio.refresh();
    }
}

/// A KVM_RUN that returned an error: interrupted (counted when `counts` is given) or
/// failed.
fn run_error(e: kvm_ioctls::Error, counts: Option<&mut ExitCounts>) -> Next {
    if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN {
        if let Some(c) = counts {
            c.intr += 1;
        }
        return Next::Interrupted;
    }
    Next::Stop(VcpuStop::RunError(std::io::Error::from_raw_os_error(
        e.errno(),
    )))
}

/// Exits that end the run, whichever handler sees them; anything else is named.
fn ending(exit: VcpuExit<'_>) -> Next {
    match exit {
        VcpuExit::Shutdown => Next::Stop(VcpuStop::Shutdown),
        VcpuExit::FailEntry(reason, cpu) => Next::Stop(VcpuStop::FailEntry { reason, cpu }),
        VcpuExit::InternalError => Next::InternalError,
        VcpuExit::SystemEvent(kind, _) => Next::Stop(match kind {
            kvm_bindings::KVM_SYSTEM_EVENT_RESET => VcpuStop::Reset,
            kvm_bindings::KVM_SYSTEM_EVENT_SHUTDOWN => VcpuStop::Shutdown,
            other => VcpuStop::Unexpected(format!("system event {other}")),
        }),
        other => Next::Stop(VcpuStop::Unexpected(format!("{other:?}"))),
    }
}

/// The bare handler: the floor of a userspace exit. No bus, no device, no counting but
/// doorbells (the lab's sample channel), reads answered with all ones.
pub struct Bare<'a> {
    /// The vCPU's exit counters (only doorbells are counted).
    pub counts: &'a mut ExitCounts,
    /// Doorbells.
    pub doorbell: DoorbellRoute<'a>,
}

impl ExitHandler for Bare<'_> {
    #[inline(always)]
    fn port_in(&mut self, _port: u16, _size: usize, data: &mut [u8]) {
        open_bus(data);
    }

    #[inline(always)]
    fn port_out(&mut self, _port: u16, _size: usize, _data: &[u8]) -> Option<VcpuStop> {
        None
    }

    #[inline(always)]
    fn mmio_read(&mut self, _addr: u64, data: &mut [u8]) {
        open_bus(data);
    }

    #[inline(always)]
    fn mmio_write(&mut self, _addr: u64, _data: &[u8]) -> Option<VcpuStop> {
        None
    }

    fn doorbell(&mut self, data: &[u8]) -> HookReply {
        self.doorbell.ring(data, self.counts)
    }

    #[cold]
    #[inline(never)]
    fn out_of_line(&mut self, exit: Result<VcpuExit<'_>, kvm_ioctls::Error>) -> Next {
        match exit {
            Err(e) => run_error(e, None),
            Ok(VcpuExit::Intr) => Next::Interrupted,
            Ok(other) => match ending(other) {
                Next::Stop(VcpuStop::Unexpected(what)) => Next::Stop(VcpuStop::Unexpected(
                    format!("{what} in the bare loop (it handles port and MMIO exits only)"),
                )),
                n => n,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use exitlab_devices::BusDevice;
    use kvm_ioctls::{MsrExitReason, ReadMsrExit, WriteMsrExit};
    use vm_memory::GuestAddress;

    use super::*;
    use crate::bus::Bus;

    /// A device that records every access (offset, size, data) and reads back a
    /// counter that advances by one per read.
    #[derive(Default)]
    struct Recorder {
        log: Mutex<Vec<(char, u64, Vec<u8>)>>,
        next: Mutex<u8>,
        action: Mutex<Option<IoAction>>,
    }

    impl BusDevice for Recorder {
        fn read(&self, offset: u64, data: &mut [u8]) {
            let mut n = self.next.lock().unwrap();
            for b in data.iter_mut() {
                *b = *n;
                *n = n.wrapping_add(1);
            }
            self.log.lock().unwrap().push(('r', offset, data.to_vec()));
        }
        fn write(&self, offset: u64, data: &[u8]) -> IoAction {
            self.log.lock().unwrap().push(('w', offset, data.to_vec()));
            self.action.lock().unwrap().unwrap_or(IoAction::Continue)
        }
    }

    struct Hook(Vec<u32>, HookReply);
    impl ExitHook for Hook {
        fn doorbell(&mut self, ctx: &DoorbellCtx<'_>) -> HookReply {
            self.0.push(ctx.value);
            assert_eq!(ctx.counts.doorbell, self.0.len() as u64);
            self.1
        }
    }

    struct Rig {
        pio: BusView,
        mmio: BusView,
        counts: ExitCounts,
        mem: GuestMemoryMmap,
        hook: Hook,
        dev: Arc<Recorder>,
        ioapic: Arc<Ioapic>,
        msis: Arc<Msis>,
    }

    /// Records the vectors of the MSIs the I/O APIC sends.
    #[derive(Default)]
    struct Msis(Mutex<Vec<u8>>);

    impl exitlab_devices::ioapic::MsiSink for Msis {
        fn signal_msi(&self, msg: exitlab_devices::ioapic::MsiMessage) -> bool {
            self.0.lock().unwrap().push(msg.data as u8);
            true
        }
        fn routes_changed(
            &self,
            _: &[exitlab_devices::ioapic::MsiMessage; exitlab_devices::ioapic::IOAPIC_PINS],
        ) {
        }
    }

    const IOAPIC: u64 = 0xfec0_0000;

    const PORT: u16 = 0x3f8;
    const MMIO: u64 = 0xfed0_0000;
    const DOORBELL: u16 = 0xf0;
    const MSRS: [UserMsr; 1] = [UserMsr {
        index: 0x4b56_4d00,
        read_value: 0x1234,
    }];

    fn rig() -> Rig {
        let pio = Bus::new();
        let mmio = Bus::new();
        let dev = Arc::new(Recorder::default());
        pio.insert(dev.clone(), u64::from(PORT), 8).unwrap();
        mmio.insert(dev.clone(), MMIO, 0x1000).unwrap();
        let msis = Arc::new(Msis::default());
        let ioapic = Arc::new(Ioapic::new(msis.clone()));
        mmio.insert(ioapic.clone(), IOAPIC, 0x1000).unwrap();
        Rig {
            ioapic,
            msis,
            pio: pio.view(),
            mmio: mmio.view(),
            counts: ExitCounts::default(),
            mem: GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap(),
            hook: Hook(Vec::new(), HookReply::Resume),
            dev,
        }
    }

    impl Rig {
        fn feed(&mut self, exit: Result<VcpuExit<'_>, kvm_ioctls::Error>, size: usize) -> Next {
            let mut h = Devices {
                pio: &mut self.pio,
                mmio: &mut self.mmio,
                counts: &mut self.counts,
                user_msrs: &MSRS,
                hlt: HltPolicy::Resume,
                ioapic: Some(&self.ioapic),
                doorbell: DoorbellRoute {
                    hook: &mut self.hook,
                    vcpu_id: 0,
                    mem: &self.mem,
                    stats: None,
                },
            };
            dispatch(&mut h, exit, size, Some(DOORBELL))
        }

        fn feed_bare(&mut self, exit: Result<VcpuExit<'_>, kvm_ioctls::Error>) -> Next {
            let mut h = Bare {
                counts: &mut self.counts,
                doorbell: DoorbellRoute {
                    hook: &mut self.hook,
                    vcpu_id: 0,
                    mem: &self.mem,
                    stats: None,
                },
            };
            dispatch(&mut h, exit, 1, Some(DOORBELL))
        }

        fn log(&self) -> Vec<(char, u64, Vec<u8>)> {
            self.dev.log.lock().unwrap().clone()
        }
    }

    #[test]
    fn single_port_accesses_reach_the_device_once() {
        let mut r = rig();
        let mut d = [0u8; 2];
        assert!(matches!(
            r.feed(Ok(VcpuExit::IoIn(PORT + 1, &mut d)), 2),
            Next::Resume
        ));
        assert_eq!(d, [0, 1]);
        assert!(matches!(
            r.feed(Ok(VcpuExit::IoOut(PORT, &[7, 8, 9, 10])), 4),
            Next::Resume
        ));
        assert_eq!(
            r.log(),
            vec![('r', 1, vec![0, 1]), ('w', 0, vec![7, 8, 9, 10])]
        );
        assert_eq!((r.counts.io_in, r.counts.io_out), (1, 1));
    }

    #[test]
    fn string_port_writes_are_split_per_element_in_order() {
        let mut r = rig();
        // `rep outsb` of "hello": one exit, five one-byte accesses.
        r.feed(Ok(VcpuExit::IoOut(PORT, b"hello")), 1);
        let log = r.log();
        assert_eq!(log.len(), 5);
        let bytes: Vec<u8> = log.iter().map(|(_, _, d)| d[0]).collect();
        assert_eq!(bytes, b"hello");
        assert!(log
            .iter()
            .all(|(k, o, d)| *k == 'w' && *o == 0 && d.len() == 1));
        // `rep outsw` of three words.
        r.feed(Ok(VcpuExit::IoOut(PORT + 2, &[1, 2, 3, 4, 5, 6])), 2);
        let words: Vec<Vec<u8>> = r.log()[5..].iter().map(|(_, _, d)| d.clone()).collect();
        assert_eq!(words, vec![vec![1, 2], vec![3, 4], vec![5, 6]]);
        // Counted as the exits they were, not as elements.
        assert_eq!(r.counts.io_out, 2);
    }

    #[test]
    fn string_port_reads_are_split_per_element_in_order() {
        let mut r = rig();
        let mut d = [0u8; 8];
        // `rep insw` of four words: four reads of two bytes, the buffer filled in order.
        r.feed(Ok(VcpuExit::IoIn(PORT, &mut d)), 2);
        assert_eq!(d, [0, 1, 2, 3, 4, 5, 6, 7]);
        let log = r.log();
        assert_eq!(log.len(), 4);
        assert!(log.iter().all(|(k, _, d)| *k == 'r' && d.len() == 2));
        assert_eq!(r.counts.io_in, 1);
    }

    #[test]
    fn a_string_write_stops_at_the_element_that_ends_the_run() {
        let mut r = rig();
        *r.dev.action.lock().unwrap() = Some(IoAction::Exit(3));
        let next = r.feed(Ok(VcpuExit::IoOut(PORT, b"abc")), 1);
        assert!(matches!(next, Next::Stop(VcpuStop::DebugExit(3))));
        assert_eq!(
            r.log().len(),
            1,
            "elements after the ending one are not delivered"
        );
    }

    #[test]
    fn unclaimed_accesses_read_all_ones_and_drop_writes() {
        let mut r = rig();
        let mut d = [0u8; 4];
        r.feed(Ok(VcpuExit::IoIn(0x1234, &mut d)), 4);
        assert_eq!(d, [0xff; 4]);
        let mut s = [0u8; 3];
        r.feed(Ok(VcpuExit::IoIn(0x1234, &mut s)), 1);
        assert_eq!(s, [0xff; 3]);
        let mut m = [0u8; 8];
        r.feed(Ok(VcpuExit::MmioRead(0x1000, &mut m)), 0);
        assert_eq!(m, [0xff; 8]);
        assert!(matches!(
            r.feed(Ok(VcpuExit::MmioWrite(0x1000, &[1])), 0),
            Next::Resume
        ));
        assert!(r.log().is_empty());
        assert_eq!(
            (r.counts.io_in, r.counts.mmio_read, r.counts.mmio_write),
            (2, 1, 1)
        );
    }

    #[test]
    fn mmio_accesses_reach_the_device_at_their_offset() {
        let mut r = rig();
        let mut d = [0u8; 4];
        r.feed(Ok(VcpuExit::MmioRead(MMIO + 0x10, &mut d)), 0);
        r.feed(Ok(VcpuExit::MmioWrite(MMIO + 0x20, &[5, 6])), 0);
        assert_eq!(
            r.log(),
            vec![('r', 0x10, vec![0, 1, 2, 3]), ('w', 0x20, vec![5, 6])]
        );
        *r.dev.action.lock().unwrap() = Some(IoAction::Reset);
        assert!(matches!(
            r.feed(Ok(VcpuExit::MmioWrite(MMIO, &[1])), 0),
            Next::Stop(VcpuStop::Reset)
        ));
    }

    #[test]
    fn doorbells_go_to_the_hook_not_the_bus() {
        let mut r = rig();
        let next = r.feed(Ok(VcpuExit::IoOut(DOORBELL, &[0x78, 0x56, 0x34, 0x12])), 4);
        assert!(matches!(next, Next::Doorbell(HookReply::Resume)));
        r.hook.1 = HookReply::Stop(9);
        let next = r.feed(Ok(VcpuExit::IoOut(DOORBELL, &[1])), 1);
        assert!(matches!(next, Next::Doorbell(HookReply::Stop(9))));
        assert_eq!(r.hook.0, vec![0x1234_5678, 1]);
        assert_eq!((r.counts.doorbell, r.counts.io_out), (2, 0));
        assert!(r.log().is_empty());
    }

    #[test]
    fn msrs_are_answered_by_policy() {
        let mut r = rig();
        let (mut err, mut data) = (0u8, 0u64);
        r.feed(
            Ok(VcpuExit::X86Rdmsr(ReadMsrExit {
                error: &mut err,
                reason: MsrExitReason::Filter,
                index: MSRS[0].index,
                data: &mut data,
            })),
            0,
        );
        assert_eq!((err, data), (0, 0x1234));
        r.feed(
            Ok(VcpuExit::X86Rdmsr(ReadMsrExit {
                error: &mut err,
                reason: MsrExitReason::Filter,
                index: 0x10,
                data: &mut data,
            })),
            0,
        );
        assert_eq!(err, 1, "an MSR the policy does not answer raises #GP");
        let mut werr = 0u8;
        r.feed(
            Ok(VcpuExit::X86Wrmsr(WriteMsrExit {
                error: &mut werr,
                reason: MsrExitReason::Filter,
                index: MSRS[0].index,
                data: 5,
            })),
            0,
        );
        assert_eq!(werr, 0);
        assert_eq!((r.counts.rdmsr, r.counts.wrmsr), (2, 1));
    }

    #[test]
    fn hlt_follows_the_policy_and_kicks_interrupt() {
        let mut r = rig();
        assert!(matches!(r.feed(Ok(VcpuExit::Hlt), 0), Next::Resume));
        assert!(matches!(r.feed(Ok(VcpuExit::Intr), 0), Next::Interrupted));
        let eintr = kvm_ioctls::Error::new(libc::EINTR);
        assert!(matches!(r.feed(Err(eintr), 0), Next::Interrupted));
        assert_eq!((r.counts.hlt, r.counts.intr), (1, 2));
        let efault = kvm_ioctls::Error::new(libc::EFAULT);
        assert!(matches!(
            r.feed(Err(efault), 0),
            Next::Stop(VcpuStop::RunError(_))
        ));
    }

    #[test]
    fn endings_and_unknown_exits_are_named() {
        let mut r = rig();
        assert!(matches!(
            r.feed(Ok(VcpuExit::Shutdown), 0),
            Next::Stop(VcpuStop::Shutdown)
        ));
        assert!(matches!(
            r.feed(Ok(VcpuExit::InternalError), 0),
            Next::InternalError
        ));
        assert!(matches!(
            r.feed(Ok(VcpuExit::FailEntry(0x21, 1)), 0),
            Next::Stop(VcpuStop::FailEntry {
                reason: 0x21,
                cpu: 1
            })
        ));
        match r.feed(Ok(VcpuExit::IrqWindowOpen), 0) {
            Next::Stop(VcpuStop::Unexpected(what)) => assert!(what.contains("IrqWindowOpen")),
            n => panic!("unexpected {n:?}"),
        }
        assert_eq!(r.counts.other, 4);
    }

    #[test]
    fn ioapic_eoi_exits_end_level_interrupts_in_the_userspace_ioapic() {
        let mut r = rig();
        // The guest routes input 10 to vector 0x41, level-triggered: four MMIO exits.
        for (off, v) in [(0u64, 0x25u32), (0x10, 0), (0, 0x24), (0x10, 0x8041)] {
            r.feed(Ok(VcpuExit::MmioWrite(IOAPIC + off, &v.to_le_bytes())), 0);
        }
        r.ioapic.set_level(10, true);
        assert_eq!(*r.msis.0.lock().unwrap(), vec![0x41]);
        // The guest's EOI of another vector ends nothing.
        assert!(matches!(
            r.feed(Ok(VcpuExit::IoapicEoi(0x42)), 0),
            Next::Resume
        ));
        assert_eq!(r.msis.0.lock().unwrap().len(), 1);
        // Its EOI of 0x41 with the line still high: delivered again.
        assert!(matches!(
            r.feed(Ok(VcpuExit::IoapicEoi(0x41)), 0),
            Next::Resume
        ));
        assert_eq!(*r.msis.0.lock().unwrap(), vec![0x41, 0x41]);
        r.ioapic.set_level(10, false);
        r.feed(Ok(VcpuExit::IoapicEoi(0x41)), 0);
        assert_eq!(r.msis.0.lock().unwrap().len(), 2);
        assert_eq!(r.ioapic.redirection(10).map(|e| e & (1 << 14)), Some(0));
        assert_eq!(
            (r.counts.ioapic_eoi, r.counts.mmio_write, r.counts.other),
            (3, 4, 0)
        );
        assert_eq!(r.ioapic.accesses().writes, 4);
        // The bare loop has no I/O APIC: the exit stops it, named.
        match r.feed_bare(Ok(VcpuExit::IoapicEoi(0x41))) {
            Next::Stop(VcpuStop::Unexpected(what)) => assert!(what.contains("IoapicEoi")),
            n => panic!("unexpected {n:?}"),
        }
    }

    #[test]
    fn the_bare_handler_touches_no_device_and_counts_only_doorbells() {
        let mut r = rig();
        let mut d = [0u8; 4];
        assert!(matches!(
            r.feed_bare(Ok(VcpuExit::IoIn(PORT, &mut d))),
            Next::Resume
        ));
        assert_eq!(d, [0xff; 4]);
        r.feed_bare(Ok(VcpuExit::IoOut(PORT, b"x")));
        r.feed_bare(Ok(VcpuExit::MmioWrite(MMIO, &[1])));
        assert!(matches!(
            r.feed_bare(Ok(VcpuExit::IoOut(DOORBELL, &[2, 0, 0, 0]))),
            Next::Doorbell(HookReply::Resume)
        ));
        assert!(r.log().is_empty());
        assert_eq!(r.counts.total(), 1);
        match r.feed_bare(Ok(VcpuExit::Hlt)) {
            Next::Stop(VcpuStop::Unexpected(what)) => assert!(what.contains("bare loop")),
            n => panic!("unexpected {n:?}"),
        }
        assert!(matches!(
            r.feed_bare(Ok(VcpuExit::Shutdown)),
            Next::Stop(VcpuStop::Shutdown)
        ));
    }

    #[test]
    fn element_sizes() {
        assert_eq!(element_size(1, 1), 1);
        assert_eq!(element_size(4, 4), 4);
        assert_eq!(element_size(1, 1024), 1);
        assert_eq!(element_size(2, 6), 2);
        // Sizes KVM never reports are taken as one access.
        assert_eq!(element_size(3, 9), 9);
        assert_eq!(element_size(2, 5), 5);
        assert_eq!(element_size(0, 0), 1);
    }
}
