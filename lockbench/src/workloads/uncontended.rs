//! `uncontended`: one client, sequential acquire+release of one lock; p50/p99 of the whole cycle
//! and cycles per second.
//!
//! Every system of a backend (locksmith, its variants, the raw floor, the peers) is measured in
//! the same stretch of time, in turns of [`TURN`] cycles each, so that the load of a shared
//! machine falls on every row alike and the ratios between rows hold even when the microseconds
//! move: one row measured a minute after another can differ by a quarter on a loaded machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::{unique_name, LockClient, LockSystem};

/// The lease: long enough never to run out during a measurement, and no longer than the Redis
/// backend's default `restart_delay`, which bounds every TTL there.
const TTL: Duration = locksmith::DEFAULT_TTL;

/// Cycles a system runs before the next one takes its turn.
const TURN: usize = 50;

/// One system being measured: its client, its lock name, what it measured so far, and the time
/// it spent measuring (for its cycles per second).
struct Contestant {
    sys: Arc<dyn LockSystem>,
    client: Arc<dyn LockClient>,
    name: String,
    samples: Samples,
    busy: Duration,
}

/// Runs the workload on every system of `systems`, interleaved in turns. A system that fails
/// (to connect, or in a cycle) leaves the run with its error; the others go on.
pub async fn run(systems: &[Arc<dyn LockSystem>], sizes: &Sizes) -> Vec<(&'static str, Result<Record>)> {
    let mut out = Vec::new();
    let mut running = Vec::new();
    for sys in systems {
        match connect(sys, sizes).await {
            Ok(c) => running.push(c),
            Err(e) => out.push((sys.system(), Err(e))),
        }
    }
    let backend = systems.first().map(|s| s.backend()).unwrap_or_default();
    let pb = super::bar(
        (sizes.uncontended_ops * running.len()) as u64,
        format!("{backend} uncontended ({} rows)", running.len()),
    );
    for (c, e) in super::in_turns(&mut running, sizes.uncontended_ops, TURN, &pb, turn).await {
        out.push((c.sys.system(), Err(e)));
    }
    pb.finish_and_clear();
    for c in running {
        out.push((c.sys.system(), Ok(record(c))));
    }
    // Rows in the order the systems were given.
    let order = |s: &str| systems.iter().position(|x| x.system() == s);
    out.sort_by_key(|(s, _)| order(s));
    out
}

/// A client of `sys`, warmed up.
async fn connect(sys: &Arc<dyn LockSystem>, sizes: &Sizes) -> Result<Contestant> {
    let client = sys.client().await?;
    let name = unique_name("uncontended", sys.system());
    for _ in 0..sizes.warmup {
        client.acquire(&name, TTL).await?.release().await?;
    }
    Ok(Contestant {
        sys: sys.clone(),
        client,
        name,
        samples: Samples::with_capacity(sizes.uncontended_ops),
        busy: Duration::ZERO,
    })
}

/// `n` timed cycles of `c`.
async fn turn(c: &mut Contestant, n: usize) -> Result<()> {
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        c.client.acquire(&c.name, TTL).await?.release().await?;
        c.samples.push(t.elapsed());
    }
    c.busy += started.elapsed();
    Ok(())
}

fn record(c: Contestant) -> Record {
    let mut r = Record::new(c.sys.system(), c.sys.backend(), "uncontended");
    r.ops = Some(c.samples.len() as u64);
    r.p50_us = c.samples.quantile(0.5);
    r.p99_us = c.samples.quantile(0.99);
    r.throughput_per_s = Some(round3(c.samples.len() as f64 / c.busy.as_secs_f64()));
    r.samples_us = c.samples.sorted();
    r
}
