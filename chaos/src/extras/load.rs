//! Load: many waiters on one lock, each on a connection of its own and all on one connection.
//! They queue one after another (each seen queued on the server before the next starts), the
//! holder releases, and each takes the lock and releases it at once: all must be served, in the
//! order they queued.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use locksmith::Locker;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::probe::{requests, rss_mib};
use crate::targets::Target;

/// One load test.
#[derive(Debug, Serialize, Deserialize)]
pub struct Load {
    /// The backend.
    pub backend: String,
    /// `own` (a connection per waiter) or `shared` (one connection for all).
    pub connections: String,
    /// Waiters.
    pub waiters: usize,
    /// Waiters that got the lock.
    pub served: usize,
    /// Grants out of queue order (a waiter served before one that queued earlier).
    pub fifo_inversions: usize,
    /// Handovers per second once the holder released.
    pub handovers_per_s: f64,
    /// Server requests per handover (server-wide counter; `None` on mem).
    pub requests_per_handover: Option<f64>,
    /// This process's memory before the waiters and with all of them queued, in MiB.
    pub rss_mib: (f64, f64),
    /// Why it did not run, if it did not.
    pub error: Option<String>,
}

impl Load {
    /// What this test broke, if anything.
    pub fn broken(&self) -> Vec<String> {
        let id = format!("load {} {} x{}", self.backend, self.connections, self.waiters);
        match &self.error {
            Some(e) => vec![format!("{id}: {e}")],
            None if self.served < self.waiters => vec![format!("{id}: only {} served", self.served)],
            None if self.fifo_inversions > 0 => vec![format!("{id}: {} served out of order", self.fifo_inversions)],
            None => Vec::new(),
        }
    }
}

/// On PostgreSQL a locker holds three server connections (grants, renewals, listening), so a
/// locker per waiter is sized to the test server's `max_connections` (400): 1,000 lockers would
/// need 3,000 and fail to connect (the full run of 2026-11-26). One locker per process is the
/// intended use; the shared row still runs 1,000 waiters.
const POSTGRES_OWN_WAITERS: usize = 100;

/// Both load tests on every target.
pub async fn load(targets: &[&Target], quick: bool) -> Vec<Load> {
    let all = if quick { 100 } else { 1000 };
    let mut out = Vec::new();
    for target in targets {
        for connections in ["own", "shared"] {
            let waiters = if target.backend == "postgres" && connections == "own" {
                all.min(POSTGRES_OWN_WAITERS)
            } else {
                all
            };
            tracing::info!(backend = target.backend, connections, waiters, "load");
            let result = one(target, connections, waiters).await;
            out.push(result.unwrap_or_else(|e| Load {
                backend: target.backend.into(),
                connections: connections.into(),
                waiters,
                served: 0,
                fifo_inversions: 0,
                handovers_per_s: 0.0,
                requests_per_handover: None,
                rss_mib: (0.0, 0.0),
                error: Some(format!("{e:#}")),
            }));
        }
    }
    out
}

async fn one(target: &Target, connections: &'static str, waiters: usize) -> Result<Load> {
    let name = format!("chaos/load/{connections}/{:08x}", rand::random::<u32>());
    let holder = locksmith::connect(&target.url).await?;
    let held = holder.lock(&name).ttl(target.ttl).acquire().await?;
    let rss_before = rss_mib();
    let shared = locksmith::connect(&target.url).await?;
    let order = Arc::new(Mutex::new(Vec::with_capacity(waiters)));
    let served = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..waiters {
        let locker: Locker = if connections == "own" {
            locksmith::connect(&target.url).await?
        } else {
            shared.clone()
        };
        let (lock, order, served, ttl) = (name.clone(), order.clone(), served.clone(), target.ttl);
        tasks.spawn(async move {
            match locker
                .lock(&lock)
                .ttl(ttl)
                .timeout(Duration::from_secs(600))
                .acquire()
                .await
            {
                Ok(guard) => {
                    order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
                    served.fetch_add(1, Ordering::SeqCst);
                    let _ = guard.release().await;
                }
                Err(e) => tracing::warn!(waiter = i, error = %e, "a load waiter failed"),
            }
            drop(locker);
        });
        // Queued on the server before the next one starts: that is the order FIFO must keep.
        let end = Instant::now() + Duration::from_secs(10);
        while holder.inspect(&name).await?.waiters < i + 1 && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let rss_after = rss_mib();
    let before = requests(target).await?;
    let start = Instant::now();
    held.release().await?;
    tokio::time::timeout(Duration::from_secs(900), async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .context("the waiters were not all served within 900 s")?;
    let took = start.elapsed();
    let after = requests(target).await?;
    let served = served.load(Ordering::SeqCst);
    let order = order.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let fifo_inversions = order.windows(2).filter(|w| w[1] < w[0]).count();
    Ok(Load {
        backend: target.backend.into(),
        connections: connections.into(),
        waiters,
        served,
        fifo_inversions,
        handovers_per_s: served as f64 / took.as_secs_f64().max(1e-9),
        requests_per_handover: before
            .zip(after)
            .map(|(b, a)| a.saturating_sub(b) as f64 / served.max(1) as f64),
        rss_mib: (rss_before, rss_after),
        error: None,
    })
}
