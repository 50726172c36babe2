//! `herd` for a reference system that waits (etcd's single-key lock): the same measurement as
//! locksmith's (`herd`): waiters queue on one lock, then handovers run back to back, and the
//! server's request count over them gives the requests per handover.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::cli::Sizes;
use crate::counters::Counter;
use crate::model::{round3, Record};
use crate::system::{Held, LockSystem};

/// The lease (as locksmith's herd).
const TTL: Duration = locksmith::DEFAULT_TTL;
/// Clients at most: the rest of the waiters share them round-robin (as locksmith's herd).
const MAX_CONNECTIONS: usize = 100;
/// A reference system cannot tell how many wait: the time given to the waiters to register.
const SETTLE: Duration = Duration::from_secs(3);

/// Runs the herd on `sys`, whose server is at `url` (for its request counter).
pub async fn run(sys: &dyn LockSystem, url: &str, sizes: &Sizes) -> Result<Record> {
    let (waiters, handovers) = (sizes.herd_waiters, sizes.herd_handovers.min(sizes.herd_waiters));
    let counter = Counter::for_url(url)
        .await?
        .ok_or_else(|| anyhow!("{url}: no server request counter"))?;
    let name = crate::system::unique_name("herd", sys.system());
    let holder = sys.client().await?;
    let first = holder.acquire(&name, TTL).await?;
    let connections = waiters.min(MAX_CONNECTIONS);
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        clients.push(sys.client().await?);
    }
    let acquired = Arc::new(AtomicUsize::new(0));
    let (last_tx, mut last_rx) = mpsc::unbounded_channel::<Box<dyn Held>>();
    let mut tasks = JoinSet::new();
    for i in 0..waiters {
        let (client, name, acquired, last_tx) = (
            clients[i % connections].clone(),
            name.clone(),
            acquired.clone(),
            last_tx.clone(),
        );
        tasks.spawn(async move {
            let held = client.acquire(&name, TTL).await?;
            if acquired.fetch_add(1, Ordering::SeqCst) + 1 < handovers {
                held.release().await?;
            } else {
                let _ = last_tx.send(held); // the last counted handover: hold until counted
            }
            anyhow::Ok(())
        });
    }
    tokio::time::sleep(SETTLE).await;

    let window = counter.start().await?;
    let t0 = Instant::now();
    first.release().await?;
    let last = tokio::time::timeout(Duration::from_secs(120), last_rx.recv())
        .await
        .map_err(|_| {
            anyhow!(
                "only {} of {handovers} handovers within 120 s",
                acquired.load(Ordering::SeqCst)
            )
        })?
        .ok_or_else(|| anyhow!("the waiters ended early"))?;
    let elapsed = t0.elapsed();
    let count = window.finish().await?;
    tasks.abort_all();
    last.release().await?;
    if acquired.load(Ordering::SeqCst) < handovers {
        bail!("fewer handovers than counted");
    }

    let mut r = Record::new(sys.system(), sys.backend(), "herd")
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
