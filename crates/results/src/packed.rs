//! Sample records packed losslessly while a run's rounds accumulate.
//!
//! `bench` keeps every round of every test until the last round has run (a planned
//! design's pilot is read before its rounds, and the figures come from all rounds), and
//! a sample record is seven 64-bit TSC values, 56 bytes. Consecutive
//! records differ little in each field (the stamps advance by about one sample's
//! length, the loop and exit counts barely move), so each field is stored as the
//! zigzag LEB128 varint of its difference from the same field of the record before:
//! 12-18 bytes a record instead of 56 on the hosts measured. Any u64 values round-trip
//! exactly (the differences wrap).

use exitlab_abi::Sample;

/// Sample records, packed (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedSamples {
    bytes: Vec<u8>,
    len: usize,
}

fn fields(s: &Sample) -> [u64; 7] {
    [
        s.g_start,
        s.g_end,
        s.h_prev_reenter,
        s.h_return,
        s.h_reenter,
        s.seq_delta,
        s.g_loop,
    ]
}

fn sample(f: [u64; 7]) -> Sample {
    Sample {
        g_start: f[0],
        g_end: f[1],
        h_prev_reenter: f[2],
        h_return: f[3],
        h_reenter: f[4],
        seq_delta: f[5],
        g_loop: f[6],
    }
}

impl PackedSamples {
    /// Packs `samples`, in order.
    pub fn pack(samples: &[Sample]) -> PackedSamples {
        let mut bytes = Vec::with_capacity(samples.len() * 16);
        let mut prev = [0u64; 7];
        for s in samples {
            let f = fields(s);
            for (v, p) in f.iter().zip(&prev) {
                let d = v.wrapping_sub(*p) as i64;
                let mut z = ((d << 1) ^ (d >> 63)) as u64;
                while z >= 0x80 {
                    bytes.push((z as u8) | 0x80);
                    z >>= 7;
                }
                bytes.push(z as u8);
            }
            prev = f;
        }
        bytes.shrink_to_fit();
        PackedSamples {
            bytes,
            len: samples.len(),
        }
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the packed records take.
    pub fn packed_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The records, in order, unpacked one at a time.
    pub fn iter(&self) -> impl Iterator<Item = Sample> + '_ {
        let mut at = 0;
        let mut prev = [0u64; 7];
        (0..self.len).map(move |_| {
            for p in prev.iter_mut() {
                let mut z = 0u64;
                let mut shift = 0;
                loop {
                    // Written by `pack`: every varint is complete.
                    let b = self.bytes[at];
                    at += 1;
                    z |= u64::from(b & 0x7f) << shift;
                    if b < 0x80 {
                        break;
                    }
                    shift += 7;
                }
                let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
                *p = p.wrapping_add(d as u64);
            }
            sample(prev)
        })
    }

    /// The records, unpacked into a vector of exactly their number.
    pub fn unpack(&self) -> Vec<Sample> {
        let mut v = Vec::with_capacity(self.len);
        v.extend(self.iter());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(base: u64, i: u64) -> Sample {
        Sample {
            g_start: base + i * 50_000,
            g_end: base + i * 50_000 + 24_000 + i % 7,
            h_prev_reenter: 0,
            h_return: 0,
            h_reenter: 0,
            seq_delta: 0,
            g_loop: 20_000 - (i % 3) * 26,
        }
    }

    #[test]
    fn round_trips_any_values() {
        let edge = Sample {
            g_start: u64::MAX,
            g_end: 0,
            h_prev_reenter: 1 << 63,
            h_return: (1 << 63) - 1,
            h_reenter: 1,
            seq_delta: u64::MAX - 1,
            g_loop: 0x8000_0000_0000_0001,
        };
        let v = vec![
            s(1 << 40, 0),
            edge,
            Sample::default(),
            edge,
            s(5, 1),
            s(1 << 62, 9),
        ];
        let p = PackedSamples::pack(&v);
        assert_eq!(p.len(), v.len());
        assert_eq!(p.unpack(), v);
        assert_eq!(p.iter().collect::<Vec<_>>(), v);
        let empty = PackedSamples::pack(&[]);
        assert!(empty.is_empty() && empty.unpack().is_empty());
    }

    #[test]
    fn a_run_of_kernel_samples_packs_to_under_a_quarter() {
        let v: Vec<Sample> = (0..1000).map(|i| s(1 << 40, i)).collect();
        let p = PackedSamples::pack(&v);
        assert_eq!(p.unpack(), v);
        // Per record: g_start and g_end 3 bytes each (deltas of 50,000), the host stamps
        // and the exit count 1 byte each, the loop 1 byte (deltas of ±52).
        assert!(
            p.packed_bytes() <= 1000 * 11 + 20,
            "{} bytes",
            p.packed_bytes()
        );
        assert!(p.packed_bytes() * 4 < v.len() * std::mem::size_of::<Sample>());
    }
}
