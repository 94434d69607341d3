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
        for d in descs.chunks_exact(desc_size) {
            let size = u16::from_le_bytes([d[6], d[7]]);
            let offset = u32_at(d, 8)? as u64;
            let name = &d[16..];
            let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            fields.insert(name, (offset, size));
        }
        Some(KvmStats {
            file,
            data_offset,
            fields,
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

    /// Names of every statistic the kernel offers.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }
}
