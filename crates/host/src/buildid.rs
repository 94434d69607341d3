//! GNU build IDs of the running kernel and of its loaded KVM modules: which binaries the
//! figures of a run came from. The kernel publishes its ELF notes in `/sys/kernel/notes`,
//! a module its own in `/sys/module/M/notes/.note.gnu.build-id`; both are raw ELF note
//! records, parsed here by their header (name size, descriptor size, type), each part
//! padded to 4 bytes.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// `NT_GNU_BUILD_ID`: the note type of a GNU build ID.
pub const NT_GNU_BUILD_ID: u32 = 3;
/// Name of the notes GNU tools write (`"GNU\0"`, name size 4).
const GNU_NAME: &[u8] = b"GNU\0";
/// Header of one note record: name size, descriptor size, type (native-endian u32 each).
const HEADER: usize = 12;

/// One ELF note record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The name, with its terminating NUL if the record has one.
    pub name: Vec<u8>,
    /// The note type.
    pub kind: u32,
    /// The descriptor.
    pub desc: Vec<u8>,
}

/// Why a run of note records cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// The bytes end inside a record.
    #[error("ELF note at byte {offset} is cut short: it needs {needed} bytes, {left} are left")]
    Truncated {
        /// Where the record starts.
        offset: usize,
        /// Bytes the record declares (header, padded name and descriptor).
        needed: usize,
        /// Bytes left from `offset`.
        left: usize,
    },
}

/// `n` rounded up to a multiple of 4, `None` on overflow.
fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|v| v & !3)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

/// Every note record in `bytes` (a note section or segment as the kernel exposes it).
/// Trailing bytes too few to hold a header (zero padding) are ignored.
pub fn parse_notes(bytes: &[u8]) -> Result<Vec<Note>, NoteError> {
    let mut notes = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let namesz = u32_at(bytes, at) as usize;
        let descsz = u32_at(bytes, at + 4) as usize;
        let kind = u32_at(bytes, at + 8);
        let left = bytes.len() - at;
        let name_padded = align4(namesz);
        let desc_padded = align4(descsz);
        let needed = name_padded
            .zip(desc_padded)
            .and_then(|(n, d)| HEADER.checked_add(n)?.checked_add(d));
        let Some(needed) = needed.filter(|n| *n <= left) else {
            return Err(NoteError::Truncated {
                offset: at,
                needed: needed.unwrap_or(usize::MAX),
                left,
            });
        };
        let name_at = at + HEADER;
        let desc_at = name_at + name_padded.unwrap_or(0);
        notes.push(Note {
            name: bytes[name_at..name_at + namesz].to_vec(),
            kind,
            desc: bytes[desc_at..desc_at + descsz].to_vec(),
        });
        at += needed;
    }
    Ok(notes)
}

/// The GNU build ID among note records `bytes`, as lower-case hex; `None` when there is
/// none, it is empty, or the records cannot be read.
pub fn gnu_build_id(bytes: &[u8]) -> Option<String> {
    parse_notes(bytes)
        .ok()?
        .into_iter()
        .find(|n| n.kind == NT_GNU_BUILD_ID && n.name == GNU_NAME && !n.desc.is_empty())
        .map(|n| hex(&n.desc))
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build IDs a run records: the kernel's and each loaded KVM module's.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildIds {
    /// The running kernel's (`/sys/kernel/notes`); `None` when it cannot be read.
    pub kernel: Option<String>,
    /// Module name -> its build ID, for each module whose notes could be read (a
    /// built-in module has none of its own: it is part of the kernel's).
    pub modules: BTreeMap<String, String>,
}

/// The build ID of module `module` under sysfs root `sys` (`/sys`).
pub fn module_build_id(sys: &Path, module: &str) -> Option<String> {
    let path = sys
        .join("module")
        .join(module)
        .join("notes")
        .join(".note.gnu.build-id");
    gnu_build_id(&fs::read(path).ok()?)
}

/// The kernel's build ID under sysfs root `sys`.
pub fn kernel_build_id(sys: &Path) -> Option<String> {
    gnu_build_id(&fs::read(sys.join("kernel").join("notes")).ok()?)
}

/// The kernel's build ID and those of `modules` (those that have one) under sysfs root
/// `sys`.
pub fn build_ids<S: AsRef<str>>(sys: &Path, modules: &[S]) -> BuildIds {
    BuildIds {
        kernel: kernel_build_id(sys),
        modules: modules
            .iter()
            .filter_map(|m| Some((m.as_ref().to_string(), module_build_id(sys, m.as_ref())?)))
            .collect(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::TempDir;

    /// One note record as the kernel lays it out.
    pub(crate) fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(name);
        v.resize(align4(v.len()).unwrap(), 0);
        v.extend_from_slice(desc);
        v.resize(align4(v.len()).unwrap(), 0);
        v
    }

    #[test]
    fn the_gnu_build_id_is_found_among_other_notes() {
        // A Linux note whose name (6 bytes) and descriptor (5 bytes) need padding, a
        // build ID of type 3 under another name, then the real one.
        let mut bytes = note(b"Linux\0", 6, b"6.1.0");
        bytes.extend(note(b"Xen\0", NT_GNU_BUILD_ID, &[0xaa; 4]));
        bytes.extend(note(
            b"GNU\0",
            NT_GNU_BUILD_ID,
            &[0x01, 0x23, 0xab, 0xff, 0x00],
        ));
        bytes.extend([0u8; 8]);
        let notes = parse_notes(&bytes).unwrap();
        assert_eq!(notes.len(), 3);
        assert_eq!(notes[0].name, b"Linux\0");
        assert_eq!(notes[0].desc, b"6.1.0");
        assert_eq!(notes[1].kind, NT_GNU_BUILD_ID);
        assert_eq!(gnu_build_id(&bytes).as_deref(), Some("0123abff00"));
    }

    #[test]
    fn bad_note_bytes_give_no_build_id() {
        let good = note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]);
        for cut in [13, 16, 20, 31] {
            assert!(
                matches!(
                    parse_notes(&good[..cut]),
                    Err(NoteError::Truncated { offset: 0, .. })
                ),
                "{cut}"
            );
            assert_eq!(gnu_build_id(&good[..cut]), None);
        }
        // A size that overflows when padded.
        let mut huge = good.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse_notes(&huge).is_err());
        // Another type, another name, an empty descriptor: no build ID.
        assert_eq!(gnu_build_id(&note(b"GNU\0", 1, &[1; 20])), None);
        assert_eq!(gnu_build_id(&note(b"GNU", 3, &[1; 20])), None);
        assert_eq!(gnu_build_id(&note(b"GNU\0", 3, &[])), None);
        assert_eq!(gnu_build_id(&[]), None);
        let msg = parse_notes(&good[..16]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "ELF note at byte 0 is cut short: it needs 36 bytes, 16 are left"
        );
    }

    #[test]
    fn this_kernel_has_a_build_id() {
        // /sys/kernel/notes exists on every kernel built with notes (both of the project's
        // kernels: this host's and the L1's).
        let bytes = fs::read("/sys/kernel/notes").expect("/sys/kernel/notes");
        let id = gnu_build_id(&bytes).expect("the kernel's notes hold a GNU build ID");
        assert!(id.len() >= 16 && id.len().is_multiple_of(2), "{id}");
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(
            kernel_build_id(Path::new("/sys")).as_deref(),
            Some(id.as_str())
        );
    }

    #[test]
    fn build_ids_from_a_sysfs_tree() {
        let root = TempDir::new("buildid");
        let write = |rel: &str, bytes: &[u8]| {
            let p = root.0.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, bytes).unwrap();
        };
        write("kernel/notes", &note(b"GNU\0", 3, &[0x12, 0x34]));
        write(
            "module/kvm_amd/notes/.note.gnu.build-id",
            &note(b"GNU\0", 3, &[0xab, 0xcd]),
        );
        fs::create_dir_all(root.0.join("module/kvm/parameters")).unwrap();
        let ids = build_ids(&root.0, &["kvm", "kvm_amd"]);
        assert_eq!(ids.kernel.as_deref(), Some("1234"));
        assert_eq!(ids.modules.len(), 1, "kvm has no notes here (built in)");
        assert_eq!(ids.modules["kvm_amd"], "abcd");
        let json = serde_json::to_value(&ids).unwrap();
        assert_eq!(json["kernel"], "1234");
        assert_eq!(json["modules"]["kvm_amd"], "abcd");
    }
}
