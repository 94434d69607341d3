//! KVM's binary statistics for a vCPU (KVM_GET_STATS_FD): the in-kernel exit counters.

use std::collections::BTreeMap;
use std::fs::File;

use kvm_ioctls::VcpuFd;

use crate::sys;

/// A vCPU's binary statistics file, with the descriptors parsed once.
#[derive(Debug)]
pub struct KvmStats {
    file: File,
    data_offset: u64,
    // name -> (offset into the data block, number of u64 items)
    fields: BTreeMap<String, (u64, u16)>,
    // Names of the cumulative event counts (type cumulative, no unit): the counters whose
    // difference over an interval is a number of events.
    counters: Vec<String>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl KvmStats {
    /// Opens the statistics of `vcpu`; `None` when the host has no binary stats.
    pub fn open(vcpu: &VcpuFd) -> Option<KvmStats> {
        let file = sys::vcpu_stats_fd(vcpu).ok()?;
        let mut header = [0u8; 24];
        sys::pread_exact(&file, &mut header, 0).ok()?;
        let name_size = u32_at(&header, 4)? as usize;
        let num_desc = u32_at(&header, 8)? as usize;
        let desc_offset = u32_at(&header, 16)? as u64;
        let data_offset = u32_at(&header, 20)? as u64;
        if name_size > 4096 || num_desc > 65536 {
            return None;
        }
        let desc_size = 16 + name_size;
        let mut descs = vec![0u8; desc_size * num_desc];
        sys::pread_exact(&file, &mut descs, desc_offset).ok()?;
        let mut fields = BTreeMap::new();
        let mut counters = Vec::new();
        for d in descs.chunks_exact(desc_size) {
            let flags = u32_at(d, 0)?;
            let size = u16::from_le_bytes([d[6], d[7]]);
            let offset = u32_at(d, 8)? as u64;
            let name = &d[16..];
            let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            // KVM_STATS_TYPE_CUMULATIVE (0) in bits 0-3, KVM_STATS_UNIT_NONE (0) in 4-7.
            if flags & 0xff == 0 && size > 0 {
                counters.push(name.clone());
            }
            fields.insert(name, (offset, size));
        }
        Some(KvmStats {
            file,
            data_offset,
            fields,
            counters,
        })
    }

    /// The first item of the counter `name` (e.g. "exits", "io_exits", "halt_exits").
    pub fn read(&self, name: &str) -> Option<u64> {
        let &(offset, size) = self.fields.get(name)?;
        if size == 0 {
            return None;
        }
        let mut b = [0u8; 8];
        sys::pread_exact(&self.file, &mut b, self.data_offset + offset).ok()?;
        Some(u64::from_le_bytes(b))
    }

    /// Every cumulative event count the kernel offers (no histograms, no times), read
    /// with one `pread` of the data block; names as the kernel spells them ("exits",
    /// "io_exits", "mmio_exits", "halt_exits", ...).
    pub fn read_counters(&self) -> BTreeMap<String, u64> {
        let end = self
            .counters
            .iter()
            .filter_map(|n| self.fields.get(n))
            .map(|&(offset, _)| offset + 8)
            .max()
            .unwrap_or(0);
        let mut data = vec![0u8; end as usize];
        if sys::pread_exact(&self.file, &mut data, self.data_offset).is_err() {
            return BTreeMap::new();
        }
        self.counters
            .iter()
            .filter_map(|name| {
                let at = self.fields.get(name)?.0 as usize;
                let b: [u8; 8] = data.get(at..at + 8)?.try_into().ok()?;
                Some((name.clone(), u64::from_le_bytes(b)))
            })
            .collect()
    }

    /// Names of every statistic the kernel offers.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }
}
