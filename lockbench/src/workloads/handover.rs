//! `handover`: a waiter is blocked on the lock; the holder releases at t0; the waiter's acquire
//! returns at t1. p50/p99 of t1−t0 for each time the waiter was blocked before the release (so
//! that server-side timers such as etcd's 100 ms sync of unsynced watchers show up if they bite).

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use tokio::sync::oneshot;

use crate::cli::Sizes;
use crate::model::{Record, FLOOR_NOTIFY};
use crate::reference::Notification;
use crate::stats::Samples;
use crate::system::{unique_name, Held, LockSystem};

/// The lease: long enough never to run out during a measurement, and no longer than the Redis
/// backend's default `restart_delay`, which bounds every TTL there.
const TTL: Duration = locksmith::DEFAULT_TTL;

/// Runs the workload on `sys`: one row per blocked time.
pub async fn run(sys: &dyn LockSystem, sizes: &Sizes) -> Result<Vec<Record>> {
    let holder = sys.client().await?;
    let waiter = sys.client().await?;
    let name = unique_name("handover", sys.system());
    let mut rows = Vec::new();
    for &blocked in &sizes.blocked {
        let pb = super::bar(
            sizes.handover_ops as u64,
            format!("{} {} handover {}ms", sys.backend(), sys.system(), blocked.as_millis()),
        );
        let mut samples = Samples::with_capacity(sizes.handover_ops);
        for _ in 0..sizes.handover_ops {
            let held = holder.acquire(&name, TTL).await?;
            let (tx, rx) = oneshot::channel::<Result<(Instant, Box<dyn Held>)>>();
            let (w, n) = (waiter.clone(), name.clone());
            tokio::spawn(async move {
                let got = w.acquire(&n, TTL).await.map(|h| (Instant::now(), h));
                let _ = tx.send(got);
            });
            tokio::time::sleep(blocked).await;
            let t0 = Instant::now();
            held.release().await?;
            let (t1, next) = tokio::time::timeout(Duration::from_secs(60), rx)
                .await
                .map_err(|_| anyhow!("the waiter did not get the lock within 60 s of the release"))?
                .map_err(|_| anyhow!("the waiter task ended without an answer"))??;
            samples.push(t1.saturating_duration_since(t0));
            next.release().await?;
            pb.inc(1);
        }
        pb.finish_and_clear();
        rows.push(row(sys.system(), sys.backend(), blocked, samples));
    }
    Ok(rows)
}

/// The raw floor, same blocked times: a `floor` row (release, notification and the take that
/// follows it, where the backend's floor takes; the notification alone otherwise) and, where it
/// takes, a `floor-notify` row (the notification alone, from the same measurements).
pub async fn run_floor(notify: &dyn Notification, sizes: &Sizes) -> Result<Vec<Record>> {
    let mut rows = Vec::new();
    for &blocked in &sizes.blocked {
        let pb = super::bar(
            sizes.handover_ops as u64,
            format!("{} floor handover {}ms", notify.backend(), blocked.as_millis()),
        );
        let mut taken = Samples::with_capacity(sizes.handover_ops);
        let mut notified = Samples::with_capacity(sizes.handover_ops);
        let mut takes = true;
        for _ in 0..sizes.handover_ops {
            let times = notify.once(blocked).await?;
            notified.push(times.notified);
            taken.push(times.taken.unwrap_or(times.notified));
            takes &= times.taken.is_some();
            pb.inc(1);
        }
        pb.finish_and_clear();
        rows.push(row("floor", notify.backend(), blocked, taken));
        if takes {
            rows.push(row(FLOOR_NOTIFY, notify.backend(), blocked, notified));
        }
    }
    Ok(rows)
}

fn row(system: &str, backend: &str, blocked: Duration, samples: Samples) -> Record {
    let mut r = Record::new(system, backend, "handover").param("blocked_ms", blocked.as_millis() as u64);
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5);
    r.p99_us = samples.quantile(0.99);
    r.samples_us = samples.sorted();
    r
}
