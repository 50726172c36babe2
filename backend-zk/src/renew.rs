//! Renewal: nothing to extend per lock — the client's heartbeats keep the session, and with it every
//! lock, alive. A renewal *confirms* the leases instead, so the watchdog never counts on a session
//! the server may already be expiring:
//!
//! - a terminated session (expired, closed) → `NotHeld` for all, without a request;
//! - disconnected (Curator: SUSPENDED) → `Unavailable` for all, without a request; the watchdog
//!   retries and fires `lost()` once no renewal succeeded for TTL − TTL/10;
//! - connected → **one request for the whole batch** (a ZooKeeper 3.6+ `multiRead` of `getData` on
//!   every lease's node, in chunks of [`CHUNK`] pipelined together). An answer proves the server
//!   heard from this session after the request was sent, so the session cannot expire before
//!   `sent + session timeout`; and it shows, per lease, that the node still exists and is ours
//!   (`czxid` = fencing token, `ephemeralOwner` = our session). A node deleted behind our back is
//!   `NotHeld`.
//!
//! Why not answer from the session state alone: the client notices a dead connection only after
//! 2/5 of the session timeout without traffic, so "connected" can be stale by that much, and a
//! watchdog trusting it would count a lease valid for longer than the server keeps it.

use lockcore::{Lease, LockError, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::errors::{is_session_gone, to_lock_error};
use crate::session::Session;

/// The most lease checks in one `multiRead` request (lock paths are at most ~3 KiB, so this stays
/// well below ZooKeeper's default 1 MiB packet limit).
const CHUNK: usize = 128;

/// Renews (confirms) `leases`, one result per lease in order.
pub(crate) async fn renew_all(session: &Session, leases: &[Lease]) -> Vec<Result<()>> {
    let state = session.state();
    if state.is_terminated() {
        return leases
            .iter()
            .map(|l| Err(LockError::not_held(l.name.as_str())))
            .collect();
    }
    if !matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    ) {
        return leases
            .iter()
            .map(|_| {
                Err(LockError::Unavailable {
                    message: format!("ZooKeeper session {:#x} is {state} (Curator: SUSPENDED)", session.id),
                    source: None,
                })
            })
            .collect();
    }

    let mut results: Vec<Option<Result<()>>> = leases.iter().map(|_| None).collect();
    // Only leases this session holds, with the token it handed out, are checked on the server.
    let mut checked = Vec::new();
    for (i, lease) in leases.iter().enumerate() {
        match session.held_czxid(&lease.holder_id) {
            Some(czxid) if czxid as u64 == lease.fencing_token => checked.push(i),
            _ => results[i] = Some(Err(LockError::not_held(lease.name.as_str()))),
        }
    }

    let sent = Instant::now();
    let mut pending = Vec::new();
    for chunk in checked.chunks(CHUNK) {
        let mut reader = session.client.new_multi_reader();
        let added = chunk
            .iter()
            .try_for_each(|&i| reader.add_get_data(&leases[i].holder_id));
        match added {
            Ok(()) => pending.push((chunk, Ok(reader.commit()))), // sent now; answers awaited below
            Err(e) => pending.push((chunk, Err(e))),
        }
    }
    for (chunk, request) in pending {
        let answer = match request {
            Ok(future) => future.await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(answers) if answers.len() == chunk.len() => {
                for (&i, answer) in chunk.iter().zip(answers) {
                    results[i] = Some(judge(session, &leases[i], answer, sent));
                }
            }
            Ok(answers) => {
                let e = LockError::Protocol(format!(
                    "multiRead answered {} results for {} reads",
                    answers.len(),
                    chunk.len()
                ));
                let message = e.to_string();
                for &i in chunk {
                    results[i] = Some(Err(LockError::Protocol(message.clone())));
                }
            }
            Err(e) => {
                for &i in chunk {
                    results[i] = Some(if is_session_gone(&e) {
                        Err(LockError::not_held(leases[i].name.as_str()))
                    } else {
                        Err(to_lock_error("confirming the session's leases", e.clone()))
                    });
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(LockError::Protocol("a lease was not checked".into()))))
        .collect()
}

/// One lease's verdict from its `getData` answer.
fn judge(session: &Session, lease: &Lease, answer: zk::MultiReadResult, sent: Instant) -> Result<()> {
    match answer {
        zk::MultiReadResult::Data { stat, .. }
            if stat.czxid as u64 == lease.fencing_token && stat.ephemeral_owner == session.id =>
        {
            session.renewed(&lease.holder_id, sent);
            Ok(())
        }
        zk::MultiReadResult::Data { .. } | zk::MultiReadResult::Error { err: zk::Error::NoNode } => {
            session.forget(&lease.holder_id);
            tracing::warn!(lock = %lease.name, node = %lease.holder_id, "the lock node is gone or not ours any more");
            Err(LockError::not_held(lease.name.as_str()))
        }
        zk::MultiReadResult::Error { err } => Err(to_lock_error("confirming a lease", err)),
        other => Err(LockError::Protocol(format!("unexpected multiRead answer {other:?}"))),
    }
}
