//! Renewal: nothing to extend per lock — the client's heartbeats keep the session, and with it every
//! lock, alive. A renewal *confirms* the session instead, so the watchdog never counts on a session
//! the server may already be expiring, and its cost does not depend on how many locks are held:
//!
//! - a terminated session (expired, closed) → `NotHeld` for all, without a request;
//! - disconnected (Curator: SUSPENDED) → `Unavailable` for all, without a request; the watchdog
//!   retries and fires `lost()` once no renewal succeeded for TTL − TTL/10;
//! - connected → **one `sync` and one `exists` for the whole batch**, pipelined (one round trip),
//!   on the namespace node; `exists` fails with `SessionExpired` once the session is gone. In an
//!   ensemble the *leader* expires sessions, from the touches its followers pass on; a follower
//!   cut off from the quorum goes on answering its clients' pings and reads by itself (for
//!   `syncLimit` ticks) while the leader side expires their sessions and grants their locks to
//!   others. `sync` goes through the leader, and the server answers a session's requests in order,
//!   so the `exists` answer comes after the leader heard from this session's server after the
//!   request was sent: the session — the lease of every lock in the batch — cannot expire before
//!   about `sent + session timeout` (the leader takes a follower's touches with its pings, every
//!   half tick: the watchdog's TTL/10 margin covers that), which is what the watchdog counts on.
//!   A cut-off follower answers neither: renewals fail and `lost()` fires within the TTL
//!   (`tests/cut_off_follower.rs`). A server that runs alone expires sessions itself: the
//!   `exists` goes without the `sync` ([`Session::confirmed_read`]).
//!
//! Whether each node still exists is not asked: a node deleted behind our back is reported by the
//! data watch set on it when it was granted ([`crate::wake::held`]), which forgets the lease, so a
//! renewal of it answers `NotHeld`. The renewal does record, per lease, that it was renewed: the
//! session monitor deletes the node of a lease nobody renews within its TTL (an abandoned guard).
//!
//! Why not answer from the session state alone: the client notices a dead connection only after
//! 2/5 of the session timeout without traffic, so "connected" can be stale by that much, and a
//! watchdog trusting it would count a lease valid for longer than the server keeps it.

use locksmith_core::driver::Lease;
use locksmith_core::{LockError, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::conn::session::Session;
use crate::error::{is_session_gone, to_lock_error};

/// Renews (confirms) `leases`, one result per lease in order. `probe` is the path the confirming
/// `exists` asks about (the namespace node; whether it exists does not matter).
pub(crate) async fn renew_all(session: &Session, probe: &str, leases: &[Lease]) -> Vec<Result<()>> {
    let state = session.state();
    if state.is_terminated() {
        return leases.iter().map(|l| Err(not_held(l))).collect();
    }
    if !matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    ) {
        let message = format!("ZooKeeper session {:#x} is {state} (Curator: SUSPENDED)", session.id);
        return leases
            .iter()
            .map(|_| {
                Err(LockError::Unavailable {
                    message: message.clone(),
                    source: None,
                })
            })
            .collect();
    }
    // Only leases this session holds, with the token it handed out, can be confirmed.
    let ours: Vec<bool> = leases
        .iter()
        .map(|l| {
            session
                .held_czxid(&l.holder_id)
                .is_some_and(|czxid| czxid as u64 == l.fencing_token)
        })
        .collect();
    if !ours.contains(&true) {
        return leases.iter().map(|l| Err(not_held(l))).collect();
    }

    let sent = Instant::now();
    match session.confirmed_read(probe, || session.client.check_stat(probe)).await {
        Ok(_) => {
            // Held still (no watch reported a deletion, no release) after the answer?
            let paths = leases
                .iter()
                .zip(&ours)
                .filter(|(_, &o)| o)
                .map(|(l, _)| l.holder_id.as_str());
            let mut still_held = session.renewed(paths, sent).into_iter();
            leases
                .iter()
                .zip(&ours)
                .map(|(lease, &ours)| {
                    // `still_held` has one entry per lease of ours, in order.
                    if ours && still_held.next().unwrap_or(false) {
                        Ok(())
                    } else {
                        Err(not_held(lease))
                    }
                })
                .collect()
        }
        Err(e) if is_session_gone(&e) => leases.iter().map(|l| Err(not_held(l))).collect(),
        Err(e) => leases
            .iter()
            .zip(&ours)
            .map(|(lease, &ours)| {
                if ours {
                    Err(to_lock_error("confirming the session", e.clone()))
                } else {
                    Err(not_held(lease))
                }
            })
            .collect(),
    }
}

/// `NotHeld` for `lease`.
fn not_held(lease: &Lease) -> LockError {
    LockError::not_held(lease.name.as_str())
}
