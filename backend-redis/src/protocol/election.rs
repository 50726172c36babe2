//! Who leads an election, and watching it change ([`locksmith_core::driver::LockBackend::leader`] and
//! [`locksmith_core::driver::LockBackend::observe`]).
//!
//! An election is a lock queue of exclusive entries (see [`crate::protocol::kinds`]): the leader is
//! its holder, its term the holder's fencing token, its value the campaign value stored with the
//! holder. Every script that changes the holder (a grant, a release, a candidate leaving with a
//! grant, an expired leader pruned) publishes on the election's leader channel.
//!
//! An observation is a task of the backend's, subscribed to that channel (one pub/sub connection
//! per backend, shared with the waiters): it reads the leader (the `LEADER` script, one round
//! trip) when it starts, on every message, and when the current leader's lease would run out
//! (an expiry publishes nothing, and nobody may run a script then), and sends changes into a
//! `tokio::sync::watch`.
//!
//! A handover is one change, as on etcd and ZooKeeper: when a leader resigns (or its lease runs
//! out) while a candidate waits in line, there is an instant when nobody holds (between the
//! release and the candidate's grant: one notification and one round trip). The `LEADER` script
//! tells that instant apart from "nobody leads and nobody waits": nobody holds, but a candidate
//! that is still alive is queued ([`LeaderRead::Pending`]). The observer then keeps the leader it
//! last reported and waits for the grant's message, instead of reporting nobody in between; it
//! reads again when a candidate leaves the queue (`LEAVE` announces it) or when the first live
//! candidate's entry would go stale (a crashed candidate is skipped after `waiter_ttl`; a stale
//! entry publishes nothing), and reports nobody once no live candidate is left.
//!
//! When the pub/sub connection breaks (a restart, a Sentinel failover
//! moving the master, a cluster node going away), it subscribes again and reads the leader again,
//! so no change is missed for good; while the server cannot be reached it keeps the last leader
//! seen and retries with backoff. It ends when its [`LeaderWatch`] is dropped, or when its backend
//! is (the task holds the backend only while it subscribes or reads).

use std::sync::{Arc, Weak};
use std::time::Duration;

use locksmith_core::driver::LockName;
use locksmith_core::{Family, Leader, LeaderWatch, LockError, Result};
use redis::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::conn::inner::Inner;
use crate::conn::node::Node;
use crate::layout::KindKeys;
use crate::protocol::scripts::SCRIPTS;
use crate::wake::Subscription;

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Who leads the election `name` now.
pub(crate) async fn leader(inner: &Inner, name: &LockName) -> Result<Option<Leader>> {
    inner.check_family(Family::Election)?;
    let keys = inner.kind_keys(Family::Election, name);
    Ok(read_leader(&inner.nodes[0], &keys).await?.leader())
}

/// Starts watching the election `name`: subscribes, then reads the current leader (so no change
/// falls between the two), and leaves the rest to a task.
pub(crate) async fn observe(inner: &Arc<Inner>, name: &LockName) -> Result<LeaderWatch> {
    inner.check_family(Family::Election)?;
    let keys = inner.kind_keys(Family::Election, name);
    let node = &inner.nodes[0];
    let sub = node.notifier.subscribe_shared(keys.leader.clone()).await?;
    let read = read_leader(node, &keys).await?;
    let recheck = recheck_after(&read);
    // While a candidate is about to lead, this observer has no earlier leader to keep: nobody.
    let (tx, rx) = watch::channel(read.leader());
    let task = tokio::spawn(run(Arc::downgrade(inner), keys, sub, recheck, tx));
    Ok(LeaderWatch::new(rx, task))
}

/// When to read again if no message comes: once the leader's lease would run out, or once the
/// first candidate in line would go stale (neither publishes anything).
fn recheck_after(read: &LeaderRead) -> Option<Instant> {
    let left = match read {
        LeaderRead::Leads(_, left) | LeaderRead::Pending(left) => *left,
        LeaderRead::Nobody => return None,
    };
    Some(Instant::now() + left + Duration::from_millis(1))
}

/// The observation: waits for a message, the leader's deadline, or the end; reads the leader.
/// It holds its backend only while it subscribes or reads: once the backend is dropped (its
/// notifier closes every subscription), the observation ends and its watch says so.
async fn run(
    inner: Weak<Inner>,
    keys: KindKeys,
    sub: Subscription,
    mut recheck: Option<Instant>,
    tx: watch::Sender<Option<Leader>>,
) {
    let mut sub = Some(sub);
    let mut backoff = MIN_BACKOFF;
    loop {
        if let Some(s) = sub.as_mut() {
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                pushed = s.recv() => {
                    if pushed.is_none() {
                        tracing::debug!(election = %keys.leader, "pub/sub connection lost; observing again");
                        sub = None;
                    }
                }
                _ = tokio::time::sleep_until(recheck.unwrap_or(far)) => {}
                _ = tx.closed() => return,
            }
        }
        let Some(inner) = inner.upgrade() else {
            tracing::debug!(election = %keys.leader, "the backend was dropped; the observation ends");
            return;
        };
        let node = &inner.nodes[0];
        if sub.is_none() {
            match node.notifier.subscribe_shared(keys.leader.clone()).await {
                Ok(s) => sub = Some(s),
                Err(e) => {
                    tracing::debug!(election = %keys.leader, error = %e, "subscribing again failed; retrying");
                    drop(inner);
                    if pause(&tx, &mut backoff).await {
                        return;
                    }
                    continue;
                }
            }
        }
        match read_leader(node, &keys).await {
            Ok(read) => {
                backoff = MIN_BACKOFF;
                recheck = recheck_after(&read);
                if let LeaderRead::Pending(_) = read {
                    // A handover under way: the grant's message brings the next leader.
                    continue;
                }
                let leader = read.leader();
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

/// The leader of the election whose keys these are, and how long until its lease runs out
/// unless renewed; or, while nobody leads, whether a candidate is about to.
async fn read_leader(node: &Node, keys: &KindKeys) -> Result<LeaderRead> {
    let reply: Vec<Value> = node
        .bounded("reading the leader", || async move {
            let mut conn = node.link.conn().await?;
            let call = node.call(&SCRIPTS.leader, &[&keys.holders, &keys.info, &keys.alive]);
            call.invoke(&mut conn).await
        })
        .await?;
    parse_leader(&reply)
}

/// What the `LEADER` script read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaderRead {
    /// This leader leads, its lease runs out after this long unless renewed.
    Leads(Leader, Duration),
    /// Nobody leads, but a candidate that is still alive waits in line: it is about to lead (its
    /// grant publishes on the leader channel), unless every such candidate leaves (announced too)
    /// or stops refreshing its entry; the first of them goes stale after this long.
    Pending(Duration),
    /// Nobody leads and nobody waits.
    Nobody,
}

impl LeaderRead {
    /// The leader, if one leads now.
    pub(crate) fn leader(self) -> Option<Leader> {
        match self {
            LeaderRead::Leads(leader, _) => Some(leader),
            LeaderRead::Pending(_) | LeaderRead::Nobody => None,
        }
    }
}

/// `{entry, '<fence>:<value>', ms left}`, `{ms}` or `{}`.
fn parse_leader(reply: &[Value]) -> Result<LeaderRead> {
    let bad = || LockError::Protocol(format!("unexpected reply {reply:?} from the leader script"));
    let millis = |v: &Value| -> Result<Duration> {
        let ms: i64 = redis::from_redis_value_ref(v).map_err(|_| bad())?;
        Ok(Duration::from_millis(ms.max(0).unsigned_abs()))
    };
    let [entry, info, left] = reply else {
        return match reply {
            [] => Ok(LeaderRead::Nobody),
            [stale_in] => Ok(LeaderRead::Pending(millis(stale_in)?)),
            _ => Err(bad()),
        };
    };
    let entry: String = redis::from_redis_value_ref(entry).map_err(|_| bad())?;
    let info: String = redis::from_redis_value_ref(info).map_err(|_| bad())?;
    let left = millis(left)?;
    let (fence, value) = info.split_once(':').ok_or_else(bad)?;
    let holder_id = entry.split_once(':').map(|(_, t)| t.to_owned()).ok_or_else(bad)?;
    let leader = Leader {
        value: value.to_owned(),
        term: fence.parse().map_err(|_| bad())?,
        holder_id,
    };
    Ok(LeaderRead::Leads(leader, left))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_replies() {
        assert_eq!(parse_leader(&[]).unwrap(), LeaderRead::Nobody);
        assert_eq!(
            parse_leader(&[Value::Int(700)]).unwrap(),
            LeaderRead::Pending(Duration::from_millis(700))
        );
        let reply = [
            Value::BulkString(b"X:abc".to_vec()),
            Value::BulkString(b"42:host:1 a".to_vec()),
            Value::Int(900),
        ];
        let LeaderRead::Leads(leader, left) = parse_leader(&reply).unwrap() else {
            panic!("a leader")
        };
        assert_eq!(
            (leader.value.as_str(), leader.term, leader.holder_id.as_str()),
            ("host:1 a", 42, "abc")
        );
        assert_eq!(left, Duration::from_millis(900));
        assert!(parse_leader(&[Value::BulkString(b"x".to_vec())]).is_err());
        assert!(parse_leader(&[Value::Int(1), Value::Int(2)]).is_err());
    }
}
