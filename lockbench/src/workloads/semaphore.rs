//! `semaphore`: N clients, each with its own connection, take and give back permits of one
//! 4-permit semaphore for a fixed time (locksmith only: the peers have no semaphores on most
//! backends). Reports permits granted per second, the most holders seen at once, and violations
//! (more holders than permits); and the handover of a full semaphore: one holder gives its permit
//! back at t0, the first waiter has it at t1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use locksmith::Locker;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::{connect, unique_name};

/// The permits of the measured semaphore.
pub const PERMITS: u32 = 4;

/// The lease (see `contended`).
const TTL: Duration = locksmith::DEFAULT_TTL;

/// One throughput row per client count, then one handover row.
pub async fn run(backend: &str, url: &str, sizes: &Sizes) -> Result<Vec<Record>> {
    super::throughput_then_handover(
        format!("{backend} locksmith semaphore"),
        sizes,
        |clients| throughput(backend, url, clients, sizes.contended_for),
        || handover(backend, url, sizes.handover_ops),
    )
    .await
}

async fn throughput(backend: &str, url: &str, clients: usize, run_for: Duration) -> Result<Record> {
    let name = unique_name("semaphore", "locksmith");
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let mut lockers = Vec::with_capacity(clients);
    for _ in 0..clients {
        lockers.push(connect(url).await?);
    }
    let started = Instant::now();
    let stop_at = started + run_for;
    let mut tasks = Vec::with_capacity(clients);
    for locker in lockers {
        let (name, inside, most, violations) = (name.clone(), inside.clone(), most.clone(), violations.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = 0u64;
            while Instant::now() < stop_at {
                let permit = locker.semaphore(&name, PERMITS).ttl(TTL).acquire().await?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if now > u64::from(PERMITS) {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
                mine += 1;
            }
            anyhow::Ok(mine)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut r = Record::new("locksmith", backend, "semaphore")
        .param("clients", clients as u64)
        .param("permits", u64::from(PERMITS));
    r.ops = Some(total);
    r.throughput_per_s = Some(round3(total as f64 / elapsed));
    r.violations = Some(violations.load(Ordering::SeqCst));
    r.params
        .insert("measured_most_at_once".into(), most.load(Ordering::SeqCst).into());
    Ok(r)
}

/// A full semaphore (its 4 permits held), one waiter blocked 20 ms; one holder releases at t0;
/// the waiter returns at t1.
async fn handover(backend: &str, url: &str, ops: usize) -> Result<Record> {
    let name = unique_name("semaphore-handover", "locksmith");
    let holder = connect(url).await?;
    let waiter = connect(url).await?;
    let mut full = Vec::new();
    for _ in 1..PERMITS {
        full.push(holder.semaphore(&name, PERMITS).ttl(TTL).acquire().await?);
    }
    let mut samples = Samples::with_capacity(ops);
    for _ in 0..ops {
        let last = holder.semaphore(&name, PERMITS).ttl(TTL).acquire().await?;
        let wait = spawn_wait(&waiter, &name);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = Instant::now();
        last.release().await?;
        let (t1, got) = tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .map_err(|_| anyhow!("the waiter had no permit 60 s after a release"))??;
        samples.push(t1.saturating_duration_since(t0));
        got?.release().await?;
    }
    for permit in full {
        permit.release().await?;
    }
    let mut r = Record::new("locksmith", backend, "semaphore-handover")
        .param("permits", u64::from(PERMITS))
        .param("blocked_ms", 20u64);
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5);
    r.p99_us = samples.quantile(0.99);
    r.samples_us = samples.sorted();
    Ok(r)
}

type Waiting = tokio::task::JoinHandle<(Instant, locksmith::Result<locksmith::LockGuard>)>;

fn spawn_wait(waiter: &Locker, name: &str) -> Waiting {
    let (w, n) = (waiter.clone(), name.to_owned());
    tokio::spawn(async move {
        let got = w.semaphore(&n, PERMITS).ttl(TTL).acquire().await;
        (Instant::now(), got)
    })
}
