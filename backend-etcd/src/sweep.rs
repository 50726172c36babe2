//! The session's sweeper: ONE background task per session, on one timer, that does two kinds of
//! deferred per-lock work so that neither costs a task or a request per lock on the critical path.
//!
//! - **Held-key watches, opened late.** A granted lock's key gets its deletion watch (see
//!   [`crate::watch`]) only once it has been held for [`WATCH_DELAY`]. The watch starts at the
//!   key's create revision + 1, so a deletion in between is still reported (etcd replays it), only
//!   up to [`WATCH_DELAY`] later. A lock released sooner costs no watch create and no cancel: an
//!   uncontended acquire + release is exactly its two transactions.
//! - **Expiry per lock.** All keys of a session share one etcd lease, which the session keeps
//!   alive as long as it holds any lock, so etcd alone would keep an abandoned lock (a guard the
//!   watchdog no longer renews) forever. The registry remembers when each lock was last part of
//!   a successful `renew_many` (or granted); a lock not renewed for its TTL is reaped here: its
//!   lost signal fires ([`LostReason::LeaseGone`]) and its key is deleted, as etcd would have
//!   done had the lock had its own lease. The watchdog renews every third of the TTL and gives a
//!   lock up itself at `TTL - TTL/10` without a renewal, so a lock it still renews is never
//!   reaped.
//! - **Suspect keys.** A key whose creating transaction failed (timeout, lost connection) may
//!   still be created when etcd applies that transaction late. Its clean-up deletes it by name
//!   once, then hands it here: the sweeper deletes it again every quarter TTL for
//!   [`SUSPECT_CHECKS`] rounds (while its lease is the session's), so a late write never leaves
//!   a key that nobody owns (see [`crate::cleanup`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lockcore::LostReason;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cleanup::delete_in_background;
use crate::queue;
use crate::session::Session;

/// How long a lock is held before its key's deletion watch is opened.
pub(crate) const WATCH_DELAY: Duration = Duration::from_millis(100);

/// How many sweeps (a quarter TTL apart) delete a suspect key again.
pub(crate) const SUSPECT_CHECKS: u32 = 8;

/// Work for the sweeper: locks whose watch is not open yet, in grant order, and suspect keys.
#[derive(Default)]
pub(crate) struct Sweep {
    unwatched: Mutex<VecDeque<(String, i64, Instant)>>,
    /// Keys a failed request may still create: `(key, lease id, checks left)`.
    suspects: Mutex<Vec<(String, i64, u32)>>,
    wake: Arc<Notify>,
}

impl Sweep {
    fn unwatched(&self) -> MutexGuard<'_, VecDeque<(String, i64, Instant)>> {
        lock(&self.unwatched)
    }

    /// A lock `(key, create_rev)` was granted at `at`: watch its key from `at + WATCH_DELAY` on.
    pub fn granted(&self, key: &str, create_rev: i64, at: Instant) {
        let was_idle = {
            let mut q = self.unwatched();
            q.push_back((key.to_owned(), create_rev, at));
            q.len() == 1
        };
        if was_idle {
            self.wake.notify_one();
        }
    }

    /// A request that may create `key` (under lease `lease_id`) failed: delete the key again on
    /// the next [`SUSPECT_CHECKS`] sweeps, in case etcd applies the request late.
    pub fn suspect(&self, key: &str, lease_id: i64) {
        lock(&self.suspects).push((key.to_owned(), lease_id, SUSPECT_CHECKS));
        self.wake.notify_one();
    }

    /// The suspects due for another delete (counting this check), forgetting those done.
    fn take_suspect_round(&self, lease_id: Option<i64>) -> Vec<String> {
        let mut suspects = lock(&self.suspects);
        suspects.retain(|(_, lease, left)| *left > 0 && Some(*lease) == lease_id);
        suspects
            .iter_mut()
            .map(|(key, _, left)| {
                *left -= 1;
                key.clone()
            })
            .collect()
    }

    fn has_suspects(&self) -> bool {
        !lock(&self.suspects).is_empty()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the sweeper of `session`; it ends when the session is dropped.
pub(crate) fn start(session: &Arc<Session>) {
    let wake = session.sweep.wake.clone();
    tokio::spawn(run(Arc::downgrade(session), wake));
}

async fn run(session: Weak<Session>, wake: Arc<Notify>) {
    let mut next_reap: Option<Instant> = None;
    loop {
        let next = {
            let Some(s) = session.upgrade() else { return };
            let now = Instant::now();
            open_due_watches(&s, now);
            if next_reap.is_some_and(|t| t <= now) {
                reap(&s, now);
                recheck_suspects(&s);
                next_reap = None;
            }
            if next_reap.is_none() && (!s.held.is_empty() || s.sweep.has_suspects()) {
                next_reap = Some(now + s.ttl() / 4);
            }
            let next_watch = s.sweep.unwatched().front().map(|(_, _, at)| *at + WATCH_DELAY);
            match (next_watch, next_reap) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// Opens the watches of the locks held for [`WATCH_DELAY`] (skipping those already released).
fn open_due_watches(s: &Session, now: Instant) {
    loop {
        let due = {
            let mut q = s.sweep.unwatched();
            match q.front() {
                Some((_, _, at)) if *at + WATCH_DELAY <= now => q.pop_front(),
                _ => None,
            }
        };
        let Some((key, create_rev, _)) = due else { return };
        if s.held.lease_of(&key, create_rev).is_none() {
            continue; // released (or lost) before it needed a watch
        }
        let id = s.hub.watch_held(&key, create_rev);
        if !s.held.set_watch(&key, create_rev, id) {
            s.hub.cancel(id); // released meanwhile
        }
    }
}

/// Deletes the suspect keys again (one background task for all of them).
fn recheck_suspects(s: &Arc<Session>) {
    let keys = s.sweep.take_suspect_round(s.lease_id());
    if keys.is_empty() {
        return;
    }
    let session = s.clone();
    tokio::spawn(async move {
        for key in keys {
            match queue::delete(&session.conn, &key, None).await {
                Ok(true) => tracing::warn!(key, "deleted a lock key that a failed request created late"),
                Ok(false) => {}
                Err(e) => tracing::debug!(key, error = %e, "re-checking a suspect lock key failed"),
            }
        }
    });
}

/// Reaps the locks nobody renewed for their TTL.
fn reap(s: &Arc<Session>, now: Instant) {
    let Some(before) = now.checked_sub(s.ttl()) else { return };
    for (key, held) in s.held.take_unrenewed(before) {
        if held.lost.fire(LostReason::LeaseGone(format!(
            "the lock was not renewed for its TTL ({:?}); its key {key} was deleted",
            s.ttl()
        ))) {
            tracing::warn!(key, fencing_token = held.create_rev, "lock expired: nobody renewed it");
        }
        if let Some(id) = held.watch_id {
            s.hub.cancel(id);
        }
        delete_in_background(s.clone(), key, held.create_rev, held.lease_id, held.slot);
    }
}
