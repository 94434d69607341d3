//! QEMU's firmware configuration device (fw_cfg), port I/O interface only.
//!
//! Ports (offsets from 0x510, [`crate::pc::FW_CFG`]):
//! - 0x510, selector: a 16-bit write selects an item by key and rewinds its read
//!   offset to 0;
//! - 0x511, data: each 1-byte read returns the next byte of the selected item, and 0
//!   once past its end or when the key names no item. A 1-byte read at 0x510 does the
//!   same (QEMU decodes both ports as one register pair). Data writes are ignored
//!   (QEMU dropped the write path in 2.4).
//!
//! Any other access width reads as 0 and is ignored on write. There is no DMA
//! interface (port 0x514): [`FW_CFG_ID`] reports the traditional interface only.
//!
//! Keys (bit 14, the historical "write" flag, is ignored; bit 15 selects the
//! architecture-specific items). Integers are little-endian unless noted.
//!
//! | key  | item |
//! |------|------|
//! | 0x00 | signature, the 4 bytes `QEMU` |
//! | 0x01 | interface id, u32: bit 0 traditional interface, bit 1 DMA (here 1) |
//! | 0x03 | RAM size in bytes, u64 |
//! | 0x05 | number of boot CPUs, u16 |
//! | 0x07 | kernel load address, u32 (set with [`FwCfg::set_kernel`]) |
//! | 0x08 | kernel size, u32 |
//! | 0x0A | initrd load address, u32 (set with [`FwCfg::set_initrd`]) |
//! | 0x0B | initrd size, u32 |
//! | 0x0F | maximum number of CPUs, u16 |
//! | 0x11 | kernel image bytes |
//! | 0x12 | initrd bytes |
//! | 0x13 | command line address, u32 (set with [`FwCfg::set_cmdline`]) |
//! | 0x14 | command line size including its NUL, u32 |
//! | 0x15 | command line bytes, NUL-terminated |
//! | 0x16 | Linux setup (real-mode) header load address, u32 ([`FwCfg::set_setup`]) |
//! | 0x17 | setup size, u32 |
//! | 0x18 | setup bytes |
//! | 0x19 | file directory (big-endian, see below) |
//! | 0x20.. | files, in the order [`FwCfg::add_file`] added them |
//!
//! Other keys, including 0x8000.. (ACPI tables, e820 and other x86 items) unless
//! set with [`FwCfg::set_item`], read as zeros.
//!
//! The file directory is a big-endian u32 count followed by one 64-byte entry per
//! file: size (u32, big-endian), selector key (u16, big-endian), a reserved u16, and
//! the name, NUL-padded to 56 bytes.
//!
//! Why hand-written: no maintained crate implements the device side of fw_cfg (the
//! crates that exist are guest-side readers).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::{BusDevice, IoAction};

/// Offset of the selector port (0x510).
pub const SELECTOR_OFFSET: u64 = 0;
/// Offset of the data port (0x511).
pub const DATA_OFFSET: u64 = 1;

/// Key of the signature item.
pub const FW_CFG_SIGNATURE: u16 = 0x00;
/// Key of the interface id item.
pub const FW_CFG_ID: u16 = 0x01;
/// Key of the RAM size item.
pub const FW_CFG_RAM_SIZE: u16 = 0x03;
/// Key of the boot CPU count item.
pub const FW_CFG_NB_CPUS: u16 = 0x05;
/// Key of the kernel load address item.
pub const FW_CFG_KERNEL_ADDR: u16 = 0x07;
/// Key of the kernel size item.
pub const FW_CFG_KERNEL_SIZE: u16 = 0x08;
/// Key of the initrd load address item.
pub const FW_CFG_INITRD_ADDR: u16 = 0x0A;
/// Key of the initrd size item.
pub const FW_CFG_INITRD_SIZE: u16 = 0x0B;
/// Key of the maximum CPU count item.
pub const FW_CFG_MAX_CPUS: u16 = 0x0F;
/// Key of the kernel image item.
pub const FW_CFG_KERNEL_DATA: u16 = 0x11;
/// Key of the initrd image item.
pub const FW_CFG_INITRD_DATA: u16 = 0x12;
/// Key of the command line address item.
pub const FW_CFG_CMDLINE_ADDR: u16 = 0x13;
/// Key of the command line size item.
pub const FW_CFG_CMDLINE_SIZE: u16 = 0x14;
/// Key of the command line bytes item.
pub const FW_CFG_CMDLINE_DATA: u16 = 0x15;
/// Key of the setup header address item.
pub const FW_CFG_SETUP_ADDR: u16 = 0x16;
/// Key of the setup size item.
pub const FW_CFG_SETUP_SIZE: u16 = 0x17;
/// Key of the setup bytes item.
pub const FW_CFG_SETUP_DATA: u16 = 0x18;
/// Key of the file directory.
pub const FW_CFG_FILE_DIR: u16 = 0x19;
/// Key of the first file.
pub const FW_CFG_FILE_FIRST: u16 = 0x20;
/// The historical write flag in a key; ignored.
pub const FW_CFG_WRITE_CHANNEL: u16 = 0x4000;
/// Flag for architecture-specific keys.
pub const FW_CFG_ARCH_LOCAL: u16 = 0x8000;
/// Bits of a key that number an item within its (generic or arch) space.
pub const FW_CFG_ENTRY_MASK: u16 = !(FW_CFG_WRITE_CHANNEL | FW_CFG_ARCH_LOCAL);
/// Longest file name, not counting its NUL.
pub const FW_CFG_MAX_FILE_NAME: usize = 55;
/// Most files the key space holds.
pub const FW_CFG_MAX_FILES: usize = (FW_CFG_ENTRY_MASK - FW_CFG_FILE_FIRST + 1) as usize;

const FILE_ENTRY_SIZE: usize = 64;
const FILE_NAME_SIZE: usize = 56;

/// Errors while filling the fw_cfg items.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FwCfgError {
    /// A file name is empty, too long, or holds a NUL.
    #[error("fw_cfg file name {0:?} is invalid: use 1 to 55 bytes without NUL")]
    BadFileName(String),
    /// A file of that name exists already.
    #[error("fw_cfg file {0:?} was added twice: give each file a distinct name")]
    DuplicateFile(String),
    /// The key space for files is used up.
    #[error("fw_cfg holds at most {FW_CFG_MAX_FILES} files: add fewer")]
    TooManyFiles,
    /// An item is 4 GiB or larger; sizes are 32-bit.
    #[error("fw_cfg item {name:?} is {len} bytes; items must be smaller than 4 GiB")]
    TooLarge {
        /// The item.
        name: String,
        /// Its length.
        len: usize,
    },
    /// [`FwCfg::set_item`] was given a key it may not set.
    #[error("fw_cfg key {0:#06x} cannot be set directly: use add_file for files, and keys below 0x20 other than the file directory, or 0x8000 and up")]
    ReservedKey(u16),
}

#[derive(Debug)]
struct Cursor {
    item: Option<Arc<[u8]>>,
    offset: usize,
}

/// The fw_cfg device.
///
/// Items are set up through `&mut self` before the device is shared; the guest only
/// reads them.
#[derive(Debug)]
pub struct FwCfg {
    items: BTreeMap<u16, Arc<[u8]>>,
    files: Vec<(String, u16)>,
    cursor: Mutex<Cursor>,
}

fn normalize(key: u16) -> u16 {
    key & !FW_CFG_WRITE_CHANNEL
}

fn size_u32(name: &str, len: usize) -> Result<u32, FwCfgError> {
    u32::try_from(len).map_err(|_| FwCfgError::TooLarge {
        name: name.to_string(),
        len,
    })
}

impl FwCfg {
    /// A device with the signature, the interface id, the RAM size (`ram_size` bytes),
    /// `cpus` boot CPUs and at most `max_cpus` CPUs (raised to `cpus` if lower), and an
    /// empty file directory.
    pub fn new(ram_size: u64, cpus: u16, max_cpus: u16) -> Self {
        let mut s = Self {
            items: BTreeMap::new(),
            files: Vec::new(),
            cursor: Mutex::new(Cursor {
                item: None,
                offset: 0,
            }),
        };
        s.put(FW_CFG_SIGNATURE, b"QEMU".to_vec());
        s.put(FW_CFG_ID, 1u32.to_le_bytes().to_vec());
        s.put(FW_CFG_RAM_SIZE, ram_size.to_le_bytes().to_vec());
        s.put(FW_CFG_NB_CPUS, cpus.to_le_bytes().to_vec());
        s.put(FW_CFG_MAX_CPUS, max_cpus.max(cpus).to_le_bytes().to_vec());
        s.rebuild_dir();
        s
    }

    fn put(&mut self, key: u16, bytes: Vec<u8>) {
        self.items.insert(normalize(key), Arc::from(bytes));
    }

    fn rebuild_dir(&mut self) {
        let mut dir = Vec::with_capacity(4 + self.files.len() * FILE_ENTRY_SIZE);
        dir.extend_from_slice(&(self.files.len() as u32).to_be_bytes());
        for (name, key) in &self.files {
            let size = self.items.get(key).map_or(0, |d| d.len() as u32);
            dir.extend_from_slice(&size.to_be_bytes());
            dir.extend_from_slice(&key.to_be_bytes());
            dir.extend_from_slice(&[0, 0]);
            let mut raw = [0u8; FILE_NAME_SIZE];
            raw[..name.len()].copy_from_slice(name.as_bytes());
            dir.extend_from_slice(&raw);
        }
        self.put(FW_CFG_FILE_DIR, dir);
    }

    /// Add a named file (e.g. `etc/e820`, `opt/exitlab/params`) and return the key it
    /// was given (0x20 for the first file, then counting up).
    pub fn add_file(&mut self, name: &str, bytes: Vec<u8>) -> Result<u16, FwCfgError> {
        if name.is_empty() || name.len() > FW_CFG_MAX_FILE_NAME || name.contains('\0') {
            return Err(FwCfgError::BadFileName(name.to_string()));
        }
        if self.files.iter().any(|(n, _)| n == name) {
            return Err(FwCfgError::DuplicateFile(name.to_string()));
        }
        if self.files.len() >= FW_CFG_MAX_FILES {
            return Err(FwCfgError::TooManyFiles);
        }
        size_u32(name, bytes.len())?;
        let key = FW_CFG_FILE_FIRST + self.files.len() as u16;
        self.put(key, bytes);
        self.files.push((name.to_string(), key));
        self.rebuild_dir();
        Ok(key)
    }

    /// Set a raw item: a generic key below 0x20 (other than the file directory) or an
    /// architecture key (0x8000 and up, e.g. 0x8003 for the e820 table).
    pub fn set_item(&mut self, key: u16, bytes: Vec<u8>) -> Result<(), FwCfgError> {
        let k = normalize(key);
        let entry = k & FW_CFG_ENTRY_MASK;
        let generic = k & FW_CFG_ARCH_LOCAL == 0;
        if generic && (entry == FW_CFG_FILE_DIR || entry >= FW_CFG_FILE_FIRST) {
            return Err(FwCfgError::ReservedKey(key));
        }
        size_u32(&format!("key {key:#06x}"), bytes.len())?;
        self.put(k, bytes);
        Ok(())
    }

    fn set_blob(
        &mut self,
        what: &str,
        keys: (u16, u16, u16),
        addr: u32,
        bytes: Vec<u8>,
    ) -> Result<(), FwCfgError> {
        let size = size_u32(what, bytes.len())?;
        self.put(keys.0, addr.to_le_bytes().to_vec());
        self.put(keys.1, size.to_le_bytes().to_vec());
        self.put(keys.2, bytes);
        Ok(())
    }

    /// Provide a kernel image for firmware to load at `addr` (keys 0x07, 0x08, 0x11).
    pub fn set_kernel(&mut self, addr: u32, image: Vec<u8>) -> Result<(), FwCfgError> {
        self.set_blob(
            "kernel",
            (FW_CFG_KERNEL_ADDR, FW_CFG_KERNEL_SIZE, FW_CFG_KERNEL_DATA),
            addr,
            image,
        )
    }

    /// Provide an initrd for firmware to load at `addr` (keys 0x0A, 0x0B, 0x12).
    pub fn set_initrd(&mut self, addr: u32, image: Vec<u8>) -> Result<(), FwCfgError> {
        self.set_blob(
            "initrd",
            (FW_CFG_INITRD_ADDR, FW_CFG_INITRD_SIZE, FW_CFG_INITRD_DATA),
            addr,
            image,
        )
    }

    /// Provide a Linux setup header for firmware to load at `addr` (keys 0x16, 0x17,
    /// 0x18).
    pub fn set_setup(&mut self, addr: u32, setup: Vec<u8>) -> Result<(), FwCfgError> {
        self.set_blob(
            "setup",
            (FW_CFG_SETUP_ADDR, FW_CFG_SETUP_SIZE, FW_CFG_SETUP_DATA),
            addr,
            setup,
        )
    }

    /// Provide a kernel command line for firmware to place at `addr` (keys 0x13,
    /// 0x14, 0x15); a NUL is appended, and the size counts it, as on QEMU.
    pub fn set_cmdline(&mut self, addr: u32, cmdline: &str) -> Result<(), FwCfgError> {
        let mut bytes = cmdline.as_bytes().to_vec();
        bytes.push(0);
        self.set_blob(
            "cmdline",
            (
                FW_CFG_CMDLINE_ADDR,
                FW_CFG_CMDLINE_SIZE,
                FW_CFG_CMDLINE_DATA,
            ),
            addr,
            bytes,
        )
    }

    /// The bytes of the item at `key`, if there is one.
    pub fn item(&self, key: u16) -> Option<&[u8]> {
        self.items.get(&normalize(key)).map(|d| &d[..])
    }

    /// Select `key` and rewind, as a guest write to the selector port does.
    pub fn select(&self, key: u16) {
        let item = self.items.get(&normalize(key)).cloned();
        let mut c = self.lock();
        c.item = item;
        c.offset = 0;
    }

    /// The next data byte, as a guest read of the data port returns it.
    pub fn read_data_byte(&self) -> u8 {
        let mut c = self.lock();
        let b = c
            .item
            .as_ref()
            .and_then(|d| d.get(c.offset).copied())
            .unwrap_or(0);
        c.offset = c.offset.saturating_add(1);
        b
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cursor> {
        crate::lock(&self.cursor)
    }
}

impl BusDevice for FwCfg {
    fn read(&self, offset: u64, data: &mut [u8]) {
        match (offset, data.len()) {
            (SELECTOR_OFFSET | DATA_OFFSET, 1) => data[0] = self.read_data_byte(),
            _ => data.fill(0),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> IoAction {
        if let (SELECTOR_OFFSET, [lo, hi]) = (offset, data) {
            self.select(u16::from_le_bytes([*lo, *hi]));
        }
        IoAction::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hammer;

    fn read_item(f: &FwCfg, key: u16, len: usize) -> Vec<u8> {
        f.write(SELECTOR_OFFSET, &key.to_le_bytes());
        (0..len)
            .map(|_| {
                let mut b = [0u8];
                f.read(DATA_OFFSET, &mut b);
                b[0]
            })
            .collect()
    }

    #[test]
    fn signature_id_ram_cpus() {
        let f = FwCfg::new(0x1_2345_6789, 4, 8);
        assert_eq!(read_item(&f, FW_CFG_SIGNATURE, 4), b"QEMU");
        assert_eq!(read_item(&f, FW_CFG_ID, 4), [1, 0, 0, 0]);
        assert_eq!(
            read_item(&f, FW_CFG_RAM_SIZE, 8),
            0x1_2345_6789u64.to_le_bytes()
        );
        assert_eq!(read_item(&f, FW_CFG_NB_CPUS, 2), [4, 0]);
        assert_eq!(read_item(&f, FW_CFG_MAX_CPUS, 2), [8, 0]);
        // The write-channel bit is ignored.
        assert_eq!(read_item(&f, FW_CFG_SIGNATURE | 0x4000, 4), b"QEMU");
    }

    #[test]
    fn reads_past_end_and_unknown_keys_are_zero() {
        let f = FwCfg::new(1 << 30, 1, 1);
        assert_eq!(read_item(&f, FW_CFG_SIGNATURE, 6), b"QEMU\0\0");
        assert_eq!(read_item(&f, 0x0D, 4), [0; 4]);
        assert_eq!(read_item(&f, 0x8003, 4), [0; 4]);
        assert_eq!(read_item(&f, 0x3FFF, 4), [0; 4]);
        // Reselecting rewinds.
        assert_eq!(read_item(&f, FW_CFG_SIGNATURE, 2), b"QE");
        assert_eq!(read_item(&f, FW_CFG_SIGNATURE, 2), b"QE");
    }

    #[test]
    fn byte_read_at_selector_port_reads_data() {
        let f = FwCfg::new(0, 1, 1);
        f.write(SELECTOR_OFFSET, &FW_CFG_SIGNATURE.to_le_bytes());
        let mut b = [0u8];
        f.read(SELECTOR_OFFSET, &mut b);
        assert_eq!(b[0], b'Q');
        f.read(DATA_OFFSET, &mut b);
        assert_eq!(b[0], b'E');
        // Wider reads do not advance.
        let mut w = [0xFFu8; 2];
        f.read(DATA_OFFSET, &mut w);
        assert_eq!(w, [0, 0]);
        f.read(DATA_OFFSET, &mut b);
        assert_eq!(b[0], b'M');
        // A byte write to the selector port does not select.
        f.write(SELECTOR_OFFSET, &[0]);
        f.read(DATA_OFFSET, &mut b);
        assert_eq!(b[0], b'U');
    }

    #[test]
    fn file_directory_bytes() {
        let mut f = FwCfg::new(0, 1, 1);
        assert_eq!(read_item(&f, FW_CFG_FILE_DIR, 4), [0, 0, 0, 0]);
        assert_eq!(f.add_file("etc/one", vec![1, 2, 3]), Ok(0x20));
        assert_eq!(f.add_file("opt/two", vec![0xAB; 300]), Ok(0x21));
        let dir = read_item(&f, FW_CFG_FILE_DIR, 4 + 2 * 64 + 4);
        assert_eq!(&dir[..4], &[0, 0, 0, 2]);
        let e0 = &dir[4..68];
        assert_eq!(&e0[..4], &[0, 0, 0, 3]);
        assert_eq!(&e0[4..6], &[0x00, 0x20]);
        assert_eq!(&e0[6..8], &[0, 0]);
        assert_eq!(&e0[8..15], b"etc/one");
        assert!(e0[15..].iter().all(|b| *b == 0));
        let e1 = &dir[68..132];
        assert_eq!(&e1[..4], &300u32.to_be_bytes());
        assert_eq!(&e1[4..6], &[0x00, 0x21]);
        assert_eq!(&e1[8..15], b"opt/two");
        assert_eq!(&dir[132..], &[0; 4]);
        assert_eq!(read_item(&f, 0x20, 4), [1, 2, 3, 0]);
        assert_eq!(read_item(&f, 0x21, 2), [0xAB, 0xAB]);
    }

    #[test]
    fn file_name_checks() {
        let mut f = FwCfg::new(0, 1, 1);
        let long = "x".repeat(56);
        assert!(matches!(
            f.add_file(&long, vec![]),
            Err(FwCfgError::BadFileName(_))
        ));
        assert!(f.add_file(&"y".repeat(55), vec![]).is_ok());
        assert!(matches!(
            f.add_file("", vec![]),
            Err(FwCfgError::BadFileName(_))
        ));
        assert!(f.add_file("a", vec![]).is_ok());
        assert_eq!(
            f.add_file("a", vec![]),
            Err(FwCfgError::DuplicateFile("a".into()))
        );
    }

    #[test]
    fn kernel_initrd_cmdline_items() {
        let mut f = FwCfg::new(0, 1, 1);
        f.set_cmdline(0x20000, "console=ttyS0").unwrap();
        assert_eq!(read_item(&f, FW_CFG_CMDLINE_SIZE, 4), [14, 0, 0, 0]);
        assert_eq!(read_item(&f, FW_CFG_CMDLINE_DATA, 14), b"console=ttyS0\0");
        assert_eq!(
            read_item(&f, FW_CFG_CMDLINE_ADDR, 4),
            0x20000u32.to_le_bytes()
        );
        f.set_kernel(0x100000, vec![7; 10]).unwrap();
        assert_eq!(read_item(&f, FW_CFG_KERNEL_SIZE, 4), [10, 0, 0, 0]);
        assert_eq!(
            read_item(&f, FW_CFG_KERNEL_ADDR, 4),
            0x100000u32.to_le_bytes()
        );
        assert_eq!(read_item(&f, FW_CFG_KERNEL_DATA, 2), [7, 7]);
        f.set_initrd(0x800_0000, vec![9; 5]).unwrap();
        assert_eq!(read_item(&f, FW_CFG_INITRD_SIZE, 4), [5, 0, 0, 0]);
        assert_eq!(read_item(&f, FW_CFG_INITRD_DATA, 1), [9]);
        f.set_setup(0x10000, vec![1, 2]).unwrap();
        assert_eq!(read_item(&f, FW_CFG_SETUP_DATA, 2), [1, 2]);
        f.set_item(0x8003, vec![5, 6]).unwrap();
        assert_eq!(read_item(&f, 0x8003, 2), [5, 6]);
        assert_eq!(
            f.set_item(FW_CFG_FILE_DIR, vec![]),
            Err(FwCfgError::ReservedKey(FW_CFG_FILE_DIR))
        );
        assert_eq!(f.set_item(0x25, vec![]), Err(FwCfgError::ReservedKey(0x25)));
        assert_eq!(f.item(FW_CFG_SIGNATURE), Some(&b"QEMU"[..]));
    }

    #[test]
    fn no_panic_on_odd_accesses() {
        let mut f = FwCfg::new(1, 1, 1);
        f.add_file("etc/x", vec![1; 3]).unwrap();
        hammer(&f, 4);
        for key in [0u16, 0x19, 0x20, 0x3FFF, 0x4000, 0x8000, 0xFFFF] {
            read_item(&f, key, 100);
        }
    }
}
