//! The session's sweeper task: opens held-key watches late, reaps locks nobody renewed for their
//! TTL, and deletes suspect keys again (the work and its reasons are described in
//! [`crate::conn::sweep`], whose queues the session owns).

use std::sync::{Arc, Weak};

use locksmith_core::LostReason;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cleanup::delete_in_background;
use crate::conn::session::Session;
use crate::conn::sweep::WATCH_DELAY;
use crate::protocol::requests;

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

/// Deletes the suspect keys again (one background task for all of them). A Go-layout key is
/// deleted only under its lock's slot, taken here: when an attempt of this session holds the slot,
/// the key is that attempt's (created by it, or the late create it found and took as its own), and
/// this round leaves it alone.
fn recheck_suspects(s: &Arc<Session>) {
    let mut keys = Vec::new();
    for (key, slot_prefix) in s.sweep.take_suspect_round(s.lease_id()) {
        match slot_prefix {
            None => keys.push((key, None)),
            Some(prefix) => match s.slots.try_take(&prefix) {
                Some(slot) => keys.push((key, Some(slot))),
                None => tracing::debug!(key, "a suspect lock key's name is in use by an attempt; not deleted"),
            },
        }
    }
    if keys.is_empty() {
        return;
    }
    let session = s.clone();
    tokio::spawn(async move {
        for (key, slot) in keys {
            match requests::delete(&session.conn, &key, None).await {
                Ok(true) => tracing::warn!(key, "deleted a lock key that a failed request created late"),
                Ok(false) => {}
                Err(e) => tracing::debug!(key, error = %e, "re-checking a suspect lock key failed"),
            }
            drop(slot);
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
