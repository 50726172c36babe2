//! Latency samples and their percentiles.

use std::time::Duration;

/// Collected latencies of one measurement.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    us: Vec<f64>,
}

impl Samples {
    /// An empty set with room for `n` samples.
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            us: Vec::with_capacity(n),
        }
    }

    /// Adds one latency.
    pub fn push(&mut self, d: Duration) {
        self.us.push(d.as_secs_f64() * 1e6);
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.us.len()
    }

    /// The `q`-quantile (0..=1) by nearest rank, or `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        quantile(&self.sorted(), q)
    }

    /// The samples, ascending, in microseconds.
    pub fn sorted(&self) -> Vec<f64> {
        let mut v = self.us.clone();
        v.sort_by(f64::total_cmp);
        v
    }
}

/// Nearest-rank quantile of an ascending slice.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    let idx = rank.clamp(1, sorted.len()) - 1;
    Some((sorted[idx] * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[7.0], 0.01), Some(7.0));
    }
}
