//! `uncontended`: one client, sequential acquire+release of one lock; p50/p99 of the whole cycle
//! and cycles per second.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::{unique_name, LockSystem};

/// The lease TTL used: long enough that no renewal happens during a cycle.
/// The lease: long enough never to run out during a measurement, and no longer than the Redis
/// backend's default `restart_delay`, which bounds every TTL there.
const TTL: Duration = locksmith::DEFAULT_TTL;

/// Runs the workload on `sys`.
pub async fn run(sys: &dyn LockSystem, sizes: &Sizes) -> Result<Record> {
    let client = sys.client().await?;
    let name = unique_name("uncontended", sys.system());
    let pb = super::bar(
        (sizes.warmup + sizes.uncontended_ops) as u64,
        format!("{} {} uncontended", sys.backend(), sys.system()),
    );
    for _ in 0..sizes.warmup {
        client.acquire(&name, TTL).await?.release().await?;
        pb.inc(1);
    }
    let mut samples = Samples::with_capacity(sizes.uncontended_ops);
    let started = Instant::now();
    for _ in 0..sizes.uncontended_ops {
        let t = Instant::now();
        client.acquire(&name, TTL).await?.release().await?;
        samples.push(t.elapsed());
        pb.inc(1);
    }
    let total = started.elapsed();
    pb.finish_and_clear();
    let mut r = Record::new(sys.system(), sys.backend(), "uncontended");
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5);
    r.p99_us = samples.quantile(0.99);
    r.throughput_per_s = Some(round3(samples.len() as f64 / total.as_secs_f64()));
    r.samples_us = samples.sorted();
    Ok(r)
}
