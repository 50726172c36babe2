//! The work of the session's sweeper ([`crate::conn::sweeper`]): ONE background task per session, on
//! one timer, that does deferred per-lock work so that none of it costs a task or a request per
//! lock on the critical path. This module holds the queues of that work, which the session owns;
//! the task itself is in [`crate::conn::sweeper`].
//!
//! - **Held-key watches, opened late.** A granted lock's key gets its deletion watch (see
//!   [`crate::wake::watch`]) only once it has been held for [`WATCH_DELAY`]. The watch starts at the
//!   key's create revision + 1, so a deletion in between is still reported (etcd replays it), only
//!   up to [`WATCH_DELAY`] later. A lock released sooner costs no watch create and no cancel: an
//!   uncontended acquire + release is exactly its two transactions.
//! - **Expiry per lock.** All keys of a session share one etcd lease, which the session keeps
//!   alive as long as it holds any lock, so etcd alone would keep an abandoned lock (a guard the
//!   watchdog no longer renews) forever. The registry remembers when each lock was last part of
//!   a successful `renew_many` (or granted); a lock not renewed for its TTL is reaped here: its
//!   lost signal fires (`LostReason::LeaseGone`) and its key is deleted, as etcd would have
//!   done had the lock had its own lease. The watchdog renews every third of the TTL and gives a
//!   lock up itself at `TTL - TTL/10` without a renewal, so a lock it still renews is never
//!   reaped.
//! - **Suspect keys.** A key whose creating transaction failed (timeout, lost connection) may
//!   still be created when etcd applies that transaction late. Its clean-up deletes it by name
//!   once, then hands it here: the sweeper deletes it again every quarter TTL for
//!   [`SUSPECT_CHECKS`] rounds (while its lease is the session's), so a late write never leaves
//!   a key that nobody owns (see [`crate::cleanup`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a lock is held before its key's deletion watch is opened.
pub(crate) const WATCH_DELAY: Duration = Duration::from_millis(100);

/// How many sweeps (a quarter TTL apart) delete a suspect key again.
pub(crate) const SUSPECT_CHECKS: u32 = 8;

/// Work for the sweeper: locks whose watch is not open yet, in grant order, and suspect keys.
#[derive(Default)]
pub(crate) struct Sweep {
    unwatched: Mutex<VecDeque<(String, i64, Instant)>>,
    /// Keys a failed request may still create.
    suspects: Mutex<Vec<Suspect>>,
    pub(crate) wake: Arc<Notify>,
}

impl Sweep {
    pub(crate) fn unwatched(&self) -> MutexGuard<'_, VecDeque<(String, i64, Instant)>> {
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
    /// the next [`SUSPECT_CHECKS`] sweeps, in case etcd applies the request late. `slot_prefix`:
    /// the Go layout's slot of the key's lock (see [`Suspect::slot_prefix`]).
    pub fn suspect(&self, key: &str, lease_id: i64, slot_prefix: Option<String>) {
        lock(&self.suspects).push(Suspect {
            key: key.to_owned(),
            slot_prefix,
            lease_id,
            checks_left: SUSPECT_CHECKS,
        });
        self.wake.notify_one();
    }

    /// The suspects due for another delete (counting this check) as `(key, slot prefix)`,
    /// forgetting those done.
    pub(crate) fn take_suspect_round(&self, lease_id: Option<i64>) -> Vec<(String, Option<String>)> {
        let mut suspects = lock(&self.suspects);
        suspects.retain(|s| s.checks_left > 0 && Some(s.lease_id) == lease_id);
        suspects
            .iter_mut()
            .map(|s| {
                s.checks_left -= 1;
                (s.key.clone(), s.slot_prefix.clone())
            })
            .collect()
    }

    pub(crate) fn has_suspects(&self) -> bool {
        !lock(&self.suspects).is_empty()
    }
}

/// A key that a failed request may still create.
struct Suspect {
    key: String,
    /// The Go layout reuses a key name for the next attempt of the session on the same lock, which
    /// takes the lock's slot first: the sweeper deletes the key only while it holds that slot
    /// itself (a key created under the slot by someone else is that attempt's own). `None` in the
    /// default layout, whose key number stays out of use instead.
    slot_prefix: Option<String>,
    lease_id: i64,
    checks_left: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
