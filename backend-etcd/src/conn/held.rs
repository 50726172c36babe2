//! The locks a session holds right now, by key, with the lost signal of each.
//!
//! Entries leave the registry when the lock is released, when the hub sees the key deleted, when
//! the session's lease is found gone, or when the lock was not renewed for its TTL (its guard was
//! abandoned: see [`crate::conn::sweep`]); all but the first fire the lost signal.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use locksmith_core::driver::LostSignal;
use locksmith_core::LostReason;
use tokio::time::Instant;

use crate::protocol::slots::Slot;

/// One held lock.
pub(crate) struct Held {
    /// The session lease the key is attached to.
    pub lease_id: i64,
    /// The key's create revision (the fencing token).
    pub create_rev: i64,
    /// Fired when the lock is lost.
    pub lost: LostSignal,
    /// The hub watch that reports the key's deletion, once it was opened (see [`crate::conn::sweep`]).
    pub watch_id: Option<i64>,
    /// When the lock was last renewed: the send time of the last keep-alive of a `renew_many`
    /// that included it (or its `acquired_at`). A lock not renewed for its TTL is reaped.
    pub renewed_at: Instant,
    /// The in-process slot of the Go layout, held as long as the key exists.
    pub slot: Option<Slot>,
}

/// All held locks of one session.
#[derive(Default)]
pub(crate) struct HeldRegistry {
    map: Mutex<HashMap<String, Held>>,
}

impl HeldRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert(&self, key: String, held: Held) {
        self.lock().insert(key, held);
    }

    /// Removes and returns the entry of `key` if it is the holder with `create_rev`.
    pub fn take(&self, key: &str, create_rev: i64) -> Option<Held> {
        let mut map = self.lock();
        if map.get(key).is_some_and(|h| h.create_rev == create_rev) {
            map.remove(key)
        } else {
            None
        }
    }

    /// The session lease of the holder `key` with `create_rev`, if we still hold it.
    pub fn lease_of(&self, key: &str, create_rev: i64) -> Option<i64> {
        self.lock()
            .get(key)
            .filter(|h| h.create_rev == create_rev)
            .map(|h| h.lease_id)
    }

    /// Marks the locks `(key, create_rev)` that we still hold as renewed at `sent` (one lock of
    /// the registry for the whole batch).
    pub fn renewed<'a>(&self, locks: impl Iterator<Item = (&'a str, i64)>, sent: Instant) {
        let mut map = self.lock();
        for (key, create_rev) in locks {
            if let Some(h) = map.get_mut(key).filter(|h| h.create_rev == create_rev) {
                h.renewed_at = h.renewed_at.max(sent);
            }
        }
    }

    /// Gives the held watch `watch_id` to the lock `(key, create_rev)`; `false` if it is no
    /// longer held (the caller cancels the watch).
    pub fn set_watch(&self, key: &str, create_rev: i64, watch_id: i64) -> bool {
        match self.lock().get_mut(key).filter(|h| h.create_rev == create_rev) {
            Some(h) => {
                h.watch_id = Some(watch_id);
                true
            }
            None => false,
        }
    }

    /// Removes the locks last renewed at or before `before`: nobody renews them any more.
    pub fn take_unrenewed(&self, before: Instant) -> Vec<(String, Held)> {
        let mut map = self.lock();
        let keys: Vec<String> = map
            .iter()
            .filter(|(_, h)| h.renewed_at <= before)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| map.remove(&k).map(|h| (k, h)))
            .collect()
    }

    /// Whether no lock is held.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The key was deleted on the server: the lock is lost. Returns the watch id to cancel.
    pub fn deleted(&self, key: &str, create_rev: i64) -> Option<i64> {
        let held = self.take(key, create_rev)?;
        if held.lost.fire(LostReason::LeaseGone(format!(
            "the key {key} was deleted on the server"
        ))) {
            tracing::warn!(key, fencing_token = create_rev, "lock lost: its key was deleted");
        }
        held.watch_id
    }

    /// The session lease is gone: every lock attached to it is lost. Returns their watch ids.
    pub fn lease_gone(&self, lease_id: i64, why: &str) -> Vec<i64> {
        let gone: Vec<(String, Held)> = {
            let mut map = self.lock();
            let keys: Vec<String> = map
                .iter()
                .filter(|(_, h)| h.lease_id == lease_id)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| map.remove(&k).map(|h| (k, h)))
                .collect()
        };
        gone.into_iter()
            .filter_map(|(key, held)| {
                if held.lost.fire(LostReason::LeaseGone(format!(
                    "the session lease {lease_id:x} is gone: {why}"
                ))) {
                    tracing::warn!(
                        key,
                        fencing_token = held.create_rev,
                        "lock lost: its session lease is gone"
                    );
                }
                held.watch_id
            })
            .collect()
    }
}
