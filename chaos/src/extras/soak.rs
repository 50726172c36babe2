//! Soak: many locks held by one process for a long time (every backend at once): none may be
//! lost, and neither the process's memory nor the renewal traffic may grow.
//!
//! The backends take their locks one after the other (each then holds while the next acquires),
//! and every soak runs on targets built with [`SOAK_TTL`] (their URLs and their locks' TTL),
//! whatever the run's TTL: what is measured is holding. Taking
//! 10,000 locks on every backend at once, with 1 s leases, kept a 2-core machine that also runs
//! the servers busy enough to delay renewals past the lease (a loss `lost()` rightly reported, of
//! the machine and not of the library); the load section measures acquiring.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use locksmith::LockGuard;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::probe::{requests, rss_mib};
use crate::targets::Target;

/// One soak.
#[derive(Debug, Serialize, Deserialize)]
pub struct Soak {
    /// The backend.
    pub backend: String,
    /// Locks held.
    pub locks: usize,
    /// How long they were held, in minutes.
    pub minutes: f64,
    /// Locks whose `lost()` fired (must be 0).
    pub lost: usize,
    /// Seconds to acquire them all (50 at a time).
    pub acquire_seconds: f64,
    /// Server requests per minute in the first and in the last sampling interval (server-wide).
    pub requests_per_min: Option<(f64, f64)>,
    /// The driver's memory after acquiring and at the end, in MiB (all soaks run in one
    /// process at once, so this is their sum).
    pub rss_mib: (f64, f64),
    /// Why it did not run, if it did not.
    pub error: Option<String>,
}

impl Soak {
    /// The row of a soak on `backend` that ended with `error` rather than a result.
    fn failed(backend: &str, locks: usize, minutes: f64, error: String) -> Soak {
        Soak {
            backend: backend.into(),
            locks,
            minutes,
            lost: 0,
            acquire_seconds: 0.0,
            requests_per_min: None,
            rss_mib: (0.0, 0.0),
            error: Some(error),
        }
    }

    /// What this soak broke, if anything.
    pub fn broken(&self) -> Vec<String> {
        let id = format!("soak {} x{}", self.backend, self.locks);
        match &self.error {
            Some(e) => vec![format!("{id}: {e}")],
            None if self.lost > 0 => vec![format!("{id}: {} locks lost", self.lost)],
            None => Vec::new(),
        }
    }
}

/// The lease TTL of every soak (the full run's TTL; the quick run's 1 s is for the faults).
pub const SOAK_TTL: Duration = Duration::from_secs(2);

/// Every target's soak, held all at once (acquired one backend after the other).
pub async fn soak(targets: &[&Target], quick: bool) -> Vec<Soak> {
    let locks = 10_000;
    let minutes = if quick { 1.0 } else { 10.0 };
    let acquiring = Arc::new(tokio::sync::Mutex::new(()));
    let runs = targets.iter().map(|t| {
        let target = (*t).clone();
        let backend = target.backend;
        let acquiring = acquiring.clone();
        let run = async move {
            tracing::info!(backend = target.backend, locks, minutes, "soak");
            one(&target, locks, minutes, &acquiring)
                .await
                .unwrap_or_else(|e| Soak::failed(target.backend, locks, minutes, format!("{e:#}")))
        };
        (backend, run)
    });
    let mut set = tokio::task::JoinSet::new();
    let mut backends = std::collections::HashMap::new();
    for (backend, run) in runs {
        backends.insert(set.spawn(run).id(), backend);
    }
    let mut out = Vec::new();
    while let Some(done) = set.join_next_with_id().await {
        match done {
            Ok((_, soak)) => out.push(soak),
            // A soak that panicked is a broken promise of its own, not a missing row.
            Err(e) => out.push(Soak::failed(
                backends.get(&e.id()).copied().unwrap_or("unknown"),
                locks,
                minutes,
                format!("the soak panicked: {e}"),
            )),
        }
    }
    out.sort_by(|a, b| a.backend.cmp(&b.backend));
    out
}

async fn one(target: &Target, locks: usize, minutes: f64, acquiring: &tokio::sync::Mutex<()>) -> Result<Soak> {
    let locker = locksmith::connect(&target.url).await?;
    let base = format!("chaos/soak/{:08x}", rand::random::<u32>());
    let turn = acquiring.lock().await;
    let start = Instant::now();
    let mut guards: Vec<LockGuard> = Vec::with_capacity(locks);
    for chunk in (0..locks).collect::<Vec<_>>().chunks(50) {
        let mut set = tokio::task::JoinSet::new();
        for i in chunk {
            let (locker, name, ttl) = (locker.clone(), format!("{base}/{i}"), target.ttl);
            set.spawn(async move { locker.lock(&name).ttl(ttl).acquire().await });
        }
        while let Some(done) = set.join_next().await {
            guards.push(done??);
        }
    }
    let acquire_seconds = start.elapsed().as_secs_f64();
    drop(turn);
    let rss_start = rss_mib();
    let hold = Duration::from_secs_f64(minutes * 60.0);
    let interval = Duration::from_secs(20).min(hold / 3);
    let held_from = Instant::now();
    let mut rates = Vec::new();
    while held_from.elapsed() < hold {
        let before = requests(target).await?;
        let t0 = Instant::now();
        tokio::time::sleep(interval.min(hold.saturating_sub(held_from.elapsed()))).await;
        let after = requests(target).await?;
        if let (Some(b), Some(a)) = (before, after) {
            rates.push(a.saturating_sub(b) as f64 * 60.0 / t0.elapsed().as_secs_f64());
        }
    }
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    let rss_end = rss_mib();
    for g in guards {
        let _ = g.release().await;
    }
    let _ = locker.shutdown().await;
    Ok(Soak {
        backend: target.backend.into(),
        locks,
        minutes,
        lost,
        acquire_seconds,
        requests_per_min: rates.first().copied().zip(rates.last().copied()),
        rss_mib: (rss_start, rss_end),
        error: None,
    })
}
