//! The watch hub: one etcd watch stream per session, shared by every watch the backend needs.
//!
//! Two kinds of watches live on it, both for DELETE events of one key:
//! - **waiter** watches, on a waiter's predecessor, opened *without* a start revision: the
//!   server creates them as synced watchers at its current revision, so the delete event is sent
//!   as soon as it is applied. (A watch with a start revision in the past is "unsynced": the
//!   server catches such watchers up in a loop that runs every 100 ms, which delays the event by
//!   up to 100 ms.) The waiter confirms the predecessor still exists *after* the watch is
//!   created, so no delete can fall between the check and the watch.
//! - **held** watches, on each held key, from the key's create revision + 1, so a deletion is
//!   seen even if it happened before the watch reached the server; such a watch is unsynced for
//!   its first moments, which only delays a loss report by at most 100 ms. They cost nothing
//!   while nothing happens: no traffic per tick, whatever the number of held locks.
//!
//! When the stream breaks (member down, failover), waiter watches report "broken" (the waiter
//! re-checks and watches again) and held watches are re-created on a new stream from their
//! create revision + 1, so no deletion in between is missed. If that history was compacted, the
//! hub reads the key instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use lockcore::{LockError, Result};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::conn::Stats;
use crate::error::timed;
use crate::held::HeldRegistry;

/// What a waiter watch has seen.
#[derive(Clone, Debug, PartialEq, Eq)]
enum WaitState {
    Pending,
    Created,
    Deleted,
    Broken(String),
}

enum Kind {
    Waiter(watch::Sender<WaitState>),
    Held { create_rev: i64 },
}

struct Entry {
    key: Vec<u8>,
    start_rev: i64,
    kind: Kind,
}

impl Entry {
    fn options(&self, id: i64) -> WatchOptions {
        WatchOptions::new()
            .with_watch_id(id)
            .with_start_revision(self.start_rev)
            .with_filters([WatchFilterType::NoPut])
    }
}

enum Cmd {
    Add(i64, Entry),
    Cancel(i64),
}

/// Handle to the hub task of one session.
pub(crate) struct WatchHub {
    tx: mpsc::UnboundedSender<Cmd>,
    next_id: AtomicI64,
    request_timeout: Duration,
}

/// A created watch on a waiter's predecessor; cancelled on drop.
pub(crate) struct DeleteWatch {
    id: i64,
    rx: watch::Receiver<WaitState>,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl Drop for DeleteWatch {
    fn drop(&mut self) {
        let _ = self.tx.send(Cmd::Cancel(self.id));
    }
}

impl DeleteWatch {
    /// Resolves when the key is deleted (`Ok`) or the watch broke (`Err` with the reason), after
    /// which the caller must look at the queue again.
    pub async fn deleted(&mut self) -> std::result::Result<(), String> {
        match self
            .rx
            .wait_for(|s| matches!(s, WaitState::Deleted | WaitState::Broken(_)))
            .await
        {
            Ok(s) if *s == WaitState::Deleted => Ok(()),
            Ok(s) => Err(format!("{:?}", *s)),
            Err(_) => Err("the watch hub stopped".into()),
        }
    }
}

impl WatchHub {
    /// Starts the hub task; it ends when the hub is dropped.
    pub fn new(client: Client, held: Arc<HeldRegistry>, request_timeout: Duration, stats: Arc<Stats>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let hub = Hub {
            entries: HashMap::new(),
            stream: None,
            client,
            held,
            myself: tx.downgrade(),
            request_timeout,
            stats,
        };
        tokio::spawn(run(rx, hub));
        WatchHub {
            tx,
            next_id: AtomicI64::new(1),
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
    pub async fn watch_delete(&self, key: &[u8]) -> Result<DeleteWatch> {
        let (state, rx) = watch::channel(WaitState::Pending);
        let id = self.add(Entry {
            key: key.to_vec(),
            start_rev: 0,
            kind: Kind::Waiter(state),
        });
        let mut w = DeleteWatch {
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
                message: format!("watching the predecessor: {why}"),
                source: None,
            }),
        }
    }

    /// Watches a held key for its deletion from `create_rev + 1` on; a deletion fires the lock's
    /// lost signal through the held registry. Returns the id for [`WatchHub::cancel`].
    pub fn watch_held(&self, key: &str, create_rev: i64) -> i64 {
        self.add(Entry {
            key: key.as_bytes().to_vec(),
            start_rev: create_rev + 1,
            kind: Kind::Held { create_rev },
        })
    }

    /// Stops a watch (no-op if it already ended).
    pub fn cancel(&self, id: i64) {
        let _ = self.tx.send(Cmd::Cancel(id));
    }
}

struct Stream {
    sender: WatchRequestSender,
    responses: WatchResponseStream,
}

struct Hub {
    entries: HashMap<i64, Entry>,
    stream: Option<Stream>,
    client: Client,
    held: Arc<HeldRegistry>,
    myself: mpsc::WeakUnboundedSender<Cmd>,
    request_timeout: Duration,
    stats: Arc<Stats>,
}

async fn run(mut rx: mpsc::UnboundedReceiver<Cmd>, mut hub: Hub) {
    let mut retry_at: Option<Instant> = None;
    let mut backoff = Duration::from_millis(50);
    loop {
        if hub.stream.is_none() && !hub.entries.is_empty() && retry_at.is_none_or(|t| Instant::now() >= t) {
            match hub.open().await {
                Ok(()) => {
                    retry_at = None;
                    backoff = Duration::from_millis(50);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "opening the etcd watch stream failed; retrying");
                    hub.broken(&e.to_string());
                    retry_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        let retry = retry_at.filter(|_| hub.stream.is_none() && !hub.entries.is_empty());
        tokio::select! {
            cmd = rx.recv() => match cmd {
                None => return,
                Some(cmd) => hub.command(cmd).await,
            },
            msg = next_message(&mut hub.stream) => match msg {
                Ok(Some(resp)) => hub.response(resp).await,
                Ok(None) => hub.lost_stream("the watch stream ended"),
                Err(e) => hub.lost_stream(&e.to_string()),
            },
            _ = sleep_until_opt(retry) => {}
        }
    }
}

async fn next_message(stream: &mut Option<Stream>) -> std::result::Result<Option<WatchResponse>, etcd_client::Error> {
    match stream {
        Some(s) => s.responses.message().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Hub {
    /// Opens a stream carrying every current entry.
    async fn open(&mut self) -> Result<()> {
        let mut ids: Vec<i64> = self.entries.keys().copied().collect();
        ids.sort_unstable();
        let Some((&first, rest)) = ids.split_first() else {
            return Ok(());
        };
        let Some(entry) = self.entries.get(&first) else {
            return Ok(());
        };
        let mut watch = self.client.watch_client();
        self.stats.watch_requests.fetch_add(ids.len() as u64, Ordering::Relaxed);
        let stream = timed(
            "opening a watch stream",
            self.request_timeout,
            watch.watch(entry.key.clone(), Some(entry.options(first))),
        )
        .await?;
        let (mut sender, responses) = stream.split();
        for id in rest {
            if let Some(e) = self.entries.get(id) {
                let sent = sender.watch(e.key.clone(), Some(e.options(*id))).await;
                sent.map_err(|e| LockError::unavailable("adding a watch", e))?;
            }
        }
        self.stream = Some(Stream { sender, responses });
        Ok(())
    }

    async fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Add(id, entry) => {
                let request = self.stream.as_mut().map(|s| (s, entry.key.clone(), entry.options(id)));
                if request.is_some() {
                    self.stats.watch_requests.fetch_add(1, Ordering::Relaxed);
                }
                let sent = match request {
                    Some((s, key, options)) => Some(s.sender.watch(key, Some(options)).await),
                    None => None,
                };
                self.entries.insert(id, entry);
                if let Some(Err(e)) = sent {
                    self.lost_stream(&e.to_string());
                }
            }
            Cmd::Cancel(id) => {
                if self.entries.remove(&id).is_some() {
                    if let Some(s) = self.stream.as_mut() {
                        self.stats.watch_requests.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = s.sender.cancel(id).await {
                            self.lost_stream(&e.to_string());
                        }
                    }
                }
            }
        }
    }

    async fn response(&mut self, resp: WatchResponse) {
        let id = resp.watch_id();
        let deleted = resp.events().iter().any(|e| e.event_type() == EventType::Delete);
        let Some(entry) = self.entries.get(&id) else { return };
        match &entry.kind {
            Kind::Waiter(state) => {
                if deleted {
                    state.send_replace(WaitState::Deleted);
                } else if resp.canceled() {
                    state.send_replace(WaitState::Broken(format!("watch cancelled: {}", resp.cancel_reason())));
                } else if resp.created() {
                    state.send_replace(WaitState::Created);
                }
                if deleted || resp.canceled() {
                    self.finish(id, resp.canceled()).await;
                }
            }
            Kind::Held { create_rev } => {
                let create_rev = *create_rev;
                if deleted {
                    let key = String::from_utf8_lossy(&entry.key).into_owned();
                    self.held.deleted(&key, create_rev);
                    self.finish(id, false).await;
                } else if resp.canceled() {
                    // Typically: the history from create_rev + 1 was compacted. Look at the key.
                    let key = entry.key.clone();
                    self.entries.remove(&id);
                    tokio::spawn(recheck_held(
                        id,
                        self.client.clone(),
                        self.held.clone(),
                        self.myself.clone(),
                        key,
                        create_rev,
                        self.request_timeout,
                    ));
                }
            }
        }
    }

    /// Forgets a watch that has done its job, cancelling it on the server unless it already was.
    async fn finish(&mut self, id: i64, server_cancelled: bool) {
        self.entries.remove(&id);
        if !server_cancelled {
            if let Some(s) = self.stream.as_mut() {
                self.stats.watch_requests.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = s.sender.cancel(id).await {
                    self.lost_stream(&e.to_string());
                }
            }
        }
    }

    fn lost_stream(&mut self, why: &str) {
        if self.stream.take().is_some() {
            tracing::debug!(
                why,
                "etcd watch stream lost; waiters re-check, held keys are watched again"
            );
        }
        self.broken(why);
    }

    /// Tells every waiter watch that it will see nothing more, and forgets it.
    fn broken(&mut self, why: &str) {
        self.entries.retain(|_, e| match &e.kind {
            Kind::Waiter(state) => {
                state.send_replace(WaitState::Broken(why.to_owned()));
                false
            }
            Kind::Held { .. } => true,
        });
    }
}

/// After a held watch was cancelled by the server: the lock is lost if its key is gone,
/// otherwise it is watched again from the current revision.
async fn recheck_held(
    id: i64,
    mut client: Client,
    held: Arc<HeldRegistry>,
    hub: mpsc::WeakUnboundedSender<Cmd>,
    key: Vec<u8>,
    create_rev: i64,
    limit: Duration,
) {
    let key_str = String::from_utf8_lossy(&key).into_owned();
    loop {
        if held.lease_of(&key_str, create_rev).is_none() {
            return; // released or lost meanwhile
        }
        match timed("checking a held key", limit, client.get(key.clone(), None)).await {
            Ok(resp) => {
                let exists = resp.kvs().first().is_some_and(|kv| kv.create_revision() == create_rev);
                if !exists {
                    held.deleted(&key_str, create_rev);
                    return;
                }
                let from = resp.header().map_or(create_rev, |h| h.revision());
                let Some(hub) = hub.upgrade() else { return };
                // The server cancelled the old watch, so its id is free again: the registry's
                // watch id stays valid.
                let entry = Entry {
                    key,
                    start_rev: from + 1,
                    kind: Kind::Held { create_rev },
                };
                let _ = hub.send(Cmd::Add(id, entry));
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, key = key_str, "re-checking a held key failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}
