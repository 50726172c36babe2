//! `handover`: a waiter is blocked on the lock; the holder releases at t0; the waiter's acquire
//! returns at t1. p50/p99 of t1−t0 for each time the waiter was blocked before the release (so
//! that server-side timers such as etcd's 100 ms sync of unsynced watchers show up if they bite).
//!
//! Every system of a backend (locksmith, its variants, the raw floor, the peers) is measured in
//! the same stretch of time, in turns of [`TURN`] hand-overs each, as the uncontended rows are:
//! a hand-over is a few hundred microseconds, and one row measured a minute after another on a
//! shared machine can differ by more than the gaps being compared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use tokio::sync::oneshot;

use crate::cli::Sizes;
use crate::model::{Record, FLOOR_NOTIFY};
use crate::reference::Notification;
use crate::stats::Samples;
use crate::system::{unique_name, Held, LockClient, LockSystem};

/// The lease: long enough never to run out during a measurement, and no longer than the Redis
/// backend's default `restart_delay`, which bounds every TTL there.
const TTL: Duration = locksmith::DEFAULT_TTL;

/// Hand-overs a system runs before the next one takes its turn.
const TURN: usize = 5;

/// A lock implementation's two clients, each with its own connection: the holder's and the
/// waiter's.
#[derive(Clone)]
struct Pair {
    sys: Arc<dyn LockSystem>,
    holder: Arc<dyn LockClient>,
    waiter: Arc<dyn LockClient>,
}

/// One system being measured at one blocked time.
enum Contestant {
    /// A lock implementation: its clients, one lock, the hand-overs so far.
    Lock { pair: Pair, name: String, samples: Samples },
    /// The raw floor and its measurements.
    Floor {
        notify: Arc<dyn Notification>,
        times: FloorSamples,
    },
}

/// The floor's measurements at one blocked time: the notify-and-take (`taken`) and the
/// notification alone (`notified`); `takes` while every one of them took.
struct FloorSamples {
    taken: Samples,
    notified: Samples,
    takes: bool,
}

/// Runs the workload on locksmith and its variants (`locksmith`), the raw `floor` (if any) and the
/// `peers`, interleaved in turns at each blocked time; the results come in that order, each with
/// its system. A system that fails leaves the run with its error; the others go on.
pub async fn run(
    locksmith: &[Arc<dyn LockSystem>],
    mut floor: Option<Arc<dyn Notification>>,
    peers: &[Arc<dyn LockSystem>],
    sizes: &Sizes,
) -> Vec<(String, Result<Vec<Record>>)> {
    let systems: Vec<Arc<dyn LockSystem>> = locksmith.iter().chain(peers).cloned().collect();
    let mut out: Vec<(String, Result<Vec<Record>>)> = Vec::new();
    let mut rows: Vec<(String, Vec<Record>)> = Vec::new();
    let mut connected: Vec<Pair> = Vec::new();
    for sys in &systems {
        match Pair::connect(sys).await {
            Ok(pair) => connected.push(pair),
            Err(e) => out.push((sys.system().to_string(), Err(e))),
        }
    }
    let backend = systems.first().map(|s| s.backend()).unwrap_or_default();
    for &blocked in &sizes.blocked {
        let mut running: Vec<Contestant> = connected
            .iter()
            .map(|pair| Contestant::Lock {
                pair: pair.clone(),
                name: unique_name("handover", pair.sys.system()),
                samples: Samples::with_capacity(sizes.handover_ops),
            })
            .chain(floor.iter().map(|notify| Contestant::Floor {
                notify: notify.clone(),
                times: FloorSamples {
                    taken: Samples::with_capacity(sizes.handover_ops),
                    notified: Samples::with_capacity(sizes.handover_ops),
                    takes: true,
                },
            }))
            .collect();
        let pb = super::bar(
            (sizes.handover_ops * running.len()) as u64,
            format!("{backend} handover {}ms ({} rows)", blocked.as_millis(), running.len()),
        );
        let step = async |c: &mut Contestant, n: usize| turn(c, blocked, n).await;
        for (c, e) in super::in_turns(&mut running, sizes.handover_ops, TURN, &pb, step).await {
            let system = c.system();
            match c {
                Contestant::Lock { .. } => connected.retain(|p| p.sys.system() != system),
                Contestant::Floor { .. } => floor = None,
            }
            out.push((system.to_string(), Err(e)));
        }
        pb.finish_and_clear();
        for c in running {
            let system = c.system().to_string();
            let new = c.rows(blocked);
            match rows.iter_mut().find(|(s, _)| *s == system) {
                Some((_, r)) => r.extend(new),
                None => rows.push((system, new)),
            }
        }
    }
    out.extend(rows.into_iter().map(|(s, r)| (s, Ok(r))));
    // locksmith's rows, the floor's, the peers' (a stable sort keeps each system's rows in order).
    let order = |s: &str| match locksmith.iter().position(|x| x.system() == s) {
        Some(i) => i,
        None if s == "floor" => locksmith.len(),
        None => locksmith.len() + 1 + peers.iter().position(|x| x.system() == s).unwrap_or(peers.len()),
    };
    out.sort_by_key(|(s, _)| order(s));
    out
}

impl Pair {
    /// Connects both clients of `sys`.
    async fn connect(sys: &Arc<dyn LockSystem>) -> Result<Pair> {
        Ok(Pair {
            sys: sys.clone(),
            holder: sys.client().await?,
            waiter: sys.client().await?,
        })
    }
}

impl Contestant {
    /// The `system` field of its rows.
    fn system(&self) -> &'static str {
        match self {
            Contestant::Lock { pair, .. } => pair.sys.system(),
            Contestant::Floor { .. } => "floor",
        }
    }

    /// Its rows for one blocked time: one for a lock implementation; the floor's `floor` row
    /// (release, notification and the take that follows it, where the backend's floor takes; the
    /// notification alone otherwise) and, where it takes, a `floor-notify` row.
    fn rows(self, blocked: Duration) -> Vec<Record> {
        match self {
            Contestant::Lock { pair, samples, .. } => {
                vec![row(pair.sys.system(), pair.sys.backend(), blocked, samples)]
            }
            Contestant::Floor { notify, times } => {
                let mut rows = vec![row("floor", notify.backend(), blocked, times.taken)];
                if times.takes {
                    rows.push(row(FLOOR_NOTIFY, notify.backend(), blocked, times.notified));
                }
                rows
            }
        }
    }
}

/// `n` timed hand-overs of `c` after the waiter was blocked for `blocked`.
async fn turn(c: &mut Contestant, blocked: Duration, n: usize) -> Result<()> {
    for _ in 0..n {
        match c {
            Contestant::Lock { pair, name, samples } => {
                samples.push(once(pair.holder.as_ref(), &pair.waiter, name, blocked).await?)
            }
            Contestant::Floor { notify, times } => {
                let once = notify.once(blocked).await?;
                times.notified.push(once.notified);
                times.taken.push(once.taken.unwrap_or(once.notified));
                times.takes &= once.taken.is_some();
            }
        }
    }
    Ok(())
}

/// One hand-over of `name` from `holder` to `waiter`, the waiter blocked for `blocked` first.
async fn once(
    holder: &dyn LockClient,
    waiter: &Arc<dyn LockClient>,
    name: &str,
    blocked: Duration,
) -> Result<Duration> {
    let held = holder.acquire(name, TTL).await?;
    let (tx, rx) = oneshot::channel::<Result<(Instant, Box<dyn Held>)>>();
    let (w, n) = (waiter.clone(), name.to_string());
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
    next.release().await?;
    Ok(t1.saturating_duration_since(t0))
}

fn row(system: &str, backend: &str, blocked: Duration, samples: Samples) -> Record {
    let mut r = Record::new(system, backend, "handover").param("blocked_ms", blocked.as_millis() as u64);
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5);
    r.p99_us = samples.quantile(0.99);
    r.samples_us = samples.sorted();
    r
}
