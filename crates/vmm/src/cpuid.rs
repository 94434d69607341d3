//! CPUID for vCPUs.
//!
//! KVM_GET_SUPPORTED_CPUID is asked once per process and the table is shared by every
//! vCPU of every VM (the CPUID-caching idea of the KVM fix this project measures, applied
//! to the VMM); each vCPU gets a copy with its own APIC ids patched in.

use std::sync::OnceLock;

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::Kvm;

use crate::VmmError;

static SUPPORTED: OnceLock<CpuId> = OnceLock::new();

/// The host's supported CPUID table, computed on first use and cached for the process.
pub fn supported(kvm: &Kvm) -> Result<&'static CpuId, VmmError> {
    if let Some(c) = SUPPORTED.get() {
        return Ok(c);
    }
    let c = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(|e| VmmError::Kvm("KVM_GET_SUPPORTED_CPUID", e))?;
    Ok(SUPPORTED.get_or_init(|| c))
}

/// A copy of `base` for the vCPU with APIC id `apic_id` out of `nr_cpus`: initial APIC id
/// (leaf 1 EBX[31:24]), logical processor count (leaf 1 EBX[23:16]), x2APIC ids (leaves
/// 0xB and 0x1F EDX), and the hypervisor bit (leaf 1 ECX[31]) set.
pub fn for_vcpu(base: &CpuId, apic_id: u32, nr_cpus: u32) -> CpuId {
    let mut c = base.clone();
    for e in c.as_mut_slice() {
        match e.function {
            1 => {
                let count = nr_cpus.min(255);
                e.ebx = (e.ebx & 0x0000_ffff) | ((apic_id & 0xff) << 24) | (count << 16);
                e.ecx |= 1 << 31;
                if nr_cpus > 1 {
                    e.edx |= 1 << 28; // HTT: the logical count field is valid
                }
            }
            0xb | 0x1f => e.edx = apic_id,
            _ => {}
        }
    }
    c
}

/// One CPUID feature bit: leaf `function`, subleaf `index`, register `reg` (0 = EAX,
/// 1 = EBX, 2 = ECX, 3 = EDX), bit `bit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuidBit {
    /// Leaf.
    pub function: u32,
    /// Subleaf.
    pub index: u32,
    /// Register: 0 = EAX, 1 = EBX, 2 = ECX, 3 = EDX.
    pub reg: u8,
    /// Bit number.
    pub bit: u8,
}

/// CPU features by the names QEMU's `-cpu host,-NAME` uses, for the ones test runners
/// remove.
pub const FEATURES: &[(&str, CpuidBit)] = &[
    (
        "arch-capabilities",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 3,
            bit: 29,
        },
    ),
    (
        "spec-ctrl",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 3,
            bit: 26,
        },
    ),
    (
        "ssbd",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 3,
            bit: 31,
        },
    ),
    (
        "invpcid",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 1,
            bit: 10,
        },
    ),
    (
        "smep",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 1,
            bit: 7,
        },
    ),
    (
        "smap",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 1,
            bit: 20,
        },
    ),
    (
        "avx2",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 1,
            bit: 5,
        },
    ),
    (
        "umip",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 2,
            bit: 2,
        },
    ),
    (
        "pku",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 2,
            bit: 3,
        },
    ),
    (
        "la57",
        CpuidBit {
            function: 7,
            index: 0,
            reg: 2,
            bit: 16,
        },
    ),
    (
        "vmx",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 2,
            bit: 5,
        },
    ),
    (
        "pcid",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 2,
            bit: 17,
        },
    ),
    (
        "x2apic",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 2,
            bit: 21,
        },
    ),
    (
        "tsc-deadline",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 2,
            bit: 24,
        },
    ),
    (
        "xsave",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 2,
            bit: 26,
        },
    ),
    (
        "avx",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 2,
            bit: 28,
        },
    ),
    (
        "mce",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 3,
            bit: 7,
        },
    ),
    (
        "mca",
        CpuidBit {
            function: 1,
            index: 0,
            reg: 3,
            bit: 14,
        },
    ),
    (
        "svm",
        CpuidBit {
            function: 0x8000_0001,
            index: 0,
            reg: 2,
            bit: 2,
        },
    ),
    (
        "pdpe1gb",
        CpuidBit {
            function: 0x8000_0001,
            index: 0,
            reg: 3,
            bit: 26,
        },
    ),
    (
        "rdtscp",
        CpuidBit {
            function: 0x8000_0001,
            index: 0,
            reg: 3,
            bit: 27,
        },
    ),
];

/// The feature bit QEMU calls `name`, if it is one of [`FEATURES`].
pub fn feature(name: &str) -> Option<CpuidBit> {
    FEATURES.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Clears `bits` in every matching entry of `c`.
pub fn clear_bits(c: &mut CpuId, bits: &[CpuidBit]) {
    for e in c.as_mut_slice() {
        for b in bits {
            let indexed = e.flags & 1 != 0;
            if e.function == b.function && (!indexed || e.index == b.index) {
                let r = match b.reg {
                    0 => &mut e.eax,
                    1 => &mut e.ebx,
                    2 => &mut e.ecx,
                    _ => &mut e.edx,
                };
                *r &= !(1u32 << b.bit);
            }
        }
    }
}

/// Value of the entry for `function`/`index`, as (eax, ebx, ecx, edx).
pub fn lookup(c: &CpuId, function: u32, index: u32) -> Option<(u32, u32, u32, u32)> {
    c.as_slice()
        .iter()
        .find(|e| e.function == function && (e.index == index || e.flags & 1 == 0))
        .map(|e| (e.eax, e.ebx, e.ecx, e.edx))
}

/// Highest sub-leaf of leaf 0xD that describes a state component this CPU supports
/// (the highest set bit of XCR0's and XSS's supported masks), at least 1; `None` when the
/// table has no leaf 0xD (no XSAVE).
pub fn xsave_max_subleaf(c: &CpuId) -> Option<u32> {
    let (eax0, _, _, edx0) = lookup(c, 0xd, 0)?;
    let (_, _, ecx1, edx1) = lookup(c, 0xd, 1).unwrap_or_default();
    let mask =
        (u64::from(edx0) << 32 | u64::from(eax0)) | (u64::from(edx1) << 32 | u64::from(ecx1));
    if mask == 0 {
        return None;
    }
    Some((63 - mask.leading_zeros()).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    fn table(entries: &[kvm_cpuid_entry2]) -> CpuId {
        CpuId::from_entries(entries).unwrap()
    }

    #[test]
    fn clear_bits_removes_named_features_only() {
        let mut c = CpuId::from_entries(&[
            entry(1, 0, 0, [0, 0, u32::MAX, u32::MAX]),
            entry(7, 0, 1, [0, u32::MAX, u32::MAX, u32::MAX]),
            entry(7, 1, 1, [u32::MAX; 4]),
        ])
        .unwrap();
        let bits = [
            feature("arch-capabilities").unwrap(),
            feature("x2apic").unwrap(),
        ];
        clear_bits(&mut c, &bits);
        assert_eq!(lookup(&c, 7, 0).unwrap().3, !(1 << 29));
        assert_eq!(
            lookup(&c, 7, 1).unwrap().3,
            u32::MAX,
            "other subleaves keep it"
        );
        assert_eq!(lookup(&c, 1, 0).unwrap().2, !(1 << 21));
        assert_eq!(lookup(&c, 1, 0).unwrap().3, u32::MAX);
        assert!(feature("frobnicate").is_none());
    }

    fn entry(function: u32, index: u32, flags: u32, regs: [u32; 4]) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            flags,
            eax: regs[0],
            ebx: regs[1],
            ecx: regs[2],
            edx: regs[3],
            ..Default::default()
        }
    }

    #[test]
    fn per_vcpu_patch() {
        let base = table(&[
            entry(1, 0, 0, [0x806f8, 0xff00_0800, 0, 0]),
            entry(0xb, 0, 1, [1, 1, 0x100, 99]),
            entry(0xb, 1, 1, [4, 2, 0x201, 99]),
        ]);
        let c = for_vcpu(&base, 3, 2);
        let (_, ebx, ecx, edx) = lookup(&c, 1, 0).unwrap();
        assert_eq!(ebx >> 24, 3);
        assert_eq!((ebx >> 16) & 0xff, 2);
        assert_eq!(ebx & 0xffff, 0x0800);
        assert_ne!(ecx & (1 << 31), 0);
        assert_ne!(edx & (1 << 28), 0);
        assert_eq!(lookup(&c, 0xb, 1).unwrap().3, 3);
        // the base table is untouched
        assert_eq!(lookup(&base, 1, 0).unwrap().1 >> 24, 0xff);
    }

    #[test]
    fn xsave_subleaves() {
        // x87|SSE|AVX (bits 0..2), XSS bit 8 (PT)
        let c = table(&[
            entry(0xd, 0, 1, [0x7, 0, 0, 0]),
            entry(0xd, 1, 1, [0xf, 0, 0x100, 0]),
        ]);
        assert_eq!(xsave_max_subleaf(&c), Some(8));
        let c = table(&[entry(0xd, 0, 1, [0x3, 0, 0, 0])]);
        assert_eq!(xsave_max_subleaf(&c), Some(1));
        let c = table(&[entry(0xd, 0, 1, [0x2e7, 0, 0, 0])]);
        assert_eq!(xsave_max_subleaf(&c), Some(9));
        assert_eq!(xsave_max_subleaf(&table(&[entry(1, 0, 0, [0; 4])])), None);
    }

    #[test]
    fn lookup_respects_index_only_when_significant() {
        let c = table(&[
            entry(7, 0, 1, [1, 2, 3, 4]),
            entry(0x80000001, 0, 0, [5, 6, 7, 8]),
        ]);
        assert_eq!(lookup(&c, 7, 0), Some((1, 2, 3, 4)));
        assert_eq!(lookup(&c, 7, 1), None);
        assert_eq!(lookup(&c, 0x80000001, 5), Some((5, 6, 7, 8)));
    }

    #[test]
    fn supported_is_cached() {
        let kvm = crate::testing::kvm_or_fail();
        let a = supported(&kvm).unwrap() as *const CpuId;
        let b = supported(&kvm).unwrap() as *const CpuId;
        assert_eq!(a, b);
    }
}
