//! `rwlock`: N clients, each with its own connection, use one read-write lock for a fixed time,
//! one operation in ten a write (locksmith only). Reports operations per second and violations (a
//! writer beside anyone); and the handover from a writer to the readers queued behind it: the
//! writer releases at t0, the last of 4 blocked readers has the lock at t1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::{connect, unique_name};

/// The lease (see `contended`).
const TTL: Duration = locksmith::DEFAULT_TTL;

/// Readers queued behind the writer in the handover.
const READERS: usize = 4;

/// One throughput row per client count, then one handover row.
pub async fn run(backend: &str, url: &str, sizes: &Sizes) -> Result<Vec<Record>> {
    super::throughput_then_handover(
        format!("{backend} locksmith rwlock"),
        sizes,
        |clients| throughput(backend, url, clients, sizes.contended_for),
        || handover(backend, url, sizes.handover_ops),
    )
    .await
}

async fn throughput(backend: &str, url: &str, clients: usize, run_for: Duration) -> Result<Record> {
    let name = unique_name("rwlock", "locksmith");
    let readers = Arc::new(AtomicU64::new(0));
    let writers = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let mut lockers = Vec::with_capacity(clients);
    for _ in 0..clients {
        lockers.push(connect(url).await?);
    }
    let started = Instant::now();
    let stop_at = started + run_for;
    let mut tasks = Vec::with_capacity(clients);
    for (client, locker) in lockers.into_iter().enumerate() {
        let (name, readers, writers, violations) = (name.clone(), readers.clone(), writers.clone(), violations.clone());
        tasks.push(tokio::spawn(async move {
            let rw = locker.rwlock(&name);
            let (mut mine, mut i) = (0u64, client);
            while Instant::now() < stop_at {
                i += 1;
                if i % 10 == 0 {
                    let w = rw.write().ttl(TTL).acquire().await?;
                    if writers.fetch_add(1, Ordering::SeqCst) > 0 || readers.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    w.release().await?;
                } else {
                    let r = rw.read().ttl(TTL).acquire().await?;
                    readers.fetch_add(1, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    r.release().await?;
                }
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
    let mut r = Record::new("locksmith", backend, "rwlock")
        .param("clients", clients as u64)
        .param("write_share_pct", 10u64);
    r.ops = Some(total);
    r.throughput_per_s = Some(round3(total as f64 / elapsed));
    r.violations = Some(violations.load(Ordering::SeqCst));
    Ok(r)
}

/// A writer holds; 4 readers (one connection each) wait 20 ms; the writer releases at t0; t1 is
/// when the last reader has the lock.
async fn handover(backend: &str, url: &str, ops: usize) -> Result<Record> {
    let name = unique_name("rwlock-handover", "locksmith");
    let writer = connect(url).await?.rwlock(&name);
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(connect(url).await?.rwlock(&name));
    }
    let mut samples = Samples::with_capacity(ops);
    for _ in 0..ops {
        let w = writer.write().ttl(TTL).acquire().await?;
        let waits: Vec<_> = readers
            .iter()
            .map(|rw| {
                let read = rw.read().ttl(TTL);
                tokio::spawn(async move {
                    let got = read.acquire().await;
                    (Instant::now(), got)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = Instant::now();
        w.release().await?;
        let mut last = t0;
        for wait in waits {
            let (t, got) = tokio::time::timeout(Duration::from_secs(60), wait)
                .await
                .map_err(|_| anyhow!("a reader had no lock 60 s after the writer released"))??;
            last = last.max(t);
            got?.release().await?;
        }
        samples.push(last.saturating_duration_since(t0));
    }
    let mut r = Record::new("locksmith", backend, "rwlock-handover")
        .param("readers", READERS as u64)
        .param("blocked_ms", 20u64);
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5);
    r.p99_us = samples.quantile(0.99);
    r.samples_us = samples.sorted();
    Ok(r)
}
