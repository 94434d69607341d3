//! PCI configuration space: configuration mechanism #1 at ports 0xCF8..=0xCFF, a
//! config-space model devices can share, the [`PciDevice`] trait, and the i440FX-like
//! host bridge at 00:00.0.
//!
//! # Ports ([`PciConfigIo`], registered at 0xCF8 for 8 ports)
//!
//! - 0xCF8, CONFIG_ADDRESS: a 32-bit write latches it, a 32-bit read returns it.
//!   Bit 31 enables configuration cycles; bits 23..16 are the bus, 15..11 the device,
//!   10..8 the function, 7..0 the register's byte offset (bits 1:0 included, as in
//!   QEMU's pc machine). Bits 30..24 are kept but ignored.
//! - 0xCF9, reset control (PIIX3 RCR), byte access only: writing a value with bit 2
//!   set requests a reset ([`IoAction::Reset`]); bit 1 is kept and read back.
//! - Other accesses to 0xCF8..=0xCFB read as all ones and are ignored on write.
//! - 0xCFC..=0xCFF, CONFIG_DATA: an access of n bytes at port 0xCFC + p reaches the
//!   configuration bytes from `(CONFIG_ADDRESS & 0xFF) | p` on, exactly as QEMU's
//!   `pci_host_data_read/write` compute it (`config_reg | (addr & 3)`, an OR, not a
//!   sum): `0x80000002` then a 16-bit read of 0xCFC reads the device ID, and so does
//!   `0x80000000` then 0xCFE. The access may run into the next dword register; bytes
//!   past port 0xCFF are not CONFIG_DATA's (they read as all ones), bytes past offset
//!   255 of a present function read as zero and are not written (QEMU clamps the
//!   length to the configuration space). With bit 31 of CONFIG_ADDRESS clear, or for
//!   a bus, device or function that holds nothing, reads return all ones and writes
//!   are dropped. Only bus 0 exists.
//!
//! # BARs
//!
//! A 32-bit memory BAR decodes while the command register's memory bit is set and
//! its address is nonzero and ends below 0xFFFF_FFFF; an I/O BAR while the I/O bit is
//! set and its range is nonzero and ends below 0x10000. So the all-ones pattern a
//! guest writes to size a BAR never maps anything (QEMU applies the same rules).
//! When a config write changes where a BAR decodes, [`PciConfigIo`] tells its
//! [`PciBarObserver`], on the vCPU thread that wrote.
//!
//! Why hand-written: Cloud Hypervisor's and Firecracker's PCI code is not published as
//! a crate of its own, and rust-vmm's vm-device has no PCI configuration space.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::{BusDevice, IoAction, IoEventSpec, IoSpace};

/// Offset of CONFIG_ADDRESS (0xCF8).
pub const CONFIG_ADDRESS_OFFSET: u64 = 0;
/// Offset of the reset control register (0xCF9).
pub const RESET_CONTROL_OFFSET: u64 = 1;
/// Offset of CONFIG_DATA (0xCFC).
pub const CONFIG_DATA_OFFSET: u64 = 4;
/// Size of a conventional PCI function's configuration space.
pub const CONFIG_SPACE_SIZE: usize = 256;
/// Number of dword registers in a configuration space.
pub const CONFIG_SPACE_DWORDS: usize = CONFIG_SPACE_SIZE / 4;
/// Number of BARs in a type-0 header.
pub const NUM_BARS: usize = 6;

/// Command register: I/O space decode.
pub const COMMAND_IO: u16 = 0x0001;
/// Command register: memory space decode.
pub const COMMAND_MEMORY: u16 = 0x0002;
/// Command register: bus master.
pub const COMMAND_MASTER: u16 = 0x0004;
/// Command register bits a guest may change: I/O, memory, bus master, parity error
/// response, SERR#, INTx disable.
pub const COMMAND_WRITABLE: u16 = 0x0001 | 0x0002 | 0x0004 | 0x0040 | 0x0100 | 0x0400;

const ENABLE_BIT: u32 = 1 << 31;
const RCR_RESET_CPU: u8 = 0x04;
const RCR_SYS_RESET: u8 = 0x02;
const BAR_REG_FIRST: usize = 4;
const COMMAND_REG: usize = 1;

/// Errors while building the PCI topology.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PciError {
    /// Device number 32 or more, or function number 8 or more.
    #[error("PCI address {bus:02x}:{device:02x}.{function} is invalid: device must be below 32 and function below 8")]
    BadAddress {
        /// Bus.
        bus: u8,
        /// Device.
        device: u8,
        /// Function.
        function: u8,
    },
    /// Only bus 0 exists.
    #[error("PCI bus {0:#04x} does not exist: put the device on bus 0")]
    NoSuchBus(u8),
    /// Two devices at one address.
    #[error("PCI address {0} is taken: choose another slot")]
    SlotTaken(PciAddress),
    /// BAR index 6 or more.
    #[error("BAR index {0} is invalid: a type-0 header has BARs 0 to 5")]
    BadBarIndex(u8),
    /// A BAR size that is not a power of two, or too small for its kind.
    #[error(
        "BAR size {size:#x} is invalid: use a power of two, at least 4 for I/O and 16 for memory"
    )]
    BadBarSize {
        /// The size.
        size: u64,
    },
    /// A BAR address not aligned to its size, or out of the BAR's space.
    #[error("BAR address {addr:#x} (size {size:#x}) is invalid: align it to its size and keep it below 64 KiB (I/O) or 4 GiB (memory), and nonzero")]
    BadBarAddress {
        /// The address.
        addr: u64,
        /// The size.
        size: u64,
    },
    /// A device could not create an eventfd.
    #[error("failed to create an eventfd for a PCI device: {0}; the process may be out of file descriptors")]
    EventFd(String),
}

/// A bus/device/function address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..32.
    pub device: u8,
    /// Function number, 0..8.
    pub function: u8,
}

impl PciAddress {
    /// The address `bus:device.function`, checked.
    pub fn new(bus: u8, device: u8, function: u8) -> Result<Self, PciError> {
        if device >= 32 || function >= 8 {
            return Err(PciError::BadAddress {
                bus,
                device,
                function,
            });
        }
        Ok(Self {
            bus,
            device,
            function,
        })
    }

    /// Device and function packed as in CONFIG_ADDRESS bits 15..8.
    pub fn devfn(self) -> u8 {
        (self.device << 3) | self.function
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.device, self.function)
    }
}

/// What a BAR decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PciBarKind {
    /// I/O space.
    Io,
    /// 32-bit memory space.
    Memory32 {
        /// Whether the BAR is marked prefetchable.
        prefetchable: bool,
    },
}

impl PciBarKind {
    /// The address space of the BAR.
    pub fn space(self) -> IoSpace {
        match self {
            PciBarKind::Io => IoSpace::Pio,
            PciBarKind::Memory32 { .. } => IoSpace::Mmio,
        }
    }
}

/// Where a BAR currently decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciBarRange {
    /// BAR index, 0..6.
    pub index: u8,
    /// Port or memory space.
    pub space: IoSpace,
    /// First address.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
}

/// A change in where a BAR decodes, reported to a [`PciBarObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciBarChange {
    /// The function whose BAR changed.
    pub device: PciAddress,
    /// BAR index.
    pub index: u8,
    /// Where it decoded before the write, if anywhere.
    pub old: Option<PciBarRange>,
    /// Where it decodes now, if anywhere.
    pub new: Option<PciBarRange>,
}

/// Told about BAR moves so the VMM can remap the device's bus registrations (and its
/// ioeventfds).
///
/// Called on the vCPU thread that wrote the config register, while that thread is in
/// the middle of handling the exit: an implementation must not wait for anything that
/// thread holds (publish a new bus snapshot rather than take a lock the bus lookup
/// also takes).
pub trait PciBarObserver: Send + Sync {
    /// A BAR of `change.device` moved, appeared or disappeared.
    fn bar_changed(&self, change: &PciBarChange);
}

/// A PCI function on bus 0.
pub trait PciDevice: Send + Sync {
    /// Read dword register `reg` (0..64) of the configuration space.
    fn read_config(&self, reg: usize) -> u32;
    /// Write the bytes of `value` selected by `byte_enables` (bit n = byte n) to dword
    /// register `reg` (0..64).
    fn write_config(&self, reg: usize, byte_enables: u8, value: u32);
    /// Where the BARs decode now (only those that decode).
    fn bars(&self) -> Vec<PciBarRange> {
        Vec::new()
    }
    /// The bus device that serves BAR `index`, for the VMM to register at the BAR's
    /// address; offsets it receives are relative to the BAR's start.
    fn bar_device(&self, _index: u8) -> Option<Arc<dyn BusDevice>> {
        None
    }
    /// Doorbells to register as ioeventfds at the BARs' current addresses.
    fn ioeventfds(&self) -> Vec<IoEventSpec> {
        Vec::new()
    }
}

/// Identity fields of a type-0 configuration header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciIds {
    /// Vendor ID.
    pub vendor_id: u16,
    /// Device ID.
    pub device_id: u16,
    /// Revision ID.
    pub revision: u8,
    /// Base class code.
    pub class: u8,
    /// Subclass code.
    pub subclass: u8,
    /// Programming interface.
    pub prog_if: u8,
    /// Subsystem vendor ID.
    pub subsystem_vendor_id: u16,
    /// Subsystem ID.
    pub subsystem_id: u16,
    /// Interrupt pin (0 none, 1..=4 INTA#..INTD#).
    pub interrupt_pin: u8,
}

/// QEMU's default subsystem vendor ID (Red Hat / Qumranet).
pub const SUBSYSTEM_VENDOR_QEMU: u16 = 0x1AF4;
/// QEMU's default subsystem ID.
pub const SUBSYSTEM_ID_QEMU: u16 = 0x1100;

#[derive(Debug, Clone, Copy)]
struct BarDef {
    kind: PciBarKind,
    size: u64,
}

/// A type-0 configuration space: 256 bytes, a per-bit write mask, and BARs.
///
/// Writable by a guest: the command register bits in [`COMMAND_WRITABLE`], cache
/// line size, interrupt line, and the address bits of each BAR. Everything else
/// (IDs, status, header type, expansion ROM BAR, capabilities pointer) is read-only;
/// absent BARs and the expansion ROM BAR read 0, so sizing them finds nothing.
#[derive(Debug, Clone)]
pub struct PciConfigSpace {
    regs: [u32; CONFIG_SPACE_DWORDS],
    wmask: [u32; CONFIG_SPACE_DWORDS],
    bars: [Option<BarDef>; NUM_BARS],
}

impl PciConfigSpace {
    /// A header with `ids`, header type 0, command 0, no BARs.
    pub fn new(ids: PciIds) -> Self {
        let mut regs = [0u32; CONFIG_SPACE_DWORDS];
        let mut wmask = [0u32; CONFIG_SPACE_DWORDS];
        regs[0] = u32::from(ids.vendor_id) | (u32::from(ids.device_id) << 16);
        regs[2] = u32::from(ids.revision)
            | (u32::from(ids.prog_if) << 8)
            | (u32::from(ids.subclass) << 16)
            | (u32::from(ids.class) << 24);
        regs[11] = u32::from(ids.subsystem_vendor_id) | (u32::from(ids.subsystem_id) << 16);
        regs[15] = u32::from(ids.interrupt_pin) << 8;
        wmask[COMMAND_REG] = u32::from(COMMAND_WRITABLE);
        wmask[3] = 0x0000_00FF;
        wmask[15] = 0x0000_00FF;
        Self {
            regs,
            wmask,
            bars: [None; NUM_BARS],
        }
    }

    /// Add BAR `index` of `kind` and `size` bytes, assigned to `addr` (as firmware
    /// would have left it). Decoding still needs the command register bit.
    pub fn add_bar(
        &mut self,
        index: u8,
        kind: PciBarKind,
        size: u64,
        addr: u64,
    ) -> Result<(), PciError> {
        let i = usize::from(index);
        if i >= NUM_BARS {
            return Err(PciError::BadBarIndex(index));
        }
        let (min, limit) = match kind {
            PciBarKind::Io => (4, 0x1_0000),
            PciBarKind::Memory32 { .. } => (16, 0x1_0000_0000),
        };
        if !size.is_power_of_two() || size < min || size > limit {
            return Err(PciError::BadBarSize { size });
        }
        let aligned = addr & (size - 1) == 0;
        let fits = addr.checked_add(size).is_some_and(|end| end < limit);
        if addr == 0 || !aligned || !fits {
            return Err(PciError::BadBarAddress { addr, size });
        }
        let size_mask = !((size - 1) as u32);
        let (low_bits, addr_mask) = match kind {
            PciBarKind::Io => (0x1, size_mask & !0x3),
            PciBarKind::Memory32 { prefetchable } => {
                (if prefetchable { 0x8 } else { 0x0 }, size_mask & !0xF)
            }
        };
        self.wmask[BAR_REG_FIRST + i] = addr_mask;
        self.regs[BAR_REG_FIRST + i] = (addr as u32 & addr_mask) | low_bits;
        self.bars[i] = Some(BarDef { kind, size });
        Ok(())
    }

    /// Set the command register (firmware-style setup, no write mask applied).
    pub fn set_command(&mut self, command: u16) {
        self.regs[COMMAND_REG] = (self.regs[COMMAND_REG] & 0xFFFF_0000) | u32::from(command);
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.regs[COMMAND_REG] as u16
    }

    /// Read dword register `reg`; registers past the space read as all ones.
    pub fn read(&self, reg: usize) -> u32 {
        self.regs.get(reg).copied().unwrap_or(u32::MAX)
    }

    /// Write the bytes of `value` selected by `byte_enables` to dword register `reg`,
    /// through the write mask.
    pub fn write(&mut self, reg: usize, byte_enables: u8, value: u32) {
        let (Some(old), Some(wm)) = (self.regs.get(reg).copied(), self.wmask.get(reg).copied())
        else {
            return;
        };
        let mut be_mask = 0u32;
        for byte in 0..4 {
            if byte_enables & (1 << byte) != 0 {
                be_mask |= 0xFF << (8 * byte);
            }
        }
        let m = wm & be_mask;
        self.regs[reg] = (old & !m) | (value & m);
    }

    /// Where BAR `index` decodes now, if it does.
    pub fn bar_range(&self, index: u8) -> Option<PciBarRange> {
        let i = usize::from(index);
        let def = (*self.bars.get(i)?)?;
        let reg = self.regs[BAR_REG_FIRST + i];
        let addr = u64::from(reg & self.wmask[BAR_REG_FIRST + i]);
        let command = self.command();
        let (enabled, limit) = match def.kind {
            PciBarKind::Io => (command & COMMAND_IO != 0, 0x1_0000u64),
            PciBarKind::Memory32 { .. } => (command & COMMAND_MEMORY != 0, 0xFFFF_FFFFu64),
        };
        let last = addr + def.size - 1;
        if !enabled || addr == 0 || last >= limit {
            return None;
        }
        Some(PciBarRange {
            index,
            space: def.kind.space(),
            addr,
            size: def.size,
        })
    }

    /// Every BAR that decodes now.
    pub fn bar_ranges(&self) -> Vec<PciBarRange> {
        (0..NUM_BARS as u8)
            .filter_map(|i| self.bar_range(i))
            .collect()
    }
}

/// The host bridge at 00:00.0, identified like QEMU's i440FX (8086:1237, revision 2,
/// class 06/00/00). It has no BARs and no chipset registers.
#[derive(Debug)]
pub struct PciHostBridge {
    config: Mutex<PciConfigSpace>,
}

/// i440FX vendor ID.
pub const HOST_BRIDGE_VENDOR_ID: u16 = 0x8086;
/// i440FX device ID.
pub const HOST_BRIDGE_DEVICE_ID: u16 = 0x1237;

impl Default for PciHostBridge {
    fn default() -> Self {
        Self::new()
    }
}

impl PciHostBridge {
    /// The host bridge.
    pub fn new() -> Self {
        Self {
            config: Mutex::new(PciConfigSpace::new(PciIds {
                vendor_id: HOST_BRIDGE_VENDOR_ID,
                device_id: HOST_BRIDGE_DEVICE_ID,
                revision: 0x02,
                class: 0x06,
                subclass: 0x00,
                prog_if: 0x00,
                subsystem_vendor_id: SUBSYSTEM_VENDOR_QEMU,
                subsystem_id: SUBSYSTEM_ID_QEMU,
                interrupt_pin: 0,
            })),
        }
    }
}

impl PciDevice for PciHostBridge {
    fn read_config(&self, reg: usize) -> u32 {
        crate::lock(&self.config).read(reg)
    }

    fn write_config(&self, reg: usize, byte_enables: u8, value: u32) {
        crate::lock(&self.config).write(reg, byte_enables, value)
    }
}

const SLOTS: usize = 256;

/// Configuration mechanism #1 (ports 0xCF8..=0xCFF) in front of bus 0.
pub struct PciConfigIo {
    address: AtomicU32,
    rcr: AtomicU8,
    devices: Vec<Option<Arc<dyn PciDevice>>>,
    observer: Option<Arc<dyn PciBarObserver>>,
}

impl fmt::Debug for PciConfigIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let present: Vec<String> = self.devices().map(|(a, _)| a.to_string()).collect();
        f.debug_struct("PciConfigIo")
            .field("address", &self.address.load(Ordering::Relaxed))
            .field("devices", &present)
            .finish_non_exhaustive()
    }
}

impl Default for PciConfigIo {
    fn default() -> Self {
        Self::new()
    }
}

impl PciConfigIo {
    /// Bus 0 with the host bridge at 00:00.0.
    pub fn new() -> Self {
        let mut devices: Vec<Option<Arc<dyn PciDevice>>> = vec![None; SLOTS];
        devices[0] = Some(Arc::new(PciHostBridge::new()));
        Self {
            address: AtomicU32::new(0),
            rcr: AtomicU8::new(0),
            devices,
            observer: None,
        }
    }

    /// Put `device` at `addr` (bus 0). A guest finds functions other than 0 only if
    /// function 0 of the slot is present.
    pub fn add_device(
        &mut self,
        addr: PciAddress,
        device: Arc<dyn PciDevice>,
    ) -> Result<(), PciError> {
        let addr = PciAddress::new(addr.bus, addr.device, addr.function)?;
        if addr.bus != 0 {
            return Err(PciError::NoSuchBus(addr.bus));
        }
        let slot = &mut self.devices[usize::from(addr.devfn())];
        if slot.is_some() {
            return Err(PciError::SlotTaken(addr));
        }
        *slot = Some(device);
        Ok(())
    }

    /// Tell `observer` whenever a config write changes where a BAR decodes.
    pub fn set_bar_observer(&mut self, observer: Arc<dyn PciBarObserver>) {
        self.observer = Some(observer);
    }

    /// The function at `addr`, if any.
    pub fn device(&self, addr: PciAddress) -> Option<Arc<dyn PciDevice>> {
        if addr.bus != 0 || addr.device >= 32 || addr.function >= 8 {
            return None;
        }
        self.devices[usize::from(addr.devfn())].clone()
    }

    /// Every function present, in address order.
    pub fn devices(&self) -> impl Iterator<Item = (PciAddress, &Arc<dyn PciDevice>)> {
        self.devices.iter().enumerate().filter_map(|(devfn, d)| {
            d.as_ref().map(|d| {
                (
                    PciAddress {
                        bus: 0,
                        device: (devfn >> 3) as u8,
                        function: (devfn & 7) as u8,
                    },
                    d,
                )
            })
        })
    }

    /// The function CONFIG_ADDRESS selects and the byte offset it names (bits 7..0,
    /// bits 1:0 included), if configuration cycles are enabled and the function exists.
    fn selected(&self) -> Option<(PciAddress, &Arc<dyn PciDevice>, usize)> {
        let a = self.address.load(Ordering::Relaxed);
        if a & ENABLE_BIT == 0 {
            return None;
        }
        let bus = (a >> 16) as u8;
        let devfn = (a >> 8) as u8;
        if bus != 0 {
            return None;
        }
        let dev = self.devices[usize::from(devfn)].as_ref()?;
        let addr = PciAddress {
            bus,
            device: devfn >> 3,
            function: devfn & 7,
        };
        Some((addr, dev, (a & 0xFF) as usize))
    }

    fn data_read(&self, port_byte: usize, data: &mut [u8]) {
        data.fill(0xFF);
        let Some((_, dev, reg_base)) = self.selected() else {
            return;
        };
        let start = reg_base | port_byte;
        let mut cached: Option<(usize, u32)> = None;
        for (i, b) in data.iter_mut().enumerate() {
            let off = start + i;
            if port_byte + i >= 4 {
                continue;
            }
            if off >= CONFIG_SPACE_SIZE {
                *b = 0;
                continue;
            }
            let reg = off / 4;
            let value = match cached {
                Some((r, v)) if r == reg => v,
                _ => {
                    let v = dev.read_config(reg);
                    cached = Some((reg, v));
                    v
                }
            };
            *b = (value >> (8 * (off % 4))) as u8;
        }
    }

    fn data_write(&self, port_byte: usize, data: &[u8]) {
        let Some((addr, dev, reg_base)) = self.selected() else {
            return;
        };
        // Group the bytes by dword register: (reg, byte enables, value).
        let start = reg_base | port_byte;
        let mut writes: Vec<(usize, u8, u32)> = Vec::with_capacity(2);
        for (i, b) in data.iter().enumerate() {
            let off = start + i;
            if port_byte + i >= 4 || off >= CONFIG_SPACE_SIZE {
                continue;
            }
            let (reg, shift) = (off / 4, off % 4);
            match writes.last_mut() {
                Some((r, be, v)) if *r == reg => {
                    *be |= 1 << shift;
                    *v |= u32::from(*b) << (8 * shift);
                }
                _ => writes.push((reg, 1 << shift, u32::from(*b) << (8 * shift))),
            }
        }
        for (reg, be, value) in writes {
            let may_move_bars =
                reg == COMMAND_REG || (BAR_REG_FIRST..BAR_REG_FIRST + NUM_BARS).contains(&reg);
            match (&self.observer, may_move_bars) {
                (Some(observer), true) => {
                    let before = dev.bars();
                    dev.write_config(reg, be, value);
                    let after = dev.bars();
                    for index in 0..NUM_BARS as u8 {
                        let old = before.iter().find(|r| r.index == index).copied();
                        let new = after.iter().find(|r| r.index == index).copied();
                        if old != new {
                            observer.bar_changed(&PciBarChange {
                                device: addr,
                                index,
                                old,
                                new,
                            });
                        }
                    }
                }
                _ => dev.write_config(reg, be, value),
            }
        }
    }
}

impl BusDevice for PciConfigIo {
    fn read(&self, offset: u64, data: &mut [u8]) {
        match (offset, data.len()) {
            (CONFIG_ADDRESS_OFFSET, 4) => {
                data.copy_from_slice(&self.address.load(Ordering::Relaxed).to_le_bytes())
            }
            (RESET_CONTROL_OFFSET, 1) => data[0] = self.rcr.load(Ordering::Relaxed),
            (4..=7, _) => self.data_read((offset - CONFIG_DATA_OFFSET) as usize, data),
            _ => data.fill(0xFF),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        match (offset, data) {
            (CONFIG_ADDRESS_OFFSET, [a, b, c, d]) => {
                self.address
                    .store(u32::from_le_bytes([*a, *b, *c, *d]), Ordering::Relaxed);
            }
            (RESET_CONTROL_OFFSET, [v]) => {
                self.rcr.store(v & RCR_SYS_RESET, Ordering::Relaxed);
                if v & RCR_RESET_CPU != 0 {
                    return IoAction::Reset;
                }
            }
            (4..=7, _) => self.data_write((offset - CONFIG_DATA_OFFSET) as usize, data),
            _ => {}
        }
        IoAction::Continue
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::test_util::hammer;

    pub(crate) fn cfg_addr(bus: u8, dev: u8, func: u8, reg: u8) -> u32 {
        ENABLE_BIT
            | (u32::from(bus) << 16)
            | (u32::from(dev) << 11)
            | (u32::from(func) << 8)
            | u32::from(reg & 0xFC)
    }

    pub(crate) fn read32(pci: &PciConfigIo, dev: u8, reg: u8) -> u32 {
        pci.write(0, &cfg_addr(0, dev, 0, reg).to_le_bytes());
        let mut b = [0u8; 4];
        pci.read(4, &mut b);
        u32::from_le_bytes(b)
    }

    pub(crate) fn write32(pci: &PciConfigIo, dev: u8, reg: u8, v: u32) {
        pci.write(0, &cfg_addr(0, dev, 0, reg).to_le_bytes());
        pci.write(4, &v.to_le_bytes());
    }

    #[test]
    fn host_bridge_identity() {
        let pci = PciConfigIo::new();
        assert_eq!(read32(&pci, 0, 0x00), 0x1237_8086);
        assert_eq!(read32(&pci, 0, 0x08) >> 8, 0x06_00_00);
        assert_eq!(read32(&pci, 0, 0x08) & 0xFF, 0x02);
        assert_eq!((read32(&pci, 0, 0x0C) >> 16) & 0xFF, 0);
        // No BARs: sizing finds nothing.
        write32(&pci, 0, 0x10, u32::MAX);
        assert_eq!(read32(&pci, 0, 0x10), 0);
    }

    #[test]
    fn absent_functions_read_all_ones() {
        let pci = PciConfigIo::new();
        assert_eq!(read32(&pci, 1, 0), u32::MAX);
        assert_eq!(read32(&pci, 31, 0), u32::MAX);
        pci.write(0, &cfg_addr(0, 0, 1, 0).to_le_bytes());
        let mut b = [0u8; 4];
        pci.read(4, &mut b);
        assert_eq!(b, [0xFF; 4]);
        pci.write(0, &cfg_addr(1, 0, 0, 0).to_le_bytes());
        pci.read(4, &mut b);
        assert_eq!(b, [0xFF; 4]);
        // Enable bit clear.
        pci.write(0, &(cfg_addr(0, 0, 0, 0) & !ENABLE_BIT).to_le_bytes());
        pci.read(4, &mut b);
        assert_eq!(b, [0xFF; 4]);
        // Writes to absent functions vanish.
        write32(&pci, 5, 0x04, 0x7);
        assert_eq!(read32(&pci, 5, 0x04), u32::MAX);
    }

    #[test]
    fn address_register_round_trip() {
        let pci = PciConfigIo::new();
        let a = cfg_addr(0, 3, 0, 0x10) | 0x3;
        pci.write(0, &a.to_le_bytes());
        let mut b = [0u8; 4];
        pci.read(0, &mut b);
        assert_eq!(u32::from_le_bytes(b), a);
        // Narrow accesses to 0xCF8 neither latch nor read the register.
        pci.write(0, &[0, 0]);
        pci.read(0, &mut b);
        assert_eq!(u32::from_le_bytes(b), a);
        let mut w = [0u8; 2];
        pci.read(0, &mut w);
        assert_eq!(w, [0xFF, 0xFF]);
    }

    #[test]
    fn narrow_data_accesses_at_each_port() {
        let pci = PciConfigIo::new();
        pci.write(0, &cfg_addr(0, 0, 0, 0).to_le_bytes());
        let mut b1 = [0u8; 1];
        let expect = 0x1237_8086u32.to_le_bytes();
        for port in 0..4u64 {
            pci.read(4 + port, &mut b1);
            assert_eq!(b1[0], expect[port as usize]);
        }
        let mut b2 = [0u8; 2];
        pci.read(6, &mut b2);
        assert_eq!(u16::from_le_bytes(b2), 0x1237);
        // A 16-bit access at 0xCFF reaches only the last byte.
        pci.read(7, &mut b2);
        assert_eq!(b2, [0x12, 0xFF]);
        // Byte write to the cache line size register (0x0C).
        pci.write(0, &cfg_addr(0, 0, 0, 0x0C).to_le_bytes());
        pci.write(4, &[0x10]);
        pci.write(5, &[0x20]); // latency timer is read-only here
        assert_eq!(read32(&pci, 0, 0x0C) & 0xFFFF, 0x0010);
        // Interrupt line through a byte write at 0xCFC with register 0x3C.
        pci.write(0, &cfg_addr(0, 0, 0, 0x3C).to_le_bytes());
        pci.write(4, &[0x0B]);
        assert_eq!(read32(&pci, 0, 0x3C) & 0xFF, 0x0B);
    }

    /// The bytes QEMU's `pci_host_data_read` returns for an access of `len` bytes at
    /// port 0xCFC + `port` with CONFIG_ADDRESS bits 7..0 = `low`, given the function's
    /// 256 configuration bytes: from `low | port` on, clamped to the port range (the
    /// rest all ones) and to the configuration space (the rest zero).
    fn qemu_data_read(space: &[u8; 256], low: usize, port: usize, len: usize) -> Vec<u8> {
        let start = low | port;
        (0..len)
            .map(|i| match (port + i < 4, start + i < 256) {
                (false, _) => 0xFF,
                (true, false) => 0,
                (true, true) => space[start + i],
            })
            .collect()
    }

    #[test]
    fn config_address_low_bits_select_the_byte_at_every_offset_and_size() {
        let pci = PciConfigIo::new();
        let mut space = [0u8; 256];
        for reg in 0..64u8 {
            space[usize::from(reg) * 4..][..4]
                .copy_from_slice(&read32(&pci, 0, reg * 4).to_le_bytes());
        }
        for reg in [0x00u8, 0x08, 0x0C, 0x3C, 0xFC] {
            for low in 0..4u8 {
                pci.write(0, &(cfg_addr(0, 0, 0, reg) | u32::from(low)).to_le_bytes());
                for port in 0..4usize {
                    for len in [1usize, 2, 4] {
                        let mut got = vec![0u8; len];
                        pci.read(CONFIG_DATA_OFFSET + port as u64, &mut got);
                        let want = qemu_data_read(&space, usize::from(reg | low), port, len);
                        assert_eq!(
                            got,
                            want,
                            "reg {reg:#x} low bits {low} port 0xCF{:X} size {len}",
                            0xC + port
                        );
                    }
                }
            }
        }
        // The case test libraries rely on: the device ID with a 16-bit read of 0xCFC.
        pci.write(0, &(cfg_addr(0, 0, 0, 0) | 2).to_le_bytes());
        let mut w = [0u8; 2];
        pci.read(CONFIG_DATA_OFFSET, &mut w);
        assert_eq!(u16::from_le_bytes(w), 0x1237);
    }

    #[test]
    fn config_address_low_bits_select_the_byte_written() {
        let pci = PciConfigIo::new();
        let command = |pci: &PciConfigIo| read32(pci, 0, 0x04) as u16;
        write32(&pci, 0, 0x04, 0);
        // 0x04 | 2 at 0xCFC is the status register, not the command register.
        pci.write(0, &(cfg_addr(0, 0, 0, 0x04) | 2).to_le_bytes());
        pci.write(CONFIG_DATA_OFFSET, &0xFFFFu16.to_le_bytes());
        assert_eq!(command(&pci), 0);
        // 0x04 | 0 at 0xCFC is.
        pci.write(0, &cfg_addr(0, 0, 0, 0x04).to_le_bytes());
        pci.write(CONFIG_DATA_OFFSET, &0x0007u16.to_le_bytes());
        assert_eq!(command(&pci), 0x0007);
        // 0x04 | 1 at 0xCFC is the command register's high byte (bits 8 and 10
        // writable), and so is 0x04 | 1 at 0xCFD (1 | 1 = 1: OR, not a sum).
        pci.write(0, &(cfg_addr(0, 0, 0, 0x04) | 1).to_le_bytes());
        pci.write(CONFIG_DATA_OFFSET, &[0x01]);
        assert_eq!(command(&pci), 0x0107);
        pci.write(CONFIG_DATA_OFFSET + 1, &[0x04]);
        assert_eq!(command(&pci), 0x0407);
        // 0x04 | 3 at 0xCFC, 16 bits: status high byte then 0x08 (read-only revision).
        pci.write(0, &(cfg_addr(0, 0, 0, 0x04) | 3).to_le_bytes());
        pci.write(CONFIG_DATA_OFFSET, &[0xFF, 0xFF]);
        assert_eq!(command(&pci), 0x0407);
        assert_eq!(read32(&pci, 0, 0x08) & 0xFF, 0x02);
    }

    #[test]
    fn reset_control_register() {
        let pci = PciConfigIo::new();
        assert_eq!(pci.write(1, &[0x02]), IoAction::Continue);
        let mut b = [0u8];
        pci.read(1, &mut b);
        assert_eq!(b[0], 0x02);
        assert_eq!(pci.write(1, &[0x06]), IoAction::Reset);
        assert_eq!(pci.write(1, &[0x0E, 0]), IoAction::Continue);
    }

    #[test]
    fn add_device_checks() {
        let mut pci = PciConfigIo::new();
        let a = PciAddress::new(0, 0, 0).unwrap();
        assert_eq!(
            pci.add_device(a, Arc::new(PciHostBridge::new())),
            Err(PciError::SlotTaken(a))
        );
        assert!(PciAddress::new(0, 32, 0).is_err());
        assert!(PciAddress::new(0, 1, 8).is_err());
        let b1 = PciAddress::new(1, 0, 0).unwrap();
        assert_eq!(
            pci.add_device(b1, Arc::new(PciHostBridge::new())),
            Err(PciError::NoSuchBus(1))
        );
        let a5 = PciAddress::new(0, 5, 0).unwrap();
        pci.add_device(a5, Arc::new(PciHostBridge::new())).unwrap();
        assert!(pci.device(a5).is_some());
        assert_eq!(pci.devices().count(), 2);
        assert_eq!(a5.to_string(), "00:05.0");
    }

    #[test]
    fn config_space_bar_rules() {
        let ids = PciIds {
            vendor_id: 1,
            device_id: 2,
            revision: 0,
            class: 0xFF,
            subclass: 0,
            prog_if: 0,
            subsystem_vendor_id: 0,
            subsystem_id: 0,
            interrupt_pin: 0,
        };
        let mut cs = PciConfigSpace::new(ids);
        assert_eq!(
            cs.add_bar(6, PciBarKind::Io, 16, 0x100),
            Err(PciError::BadBarIndex(6))
        );
        assert!(cs.add_bar(0, PciBarKind::Io, 24, 0x100).is_err());
        assert!(cs.add_bar(0, PciBarKind::Io, 256, 0x180).is_err());
        assert!(cs.add_bar(0, PciBarKind::Io, 256, 0xFF00).is_err());
        assert!(cs
            .add_bar(
                0,
                PciBarKind::Memory32 {
                    prefetchable: false
                },
                8,
                0x1000
            )
            .is_err());
        cs.add_bar(
            2,
            PciBarKind::Memory32 { prefetchable: true },
            0x1000,
            0xE000_0000,
        )
        .unwrap();
        assert_eq!(cs.read(6), 0xE000_0008);
        // Not decoding until the command register says so.
        assert_eq!(cs.bar_range(2), None);
        cs.set_command(COMMAND_MEMORY);
        assert_eq!(
            cs.bar_range(2),
            Some(PciBarRange {
                index: 2,
                space: IoSpace::Mmio,
                addr: 0xE000_0000,
                size: 0x1000
            })
        );
        // Sizing pattern does not decode.
        cs.write(6, 0xF, u32::MAX);
        assert_eq!(cs.read(6), 0xFFFF_F008);
        assert_eq!(cs.bar_range(2), None);
        // Status, IDs and the ROM BAR are read-only.
        cs.write(0, 0xF, 0);
        cs.write(1, 0xF, u32::MAX);
        cs.write(12, 0xF, u32::MAX);
        assert_eq!(cs.read(0), 0x0002_0001);
        assert_eq!(cs.read(1), u32::from(COMMAND_WRITABLE));
        assert_eq!(cs.read(12), 0);
        assert_eq!(cs.read(64), u32::MAX);
        cs.write(64, 0xF, 0);
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        let pci = PciConfigIo::new();
        hammer(&pci, 16);
        for reg in (0..=0xFFu8).step_by(1) {
            pci.write(0, &cfg_addr(0, 0, 0, reg).to_le_bytes());
            for port in 4..8u64 {
                for w in [1usize, 2, 3, 4, 8] {
                    let mut b = vec![0u8; w];
                    pci.read(port, &mut b);
                    pci.write(port, &b);
                }
            }
        }
    }
}
