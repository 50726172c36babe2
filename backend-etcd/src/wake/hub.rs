//! The task behind the session's [`crate::wake::watch::WatchHub`]: it owns the one watch stream, adds
//! and cancels watches on it, routes events to waiters and to the held registry, and re-opens the
//! stream when it breaks (see [`crate::wake::watch`] for what the watches are for).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Event, EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use locksmith_core::driver::retry::Backoff;
use locksmith_core::{LockError, Result};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::conn::held::HeldRegistry;
use crate::conn::Stats;
use crate::error::timed;

/// What a waiter watch has seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WaitState {
    /// Not created on the server yet.
    Pending,
    /// Created: events from now on are reported.
    Created,
    /// The event waited for happened.
    Fired,
    /// The watch ended without it (stream lost, cancelled by the server).
    Broken(String),
}

/// Which events fire a waiter watch.
pub(crate) enum Wanted {
    /// A DELETE of the key.
    Delete,
    /// A DELETE of the key or a PUT to it.
    DeleteOrPut,
    /// A DELETE of one of these keys (of a prefix watch).
    DeleteOf(HashSet<Vec<u8>>),
}

impl Wanted {
    fn fires(&self, event: &Event) -> bool {
        match (self, event.event_type()) {
            (Wanted::Delete, EventType::Delete) | (Wanted::DeleteOrPut, _) => true,
            (Wanted::DeleteOf(keys), EventType::Delete) => event.kv().is_some_and(|kv| keys.contains(kv.key())),
            _ => false,
        }
    }

    fn puts(&self) -> bool {
        matches!(self, Wanted::DeleteOrPut)
    }
}

pub(crate) enum Kind {
    Waiter {
        state: watch::Sender<WaitState>,
        wanted: Wanted,
    },
    Held {
        create_rev: i64,
    },
}

/// One watch: a key (or, with `prefix`, every key under it) from `start_rev` (0: now).
pub(crate) struct Entry {
    pub key: Vec<u8>,
    pub prefix: bool,
    pub start_rev: i64,
    pub kind: Kind,
}

impl Entry {
    fn options(&self, id: i64) -> WatchOptions {
        let puts = matches!(&self.kind, Kind::Waiter { wanted, .. } if wanted.puts());
        let mut options = WatchOptions::new()
            .with_watch_id(id)
            .with_start_revision(self.start_rev);
        if !puts {
            options = options.with_filters([WatchFilterType::NoPut]);
        }
        if self.prefix {
            options = options.with_prefix();
        }
        options
    }
}

/// What is left to do for a watch once the responses at hand are applied ([`Hub::apply`]).
enum After {
    /// Cancel it on the server.
    Cancel(i64),
    /// Its history was compacted: read the held key instead ([`recheck_held`]).
    Recheck { key: Vec<u8>, create_rev: i64 },
}

pub(crate) enum Cmd {
    Add(i64, Entry),
    Cancel(i64),
    /// Watch the held key again from `from` under a new id, if the lock `(key, create_rev)` is
    /// still held ([`recheck_held`]): etcd keeps a watch it cancelled as compacted until the
    /// client cancels it, so its id would be refused as a duplicate.
    Rewatch {
        key: Vec<u8>,
        create_rev: i64,
        from: i64,
    },
}

/// Starts the hub task; it ends when every sender of the returned channel is dropped.
pub(crate) fn start(
    client: Client,
    held: Arc<HeldRegistry>,
    ids: Arc<AtomicI64>,
    request_timeout: Duration,
    stats: Arc<Stats>,
) -> mpsc::UnboundedSender<Cmd> {
    let (tx, rx) = mpsc::unbounded_channel();
    let hub = Hub {
        entries: HashMap::new(),
        stream: None,
        client,
        held,
        myself: tx.downgrade(),
        ids,
        request_timeout,
        stats,
    };
    tokio::spawn(run(rx, hub));
    tx
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
    /// The watch ids of this stream, shared with [`crate::wake::watch::WatchHub`].
    ids: Arc<AtomicI64>,
    request_timeout: Duration,
    stats: Arc<Stats>,
}

/// The pause before opening the watch stream again after a failed try: 50 ms, doubling to 1 s.
const REOPEN_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

async fn run(mut rx: mpsc::UnboundedReceiver<Cmd>, mut hub: Hub) {
    let mut retry_at: Option<Instant> = None;
    let mut delays = REOPEN_BACKOFF.delays();
    loop {
        if hub.stream.is_none() && !hub.entries.is_empty() && retry_at.is_none_or(|t| Instant::now() >= t) {
            match hub.open().await {
                Ok(()) => {
                    retry_at = None;
                    delays.reset();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "opening the etcd watch stream failed; retrying");
                    hub.broken(&e.to_string());
                    retry_at = Some(Instant::now() + delays.next_delay());
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
            _ = locksmith_core::driver::sleep_until_deadline(retry) => {}
        }
    }
}

async fn next_message(stream: &mut Option<Stream>) -> std::result::Result<Option<WatchResponse>, etcd_client::Error> {
    match stream {
        Some(s) => s.responses.message().await,
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
            Cmd::Add(id, entry) => self.add(id, entry).await,
            Cmd::Rewatch { key, create_rev, from } => {
                let id = self.ids.fetch_add(1, Ordering::Relaxed);
                let key_str = String::from_utf8_lossy(&key).into_owned();
                // Released or lost meanwhile: nothing to watch. Otherwise a release from now on
                // cancels the new id, and its Cancel comes after this command.
                if self.held.set_watch(&key_str, create_rev, id) {
                    let entry = Entry {
                        key,
                        prefix: false,
                        start_rev: from.saturating_add(1),
                        kind: Kind::Held { create_rev },
                    };
                    self.add(id, entry).await;
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

    /// Watches `entry` under `id` (on the stream once there is one).
    async fn add(&mut self, id: i64, entry: Entry) {
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

    /// Applies `resp`, and every response already received after it, before any waiter it woke
    /// runs: the deletions of one transaction (an operator's `del --prefix`) come as separate
    /// responses of one revision, in no set order, and a waiter woken by one must find the others
    /// applied (its own key's deletion: see `protocol::exclusive`). Then the cancels.
    async fn response(&mut self, resp: WatchResponse) {
        let mut after = Vec::new();
        let mut fired = self.apply(resp, &mut after);
        while let Some(resp) = self.received() {
            fired |= self.apply(resp, &mut after);
        }
        if fired {
            // The waiter runs before the cancel is written: that write wakes the connection's
            // task, which would otherwise run first (tokio runs the task woken last first) and
            // hold up the grant by a socket write.
            tokio::task::yield_now().await;
        }
        for then in after {
            match then {
                After::Cancel(id) => self.cancel_on_server(id).await,
                After::Recheck { key, create_rev } => {
                    tokio::spawn(recheck_held(
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

    /// A response the stream has received already, if any (without waiting: one poll, after
    /// which the run loop polls the stream again with its own waker).
    fn received(&mut self) -> Option<WatchResponse> {
        let message = {
            let stream = self.stream.as_mut()?;
            let message = std::pin::pin!(stream.responses.message());
            match message.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
                std::task::Poll::Ready(message) => message,
                std::task::Poll::Pending => return None,
            }
        };
        match message {
            Ok(Some(resp)) => Some(resp),
            Ok(None) => {
                self.lost_stream("the watch stream ended");
                None
            }
            Err(e) => {
                self.lost_stream(&e.to_string());
                None
            }
        }
    }

    /// Applies `resp` to its watch: a waiter's state, a held lock's loss; a watch that has done
    /// its job is forgotten, and what is left to do on the server goes on `after`. `true` if a
    /// waiter's event fired.
    fn apply(&mut self, resp: WatchResponse, after: &mut Vec<After>) -> bool {
        let id = resp.watch_id();
        let deleted = resp.events().iter().any(|e| e.event_type() == EventType::Delete);
        let Some(entry) = self.entries.get(&id) else {
            return false;
        };
        match &entry.kind {
            Kind::Waiter { state, wanted } => {
                let fired = resp.events().iter().any(|e| wanted.fires(e));
                if fired {
                    state.send_replace(WaitState::Fired);
                } else if resp.canceled() {
                    state.send_replace(WaitState::Broken(format!("watch cancelled: {}", resp.cancel_reason())));
                } else if resp.created() {
                    state.send_replace(WaitState::Created);
                }
                if fired || resp.canceled() {
                    self.entries.remove(&id);
                    if !resp.canceled() {
                        after.push(After::Cancel(id));
                    }
                }
                fired
            }
            Kind::Held { create_rev } => {
                let create_rev = *create_rev;
                if deleted {
                    let key = String::from_utf8_lossy(&entry.key).into_owned();
                    self.held.deleted(&key, create_rev);
                    self.entries.remove(&id);
                    after.push(After::Cancel(id));
                } else if resp.canceled() {
                    // Typically: the history from create_rev + 1 was compacted. Look at the key,
                    // and free the old id on the server (it keeps a compacted watch until then).
                    let key = entry.key.clone();
                    self.entries.remove(&id);
                    after.push(After::Cancel(id));
                    after.push(After::Recheck { key, create_rev });
                }
                false
            }
        }
    }

    /// Cancels watch `id` on the server, which would keep it until the stream closes.
    async fn cancel_on_server(&mut self, id: i64) {
        if let Some(s) = self.stream.as_mut() {
            self.stats.watch_requests.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = s.sender.cancel(id).await {
                self.lost_stream(&e.to_string());
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
            Kind::Waiter { state, .. } => {
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
                let _ = hub.send(Cmd::Rewatch { key, create_rev, from });
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, key = key_str, "re-checking a held key failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}
