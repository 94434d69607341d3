//! Userspace exits of one vCPU by reason: plain counters owned by the vCPU thread.
//!
//! The reasons are listed once, in the macro call at the bottom; the struct, its
//! `(name, count)` listing and its arithmetic are generated from that list, so adding a
//! reason is one line.
#![deny(missing_docs)]

macro_rules! exit_counts {
    ($($(#[doc = $doc:literal])* $field:ident),+ $(,)?) => {
        /// Userspace exits of one vCPU by reason. Plain counters owned by the vCPU thread.
        // `default`: results written before a reason existed still read (as 0).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(default)]
        #[repr(C)]
        pub struct ExitCounts {
            $($(#[doc = $doc])* pub $field: u64,)+
        }

        impl ExitCounts {
            /// How many reasons there are.
            pub const REASONS: usize = [$(stringify!($field)),+].len();

            /// (name, count) pairs, in a fixed order.
            pub fn entries(&self) -> [(&'static str, u64); Self::REASONS] {
                [$((stringify!($field), self.$field)),+]
            }

            /// Applies `f` to each pair of counts of `self` and `other`.
            fn zip(&self, other: &ExitCounts, f: impl Fn(u64, u64) -> u64) -> ExitCounts {
                ExitCounts { $($field: f(self.$field, other.$field)),+ }
            }
        }
    };
}

exit_counts! {
    /// Port reads (one per exit, whatever the string count).
    io_in,
    /// Port writes (not counting doorbells).
    io_out,
    /// MMIO reads.
    mmio_read,
    /// MMIO writes.
    mmio_write,
    /// HLT.
    hlt,
    /// RDMSR routed to userspace.
    rdmsr,
    /// WRMSR routed to userspace.
    wrmsr,
    /// Doorbell writes handed to the hook.
    doorbell,
    /// KVM_RUN interrupted by a signal.
    intr,
    /// KVM_EXIT_IOAPIC_EOI: the guest's EOI of a level-triggered vector of the userspace
    /// I/O APIC (split irqchip).
    ioapic_eoi,
    /// Anything else.
    other,
}

impl ExitCounts {
    /// Every userspace exit counted.
    pub fn total(&self) -> u64 {
        self.entries().iter().map(|(_, n)| n).sum()
    }

    /// These counts plus `other`.
    pub fn plus(&self, other: &ExitCounts) -> ExitCounts {
        self.zip(other, u64::wrapping_add)
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &ExitCounts) -> ExitCounts {
        self.zip(earlier, u64::wrapping_sub)
    }
}

/// The exits of one vCPU over a run (or a test): its userspace exits by reason and
/// KVM's own counts, when the host has binary stats. `exitlab run` reports one per vCPU;
/// the lab's results record them per test.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct VcpuExits {
    /// vCPU index (= APIC id).
    pub vcpu: u32,
    /// Userspace exits by reason.
    pub user: ExitCounts,
    /// KVM's count of all exits (binary stats `exits`), when the host has them.
    pub kvm_exits: Option<u64>,
    /// KVM's count of HLT exits (binary stats `halt_exits`), when the host has them.
    pub halt_exits: Option<u64>,
}

/// The busy-waits a vCPU made for the VMM's known-answer control (`inject-cycles`: a wait
/// that adds N host TSC cycles after every userspace exit), as the VMM measured them:
/// each wait's spin (from its first clock read to its last) plus what a wait costs
/// outside its spin (its call and clock reads, calibrated when the control was set). That
/// is the change the exits really got: N on average, more where the thread lost its CPU
/// while it spun (as the emulated CPUs of a nested guest do when they share one host
/// thread).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct InjectedWaits {
    /// Waits made: one per userspace exit handled while the control was on.
    pub waits: u64,
    /// Cycles the waits added in all (spins and their cost outside them).
    pub spun: u64,
    /// The shortest wait (0 when none was made).
    pub min: u64,
    /// The longest wait.
    pub max: u64,
    /// Exits the control left without a wait to calibrate itself where it waits: among
    /// the first exits of a run, those the guest does not measure (its warm-up), every
    /// other one gets no wait ([`InjectedWaits::waits`] counts the others). Absent in
    /// older files.
    #[serde(default)]
    pub unwaited: u64,
    /// Calibrations made where the waits are made (one per vCPU run that had enough
    /// unmeasured exits). Absent in older files.
    #[serde(default)]
    pub in_situ: u64,
    /// Of those, the ones not used: a wait there added far more than its spin (an exit
    /// disturbed too often to tell), and the warm loop's calibration stood. Absent in
    /// older files.
    #[serde(default)]
    pub in_situ_unused: u64,
    /// Calibrations where the waits are made that were begun (took an exit) and not
    /// finished: the vCPU run ended (or the control was set again) within its first
    /// unmeasured exits, and the warm loop's calibration stood. Not counted in [`InjectedWaits::in_situ`].
    /// Absent in older files, which counted such a calibration nowhere.
    #[serde(default)]
    pub in_situ_cut: u64,
}

impl InjectedWaits {
    /// Counts one wait of `spun` cycles.
    pub fn add(&mut self, spun: u64) {
        self.min = if self.waits == 0 {
            spun
        } else {
            self.min.min(spun)
        };
        self.max = self.max.max(spun);
        self.waits += 1;
        self.spun = self.spun.saturating_add(spun);
    }

    /// The waits of `self` and `other` together (two runs of one test, for instance).
    pub fn merged(self, other: InjectedWaits) -> InjectedWaits {
        let mut out = match (self.waits, other.waits) {
            (0, _) => other,
            (_, 0) => self,
            _ => InjectedWaits {
                waits: self.waits + other.waits,
                spun: self.spun.saturating_add(other.spun),
                min: self.min.min(other.min),
                max: self.max.max(other.max),
                ..InjectedWaits::default()
            },
        };
        // The calibration's counts add up whichever side made the waits.
        out.unwaited = self.unwaited + other.unwaited;
        out.in_situ = self.in_situ + other.in_situ;
        out.in_situ_unused = self.in_situ_unused + other.in_situ_unused;
        out.in_situ_cut = self.in_situ_cut + other.in_situ_cut;
        out
    }

    /// Mean cycles spun per wait (`None` without waits).
    pub fn mean(&self) -> Option<f64> {
        (self.waits > 0).then(|| self.spun as f64 / self.waits as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_waits_keep_count_sum_and_extremes() {
        let mut w = InjectedWaits::default();
        assert_eq!(w.mean(), None);
        for spun in [120, 100, 180] {
            w.add(spun);
        }
        let want = InjectedWaits {
            waits: 3,
            spun: 400,
            min: 100,
            max: 180,
            ..InjectedWaits::default()
        };
        assert_eq!(w, want);
        assert_eq!(w.mean(), Some(400.0 / 3.0));
        // A run without waits changes nothing either way round; two with waits add up.
        assert_eq!(w.merged(InjectedWaits::default()), w);
        assert_eq!(InjectedWaits::default().merged(w), w);
        let mut other = InjectedWaits::default();
        other.add(90);
        assert_eq!(
            w.merged(other),
            InjectedWaits {
                waits: 4,
                spun: 490,
                min: 90,
                max: 180,
                ..InjectedWaits::default()
            }
        );
        // Exits left without a wait and the calibrations add up too, also where one side
        // made no wait.
        let calibrating = InjectedWaits {
            unwaited: 16,
            in_situ: 1,
            in_situ_unused: 1,
            in_situ_cut: 1,
            ..InjectedWaits::default()
        };
        let both = w.merged(calibrating).merged(InjectedWaits {
            unwaited: 8,
            in_situ: 1,
            ..w
        });
        assert_eq!(
            (
                both.waits,
                both.unwaited,
                both.in_situ,
                both.in_situ_unused,
                both.in_situ_cut
            ),
            (6, 24, 2, 1, 1)
        );
        assert_eq!((both.spun, both.min, both.max), (800, 100, 180));
        let twice = calibrating.merged(calibrating);
        assert_eq!(
            (
                twice.unwaited,
                twice.in_situ,
                twice.in_situ_unused,
                twice.in_situ_cut
            ),
            (32, 2, 2, 2)
        );
        assert_eq!(twice.waits, 0);
    }

    #[test]
    fn arithmetic_covers_every_reason() {
        let a = ExitCounts {
            io_in: 1,
            io_out: 2,
            mmio_read: 3,
            mmio_write: 4,
            hlt: 5,
            rdmsr: 6,
            wrmsr: 7,
            doorbell: 8,
            intr: 9,
            ioapic_eoi: 10,
            other: 11,
        };
        let b = a.plus(&a);
        assert_eq!(b.total(), 132);
        assert_eq!(b.since(&a), a);
        let names: Vec<&str> = a.entries().iter().map(|e| e.0).collect();
        assert_eq!(names.len(), ExitCounts::REASONS);
        assert_eq!(names[0], "io_in");
        assert_eq!(names[10], "other");
        assert!(a
            .entries()
            .iter()
            .enumerate()
            .all(|(i, e)| e.1 == i as u64 + 1));
    }

    #[test]
    fn since_wraps_instead_of_panicking() {
        let later = ExitCounts::default();
        let earlier = ExitCounts {
            hlt: 1,
            ..ExitCounts::default()
        };
        assert_eq!(later.since(&earlier).hlt, u64::MAX);
    }

    #[test]
    fn json_keeps_the_field_names() {
        let v = serde_json::to_value(ExitCounts {
            mmio_write: 7,
            ..ExitCounts::default()
        })
        .unwrap();
        assert_eq!(v["mmio_write"], 7);
        assert_eq!(v.as_object().unwrap().len(), ExitCounts::REASONS);
    }

    #[test]
    fn counts_written_before_a_reason_existed_still_read() {
        let old = r#"{"io_in":1,"io_out":0,"mmio_read":0,"mmio_write":0,"hlt":0,"rdmsr":0,"wrmsr":0,"doorbell":2,"intr":0,"other":0}"#;
        let c: ExitCounts = serde_json::from_str(old).unwrap();
        assert_eq!((c.io_in, c.doorbell, c.ioapic_eoi), (1, 2, 0));
    }
}
