//! `contended`: N clients, each with its own connection, hammer one lock for a fixed time.
//! Reports acquisitions per second, the per-client spread (fairness) and mutual-exclusion
//! violations, checked with a shared counter and an in-critical-section flag.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::system::{unique_name, LockSystem};

/// The lease: long enough never to run out during a measurement, and no longer than the Redis
/// backend's default `restart_delay`, which bounds every TTL there.
const TTL: Duration = locksmith::DEFAULT_TTL;

/// The critical-section check shared by all clients.
#[derive(Default)]
struct Critical {
    inside: AtomicBool,
    entries: AtomicU64,
    violations: AtomicU64,
}

impl Critical {
    /// Called right after acquiring: another client inside is a violation.
    fn enter(&self) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        self.entries.fetch_add(1, Ordering::SeqCst);
    }

    /// Called right before releasing.
    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
    }
}

/// Runs one row per client count.
pub async fn run(sys: &dyn LockSystem, sizes: &Sizes) -> Result<Vec<Record>> {
    let mut rows = Vec::new();
    let pb = super::bar(
        sizes.clients.len() as u64,
        format!("{} {} contended", sys.backend(), sys.system()),
    );
    for &n in &sizes.clients {
        pb.set_message(format!("{n} clients"));
        rows.push(point(sys, n, sizes.contended_for).await?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(rows)
}

async fn point(sys: &dyn LockSystem, clients: usize, run_for: Duration) -> Result<Record> {
    let name = unique_name("contended", sys.system());
    let critical = Arc::new(Critical::default());
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(sys.client().await?);
    }
    let started = Instant::now();
    let stop_at = started + run_for;
    let mut tasks = Vec::with_capacity(clients);
    for client in conns {
        let (critical, name) = (critical.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = 0u64;
            while Instant::now() < stop_at {
                let held = client.acquire(&name, TTL).await?;
                critical.enter();
                tokio::task::yield_now().await;
                mine += 1;
                critical.leave();
                held.release().await?;
            }
            anyhow::Ok(mine)
        }));
    }
    let mut per_client = Vec::with_capacity(clients);
    for t in tasks {
        per_client.push(t.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total: u64 = per_client.iter().sum();
    let min = per_client.iter().copied().min().unwrap_or(0);
    let max = per_client.iter().copied().max().unwrap_or(0);
    let mut r = Record::new(sys.system(), sys.backend(), "contended").param("clients", clients as u64);
    r.ops = Some(total);
    r.throughput_per_s = Some(round3(total as f64 / elapsed));
    r.violations = Some(critical.violations.load(Ordering::SeqCst));
    // The spread is a result, but the schema has no field for it: it goes with the params, under
    // names that say they are measured.
    r.params.insert("measured_min_per_client".into(), min.into());
    r.params.insert("measured_max_per_client".into(), max.into());
    r.params
        .insert("measured_fairness".into(), round3(jain(&per_client)).into());
    debug_assert_eq!(critical.entries.load(Ordering::SeqCst), total);
    Ok(r)
}

/// Jain's fairness index: 1.0 when every client got the same share, 1/n when one got everything.
fn jain(xs: &[u64]) -> f64 {
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let sq: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if sq == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * sq)
}

#[cfg(test)]
mod tests {
    #[test]
    fn jain_index() {
        assert_eq!(super::jain(&[5, 5, 5, 5]), 1.0);
        assert_eq!(super::jain(&[4, 0, 0, 0]), 0.25);
    }
}
