//! `guarded`: what a guarded write costs beside a plain write of the same bytes to the same
//! store. One holder writes a 64-byte value to one key, sequentially, in interleaved turns:
//!
//! - `locksmith`: `guard.guarded().put(key, value)`, the lease's check and the write in one
//!   server step (an etcd `Txn`, a ZooKeeper `multi`, a Redis script, one PostgreSQL statement);
//! - `floor`: a plain write with the bare client, no check (etcd `Put`, ZooKeeper `setData`,
//!   Redis `SET`, a PostgreSQL upsert): what the check adds is the ratio of the two.
//!
//! Each row has p50/p99 and, where the server counts requests (etcd, ZooKeeper, Redis), the
//! requests per write (`measured_requests_per_write`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use locksmith::LockGuard;

use crate::cli::Sizes;
use crate::counters::Counter;
use crate::model::{round3, Record};
use crate::reference::PlainWrite;
use crate::stats::Samples;
use crate::system::{connect, unique_name};

/// The value written: 64 bytes.
const VALUE: [u8; 64] = [b'x'; 64];

/// Writes a system makes before the next one takes its turn.
const TURN: usize = 50;

/// One side of the comparison.
enum Writer {
    Guarded { guard: Box<LockGuard>, key: String },
    Plain(Arc<dyn PlainWrite>),
}

impl Writer {
    async fn write(&self) -> Result<()> {
        match self {
            Writer::Guarded { guard, key } => Ok(guard.guarded().put(key, VALUE.to_vec()).await?),
            Writer::Plain(plain) => plain.put(&VALUE).await,
        }
    }
}

/// The `locksmith` row (and the `floor` row when `plain` is given) of `backend` at `url`.
pub async fn run(
    backend: &'static str,
    url: &str,
    plain: Option<Arc<dyn PlainWrite>>,
    sizes: &Sizes,
) -> Result<Vec<Record>> {
    let locker = connect(url).await?;
    let name = unique_name("guarded", "locksmith");
    let guard = Box::new(locker.lock(&name).acquire().await?);
    let key = format!("/lockbench-guarded-{}", std::process::id());
    let mut writers = vec![(
        "locksmith",
        Writer::Guarded {
            guard,
            key: key.clone(),
        },
    )];
    writers.extend(plain.map(|p| ("floor", Writer::Plain(p))));
    for (_, writer) in &writers {
        for _ in 0..sizes.warmup {
            writer.write().await?;
        }
    }
    let ops = sizes.uncontended_ops;
    let mut samples: Vec<Samples> = writers.iter().map(|_| Samples::with_capacity(ops)).collect();
    let mut busy = vec![Duration::ZERO; writers.len()];
    let mut done = 0;
    while done < ops {
        let n = TURN.min(ops - done);
        for (i, (_, writer)) in writers.iter().enumerate() {
            let started = Instant::now();
            for _ in 0..n {
                let t = Instant::now();
                writer.write().await?;
                samples[i].push(t.elapsed());
            }
            busy[i] += started.elapsed();
        }
        done += n;
    }
    let requests = requests_per_write(url, &writers, sizes).await;
    let mut rows = Vec::new();
    for (i, (system, _)) in writers.iter().enumerate() {
        let mut r = Record::new(system, backend, "guarded");
        r.params.insert("value_bytes".into(), VALUE.len().into());
        r.ops = Some(samples[i].len() as u64);
        r.p50_us = samples[i].quantile(0.5);
        r.p99_us = samples[i].quantile(0.99);
        r.throughput_per_s = Some(round3(samples[i].len() as f64 / busy[i].as_secs_f64()));
        if let Some(Some(per_write)) = requests.get(i) {
            r.params
                .insert("measured_requests_per_write".into(), (*per_write).into());
        }
        rows.push(r);
    }
    if let Some((_, Writer::Guarded { guard, key })) = writers.into_iter().next() {
        guard.guarded().delete(&key).await?;
        guard.release().await?;
    }
    Ok(rows)
}

/// Server requests per write of each writer, counted over `sizes.warmup` writes where the
/// server has a counter (`None` elsewhere).
async fn requests_per_write(url: &str, writers: &[(&str, Writer)], sizes: &Sizes) -> Vec<Option<f64>> {
    let Ok(Some(counter)) = Counter::for_url(url).await else {
        return Vec::new();
    };
    let n = sizes.warmup.max(10);
    let mut out = Vec::new();
    for (_, writer) in writers {
        let counted = async {
            let window = counter.start().await?;
            for _ in 0..n {
                writer.write().await?;
            }
            anyhow::Ok(window.finish().await?.requests)
        };
        out.push(counted.await.ok().map(|r| round3(r as f64 / n as f64)));
    }
    out
}
