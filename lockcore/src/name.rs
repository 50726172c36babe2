//! Lock names: validation and the one collision-free encoding every backend uses.
//!
//! A name is any UTF-8 string of 1 to [`MAX_NAME_LEN`] bytes without NUL. Backends never see the
//! raw name in a key or path; they use [`LockName::encoded`], which turns the name into a single
//! segment of the characters `[A-Za-z0-9_-]` and `%XX` escapes. Because an encoded name contains no
//! `/` and the encoding is injective, a key layout of the form `prefix/<encoded>/...` can never
//! make one lock's keys a prefix of another's: `a`, `a/b`, `ab` and `a/` are four independent locks.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::error::{LockError, Result};

/// The maximum length of a lock name: 1024 bytes of UTF-8.
///
/// The encoded form is at most three times as long (3 KiB), which fits every backend's key and
/// path limits with room for prefixes.
pub const MAX_NAME_LEN: usize = 1024;

/// A validated lock name.
///
/// Cheap to clone: the name and its encoding share one reference-counted allocation, as a lock's
/// name is copied into its request, lease, guard, watchdog entry and re-entry key on every
/// acquire. Compared, ordered and hashed by the name as given.
#[derive(Clone)]
pub struct LockName {
    /// The name as given, then its encoding.
    text: Arc<str>,
    /// Where the encoding starts in `text`.
    split: usize,
}

impl PartialEq for LockName {
    fn eq(&self, other: &LockName) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for LockName {}

impl Hash for LockName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for LockName {
    fn partial_cmp(&self, other: &LockName) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LockName {
    fn cmp(&self, other: &LockName) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl LockName {
    /// Validates `name`: rejects the empty name, names longer than [`MAX_NAME_LEN`] bytes, and
    /// names containing a NUL byte, each with [`LockError::InvalidName`].
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for the empty name, a name longer than [`MAX_NAME_LEN`] bytes, or
    /// one containing a NUL byte.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{driver::LockName, LockError};
    ///
    /// assert_eq!(LockName::new("orders/42")?.as_str(), "orders/42");
    /// assert!(matches!(LockName::new(""), Err(LockError::InvalidName(_))));
    /// assert!(matches!(LockName::new("a\0b"), Err(LockError::InvalidName(_))));
    /// # Ok::<(), LockError>(())
    /// ```
    pub fn new(name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(LockError::InvalidName("the name is empty".into()));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(LockError::InvalidName(format!(
                "the name is {} bytes long; the maximum is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        if name.contains('\0') {
            return Err(LockError::InvalidName("the name contains a NUL byte".into()));
        }
        let mut text = String::with_capacity(name.len() * 2 + 8);
        text.push_str(name);
        encode_into(name, &mut text);
        Ok(LockName {
            text: Arc::from(text),
            split: name.len(),
        })
    }

    /// The name as the user gave it.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// let name = locksmith::driver::LockName::new("orders/42")?;
    /// assert_eq!(name.as_str(), "orders/42");
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.text[..self.split]
    }

    /// The name as one key/path segment: `[A-Za-z0-9_-]` kept, every other byte as `%XX`
    /// (upper-case hex). Injective, never empty, never contains `/` or `.`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// let name = locksmith::driver::LockName::new("orders/42.a")?;
    /// assert_eq!(name.encoded(), "orders%2F42%2Ea");
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn encoded(&self) -> &str {
        &self.text[self.split..]
    }

    /// Reverses [`LockName::encoded`]; `None` if `encoded` is not the output of the encoding.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::driver::LockName;
    ///
    /// let name = LockName::new("orders/42")?;
    /// assert_eq!(LockName::decode(name.encoded()), Some(name));
    /// assert_eq!(LockName::decode("orders/42"), None); // `/` is never in an encoded name
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn decode(encoded: &str) -> Option<LockName> {
        let bytes = encoded.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' => {
                    let hex = encoded.get(i + 1..i + 3)?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 3;
                }
                b if is_unreserved(b) => {
                    out.push(b);
                    i += 1;
                }
                _ => return None,
            }
        }
        let name = LockName::new(std::str::from_utf8(&out).ok()?).ok()?;
        (name.encoded() == encoded).then_some(name)
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Appends the encoding of `name` to `out` (see [`LockName::encoded`]): a run of unreserved
/// bytes at a time.
fn encode_into(name: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let bytes = name.as_bytes();
    let mut kept = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if is_unreserved(b) {
            continue;
        }
        // `kept..i` is a run of ASCII, so both ends are character boundaries (`i` may be in the
        // middle of a character only when the run is empty).
        if kept < i {
            out.push_str(&name[kept..i]);
        }
        out.push('%');
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xF)] as char);
        kept = i + 1;
    }
    out.push_str(&name[kept..]);
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names() {
        assert!(matches!(LockName::new(""), Err(LockError::InvalidName(_))));
        assert!(matches!(LockName::new("a\0b"), Err(LockError::InvalidName(_))));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(LockName::new(&long), Err(LockError::InvalidName(_))));
        assert!(LockName::new(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }

    #[test]
    fn encoding_is_one_segment_and_injective() {
        let names = ["a", "a/b", "ab", "a/", "a%2F", ".", "..", "ä/ö", " ", "a-b_c"];
        let mut seen = std::collections::HashSet::new();
        for n in names {
            let name = LockName::new(n).unwrap();
            let enc = name.encoded();
            assert!(!enc.is_empty());
            assert!(!enc.contains('/') && !enc.contains('.'), "{enc}");
            assert!(seen.insert(enc.to_owned()), "collision on {n:?}");
            assert_eq!(LockName::decode(enc).unwrap(), name);
        }
        assert_eq!(LockName::new("orders/42").unwrap().encoded(), "orders%2F42");
        // Runs of several bytes to escape, at either end and in the middle of a name.
        assert_eq!(LockName::new("aäb").unwrap().encoded(), "a%C3%A4b");
        assert_eq!(LockName::new("ää").unwrap().encoded(), "%C3%A4%C3%A4");
        assert_eq!(LockName::new("日本/x").unwrap().encoded(), "%E6%97%A5%E6%9C%AC%2Fx");
    }

    #[test]
    fn clones_share_the_name_and_compare_by_it() {
        let a = LockName::new("orders/42").unwrap();
        let b = a.clone();
        assert_eq!((a.as_str(), a.encoded()), ("orders/42", "orders%2F42"));
        assert_eq!(a, b);
        assert_eq!(a, LockName::new("orders/42").unwrap());
        assert_ne!(a, LockName::new("orders/43").unwrap());
        assert!(LockName::new("a").unwrap() < LockName::new("b").unwrap());
        let set: std::collections::HashSet<LockName> = [a.clone(), b, LockName::new("x").unwrap()].into();
        assert_eq!(set.len(), 2);
        assert_eq!(format!("{a} {a:?}"), "orders/42 \"orders/42\"");
    }

    #[test]
    fn no_encoded_name_is_a_prefix_segment_of_another() {
        let a = format!("{}/", LockName::new("a").unwrap().encoded());
        for other in ["a/b", "ab", "a/"] {
            let o = format!("{}/", LockName::new(other).unwrap().encoded());
            assert!(!o.starts_with(&a), "{other:?}");
        }
    }

    #[test]
    fn decode_rejects_non_canonical_forms() {
        assert!(LockName::decode("a%2f").is_none()); // lower-case hex is not our output
        assert!(LockName::decode("%61").is_none()); // 'a' would not be escaped
        assert!(LockName::decode("a/b").is_none());
        assert!(LockName::decode("%0").is_none());
        assert!(LockName::decode("").is_none());
    }
}
