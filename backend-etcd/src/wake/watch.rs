//! The watch hub: one etcd watch stream per session, shared by every watch the backend needs.
//! This module is its handle ([`WatchHub`]) and the waiter's side of a watch ([`Wakeup`]); the
//! task that owns the stream is in [`crate::wake::hub`].
//!
//! Two kinds of watches live on it:
//! - **waiter** watches, opened *without* a start revision: the server creates them as synced
//!   watchers at its current revision, so an event is sent as soon as it is applied. (A watch
//!   with a start revision in the past is "unsynced": the server catches such watchers up in a
//!   loop that runs every 100 ms, which delays the event by up to 100 ms.) The waiter confirms
//!   its standing *after* the watch is created, so no event can fall between the check and the
//!   watch. A waiter watches one key for its DELETE (a mutex waiter's predecessor, a reader's
//!   writer ahead), one key for its DELETE or a PUT (a semaphore waiter's predecessor, which
//!   touches its key when it becomes a holder), or a lock's whole prefix for the DELETE of any
//!   of the keys ahead of it (a semaphore's first waiter); each fires once. A mutex waiter right
//!   behind the holder, which takes the lock on its predecessor's deletion without a look at the
//!   queue, watches its own key's DELETE as well (see `protocol::exclusive`).
//! - **held** watches, on each held key, from the key's create revision + 1, so a deletion is
//!   seen even if it happened before the watch reached the server; such a watch is unsynced for
//!   its first moments, which only delays a loss report by at most 100 ms. They cost nothing
//!   while nothing happens: no traffic per tick, whatever the number of held locks.
//!
//! When the stream breaks (member down, failover), waiter watches report "broken" (the waiter
//! re-checks and watches again) and held watches are re-created on a new stream from their
//! create revision + 1, so no deletion in between is missed. If that history was compacted, the
//! hub reads the key instead.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use locksmith_core::{LockError, Result};
use tokio::sync::{mpsc, watch};

use crate::conn::held::HeldRegistry;
use crate::conn::Stats;
use crate::wake::hub::{Cmd, Entry, Kind, WaitState, Wanted};

/// Handle to the hub task of one session.
pub(crate) struct WatchHub {
    tx: mpsc::UnboundedSender<Cmd>,
    next_id: Arc<AtomicI64>,
    request_timeout: Duration,
}

/// A created waiter watch; cancelled on drop.
pub(crate) struct Wakeup {
    id: i64,
    rx: watch::Receiver<WaitState>,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        let _ = self.tx.send(Cmd::Cancel(self.id));
    }
}

impl Wakeup {
    /// Resolves when the event waited for happened (`Ok`) or the watch broke (`Err` with the
    /// reason), after which the caller must look at the queue again.
    pub async fn fired(&mut self) -> std::result::Result<(), String> {
        match self
            .rx
            .wait_for(|s| matches!(s, WaitState::Fired | WaitState::Broken(_)))
            .await
        {
            Ok(s) if *s == WaitState::Fired => Ok(()),
            Ok(s) => Err(format!("{:?}", *s)),
            Err(_) => Err("the watch hub stopped".into()),
        }
    }
}

impl WatchHub {
    /// Starts the hub task; it ends when the hub is dropped.
    pub fn new(client: Client, held: Arc<HeldRegistry>, request_timeout: Duration, stats: Arc<Stats>) -> Self {
        let next_id = Arc::new(AtomicI64::new(1));
        let tx = crate::wake::hub::start(client, held, next_id.clone(), request_timeout, stats);
        WatchHub {
            tx,
            next_id,
            request_timeout,
        }
    }

    fn add(&self, entry: Entry) -> i64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Cmd::Add(id, entry));
        id
    }

    /// Watches for the deletion of `key` from now on; returns once the server created the (synced)
    /// watch, so that a later read of the key cannot miss its deletion.
    pub async fn watch_delete(&self, key: &[u8]) -> Result<Wakeup> {
        self.watch_waiter(key, false, Wanted::Delete).await
    }

    /// Watches for the deletion of `key` or a put to it (a touch), from now on (see
    /// [`WatchHub::watch_delete`]).
    pub async fn watch_touch(&self, key: &[u8]) -> Result<Wakeup> {
        self.watch_waiter(key, false, Wanted::DeleteOrPut).await
    }

    /// Watches the keys under `prefix` for the deletion of any of `keys`, from now on (see
    /// [`WatchHub::watch_delete`]).
    pub async fn watch_any_deleted(&self, prefix: &str, keys: Vec<Vec<u8>>) -> Result<Wakeup> {
        let keys: HashSet<Vec<u8>> = keys.into_iter().collect();
        self.watch_waiter(prefix.as_bytes(), true, Wanted::DeleteOf(keys)).await
    }

    async fn watch_waiter(&self, key: &[u8], prefix: bool, wanted: Wanted) -> Result<Wakeup> {
        let (state, rx) = watch::channel(WaitState::Pending);
        let id = self.add(Entry {
            key: key.to_vec(),
            prefix,
            start_rev: 0,
            kind: Kind::Waiter { state, wanted },
        });
        let mut w = Wakeup {
            id,
            rx,
            tx: self.tx.clone(),
        };
        let broken = match tokio::time::timeout(self.request_timeout, w.rx.wait_for(|s| *s != WaitState::Pending)).await
        {
            Ok(Ok(s)) => match &*s {
                WaitState::Broken(why) => Some(why.clone()),
                _ => None,
            },
            Ok(Err(_)) => Some("the watch hub stopped".into()),
            Err(_) => Some(format!("no watch created within {:?}", self.request_timeout)),
        };
        match broken {
            None => Ok(w),
            Some(why) => Err(LockError::Unavailable {
                message: format!("watching the queue: {why}"),
                source: None,
            }),
        }
    }

    /// Watches a held key for its deletion from `create_rev + 1` on; a deletion fires the lock's
    /// lost signal through the held registry. Returns the id for [`WatchHub::cancel`].
    pub fn watch_held(&self, key: &str, create_rev: i64) -> i64 {
        self.add(Entry {
            key: key.as_bytes().to_vec(),
            prefix: false,
            start_rev: create_rev.saturating_add(1),
            kind: Kind::Held { create_rev },
        })
    }

    /// Stops a watch (no-op if it already ended).
    pub fn cancel(&self, id: i64) {
        let _ = self.tx.send(Cmd::Cancel(id));
    }

    /// Cancels watch `id` when the returned guard is dropped.
    pub fn cancel_on_drop(&self, id: i64) -> CancelOnDrop<'_> {
        CancelOnDrop { hub: self, id }
    }
}

/// Cancels a watch of the hub when dropped (see [`WatchHub::cancel_on_drop`]).
pub(crate) struct CancelOnDrop<'a> {
    hub: &'a WatchHub,
    id: i64,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        self.hub.cancel(self.id);
    }
}
