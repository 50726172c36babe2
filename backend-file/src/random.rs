//! Random numbers straight from the kernel (`getrandom(2)`), for the few this backend needs: a
//! liveness file's id, the seed of a locker's queue entry ids ([`Ids`]) and the jitter of the
//! prune passes. Not `rand`'s
//! thread-local generator: seeding it detects the CPU's features (a `CPUID`, which traps to the
//! hypervisor on a virtual machine) and costs a short `locksmith run` more than the numbers are
//! worth.

use std::sync::atomic::{AtomicU64, Ordering};

/// 128 random bits.
pub(crate) fn u128() -> u128 {
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u128::from_ne_bytes(bytes),
        // Neither the system call nor /dev/urandom: `rand` as before (which has no other source
        // either, and panics).
        Err(_) => rand::random(),
    }
}

/// 64 random bits.
pub(crate) fn u64() -> u64 {
    u128() as u64
}

/// The ids of one locker's queue entries: 64 bits each, distinct within the locker (a counter
/// through a bijective mix), as unpredictable across lockers as [`u64`]'s (the counter starts
/// from random bits, and the mix is keyed by others), without a system call each.
#[derive(Debug)]
pub(crate) struct Ids {
    key: u64,
    next: AtomicU64,
}

impl Ids {
    /// A new series, seeded from the kernel.
    pub fn new() -> Ids {
        let seed = u128();
        Ids {
            key: (seed >> 64) as u64,
            next: AtomicU64::new(seed as u64),
        }
    }

    /// The next id, as 16 lower-case hexadecimal digits.
    pub fn next_hex(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = mix(n ^ self.key).wrapping_add(self.key);
        let mut hex = String::with_capacity(16);
        for shift in (0..16).rev() {
            hex.push(char::from(b"0123456789abcdef"[(id >> (shift * 4)) as usize & 0xf]));
        }
        hex
    }
}

/// SplitMix64's finaliser: a bijection of the 64-bit numbers that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A number in `[0, 1)`, uniformly.
pub(crate) fn unit() -> f64 {
    // The top 53 bits: every value a double holds in [0, 1) at that spacing.
    (u128() >> 75) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    /// Distinct ids, and units inside `[0, 1)` that are not all alike.
    #[test]
    fn numbers_vary_and_units_stay_in_range() {
        let ids: std::collections::HashSet<u128> = (0..100).map(|_| super::u128()).collect();
        assert_eq!(ids.len(), 100);
        let units: Vec<f64> = (0..1000).map(|_| super::unit()).collect();
        assert!(units.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(units.iter().any(|u| *u < 0.25) && units.iter().any(|u| *u > 0.75));
    }

    /// Entry ids: 16 hexadecimal digits, distinct within a series (also where its counter wraps),
    /// and two series share none.
    #[test]
    fn entry_ids_are_distinct_within_and_across_lockers() {
        let (a, b) = (super::Ids::new(), super::Ids::new());
        a.next.store(u64::MAX - 500, std::sync::atomic::Ordering::Relaxed);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1_000 {
            for id in [a.next_hex(), b.next_hex()] {
                assert!(id.len() == 16 && id.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
                assert!(seen.insert(id.clone()), "{id} twice");
            }
        }
        assert_ne!(super::mix(0), 0);
    }
}
