//! Where a lock lives in the directory: file names from [`LockName::encoded`], and back.
//!
//! One lock (a name in one [`Family`]) is two files named by its *stem*:
//! - `<stem>.lock`: empty, never replaced; the `flock` on it makes each change of the state a
//!   transaction (between processes and between tasks of one process alike);
//! - `<stem>.state`: the queue, holders and waiters in arrival order, and the last fencing token
//!   (JSON), written in place in one of two checksummed frames, beside a reservation of tokens
//!   (see `conn/record.rs`); a new one is written to `.<stem>.tmp` first and renamed into place.
//!
//! The stem is [`Family::segment`] (`[A-Za-z0-9_-]`, `%XX` escapes and the family's suffix),
//! with every upper-case letter escaped too (`A` is `%41`), so that names differing only in case
//! stay apart on case-insensitive file systems. A stem longer than [`MAX_STEM`] bytes is cut and
//! ends in `~` and a hash of the whole segment; the state file carries the full segment, so a
//! listing reads names from the files, never from their names, and two names that cut to the same
//! stem are told apart (the second is refused, never mixed up with the first).
//!
//! The liveness files of the lockers using the directory are in `.owners/` (see
//! `conn/owner.rs`).

use std::path::{Path, PathBuf};

use locksmith_core::driver::LockName;
use locksmith_core::Family;

/// The suffix of a lock's state file.
pub(crate) const STATE_SUFFIX: &str = ".state";
/// The suffix of a lock's lock file.
const LOCK_SUFFIX: &str = ".lock";
/// The directory of the lockers' liveness files.
pub(crate) const OWNERS_DIR: &str = ".owners";
/// The longest stem kept as it is (file names may have 255 bytes on most file systems).
const MAX_STEM: usize = 200;

/// The files of one lock.
#[derive(Clone, Debug)]
pub(crate) struct LockFile {
    /// [`Family::segment`] of the name: what the state file records.
    pub segment: String,
    /// The stem of its file names.
    pub stem: String,
}

impl LockFile {
    /// The files of `name` in `family`.
    pub fn of(family: Family, name: &LockName) -> LockFile {
        let segment = family.segment(name);
        LockFile {
            stem: stem(&segment),
            segment,
        }
    }

    /// Whether these are the files [`LockFile::of`] gives for `name` in `family` (its segment
    /// compared without building it).
    pub fn is_of(&self, family: Family, name: &LockName) -> bool {
        self.segment.strip_prefix(name.encoded()) == Some(family.suffix())
    }

    /// The files of stem `stem`, found in the directory (a prune's: its lock's segment is not
    /// known, and stays empty; its state file says it).
    pub fn of_stem(stem: &str) -> LockFile {
        LockFile {
            segment: String::new(),
            stem: stem.to_owned(),
        }
    }

    /// `<dir>/<stem>.lock`.
    pub fn lock_path(&self, dir: &Path) -> PathBuf {
        self.path(dir, "", LOCK_SUFFIX)
    }

    /// `<dir>/<stem>.state`.
    pub fn state_path(&self, dir: &Path) -> PathBuf {
        self.path(dir, "", STATE_SUFFIX)
    }

    /// `<dir>/.<stem>.tmp`: where the next state is written before it is renamed over the last.
    pub fn temp_path(&self, dir: &Path) -> PathBuf {
        self.path(dir, ".", ".tmp")
    }

    /// `<dir>/<prefix><stem><suffix>`, in one allocation: a step names its files several times,
    /// and `format!` then `join` cost two allocations and the formatting machinery each time.
    fn path(&self, dir: &Path, prefix: &str, suffix: &str) -> PathBuf {
        let dir = dir.as_os_str();
        let len = dir.len() + 1 + prefix.len() + self.stem.len() + suffix.len();
        let mut path = std::ffi::OsString::with_capacity(len);
        path.push(dir);
        if !dir.is_empty() && !dir.as_encoded_bytes().ends_with(b"/") {
            path.push("/");
        }
        path.push(prefix);
        path.push(&self.stem);
        path.push(suffix);
        PathBuf::from(path)
    }
}

/// The stem of a lock file's name (`None` for any other file).
pub(crate) fn stem_of_lock_file(file_name: &str) -> Option<&str> {
    file_name
        .strip_suffix(LOCK_SUFFIX)
        .filter(|stem| !stem.starts_with('.'))
}

/// The stem of a state file's name (`None` for any other file).
pub(crate) fn stem_of_state_file(file_name: &str) -> Option<&str> {
    file_name
        .strip_suffix(STATE_SUFFIX)
        .filter(|stem| !stem.starts_with('.'))
}

/// The file-name stem of a segment (see the module docs): every ASCII upper-case letter but an
/// escape's hex digits as `%XX`. Copied run by run between the upper-case letters (a step names
/// its lock twice a cycle; one character at a time cost ~1 k instructions a name).
fn stem(segment: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(segment.len() + 8);
    let mut kept = 0;
    for (i, b) in segment.bytes().enumerate() {
        if !b.is_ascii_uppercase() {
            continue;
        }
        // `kept` and `i` are both character boundaries: each follows or is an ASCII byte.
        out.push_str(&segment[kept..i]);
        kept = i;
        if !ends_in_escape(&out) {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
            kept = i + 1;
        }
    }
    out.push_str(&segment[kept..]);
    shortened(out, segment)
}

/// `encoded`, the encoding of `segment`, cut to [`MAX_STEM`] bytes where it is longer, with a hash
/// of the whole segment in place of the rest.
fn shortened(encoded: String, segment: &str) -> String {
    if encoded.len() <= MAX_STEM {
        return encoded;
    }
    let mut cut = MAX_STEM - 17;
    while !encoded.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{:016x}", &encoded[..cut], fnv1a(segment.as_bytes()))
}

/// Whether `out` ends inside a `%XX` escape of the encoding (its hex digits stay upper case).
fn ends_in_escape(out: &str) -> bool {
    let b = out.as_bytes();
    matches!(b, [.., b'%'] | [.., b'%', _])
}

/// FNV-1a, 64 bits: a hash that is the same in every build and process.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem_of(name: &str) -> String {
        LockFile::of(Family::Mutex, &LockName::new(name).unwrap()).stem
    }

    /// `is_of` says yes to the files `of` gives, and no for another family or name (also one
    /// whose segment starts the same).
    #[test]
    fn files_know_the_lock_they_are_of() {
        let (a, ab) = (LockName::new("a").unwrap(), LockName::new("a.sem").unwrap());
        for family in Family::ALL {
            let files = LockFile::of(family, &a);
            for other in Family::ALL {
                assert_eq!(files.is_of(other, &a), other == family, "{family:?} against {other:?}");
            }
            assert!(!files.is_of(family, &ab));
            assert!(!LockFile::of(family, &ab).is_of(family, &a));
        }
    }

    /// The stem as the first version wrote it, one character at a time: the files of locks
    /// taken by an older locksmith must keep their names.
    fn stem_by_char(segment: &str) -> String {
        let mut out = String::new();
        for c in segment.chars() {
            if c.is_ascii_uppercase() && !ends_in_escape(&out) {
                out.push_str(&format!("%{:02X}", c as u32));
            } else {
                out.push(c);
            }
        }
        shortened(out, segment)
    }

    #[test]
    fn stems_are_the_names_the_first_version_gave() {
        let long = "Ab/".repeat(200);
        let segments = [
            "a",
            "A",
            "AB",
            "%",
            "%A",
            "%AB",
            "%ABC",
            "A%",
            "x%2Fy",
            "%2F%2F",
            "ÄÖ/ü",
            "aÄB",
            "%4A%4a",
            "mutex/orders%2F42",
            "Z",
            "%%A",
            long.as_str(),
        ];
        for segment in segments {
            assert_eq!(stem(segment), stem_by_char(segment), "{segment:?}");
        }
        for name in [
            "orders/42",
            "A/b.C",
            " ",
            "..",
            "ä/ö/ü",
            "x.y",
            "x%2Ey",
            &"Q".repeat(300),
        ] {
            let segment = Family::Mutex.segment(&LockName::new(name).unwrap());
            assert_eq!(stem(&segment), stem_by_char(&segment), "{name:?}");
        }
    }

    #[test]
    fn file_paths_are_the_stem_in_the_directory() {
        let file = LockFile::of_stem("a%2Fb");
        for dir in ["/tmp/locks", "/tmp/locks/", "/", "locks", ""] {
            let dir = Path::new(dir);
            assert_eq!(file.lock_path(dir), dir.join("a%2Fb.lock"));
            assert_eq!(file.state_path(dir), dir.join("a%2Fb.state"));
            assert_eq!(file.temp_path(dir), dir.join(".a%2Fb.tmp"));
        }
    }

    #[test]
    fn names_that_differ_in_case_or_slashes_get_different_files() {
        let names = ["a", "A", "a/b", "ab", "a/", "AB", "aB", "%", "ä", "Ä", ".", ".."];
        let mut seen = std::collections::HashSet::new();
        for n in names {
            let s = stem_of(n);
            assert!(!s.contains('/') && !s.starts_with('.'), "{n:?} -> {s}");
            assert!(
                seen.insert(s.to_ascii_lowercase()),
                "{n:?} collides case-insensitively: {s}"
            );
        }
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_apart() {
        let long_a = "x".repeat(1000) + "a";
        let long_b = "x".repeat(1000) + "b";
        let (a, b) = (stem_of(&long_a), stem_of(&long_b));
        assert!(a.len() <= MAX_STEM && b.len() <= MAX_STEM);
        assert_ne!(a, b);
        let huge = "É".repeat(512);
        assert!(stem_of(&huge).len() <= MAX_STEM);
    }

    #[test]
    fn only_state_files_name_locks() {
        assert_eq!(stem_of_state_file("abc.state"), Some("abc"));
        assert_eq!(stem_of_state_file(".abc.tmp"), None);
        assert_eq!(stem_of_state_file("abc.lock"), None);
        assert_eq!(stem_of_state_file(".owners"), None);
        assert_eq!(stem_of_lock_file("abc.lock"), Some("abc"));
        assert_eq!(stem_of_lock_file(".pruned.lock"), None);
        assert_eq!(stem_of_lock_file("abc.state"), None);
    }
}
