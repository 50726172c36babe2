//! Who leads an election, and watching it change ([`lockcore::LockBackend::leader`] and
//! [`lockcore::LockBackend::observe`]).
//!
//! An election is a lock queue of exclusive entries (see [`crate::kind_scripts`]): the leader is
//! its holder, its term the holder's fencing token, its value the campaign value stored with the
//! holder. Every script that changes the holder (a grant, a release, a candidate leaving with a
//! grant, an expired leader pruned) publishes on the election's leader channel.
//!
//! An observation is a task of the backend's, subscribed to that channel (one pub/sub connection
//! per backend, shared with the waiters): it reads the leader (the `LEADER` script, one round
//! trip) when it starts, on every message, and when the current leader's lease would run out
//! (an expiry publishes nothing, and nobody may run a script then), and sends changes into a
//! `tokio::sync::watch`. When the pub/sub connection breaks (a restart, a Sentinel failover
//! moving the master, a cluster node going away), it subscribes again and reads the leader again,
//! so no change is missed for good; while the server cannot be reached it keeps the last leader
//! seen and retries with backoff. It ends when its [`LeaderWatch`] is dropped.

use std::sync::Arc;
use std::time::Duration;

use lockcore::{Family, Leader, LeaderWatch, LockName, Result};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::inner::Inner;
use crate::keys::KindKeys;
use crate::notify::Subscription;

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Who leads the election `name` now.
pub(crate) async fn leader(inner: &Inner, name: &LockName) -> Result<Option<Leader>> {
    inner.check_family(Family::Election)?;
    let keys = inner.kind_keys(Family::Election, name);
    Ok(inner.nodes[0].leader(&keys).await?.map(|(leader, _)| leader))
}

/// Starts watching the election `name`: subscribes, then reads the current leader (so no change
/// falls between the two), and leaves the rest to a task.
pub(crate) async fn observe(inner: &Arc<Inner>, name: &LockName) -> Result<LeaderWatch> {
    inner.check_family(Family::Election)?;
    let keys = inner.kind_keys(Family::Election, name);
    let node = &inner.nodes[0];
    let sub = node.notifier.subscribe_shared(keys.leader.clone()).await?;
    let (first, left) = split(node.leader(&keys).await?);
    let (tx, rx) = watch::channel(first);
    let task = tokio::spawn(run(inner.clone(), keys, sub, left.map(|l| Instant::now() + l), tx));
    Ok(LeaderWatch::new(rx, task))
}

fn split(read: Option<(Leader, Duration)>) -> (Option<Leader>, Option<Duration>) {
    match read {
        Some((leader, left)) => (Some(leader), Some(left)),
        None => (None, None),
    }
}

/// The observation: waits for a message, the leader's deadline, or the end; reads the leader.
async fn run(
    inner: Arc<Inner>,
    keys: KindKeys,
    sub: Subscription,
    mut recheck: Option<Instant>,
    tx: watch::Sender<Option<Leader>>,
) {
    let node = &inner.nodes[0];
    let mut sub = Some(sub);
    let mut backoff = MIN_BACKOFF;
    loop {
        match sub.as_mut() {
            Some(s) => {
                let far = Instant::now() + Duration::from_secs(3600);
                tokio::select! {
                    alive = s.recv() => {
                        if !alive {
                            tracing::debug!(election = %keys.leader, "pub/sub connection lost; observing again");
                            sub = None;
                            continue;
                        }
                    }
                    _ = tokio::time::sleep_until(recheck.unwrap_or(far)) => {}
                    _ = tx.closed() => return,
                }
            }
            None => match node.notifier.subscribe_shared(keys.leader.clone()).await {
                Ok(s) => sub = Some(s),
                Err(e) => {
                    tracing::debug!(election = %keys.leader, error = %e, "subscribing again failed; retrying");
                    if pause(&tx, &mut backoff).await {
                        return;
                    }
                    continue;
                }
            },
        }
        match node.leader(&keys).await {
            Ok(read) => {
                backoff = MIN_BACKOFF;
                let (leader, left) = split(read);
                recheck = left.map(|l| Instant::now() + l + Duration::from_millis(1));
                tx.send_if_modified(|seen| {
                    let differs = *seen != leader;
                    if differs {
                        tracing::debug!(election = %keys.leader, leader = ?leader.as_ref().map(|l| (&l.value, l.term)), "leader changed");
                        seen.clone_from(&leader);
                    }
                    differs
                });
            }
            Err(e) => {
                tracing::debug!(election = %keys.leader, error = %e, "reading the leader failed; retrying");
                recheck = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Sleeps for the backoff (doubling it); `true` if the watch was dropped meanwhile.
async fn pause(tx: &watch::Sender<Option<Leader>>, backoff: &mut Duration) -> bool {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    tokio::select! {
        _ = tokio::time::sleep(wait) => false,
        _ = tx.closed() => true,
    }
}
