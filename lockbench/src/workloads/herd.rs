//! `herd`: 100 waiters queue on one lock, then 50 handovers run back to back; the requests the
//! server received during them (see [`crate::counters`] for what counts on each backend) give the
//! requests per handover (a thundering herd, where every waiter re-checks on each release, shows
//! up as ~100).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use locksmith::driver::LockName;
use locksmith::{LockGuard, Locker};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::cli::Sizes;
use crate::counters::{Counter, Counting};
use crate::model::{round3, Record};
use crate::system::{connect, unique_name};

/// Long enough that no renewal falls inside the measured window.
/// The lease: long enough never to run out during a measurement, and no longer than the Redis
/// backend's default `restart_delay`, which bounds every TTL there.
const TTL: Duration = locksmith::DEFAULT_TTL;
/// At most this many connections: every waiter has its own up to here, the rest share them
/// round-robin. (A stock ZooKeeper allows 60 connections per client address; `scripts/backends`
/// lifts that limit.)
const MAX_CONNECTIONS: usize = 100;

/// Runs the herd on locksmith's `backend` at `url`.
pub async fn run(backend: &str, url: &str, sizes: &Sizes) -> Result<Record> {
    let (waiters, handovers) = (sizes.herd_waiters, sizes.herd_handovers.min(sizes.herd_waiters));
    let server = Counter::for_url(url).await?;
    let name = unique_name("herd", "locksmith");
    let pb = super::bar((waiters + handovers) as u64, format!("{backend} locksmith herd"));

    // mem has no server: count the calls into the backend, one counter for every connection.
    let calls = Arc::new(AtomicU64::new(0));
    let counter = server.clone().unwrap_or_else(|| Counter::Calls(calls.clone()));
    let counted = |locker: Locker| {
        if server.is_some() {
            locker
        } else {
            Counting::wrap(&locker, calls.clone())
        }
    };

    let holder = counted(connect(url).await?);
    let first = holder.lock(&name).ttl(TTL).acquire().await?;
    let connections = waiters.min(MAX_CONNECTIONS);
    let mut lockers = Vec::with_capacity(connections);
    for _ in 0..connections {
        lockers.push(counted(connect(url).await?));
    }

    let acquired = Arc::new(AtomicUsize::new(0));
    let (last_tx, mut last_rx) = mpsc::unbounded_channel::<LockGuard>();
    let mut tasks = JoinSet::new();
    for i in 0..waiters {
        let (locker, name, acquired, last_tx) = (
            lockers[i % connections].clone(),
            name.clone(),
            acquired.clone(),
            last_tx.clone(),
        );
        tasks.spawn(async move {
            let guard = locker
                .lock(&name)
                .ttl(TTL)
                .timeout(Duration::from_secs(300))
                .acquire()
                .await?;
            if acquired.fetch_add(1, Ordering::SeqCst) + 1 < handovers {
                guard.release().await?;
            } else {
                // The last counted handover: hold until the counter is read.
                let _ = last_tx.send(guard);
            }
            anyhow::Ok(())
        });
    }
    wait_queued(&holder, &name, waiters, &pb).await;

    let window = counter.start().await?;
    let t0 = Instant::now();
    first.release().await?;
    let mut done = 0;
    let last = loop {
        tokio::select! {
            g = last_rx.recv() => break g.ok_or_else(|| anyhow!("waiters ended early"))?,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                let now = acquired.load(Ordering::SeqCst);
                pb.inc((now - done) as u64);
                done = now;
                if t0.elapsed() > Duration::from_secs(120) {
                    bail!("only {now} of {handovers} handovers within 120 s");
                }
            }
        }
    };
    let elapsed = t0.elapsed();
    let count = window.finish().await?;
    tasks.abort_all();
    last.release().await?;
    pb.finish_and_clear();

    let mut r = Record::new("locksmith", backend, "herd")
        .param("waiters", waiters as u64)
        .param("handovers", handovers as u64)
        .param("connections", connections as u64);
    r.params.insert("measured_counter".into(), counter.describe().into());
    count.annotate(&mut r.params);
    r.ops = Some(handovers as u64);
    r.requests_per_handover = Some(round3(count.requests as f64 / handovers as f64));
    r.throughput_per_s = Some(round3(handovers as f64 / elapsed.as_secs_f64()));
    Ok(r)
}

/// Waits until the backend reports every waiter queued (or 20 s; backends that cannot count
/// waiters get a fixed settle time).
async fn wait_queued(holder: &Locker, name: &str, waiters: usize, pb: &indicatif::ProgressBar) {
    let Ok(lock_name) = LockName::new(name) else { return };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = 0;
    while Instant::now() < deadline {
        match holder.backend().inspect(&lock_name).await {
            Ok(info) => {
                pb.inc(info.waiters.saturating_sub(last) as u64);
                last = last.max(info.waiters);
                if info.waiters >= waiters {
                    break;
                }
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the last waiters' registration requests land before the counter is read.
    tokio::time::sleep(Duration::from_millis(200)).await;
}
