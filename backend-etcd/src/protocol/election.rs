//! Elections: who leads ([`read_leader`]) and the observation of the leadership ([`observe`]).
//!
//! A campaign is an exclusive entry of the election's queue ([`crate::protocol::exclusive`]) whose key
//! holds the campaign value, exactly as etcd's Go `concurrency.Election` (and `etcdctl elect`)
//! lays it out: the leader is the oldest key of the election's prefix, and its term is that key's
//! create revision.
//!
//! The observer is one task per [`LeaderWatch`]. Each round it opens a watch stream with one
//! watch — on the leader's key (a put changes its value, a delete ends its term), or on the
//! whole prefix while nobody leads (a put is a new candidate) — created synced (no start
//! revision), and then reads the leader again: if it changed meanwhile, the change is reported
//! and the round ends; otherwise the first event of the watch ends the round with a read of the
//! new leader (a value change of the same leader is reported as it comes). So nothing between
//! the read and the watch is missed, no event waits for etcd's unsynced-watcher loop, compaction
//! cannot cancel the watch, and a leadership change costs the observer one read after the event
//! and one watch and read to follow the new leader. A request that fails (an outage, a broken
//! stream) ends the round: the next one starts after a backoff (50 ms, doubling to 1 s) and
//! reads the leader afresh. The task ends when the watch is dropped or the backend is.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, KeyValue, Txn, TxnOp, WatchFilterType, WatchOptions, WatchStream};
use locksmith_core::driver::retry::Backoff;
use locksmith_core::{Leader, LeaderWatch, LockError, Result};
use tokio::sync::watch;

use crate::conn::session::Session;
use crate::conn::Conn;
use crate::protocol::requests::{gets, oldest_first, revision, run};

/// The pause before the next round after a failed one: 50 ms, doubling to 1 s.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// The leader of the election whose keys live under `prefix` (the oldest key), and the revision
/// of the read: one round trip.
pub(crate) async fn read_leader(conn: &Conn, prefix: &str) -> Result<(Option<Leader>, i64)> {
    let txn = Txn::new().and_then([TxnOp::get(prefix, Some(oldest_first().with_limit(1)))]);
    let resp = run(conn, "reading the leader", txn).await?;
    let leader = gets(&resp).first().and_then(|g| g.kvs().first()).map(leader_of);
    Ok((leader, revision(&resp)?))
}

fn leader_of(kv: &KeyValue) -> Leader {
    Leader {
        value: String::from_utf8_lossy(kv.value()).into_owned(),
        term: u64::try_from(kv.create_revision()).unwrap_or(0),
        holder_id: String::from_utf8_lossy(kv.key()).into_owned(),
    }
}

/// Reads the leader of `prefix` and starts the task that reports its changes (see the module
/// docs). The first read's failure is the caller's error.
pub(crate) async fn observe(session: &Arc<Session>, prefix: String) -> Result<LeaderWatch> {
    let (first, _) = read_leader(&session.conn, &prefix).await?;
    let (tx, rx) = watch::channel(first.clone());
    let observer = Observer {
        conn: session.conn.clone(),
        prefix,
    };
    let closed = session.closed();
    let task = tokio::spawn(async move {
        tokio::select! {
            () = observer.run(first, &tx) => {}
            () = tx.closed() => {}
            () = closed => tracing::debug!("the backend was dropped; the election observer ends"),
        }
    });
    Ok(LeaderWatch::new(rx, task))
}

struct Observer {
    conn: Conn,
    prefix: String,
}

impl Observer {
    /// Follows the leadership from `current` on, forever (the caller ends it).
    async fn run(&self, mut current: Option<Leader>, tx: &watch::Sender<Option<Leader>>) {
        let mut delays = BACKOFF.delays();
        loop {
            match self.round(&mut current, tx).await {
                Ok(()) => delays.reset(),
                Err(e) => {
                    let backoff = delays.next_delay();
                    tracing::debug!(prefix = self.prefix, error = %e, ?backoff, "observing the election failed; retrying");
                    // The next round reads the leader afresh: whatever happened meanwhile is in it.
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }

    /// One round (see the module docs): returns once a change was reported, or with the error
    /// of a request that failed.
    async fn round(&self, current: &mut Option<Leader>, tx: &watch::Sender<Option<Leader>>) -> Result<()> {
        let mut stream = self.watch(current.as_ref()).await?;
        let (now, _) = read_leader(&self.conn, &self.prefix).await?;
        if now != *current {
            publish(current, now, tx);
            return Ok(());
        }
        loop {
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => return Err(unavailable("the watch stream ended")),
                Err(e) => return Err(LockError::unavailable("watching the election", e)),
            };
            let mut reread = resp.canceled();
            for event in resp.events() {
                // A put to the leader's key (same term) is a new value; anything else may be a
                // new leader.
                let proclaimed = match (current.as_ref(), event.event_type(), event.kv()) {
                    (Some(leader), EventType::Put, Some(kv))
                        if u64::try_from(kv.create_revision()).ok() == Some(leader.term) =>
                    {
                        Some(Leader {
                            value: String::from_utf8_lossy(kv.value()).into_owned(),
                            ..leader.clone()
                        })
                    }
                    _ => None,
                };
                match proclaimed {
                    Some(leader) => publish(current, Some(leader), tx),
                    None => {
                        reread = true;
                        break;
                    }
                }
            }
            if reread {
                let (now, _) = read_leader(&self.conn, &self.prefix).await?;
                publish(current, now, tx);
                return Ok(());
            }
        }
    }

    /// A new watch stream with one synced watch: on the leader's key, or on the prefix's puts
    /// while nobody leads. Returns once the server created it.
    async fn watch(&self, leader: Option<&Leader>) -> Result<WatchStream> {
        let (key, options) = match leader {
            Some(l) => (l.holder_id.clone().into_bytes(), WatchOptions::new()),
            None => (
                self.prefix.clone().into_bytes(),
                WatchOptions::new()
                    .with_prefix()
                    .with_filters([WatchFilterType::NoDelete]),
            ),
        };
        self.conn.stats.watch_requests.fetch_add(1, Ordering::Relaxed);
        let limit = self.conn.limit;
        let created = tokio::time::timeout(limit, async {
            let mut stream = self.conn.client.watch_client().watch(key, Some(options)).await?;
            match stream.message().await? {
                Some(resp) if resp.created() && !resp.canceled() => Ok(Some(stream)),
                _ => Ok(None),
            }
        })
        .await;
        match created {
            Ok(Ok(Some(stream))) => Ok(stream),
            Ok(Ok(None)) => Err(unavailable("etcd did not create the watch")),
            Ok(Err(e)) => Err(crate::error::from_etcd("watching the election", e)),
            Err(_) => Err(unavailable(&format!("no watch created within {limit:?}"))),
        }
    }
}

/// Reports `now` if it is not what was reported last.
fn publish(current: &mut Option<Leader>, now: Option<Leader>, tx: &watch::Sender<Option<Leader>>) {
    if *current != now {
        tracing::debug!(leader = ?now, "the election's leader changed");
    }
    current.clone_from(&now);
    tx.send_if_modified(|seen| {
        let differs = *seen != now;
        if differs {
            *seen = now;
        }
        differs
    });
}

fn unavailable(what: &str) -> LockError {
    LockError::Unavailable {
        message: format!("observing the election: {what}"),
        source: None,
    }
}
