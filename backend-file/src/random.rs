//! Random numbers straight from the kernel (`getrandom(2)`), for the few this backend needs: a
//! liveness file's id, a queue entry's id and the jitter of the prune passes. Not `rand`'s
//! thread-local generator: seeding it detects the CPU's features (a `CPUID`, which traps to the
//! hypervisor on a virtual machine) and costs a short `locksmith run` more than the numbers are
//! worth.

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
}
