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

mod qemu_data;

pub use qemu_data::{Model, FEATURES, FEATURE_WORDS, MODELS, OTHER_FLAGS, QEMU_VERSION};

/// The feature bit QEMU calls `name` (QEMU's spelling: `_` reads as `-`, aliases such as
/// `sse4_1` and `pclmuldq` included), from QEMU's own tables ([`FEATURES`]).
pub fn feature(name: &str) -> Option<CpuidBit> {
    let find = |n: &str| {
        FEATURES
            .binary_search_by(|(f, _)| (*f).cmp(n))
            .ok()
            .map(|i| FEATURES[i].1)
    };
    find(name).or_else(|| find(&name.replace('_', "-")))
}

/// The TSC-deadline timer's bit (CPUID.01H:ECX[24]): KVM emulates it with an in-kernel
/// LAPIC (KVM_CAP_TSC_DEADLINE_TIMER) without listing it in its supported CPUID.
pub const TSC_DEADLINE: CpuidBit = CpuidBit {
    function: 1,
    index: 0,
    reg: 2,
    bit: 24,
};

/// What `t` asks for and this host's KVM cannot provide (KVM_GET_SUPPORTED_CPUID, plus
/// the TSC-deadline timer where KVM has it), for the front end's warnings.
pub fn check(kvm: &Kvm, t: &CpuTemplate) -> Result<Vec<Missing>, VmmError> {
    let extra: &[CpuidBit] = if kvm.check_extension(kvm_ioctls::Cap::TscDeadlineTimer) {
        &[TSC_DEADLINE]
    } else {
        &[]
    };
    Ok(apply(supported(kvm)?, t, extra).1)
}

/// QEMU's name for `bit` (its first name in [`FEATURES`]).
pub fn feature_name(bit: CpuidBit) -> Option<&'static str> {
    FEATURES.iter().find(|(_, b)| *b == bit).map(|(n, _)| *n)
}

/// The named QEMU CPU model `name` (an alias such as `Skylake-Server` or a versioned
/// name such as `Skylake-Server-v4`).
pub fn model(name: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.name == name)
}

/// The guest's physical-address width (CPUID 0x80000008 EAX[7:0]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PhysBits {
    /// The host's for `host`/`max`; QEMU's 40 (at most the host's) for a named model.
    #[default]
    Default,
    /// The host's (`host-phys-bits`).
    Host,
    /// Exactly this many (`phys-bits=N`, at most the host's).
    Exact(u8),
}

/// The guest CPU as QEMU's `-cpu` describes it. The default is the host CPU as KVM
/// supports it (`-cpu host`, also `-cpu max` with KVM).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuTemplate {
    /// A named QEMU model: its features (those the host has; the KVM paravirtual leaf
    /// stays the host's), family, model, stepping, levels and brand string replace the
    /// host's. `None`: the host's.
    pub model: Option<&'static Model>,
    /// Features to offer on top (`+NAME`), if the host has them.
    pub add: Vec<CpuidBit>,
    /// Features to hide (`-NAME`), applied last.
    pub remove: Vec<CpuidBit>,
    /// Vendor string (leaf 0): the host's unless given, as QEMU does under KVM.
    pub vendor: Option<[u8; 12]>,
    /// CPUID family, overriding the model's.
    pub family: Option<u32>,
    /// CPUID model number, overriding the model's.
    pub model_number: Option<u32>,
    /// CPUID stepping, overriding the model's.
    pub stepping: Option<u32>,
    /// Highest basic leaf, overriding the model's.
    pub level: Option<u32>,
    /// Highest extended leaf, overriding the model's.
    pub xlevel: Option<u32>,
    /// Physical-address width.
    pub phys_bits: PhysBits,
}

/// A feature the template asks for and the host cannot provide (QEMU warns about it, or
/// refuses under `enforce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing(pub CpuidBit);

impl std::fmt::Display for Missing {
    /// QEMU's wording: `CPUID.80000001H:ECX.svm [bit 2]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        let reg = ["EAX", "EBX", "ECX", "EDX"][usize::from(b.reg & 3)];
        let leaf = if b.index != 0 || matches!(b.function, 7 | 0xd | 0x12 | 0x14) {
            format!("{:02X}H.{:02X}H", b.function, b.index)
        } else {
            format!("{:02X}H", b.function)
        };
        let name = feature_name(b).unwrap_or("?");
        write!(f, "CPUID.{leaf}:{reg}.{name} [bit {}]", b.bit)
    }
}

fn reg_mut(e: &mut kvm_bindings::kvm_cpuid_entry2, reg: u8) -> &mut u32 {
    match reg {
        0 => &mut e.eax,
        1 => &mut e.ebx,
        2 => &mut e.ecx,
        _ => &mut e.edx,
    }
}

fn word(c: &CpuId, function: u32, index: u32, reg: u8) -> u32 {
    lookup(c, function, index).map_or(0, |r| [r.0, r.1, r.2, r.3][usize::from(reg & 3)])
}

fn set_word(c: &mut CpuId, function: u32, index: u32, reg: u8, v: u32) {
    for e in c.as_mut_slice() {
        if e.function == function && (e.flags & 1 == 0 || e.index == index) {
            *reg_mut(e, reg) = v;
        }
    }
}

/// The CPUID version word (leaf 1 EAX) for family/model/stepping, as QEMU encodes it.
pub fn version_word(family: u32, model: u32, stepping: u32) -> u32 {
    let fam = if family > 0xf {
        0xf << 8 | (family - 0xf) << 20
    } else {
        family << 8
    };
    fam | (model & 0xf) << 4 | (model >> 4 & 0xf) << 16 | (stepping & 0xf)
}

/// The family, model and stepping of a CPUID version word.
pub fn split_version(eax: u32) -> (u32, u32, u32) {
    let base = eax >> 8 & 0xf;
    let family = if base == 0xf {
        base + (eax >> 20 & 0xff)
    } else {
        base
    };
    let model = (eax >> 4 & 0xf) | (eax >> 16 & 0xf) << 4;
    (family, model, eax & 0xf)
}

/// Builds the guest's CPUID from the host's supported table `host` and the template;
/// also returns what the template asked for and the host cannot provide. `extra` are
/// bits KVM emulates without listing them (the TSC-deadline timer with an in-kernel
/// LAPIC): they count as offered.
pub fn apply(host: &CpuId, t: &CpuTemplate, extra: &[CpuidBit]) -> (CpuId, Vec<Missing>) {
    let mut c = host.clone();
    if t.model.is_none() {
        for &b in extra {
            set_bit(&mut c, b);
        }
    }
    let mut missing = Vec::new();
    let offered = |b: CpuidBit| {
        extra.contains(&b) || word(host, b.function, b.index, b.reg) & (1 << b.bit) != 0
    };
    let (mut level, mut xlevel) = (
        lookup(host, 0, 0).map_or(0, |r| r.0),
        lookup(host, 0x8000_0000, 0).map_or(0, |r| r.0),
    );
    let host_level = level;
    let host_xlevel = xlevel;
    if let Some(m) = t.model {
        // The KVM leaves (0x4000_00xx) stay the host's: exitlab offers every paravirtual
        // feature KVM has whatever the model (QEMU's models turn most of them on).
        for &(function, index, reg) in FEATURE_WORDS
            .iter()
            .filter(|w| w.0 & 0xffff_0000 != 0x4000_0000)
        {
            let want = m
                .features
                .iter()
                .filter(|f| (f.0, f.1, f.2) == (function, index, reg))
                .fold(0, |a, f| a | f.3);
            let mut have = word(host, function, index, reg);
            for b in extra {
                if (b.function, b.index, b.reg) == (function, index, reg) {
                    have |= 1 << b.bit;
                }
            }
            set_word(&mut c, function, index, reg, want & have);
            for bit in 0..32u8 {
                if want & !have & (1 << bit) != 0 {
                    missing.push(Missing(CpuidBit {
                        function,
                        index,
                        reg,
                        bit,
                    }));
                }
            }
        }
        let eax = version_word(m.family, m.model, m.stepping);
        set_word(&mut c, 1, 0, 0, eax);
        level = m.level;
        xlevel = m.xlevel;
        set_brand(&mut c, m.model_id);
    }
    for &b in &t.add {
        if offered(b) {
            set_bit(&mut c, b);
        } else if !missing.contains(&Missing(b)) {
            missing.push(Missing(b));
        }
    }
    clear_bits(&mut c, &t.remove);
    if let Some(v) = t.vendor {
        let w = |i: usize| u32::from_le_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
        for e in c.as_mut_slice() {
            if e.function == 0 || (e.function == 0x8000_0000 && e.ebx != 0) {
                (e.ebx, e.edx, e.ecx) = (w(0), w(4), w(8));
            }
        }
    }
    if t.family.is_some() || t.model_number.is_some() || t.stepping.is_some() {
        let (f, m, s) = split_version(word(&c, 1, 0, 0));
        let eax = version_word(
            t.family.unwrap_or(f),
            t.model_number.unwrap_or(m),
            t.stepping.unwrap_or(s),
        );
        set_word(&mut c, 1, 0, 0, eax);
    }
    // What the features need (QEMU's full-cpuid-auto-level): leaf 7 for its features,
    // 0xD for XSAVE, 0x8000000A for SVM's.
    for &(function, index, reg) in FEATURE_WORDS {
        if word(&c, function, index, reg) != 0 {
            if function < 0x4000_0000 {
                level = level.max(function);
            } else if function & 0xffff_0000 == 0x8000_0000 {
                xlevel = xlevel.max(function);
            }
        }
    }
    level = t.level.unwrap_or(level).min(host_level);
    xlevel = t.xlevel.unwrap_or(xlevel).min(host_xlevel);
    set_word(&mut c, 0, 0, 0, level);
    set_word(&mut c, 0x8000_0000, 0, 0, xlevel);
    let keep: Vec<_> = c
        .as_slice()
        .iter()
        .filter(|e| {
            let f = e.function;
            !((f > level && f < 0x4000_0000) || (f > xlevel && f & 0xffff_0000 == 0x8000_0000))
        })
        .copied()
        .collect();
    if keep.len() != c.as_slice().len() {
        // Fewer entries than a table that came from CpuId itself: cannot fail.
        if let Ok(k) = CpuId::from_entries(&keep) {
            c = k;
        }
    }
    let host_phys = lookup(host, 0x8000_0008, 0).map_or(36, |r| r.0 & 0xff);
    let phys = match (t.phys_bits, t.model) {
        (PhysBits::Exact(n), _) => u32::from(n).min(host_phys),
        (PhysBits::Host, _) | (PhysBits::Default, None) => host_phys,
        (PhysBits::Default, Some(_)) => host_phys.min(40),
    };
    for e in c.as_mut_slice() {
        if e.function == 0x8000_0008 {
            e.eax = (e.eax & !0xff) | phys;
        }
    }
    (c, missing)
}

/// Sets `b` in every matching entry of `c`.
fn set_bit(c: &mut CpuId, b: CpuidBit) {
    for e in c.as_mut_slice() {
        if e.function == b.function && (e.flags & 1 == 0 || e.index == b.index) {
            *reg_mut(e, b.reg) |= 1 << b.bit;
        }
    }
}

/// Writes `brand` (at most 48 bytes, NUL-padded) into leaves 0x80000002-4.
fn set_brand(c: &mut CpuId, brand: &str) {
    let mut b = [0u8; 48];
    let n = brand.len().min(47);
    b[..n].copy_from_slice(&brand.as_bytes()[..n]);
    let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    for e in c.as_mut_slice() {
        if (0x8000_0002..=0x8000_0004).contains(&e.function) {
            let o = (e.function - 0x8000_0002) as usize * 16;
            (e.eax, e.ebx, e.ecx, e.edx) = (w(o), w(o + 4), w(o + 8), w(o + 12));
        }
    }
}

/// Clears `bits` in every matching entry of `c`.
pub fn clear_bits(c: &mut CpuId, bits: &[CpuidBit]) {
    for e in c.as_mut_slice() {
        for b in bits {
            let indexed = e.flags & 1 != 0;
            if e.function == b.function && (!indexed || e.index == b.index) {
                *reg_mut(e, b.reg) &= !(1u32 << b.bit);
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

    /// A host table: Intel-like vendor, leaves 0, 1, 7, 0xd, 0x14 and the extended ones.
    fn host() -> CpuId {
        let v = b"GenuineIntel";
        let w = |i: usize| u32::from_le_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
        table(&[
            entry(0, 0, 0, [0x14, w(0), w(8), w(4)]),
            entry(1, 0, 0, [0x806f8, 0, !(1 << 5), u32::MAX]),
            entry(7, 0, 1, [0, u32::MAX, u32::MAX, u32::MAX]),
            entry(0xd, 0, 1, [7, 0, 0, 0]),
            entry(0x14, 0, 1, [1, 0, 0, 0]),
            entry(0x8000_0000, 0, 0, [0x8000_0008, 0, 0, 0]),
            entry(0x8000_0001, 0, 0, [0, 0, !(1 << 2), u32::MAX]),
            entry(0x8000_0002, 0, 0, [0x6c65_746e, 0, 0, 0]),
            entry(0x8000_0003, 0, 0, [0; 4]),
            entry(0x8000_0004, 0, 0, [0; 4]),
            entry(0x8000_0008, 0, 0, [0x3030, 0, 0, 0]),
        ])
    }

    #[test]
    fn host_template_is_the_host_plus_what_kvm_emulates() {
        let h = host();
        let (c, missing) = apply(&h, &CpuTemplate::default(), &[]);
        assert_eq!(c.as_slice(), h.as_slice());
        assert!(missing.is_empty());
        let mut h2 = host();
        clear_bits(&mut h2, &[TSC_DEADLINE]);
        let (c, _) = apply(&h2, &CpuTemplate::default(), &[TSC_DEADLINE]);
        assert_ne!(lookup(&c, 1, 0).unwrap().2 & 1 << 24, 0);
    }

    #[test]
    fn a_named_model_takes_its_features_the_host_has_and_names_the_rest() {
        let t = CpuTemplate {
            model: model("qemu64"),
            add: vec![feature("vmx").unwrap(), feature("umip").unwrap()],
            remove: vec![feature("x2apic").unwrap()],
            ..Default::default()
        };
        let (c, missing) = apply(&host(), &t, &[]);
        let (eax, _, ecx, edx) = lookup(&c, 1, 0).unwrap();
        // qemu64: family 15, model 107, stepping 1
        assert_eq!(split_version(eax), (15, 107, 1));
        assert_eq!(eax, version_word(15, 107, 1));
        // its leaf-1 features only: sse3 (pni), cx16, no avx, x2apic removed
        assert_ne!(ecx & 1, 0);
        assert_ne!(ecx & 1 << 13, 0);
        assert_eq!(ecx & 1 << 28, 0);
        assert_eq!(ecx & 1 << 21, 0);
        assert_ne!(edx & 1, 0);
        // +umip on top of the model (leaf 7 ECX bit 2); nothing else of leaf 7 EBX
        let (_, ebx7, ecx7, _) = lookup(&c, 7, 0).unwrap();
        assert_eq!((ebx7, ecx7), (0, 1 << 2));
        // vmx is not on this host: named in QEMU's words
        assert_eq!(missing, vec![Missing(feature("vmx").unwrap())]);
        assert_eq!(missing[0].to_string(), "CPUID.01H:ECX.vmx [bit 5]");
        // qemu64's level 0xd: leaf 0x14 is gone; its brand string
        assert_eq!(lookup(&c, 0, 0).unwrap().0, 0xd);
        assert!(lookup(&c, 0x14, 0).is_none());
        let brand: Vec<u8> = (0x8000_0002..=0x8000_0004)
            .flat_map(|f| {
                let r = lookup(&c, f, 0).unwrap();
                [r.0, r.1, r.2, r.3].into_iter().flat_map(u32::to_le_bytes)
            })
            .take_while(|b| *b != 0)
            .collect();
        assert_eq!(brand, b"QEMU Virtual CPU version 2.5+");
        // a named model's phys-bits: 40, at most the host's 48
        assert_eq!(lookup(&c, 0x8000_0008, 0).unwrap().0 & 0xff, 40);
        // the host's vendor, as QEMU under KVM
        assert_eq!(
            lookup(&c, 0, 0).unwrap().1,
            lookup(&host(), 0, 0).unwrap().1
        );
    }

    #[test]
    fn svm_missing_is_named_with_its_leaf() {
        let t = CpuTemplate {
            add: vec![feature("svm").unwrap()],
            ..Default::default()
        };
        let (_, m) = apply(&host(), &t, &[]);
        assert_eq!(m[0].to_string(), "CPUID.80000001H:ECX.svm [bit 2]");
    }

    #[test]
    fn vendor_fms_levels_and_phys_bits() {
        let t = CpuTemplate {
            vendor: Some(*b"AuthenticAMD"),
            family: Some(0x17),
            model_number: Some(0x31),
            stepping: Some(0),
            level: Some(7),
            xlevel: Some(0x8000_0004),
            phys_bits: PhysBits::Exact(36),
            ..Default::default()
        };
        let (c, _) = apply(&host(), &t, &[]);
        let (eax0, ebx, ecx, edx) = lookup(&c, 0, 0).unwrap();
        let v: Vec<u8> = [ebx, edx, ecx]
            .into_iter()
            .flat_map(u32::to_le_bytes)
            .collect();
        assert_eq!(&v, b"AuthenticAMD");
        assert_eq!(eax0, 7);
        assert!(lookup(&c, 0xd, 0).is_none());
        assert_eq!(split_version(lookup(&c, 1, 0).unwrap().0), (0x17, 0x31, 0));
        assert_eq!(lookup(&c, 0x8000_0000, 0).unwrap().0, 0x8000_0004);
        assert!(lookup(&c, 0x8000_0008, 0).is_none(), "above xlevel");
        let t = CpuTemplate {
            phys_bits: PhysBits::Exact(36),
            ..Default::default()
        };
        let (c, _) = apply(&host(), &t, &[]);
        assert_eq!(lookup(&c, 0x8000_0008, 0).unwrap().0 & 0xff, 36);
        let t = CpuTemplate {
            model: model("IvyBridge"),
            phys_bits: PhysBits::Host,
            ..Default::default()
        };
        let (c, _) = apply(&host(), &t, &[]);
        assert_eq!(lookup(&c, 0x8000_0008, 0).unwrap().0 & 0xff, 0x30);
    }

    #[test]
    fn qemu_tables_are_complete_and_sorted() {
        assert!(FEATURES.windows(2).all(|w| w[0].0 < w[1].0));
        for (n, b) in [
            ("x2apic", (1, 0, 2, 21)),
            ("tsc-deadline", (1, 0, 2, 24)),
            ("cx16", (1, 0, 2, 13)),
            ("xsave", (1, 0, 2, 26)),
            ("pcid", (1, 0, 2, 17)),
            ("invpcid", (7, 0, 1, 10)),
            ("umip", (7, 0, 2, 2)),
            ("arch-capabilities", (7, 0, 3, 29)),
            ("svm", (0x8000_0001, 0, 2, 2)),
            ("rdtscp", (0x8000_0001, 0, 3, 27)),
            ("skinit", (0x8000_0001, 0, 2, 12)),
        ] {
            let f = feature(n).unwrap_or_else(|| panic!("{n}"));
            assert_eq!((f.function, f.index, f.reg, f.bit), b, "{n}");
        }
        assert_eq!(feature("tsc_deadline"), feature("tsc-deadline"));
        for m in [
            "qemu64",
            "max",
            "Opteron_G1",
            "IvyBridge",
            "Skylake-Server",
            "EPYC",
            "EPYC-Rome",
        ] {
            assert!(m == "max" || model(m).is_some(), "{m}");
        }
        assert!(OTHER_FLAGS.contains(&"enforce"));
    }

    #[test]
    fn supported_is_cached() {
        let kvm = crate::testing::kvm_or_fail();
        let a = supported(&kvm).unwrap() as *const CpuId;
        let b = supported(&kvm).unwrap() as *const CpuId;
        assert_eq!(a, b);
    }
}
