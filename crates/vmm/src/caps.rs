//! What this host's KVM offers, asked once per process.
//!
//! [`Capabilities::get`] checks every capability exitlab cares about on a throwaway VM (on
//! the system fd when no VM can be created, saying so), reads the vCPU TSC frequency and
//! the XSAVE extent of the supported CPUID table, and keeps the answer for the rest of the
//! process. Everything above the VMM (the lab, the command line) reads KVM's answers from
//! here and never issues an ioctl itself. The probe runs when something first asks for it
//! (`exitlab host`, `exitlab bench`), never on the path of `exitlab run`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kvm_bindings as kb;
use kvm_ioctls::Kvm;

use crate::{cpuid, VmmError};

/// Capabilities reported, by name without the `KVM_CAP_` prefix.
const CAPABILITIES: &[(&str, u32)] = &[
    ("IRQCHIP", kb::KVM_CAP_IRQCHIP),
    ("SPLIT_IRQCHIP", kb::KVM_CAP_SPLIT_IRQCHIP),
    ("X2APIC_API", kb::KVM_CAP_X2APIC_API),
    ("IOEVENTFD", kb::KVM_CAP_IOEVENTFD),
    ("IOEVENTFD_ANY_LENGTH", kb::KVM_CAP_IOEVENTFD_ANY_LENGTH),
    ("IRQFD", kb::KVM_CAP_IRQFD),
    ("SYNC_REGS", kb::KVM_CAP_SYNC_REGS),
    ("X86_USER_SPACE_MSR", kb::KVM_CAP_X86_USER_SPACE_MSR),
    ("X86_MSR_FILTER", kb::KVM_CAP_X86_MSR_FILTER),
    ("X86_DISABLE_EXITS", kb::KVM_CAP_X86_DISABLE_EXITS),
    ("HALT_POLL", kb::KVM_CAP_HALT_POLL),
    ("BINARY_STATS_FD", kb::KVM_CAP_BINARY_STATS_FD),
    ("COALESCED_MMIO", kb::KVM_CAP_COALESCED_MMIO),
    ("COALESCED_PIO", kb::KVM_CAP_COALESCED_PIO),
    ("PIT2", kb::KVM_CAP_PIT2),
    ("GET_TSC_KHZ", kb::KVM_CAP_GET_TSC_KHZ),
    ("TSC_CONTROL", kb::KVM_CAP_TSC_CONTROL),
    ("VM_TSC_CONTROL", kb::KVM_CAP_VM_TSC_CONTROL),
    ("TSC_DEADLINE_TIMER", kb::KVM_CAP_TSC_DEADLINE_TIMER),
    ("IMMEDIATE_EXIT", kb::KVM_CAP_IMMEDIATE_EXIT),
    ("VCPU_ATTRIBUTES", kb::KVM_CAP_VCPU_ATTRIBUTES),
    ("X86_NOTIFY_VMEXIT", kb::KVM_CAP_X86_NOTIFY_VMEXIT),
    ("X86_BUS_LOCK_EXIT", kb::KVM_CAP_X86_BUS_LOCK_EXIT),
    ("PMU_CAPABILITY", kb::KVM_CAP_PMU_CAPABILITY),
    ("ADJUST_CLOCK", kb::KVM_CAP_ADJUST_CLOCK),
    ("X86_APIC_BUS_CYCLES_NS", kb::KVM_CAP_X86_APIC_BUS_CYCLES_NS),
    ("EXIT_HYPERCALL", kb::KVM_CAP_EXIT_HYPERCALL),
    (
        "EXIT_ON_EMULATION_FAILURE",
        kb::KVM_CAP_EXIT_ON_EMULATION_FAILURE,
    ),
    ("READONLY_MEM", kb::KVM_CAP_READONLY_MEM),
    ("NR_MEMSLOTS", kb::KVM_CAP_NR_MEMSLOTS),
    ("MAX_VCPU_ID", kb::KVM_CAP_MAX_VCPU_ID),
    ("XSAVE2", kb::KVM_CAP_XSAVE2),
    ("SET_GUEST_DEBUG", kb::KVM_CAP_SET_GUEST_DEBUG),
];

/// Hypercall number of `KVM_HC_MAP_GPA_RANGE` (bit index in the `KVM_CAP_EXIT_HYPERCALL` mask).
const KVM_HC_MAP_GPA_RANGE: u32 = 12;

/// Where the capabilities were checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckedOn {
    /// On a VM fd: what a VM of this process gets.
    Vm,
    /// On the system fd, because no VM could be created.
    System,
}

impl CheckedOn {
    /// `VM` or `system`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckedOn::Vm => "VM",
            CheckedOn::System => "system",
        }
    }
}

/// What this host's KVM offers, probed once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// `KVM_GET_API_VERSION`.
    pub api_version: i32,
    /// `KVM_CAP_NR_VCPUS`: recommended maximum vCPUs per VM.
    pub nr_vcpus: i32,
    /// `KVM_CAP_MAX_VCPUS`: hard maximum vCPUs per VM.
    pub max_vcpus: i32,
    /// Where the capabilities were checked.
    pub checked_on: CheckedOn,
    /// Why no VM could be created and what to do, when none could.
    pub vm_error: Option<(String, String)>,
    /// Every capability of the table, by name, with `KVM_CHECK_EXTENSION`'s answer.
    pub values: BTreeMap<&'static str, i32>,
    /// `KVM_GET_TSC_KHZ` of a throwaway vCPU, when it answered.
    pub tsc_khz: Option<u32>,
    /// Highest sub-leaf of CPUID leaf 0xD a guest sees; `None` without XSAVE.
    pub xsave_max_subleaf: Option<u32>,
}

static CAPS: OnceLock<Capabilities> = OnceLock::new();

impl Capabilities {
    /// This host's capabilities, probed through `kvm` on the first call of the process.
    pub fn get(kvm: &Kvm) -> &'static Capabilities {
        CAPS.get_or_init(|| Capabilities::probe(kvm))
    }

    /// Opens /dev/kvm (with the usual explanations when it cannot) and returns
    /// [`Capabilities::get`].
    pub fn open() -> Result<&'static Capabilities, VmmError> {
        if let Some(c) = CAPS.get() {
            return Ok(c);
        }
        let kvm = crate::open_kvm()?;
        Ok(Capabilities::get(&kvm))
    }

    fn probe(kvm: &Kvm) -> Capabilities {
        let vm = kvm.create_vm();
        let vm_error = vm.as_ref().err().map(|e| {
            let reason = std::io::Error::from_raw_os_error(e.errno());
            let advice = match e.errno() {
                libc::EBUSY => {
                    "another hypervisor holds VT-x/AMD-V, or KVM could not enable it: stop \
                     other hypervisors and check dmesg"
                }
                libc::ENOMEM => "not enough memory to create a VM",
                _ => "check dmesg for KVM errors",
            };
            (
                format!("KVM_CREATE_VM failed: {reason}"),
                advice.to_string(),
            )
        });
        let check = |cap: u32| -> i32 {
            let cap = libc::c_ulong::from(cap);
            match &vm {
                Ok(vm) => vm.check_extension_raw(cap),
                Err(_) => kvm.check_extension_raw(cap),
            }
        };
        let tsc_khz = vm
            .as_ref()
            .ok()
            .and_then(|vm| vm.create_vcpu(0).ok())
            .and_then(|vcpu| vcpu.get_tsc_khz().ok())
            .filter(|k| *k > 0);
        Capabilities {
            api_version: kvm.get_api_version(),
            nr_vcpus: check(kb::KVM_CAP_NR_VCPUS),
            max_vcpus: check(kb::KVM_CAP_MAX_VCPUS),
            checked_on: if vm.is_ok() {
                CheckedOn::Vm
            } else {
                CheckedOn::System
            },
            values: CAPABILITIES
                .iter()
                .map(|(name, cap)| (*name, check(*cap)))
                .collect(),
            vm_error,
            tsc_khz,
            xsave_max_subleaf: cpuid::supported(kvm)
                .ok()
                .and_then(cpuid::xsave_max_subleaf),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.values.get(name).is_some_and(|v| *v > 0)
    }

    /// MSR accesses can be sent to userspace (`X86_USER_SPACE_MSR` and `X86_MSR_FILTER`).
    pub fn user_space_msr(&self) -> bool {
        self.has("X86_USER_SPACE_MSR") && self.has("X86_MSR_FILTER")
    }

    /// ioeventfds are available (`IOEVENTFD`).
    pub fn ioeventfd(&self) -> bool {
        self.has("IOEVENTFD")
    }

    /// An in-kernel irqchip is available (`IRQCHIP`).
    pub fn irqchip(&self) -> bool {
        self.has("IRQCHIP")
    }

    /// The exits that may be disabled (`X86_DISABLE_EXITS` bits).
    pub fn disable_exits(&self) -> u32 {
        self.values
            .get("X86_DISABLE_EXITS")
            .map_or(0, |v| (*v).max(0) as u32)
    }

    /// Every capability with the names of its set bits, for those whose value is a mask.
    pub fn bit_names(&self) -> BTreeMap<&'static str, String> {
        self.values
            .iter()
            .filter_map(|(name, v)| decode_cap_bits(name, *v).map(|b| (*name, b)))
            .collect()
    }
}

/// Names of the bits set in a capability value, for capabilities whose value is a bit mask.
/// `None` for capabilities that are plain counts or booleans, and for a zero value.
pub fn decode_cap_bits(cap: &str, value: i32) -> Option<String> {
    if value <= 0 {
        return None;
    }
    let bits = value as u32;
    let table: &[(u32, &str)] = match cap {
        "X86_DISABLE_EXITS" => &[
            (kb::KVM_X86_DISABLE_EXITS_MWAIT, "MWAIT"),
            (kb::KVM_X86_DISABLE_EXITS_HLT, "HLT"),
            (kb::KVM_X86_DISABLE_EXITS_PAUSE, "PAUSE"),
            (kb::KVM_X86_DISABLE_EXITS_CSTATE, "CSTATE"),
        ],
        "X2APIC_API" => &[
            (kb::KVM_X2APIC_API_USE_32BIT_IDS, "USE_32BIT_IDS"),
            (
                kb::KVM_X2APIC_API_DISABLE_BROADCAST_QUIRK,
                "DISABLE_BROADCAST_QUIRK",
            ),
        ],
        "SYNC_REGS" => &[
            (kb::KVM_SYNC_X86_REGS, "REGS"),
            (kb::KVM_SYNC_X86_SREGS, "SREGS"),
            (kb::KVM_SYNC_X86_EVENTS, "EVENTS"),
        ],
        "ADJUST_CLOCK" => &[
            (kb::KVM_CLOCK_TSC_STABLE, "TSC_STABLE"),
            (kb::KVM_CLOCK_REALTIME, "REALTIME"),
            (kb::KVM_CLOCK_HOST_TSC, "HOST_TSC"),
        ],
        "EXIT_HYPERCALL" => &[(1 << KVM_HC_MAP_GPA_RANGE, "MAP_GPA_RANGE")],
        "PMU_CAPABILITY" => &[(kb::KVM_PMU_CAP_DISABLE, "DISABLE")],
        "X86_NOTIFY_VMEXIT" => &[
            (kb::KVM_X86_NOTIFY_VMEXIT_ENABLED, "ENABLED"),
            (kb::KVM_X86_NOTIFY_VMEXIT_USER, "USER"),
        ],
        _ => return None,
    };
    let mut names: Vec<String> = table
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    let known = table.iter().fold(0u32, |acc, (bit, _)| acc | bit);
    if bits & !known != 0 {
        names.push(format!("{:#x}", bits & !known));
    }
    Some(names.join("|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_decoders() {
        assert_eq!(
            decode_cap_bits("X86_DISABLE_EXITS", 14).as_deref(),
            Some("HLT|PAUSE|CSTATE")
        );
        assert_eq!(
            decode_cap_bits("X86_DISABLE_EXITS", 15).as_deref(),
            Some("MWAIT|HLT|PAUSE|CSTATE")
        );
        assert_eq!(decode_cap_bits("X86_DISABLE_EXITS", 0), None);
        assert_eq!(
            decode_cap_bits("SYNC_REGS", 7).as_deref(),
            Some("REGS|SREGS|EVENTS")
        );
        assert_eq!(
            decode_cap_bits("X2APIC_API", 3).as_deref(),
            Some("USE_32BIT_IDS|DISABLE_BROADCAST_QUIRK")
        );
        assert_eq!(
            decode_cap_bits("X2APIC_API", 0x0b).as_deref(),
            Some("USE_32BIT_IDS|DISABLE_BROADCAST_QUIRK|0x8")
        );
        assert_eq!(
            decode_cap_bits("ADJUST_CLOCK", 14).as_deref(),
            Some("TSC_STABLE|REALTIME|HOST_TSC")
        );
        assert_eq!(
            decode_cap_bits("EXIT_HYPERCALL", 4096).as_deref(),
            Some("MAP_GPA_RANGE")
        );
        assert_eq!(decode_cap_bits("X86_USER_SPACE_MSR", 1), None);
        assert_eq!(decode_cap_bits("IRQCHIP", 1), None);
    }

    #[test]
    fn probed_once_and_consistent_with_kvm() {
        let kvm = crate::open_kvm().expect("these tests need a usable /dev/kvm");
        let a = Capabilities::get(&kvm);
        let b = Capabilities::open().expect("KVM opened a moment ago");
        assert!(std::ptr::eq(a, b), "probed once per process");
        assert_eq!(a.api_version, 12);
        assert_eq!(a.checked_on, CheckedOn::Vm, "{:?}", a.vm_error);
        assert!(a.nr_vcpus > 0);
        assert!(a.irqchip(), "every x86 KVM has an in-kernel irqchip");
        assert_eq!(
            a.ioeventfd(),
            kvm.check_extension(kvm_ioctls::Cap::Ioeventfd)
        );
        assert_eq!(a.values.len(), CAPABILITIES.len());
        assert!(a.tsc_khz.is_some());
        assert_eq!(
            a.xsave_max_subleaf,
            cpuid::supported(&kvm)
                .ok()
                .and_then(cpuid::xsave_max_subleaf)
        );
    }
}
