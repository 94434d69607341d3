//! ACPI tables in the BIOS area, found the standard way (a scan of 0xE0000..0xFFFFF for
//! the RSDP on 16-byte boundaries).
//!
//! Layout from [`ACPI_START`] (0xE0000), each table 16-byte aligned (FACS 64-byte):
//! RSDP (revision 2), RSDT, XSDT, FADT (revision 6), FACS, MADT, DSDT. The region
//! 0xE0000..0x100000 is e820-reserved.
//!
//! The FADT describes a PIIX4-style PM block in I/O space (not hardware-reduced):
//! PM1a event block at [`PM1A_EVT_BLK`], PM1a control block at [`PM1A_CNT_BLK`], the PM
//! timer at [`PM_TMR_BLK`] (24 or 32 bits), SCI on IRQ [`SCI_IRQ`], no GPE block, no SMI
//! command port (the machine is always in ACPI mode) and the i8042 reset
//! ([`RESET_PORT`] <- [`RESET_VALUE`]) as the reset register. The DSDT declares one PCI
//! host bridge (`\_SB.PCI0`, PNP0A03, bus 0).
//!
//! Why hand-written: rust-vmm's `acpi_tables` builds tables and AML in general; these
//! seven small tables must sit at fixed places in the BIOS area with QEMU's field
//! values, a few dozen lines each, so writing them directly is shorter than adapting a
//! general builder. If the DSDT grows beyond a few names, that crate is the way.

use vm_memory::GuestMemoryBackend;

use crate::error::{BootError, Result};
use crate::layout::{align_up, write_bytes, zero_bytes, ACPI_END, ACPI_START};

/// I/O port of the PM1a event block (4 bytes: status, enable).
pub const PM1A_EVT_BLK: u16 = 0xB000;
/// I/O port of the PM1a control block (2 bytes).
pub const PM1A_CNT_BLK: u16 = 0xB004;
/// I/O port of the ACPI PM timer (4 bytes).
pub const PM_TMR_BLK: u16 = 0xB008;
/// IRQ (and GSI) of the SCI.
pub const SCI_IRQ: u16 = 9;
/// Physical address of the IOAPIC.
pub const IOAPIC_ADDR: u32 = 0xFEC0_0000;
/// ID of the IOAPIC in the MADT (KVM's in-kernel IOAPIC resets its ID register to 0).
pub const IOAPIC_ID: u8 = 0;
/// Physical address of the local APICs.
pub const LAPIC_ADDR: u32 = 0xFEE0_0000;
/// I/O port of the reset register (the i8042 command port).
pub const RESET_PORT: u16 = 0x64;
/// Value written to the reset register (i8042 "pulse reset line").
pub const RESET_VALUE: u8 = 0xFE;
/// Most vCPUs the MADT describes (8-bit xAPIC IDs 0..=254).
pub const MAX_CPUS: u32 = 255;

/// OEM ID in every table.
pub const OEM_ID: &[u8; 6] = b"EXITLB";
/// OEM table ID in every table.
pub const OEM_TABLE_ID: &[u8; 8] = b"EXITLAB ";

const HEADER_LEN: usize = 36;
const RSDP_LEN: usize = 36;
const FADT_LEN: usize = 276;
const FACS_LEN: usize = 64;

/// FADT flag: WBINVD works.
pub const FADT_WBINVD: u32 = 1 << 0;
/// FADT flag: C1 supported on all processors.
pub const FADT_PROC_C1: u32 = 1 << 2;
/// FADT flag: the power button is not a fixed feature.
pub const FADT_PWR_BUTTON: u32 = 1 << 4;
/// FADT flag: the sleep button is not a fixed feature.
pub const FADT_SLP_BUTTON: u32 = 1 << 5;
/// FADT flag: the PM timer is 32 bits wide.
pub const FADT_TMR_VAL_EXT: u32 = 1 << 8;
/// FADT flag: the reset register is supported.
pub const FADT_RESET_REG_SUP: u32 = 1 << 10;
/// FADT flag: hardware-reduced ACPI (never set here).
pub const FADT_HW_REDUCED_ACPI: u32 = 1 << 20;
/// MADT flag: dual 8259 PICs present.
pub const MADT_PCAT_COMPAT: u32 = 1;

/// Where the tables were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcpiInfo {
    /// RSDP (give it to the guest: PVH `rsdp_paddr`, Linux `acpi_rsdp_addr`).
    pub rsdp: u64,
    /// RSDT.
    pub rsdt: u64,
    /// XSDT.
    pub xsdt: u64,
    /// FADT ("FACP").
    pub fadt: u64,
    /// FACS.
    pub facs: u64,
    /// MADT ("APIC").
    pub madt: u64,
    /// DSDT.
    pub dsdt: u64,
    /// One past the last byte used.
    pub end: u64,
}

/// Sets byte `at` so that all of `bytes` sums to 0 (mod 256).
fn fix_checksum(bytes: &mut [u8], at: usize) {
    bytes[at] = 0;
    let sum = bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[at] = sum.wrapping_neg();
}

/// A table under construction: header, then body.
struct Table(Vec<u8>);

impl Table {
    fn new(signature: &[u8; 4], revision: u8) -> Table {
        let mut v = vec![0u8; HEADER_LEN];
        v[0..4].copy_from_slice(signature);
        v[8] = revision;
        v[10..16].copy_from_slice(OEM_ID);
        v[16..24].copy_from_slice(OEM_TABLE_ID);
        v[24..28].copy_from_slice(&1u32.to_le_bytes());
        v[28..32].copy_from_slice(b"EXLB");
        v[32..36].copy_from_slice(&1u32.to_le_bytes());
        Table(v)
    }

    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    /// Generic address structure in system I/O space.
    fn gas_io(&mut self, port: u16, bit_width: u8, access_size: u8) -> &mut Self {
        if port == 0 {
            return self.bytes(&[0; 12]);
        }
        self.u8(1)
            .u8(bit_width)
            .u8(0)
            .u8(access_size)
            .u64(u64::from(port))
    }

    /// Sets the length and checksum.
    fn finish(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[4..8].copy_from_slice(&len.to_le_bytes());
        fix_checksum(&mut self.0, 9);
        self.0
    }
}

/// AML: `op` followed by a PkgLength covering `body`.
fn aml_pkg(op: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = op.to_vec();
    // PkgLength counts its own bytes.
    let len = body.len() + 1;
    if len < 0x40 {
        out.push(len as u8);
    } else {
        let len = body.len() + 2;
        out.push(0x40 | (len & 0xf) as u8);
        out.push((len >> 4) as u8);
    }
    out.extend_from_slice(body);
    out
}

/// The DSDT's AML body:
/// `Scope (\_SB) { Device (PCI0) { Name (_HID, EisaId ("PNP0A03")) Name (_UID, Zero) Name (_BBN, Zero) } }`
/// and the sleep states `\_S3` and `\_S5`.
fn dsdt_body() -> Vec<u8> {
    const NAME_OP: u8 = 0x08;
    const DWORD_PREFIX: u8 = 0x0C;
    const ZERO_OP: u8 = 0x00;
    let mut dev = b"PCI0".to_vec();
    dev.push(NAME_OP);
    dev.extend_from_slice(b"_HID");
    dev.push(DWORD_PREFIX);
    dev.extend_from_slice(&0x030A_D041u32.to_le_bytes()); // EisaId ("PNP0A03")
    dev.push(NAME_OP);
    dev.extend_from_slice(b"_UID");
    dev.push(ZERO_OP);
    dev.push(NAME_OP);
    dev.extend_from_slice(b"_BBN");
    dev.push(ZERO_OP);
    let device = aml_pkg(&[0x5B, 0x82], &dev);
    let mut scope = b"\\_SB_".to_vec();
    scope.extend_from_slice(&device);
    let mut body = aml_pkg(&[0x10], &scope);
    // Name (_S3, Package (4) { 1, 1, 0, 0 }) and Name (_S5, Package (4) { 0, 0, 0, 0 }):
    // the SLP_TYP values PM1a_CNT takes (QEMU's).
    for (name, typ) in [(b"_S3_", 1u8), (b"_S5_", 0u8)] {
        body.push(NAME_OP);
        body.extend_from_slice(name);
        body.extend_from_slice(&aml_pkg(&[0x12], &[4, typ, typ, ZERO_OP, ZERO_OP]));
    }
    body
}

fn fadt(dsdt: u64, facs: u64, pm_timer_32bit: bool) -> Vec<u8> {
    let mut flags = FADT_WBINVD | FADT_PROC_C1 | FADT_PWR_BUTTON | FADT_SLP_BUTTON;
    flags |= FADT_RESET_REG_SUP;
    if pm_timer_32bit {
        flags |= FADT_TMR_VAL_EXT;
    }
    let mut t = Table::new(b"FACP", 6);
    t.u32(facs as u32) // FIRMWARE_CTRL
        .u32(dsdt as u32) // DSDT
        .u8(0) // reserved
        .u8(0) // preferred PM profile: unspecified
        .u16(SCI_IRQ)
        .u32(0) // SMI_CMD: none, always in ACPI mode
        .u8(0) // ACPI_ENABLE
        .u8(0) // ACPI_DISABLE
        .u8(0) // S4BIOS_REQ
        .u8(0) // PSTATE_CNT
        .u32(u32::from(PM1A_EVT_BLK))
        .u32(0) // PM1b_EVT_BLK
        .u32(u32::from(PM1A_CNT_BLK))
        .u32(0) // PM1b_CNT_BLK
        .u32(0) // PM2_CNT_BLK
        .u32(u32::from(PM_TMR_BLK))
        .u32(0) // GPE0_BLK
        .u32(0) // GPE1_BLK
        .u8(4) // PM1_EVT_LEN
        .u8(2) // PM1_CNT_LEN
        .u8(0) // PM2_CNT_LEN
        .u8(4) // PM_TMR_LEN
        .u8(0) // GPE0_BLK_LEN
        .u8(0) // GPE1_BLK_LEN
        .u8(0) // GPE1_BASE
        .u8(0) // CST_CNT
        .u16(0x0fff) // P_LVL2_LAT: C2 not supported
        .u16(0x0fff) // P_LVL3_LAT: C3 not supported
        .u16(0) // FLUSH_SIZE
        .u16(0) // FLUSH_STRIDE
        .u8(0) // DUTY_OFFSET
        .u8(0) // DUTY_WIDTH
        .u8(0) // DAY_ALRM
        .u8(0) // MON_ALRM
        .u8(0) // CENTURY
        .u16(0x0003) // IAPC_BOOT_ARCH: LEGACY_DEVICES | 8042
        .u8(0) // reserved
        .u32(flags)
        .gas_io(RESET_PORT, 8, 1) // RESET_REG
        .u8(RESET_VALUE)
        .u16(0) // ARM_BOOT_ARCH
        .u8(0) // FADT minor version
        .u64(facs) // X_FIRMWARE_CTRL
        .u64(dsdt) // X_DSDT
        .gas_io(PM1A_EVT_BLK, 32, 2) // X_PM1a_EVT_BLK
        .gas_io(0, 0, 0) // X_PM1b_EVT_BLK
        .gas_io(PM1A_CNT_BLK, 16, 2) // X_PM1a_CNT_BLK
        .gas_io(0, 0, 0) // X_PM1b_CNT_BLK
        .gas_io(0, 0, 0) // X_PM2_CNT_BLK
        .gas_io(PM_TMR_BLK, 32, 3) // X_PM_TMR_BLK
        .gas_io(0, 0, 0) // X_GPE0_BLK
        .gas_io(0, 0, 0) // X_GPE1_BLK
        .gas_io(0, 0, 0) // SLEEP_CONTROL_REG
        .gas_io(0, 0, 0) // SLEEP_STATUS_REG
        .u64(0); // hypervisor vendor identity
    let v = t.finish();
    debug_assert_eq!(v.len(), FADT_LEN);
    v
}

fn facs() -> Vec<u8> {
    let mut v = vec![0u8; FACS_LEN];
    v[0..4].copy_from_slice(b"FACS");
    v[4..8].copy_from_slice(&(FACS_LEN as u32).to_le_bytes());
    v[32] = 2; // version
    v
}

fn madt(cpus: u32) -> Vec<u8> {
    let mut t = Table::new(b"APIC", 4);
    t.u32(LAPIC_ADDR).u32(MADT_PCAT_COMPAT);
    for id in 0..cpus {
        // Processor local APIC: ACPI processor UID, APIC ID, flags (enabled).
        t.u8(0).u8(8).u8(id as u8).u8(id as u8).u32(1);
    }
    // IOAPIC: ID, reserved, address, GSI base.
    t.u8(1).u8(12).u8(IOAPIC_ID).u8(0).u32(IOAPIC_ADDR).u32(0);
    // Interrupt source overrides: ISA IRQ0 -> GSI2 (conforming), IRQ9 (SCI) level, active high.
    t.u8(2).u8(10).u8(0).u8(0).u32(2).u16(0);
    t.u8(2)
        .u8(10)
        .u8(0)
        .u8(SCI_IRQ as u8)
        .u32(u32::from(SCI_IRQ))
        .u16(0x000d);
    // Local APIC NMI: all processors, LINT1, conforming.
    t.u8(4).u8(6).u8(0xff).u16(0).u8(1);
    t.finish()
}

/// Base of the HPET's registers (QEMU's pc machine; exitlab-devices' `pc::HPET`).
pub const HPET_BASE: u64 = 0xFED0_0000;
/// The HPET's capabilities, low 32 bits (the event timer block ID): revision 1, three
/// timers, 64-bit counter, legacy replacement capable, vendor 0x8086.
pub const HPET_BLOCK_ID: u32 = 0x8086_A201;
/// Length of the HPET table.
pub const HPET_TABLE_LEN: usize = 56;

/// The HPET table, as QEMU builds it: the block ID, the base as a system-memory GAS
/// (no width, offset or access size), HPET number 0, minimum tick 0, no page
/// protection.
fn hpet() -> Vec<u8> {
    let mut t = Table::new(b"HPET", 1);
    t.u32(HPET_BLOCK_ID)
        .bytes(&[0, 0, 0, 0])
        .u64(HPET_BASE)
        .u8(0)
        .u16(0)
        .u8(0);
    t.finish()
}

fn rsdp(rsdt: u64, xsdt: u64) -> Vec<u8> {
    let mut v = vec![0u8; RSDP_LEN];
    v[0..8].copy_from_slice(b"RSD PTR ");
    v[9..15].copy_from_slice(OEM_ID);
    v[15] = 2;
    v[16..20].copy_from_slice(&(rsdt as u32).to_le_bytes());
    v[20..24].copy_from_slice(&(RSDP_LEN as u32).to_le_bytes());
    v[24..32].copy_from_slice(&xsdt.to_le_bytes());
    fix_checksum(&mut v[..20], 8);
    fix_checksum(&mut v, 32);
    v
}

/// Writes the ACPI tables for `cpus` vCPUs into the BIOS area of `mem`.
pub fn build_acpi<M: GuestMemoryBackend>(
    mem: &M,
    cpus: u32,
    pm_timer_32bit: bool,
) -> Result<AcpiInfo> {
    if cpus == 0 || cpus > MAX_CPUS {
        return Err(BootError::BadCpuCount {
            cpus,
            max: MAX_CPUS,
        });
    }
    let madt = madt(cpus);
    let mut dsdt = Table::new(b"DSDT", 2);
    dsdt.bytes(&dsdt_body());
    let dsdt = dsdt.finish();

    // Addresses, in order.
    let mut next = ACPI_START;
    let mut place = |len: usize, align: u64| -> u64 {
        // The BIOS area is 128 KiB and these tables use a few KiB: no overflow possible.
        let at = align_up(next, align).unwrap_or(next);
        next = at + len as u64;
        at
    };
    let rsdp_addr = place(RSDP_LEN, 16);
    let rsdt_addr = place(HEADER_LEN + 3 * 4, 16);
    let xsdt_addr = place(HEADER_LEN + 3 * 8, 16);
    let fadt_addr = place(FADT_LEN, 16);
    let facs_addr = place(FACS_LEN, 64);
    let madt_addr = place(madt.len(), 16);
    let dsdt_addr = place(dsdt.len(), 16);
    let hpet_addr = place(HPET_TABLE_LEN, 16);
    let end = next;
    debug_assert!(end <= ACPI_END);

    let mut rsdt = Table::new(b"RSDT", 1);
    rsdt.u32(fadt_addr as u32)
        .u32(madt_addr as u32)
        .u32(hpet_addr as u32);
    let mut xsdt = Table::new(b"XSDT", 1);
    xsdt.u64(fadt_addr).u64(madt_addr).u64(hpet_addr);

    zero_bytes(mem, ACPI_START, ACPI_END - ACPI_START)?;
    write_bytes(mem, rsdp_addr, &rsdp(rsdt_addr, xsdt_addr))?;
    write_bytes(mem, rsdt_addr, &rsdt.finish())?;
    write_bytes(mem, xsdt_addr, &xsdt.finish())?;
    write_bytes(mem, fadt_addr, &fadt(dsdt_addr, facs_addr, pm_timer_32bit))?;
    write_bytes(mem, facs_addr, &facs())?;
    write_bytes(mem, madt_addr, &madt)?;
    write_bytes(mem, dsdt_addr, &dsdt)?;
    write_bytes(mem, hpet_addr, &hpet())?;
    Ok(AcpiInfo {
        rsdp: rsdp_addr,
        rsdt: rsdt_addr,
        xsdt: xsdt_addr,
        fadt: fadt_addr,
        facs: facs_addr,
        madt: madt_addr,
        dsdt: dsdt_addr,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{e820_map, read_bytes, E820Kind};
    use crate::multiboot::tests::mem;
    use vm_memory::GuestMemoryMmap;

    fn read(m: &GuestMemoryMmap<()>, a: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        read_bytes(m, a, &mut v).unwrap();
        v
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
    }

    /// Reads a table at `a` by its header length and checks its checksum.
    fn table(m: &GuestMemoryMmap<()>, a: u64, sig: &[u8; 4]) -> Vec<u8> {
        let hdr = read(m, a, HEADER_LEN);
        assert_eq!(&hdr[..4], sig);
        let t = read(m, a, u32_at(&hdr, 4) as usize);
        assert_eq!(sum(&t), 0, "{} checksum", String::from_utf8_lossy(sig));
        t
    }

    /// Finds the RSDP the way an OS does.
    fn scan_rsdp(m: &GuestMemoryMmap<()>) -> Option<u64> {
        (0xE0000u64..0x100000).step_by(16).find(|&a| {
            let b = read(m, a, 20);
            &b[..8] == b"RSD PTR " && sum(&b) == 0
        })
    }

    #[test]
    fn tables_found_and_valid() {
        for cpus in [1u32, 4, 64] {
            let m = mem(16 << 20);
            let info = build_acpi(&m, cpus, true).unwrap();
            let rsdp_addr = scan_rsdp(&m).expect("RSDP found by scan");
            assert_eq!(rsdp_addr, info.rsdp);
            let r = read(&m, rsdp_addr, RSDP_LEN);
            assert_eq!(sum(&r), 0, "extended checksum");
            assert_eq!(r[15], 2);
            assert_eq!(u32_at(&r, 20), 36);

            let rsdt = table(&m, u32_at(&r, 16) as u64, b"RSDT");
            let xsdt = table(&m, u64_at(&r, 24), b"XSDT");
            assert_eq!(rsdt.len(), 36 + 12);
            assert_eq!(xsdt.len(), 36 + 24);
            let hpet_addr = u64_at(&xsdt, 52);
            assert_eq!(u32_at(&rsdt, 44) as u64, hpet_addr);
            let hpet = table(&m, hpet_addr, b"HPET");
            assert_eq!(hpet.len(), HPET_TABLE_LEN);
            assert_eq!(u32_at(&hpet, 36), HPET_BLOCK_ID);
            assert_eq!(&hpet[40..44], &[0, 0, 0, 0]);
            assert_eq!(u64_at(&hpet, 44), HPET_BASE);
            let fadt_addr = u64_at(&xsdt, 36);
            assert_eq!(u32_at(&rsdt, 36) as u64, fadt_addr);
            let madt_addr = u64_at(&xsdt, 44);
            assert_eq!(u32_at(&rsdt, 40) as u64, madt_addr);

            let fadt = table(&m, fadt_addr, b"FACP");
            assert_eq!(fadt.len(), FADT_LEN);
            assert_eq!(fadt[8], 6);
            let flags = u32_at(&fadt, 112);
            assert_eq!(flags & FADT_HW_REDUCED_ACPI, 0);
            assert_ne!(flags & FADT_TMR_VAL_EXT, 0);
            assert_eq!(u16::from_le_bytes([fadt[46], fadt[47]]), 9);
            assert_eq!(u32_at(&fadt, 76), 0xB008);
            assert_eq!(fadt[91], 4);
            // X_PM_TMR_BLK: system I/O, 32 bits, dword access, 0xB008.
            assert_eq!(&fadt[208..212], &[1, 32, 0, 3]);
            assert_eq!(u64_at(&fadt, 212), 0xB008);
            let dsdt_addr = u64_at(&fadt, 140);
            assert_eq!(u32_at(&fadt, 40) as u64, dsdt_addr);
            let dsdt = table(&m, dsdt_addr, b"DSDT");
            assert!(dsdt.len() > 36);
            let facs = read(&m, u64_at(&fadt, 132), 64);
            assert_eq!(&facs[..4], b"FACS");
            assert_eq!(u64_at(&fadt, 132) % 64, 0);

            let madt = table(&m, madt_addr, b"APIC");
            assert_eq!(u32_at(&madt, 36), 0xFEE0_0000);
            assert_eq!(u32_at(&madt, 40), MADT_PCAT_COMPAT);
            let mut at = 44;
            let mut lapics = Vec::new();
            let mut ioapics = 0;
            let mut isos = Vec::new();
            while at < madt.len() {
                let (kind, len) = (madt[at], madt[at + 1] as usize);
                assert!(len >= 2 && at + len <= madt.len());
                match kind {
                    0 => {
                        assert_eq!(u32_at(&madt, at + 4), 1);
                        lapics.push(madt[at + 3]);
                    }
                    1 => {
                        ioapics += 1;
                        assert_eq!(u32_at(&madt, at + 4), 0xFEC0_0000);
                        assert_eq!(u32_at(&madt, at + 8), 0);
                    }
                    2 => isos.push((madt[at + 3], u32_at(&madt, at + 4))),
                    _ => {}
                }
                at += len;
            }
            assert_eq!(lapics, (0..cpus).map(|i| i as u8).collect::<Vec<_>>());
            assert_eq!(ioapics, 1);
            assert_eq!(isos, vec![(0, 2), (9, 9)]);

            // Everything lies in the e820-reserved BIOS area.
            assert!(e820_map(16 << 20)
                .iter()
                .any(|e| e.kind == E820Kind::Reserved
                    && e.addr <= ACPI_START
                    && e.end() >= info.end));
        }
    }

    #[test]
    fn timer_24bit_flag() {
        let m = mem(16 << 20);
        let info = build_acpi(&m, 2, false).unwrap();
        let fadt = read(&m, info.fadt, FADT_LEN);
        assert_eq!(u32_at(&fadt, 112) & FADT_TMR_VAL_EXT, 0);
        assert_eq!(sum(&fadt), 0);
    }

    #[test]
    fn bad_cpu_counts() {
        let m = mem(16 << 20);
        assert!(matches!(
            build_acpi(&m, 0, true),
            Err(BootError::BadCpuCount { .. })
        ));
        assert!(matches!(
            build_acpi(&m, 256, true),
            Err(BootError::BadCpuCount { .. })
        ));
    }

    #[test]
    fn aml_package_lengths() {
        let body = dsdt_body();
        // ScopeOp, PkgLength (one byte), the scope; then the two sleep packages.
        assert_eq!(body[0], 0x10);
        let scope_end = 1 + body[1] as usize;
        assert_eq!(
            &body[scope_end..],
            &[
                0x08, b'_', b'S', b'3', b'_', 0x12, 6, 4, 1, 1, 0, 0, //
                0x08, b'_', b'S', b'5', b'_', 0x12, 6, 4, 0, 0, 0, 0,
            ]
        );
        let long = aml_pkg(&[0x10], &[0u8; 100]);
        assert_eq!(long[1] & 0xC0, 0x40);
        let len = ((long[1] & 0xf) as usize) | ((long[2] as usize) << 4);
        assert_eq!(len, long.len() - 1);
    }
}
