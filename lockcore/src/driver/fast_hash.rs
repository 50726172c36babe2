//! A fast hasher for the maps on locksmith's own hot paths: the locks a locker holds (re-entry
//! detection), the watchdog's leases by id, a backend's statements by their text.
//!
//! The standard library's SipHash resists collisions an attacker crafts, and costs for it: ~0.3 k
//! instructions a short key, ~3 k a statement's text, on every acquire and release
//! (`docs/overhead.md`). These maps hold what this process itself holds or sends (names it
//! holds now, its own statements, sequential ids), so a multiply-rotate over 8 bytes at a time
//! does, as in rustc's FxHash. Equal-hash keys are still compared whole by the map.

use std::hash::{BuildHasherDefault, Hasher};

/// The multiply-rotate hasher (see the module docs). Not for maps whose keys an attacker chooses
/// in numbers.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// use std::collections::HashMap;
/// use locksmith::driver::fast_hash::FastBuildHasher;
///
/// let mut by_text: HashMap<String, u32, FastBuildHasher> = HashMap::default();
/// by_text.insert("SELECT 1".into(), 1);
/// assert_eq!(by_text.get("SELECT 1"), Some(&1));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

/// Builds [`FastHasher`]s: the third type parameter of a `HashMap` that uses it.
pub type FastBuildHasher = BuildHasherDefault<FastHasher>;

/// The multiplier (rustc's FxHash's, an odd constant with well-spread bits).
const K: u64 = 0x517c_c1b7_2722_0a95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // The length too: "a" and "a\0" differ.
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(value: &T) -> u64 {
        FastBuildHasher::default().hash_one(value)
    }

    #[test]
    fn keys_that_differ_hash_apart() {
        assert_ne!(hash(&"a"), hash(&"b"));
        assert_ne!(hash(&"a"), hash(&"a\0"));
        assert_ne!(hash(&"orders/1"), hash(&"orders/2"));
        assert_ne!(hash(&1u64), hash(&2u64));
        assert_eq!(hash(&"orders/42"), hash(&String::from("orders/42")));
        let names: std::collections::HashSet<u64> = (0..10_000).map(|i| hash(&format!("job/{i}"))).collect();
        assert_eq!(names.len(), 10_000, "collisions among 10,000 names");
    }
}
