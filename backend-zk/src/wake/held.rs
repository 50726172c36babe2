//! Lost detection for held locks: a one-shot data watch on every held node, so that a node deleted
//! behind the holder's back fires `lost()` without any renewal traffic per lock.
//!
//! - When a lease is granted, its path is handed to the session's watch task, which sends one
//!   `getData` with a watch on the node (the only request per lock; a watch costs nothing until it
//!   fires). A contender that waited hands over the watch it set on its own node while it waited
//!   ([`NodeWatch`], see [`crate::protocol::contender`]): no request then.
//! - `NodeDeleted` → if the lease is still held (not released by us), it is forgotten and its
//!   `lost()` fires with [`locksmith_core::LostReason::LeaseGone`]. Our own release forgets the lease
//!   *before* sending its `delete`, so the event that delete triggers is ignored — and it is also
//!   what ends the lease's watch: nothing stays behind after a release.
//! - `NodeDataChanged` (someone wrote to our node) → the watch is set again.
//! - A lost connection does not end the watch: `zookeeper-client` re-registers its watches on
//!   reconnection within the same session (`SetWatches` with the last zxid seen, sent before any
//!   other request), and the server then reports a node deleted while we were away. This is
//!   checked by `tests/reconnect.rs`.
//! - Session expiry or close ends every watch at once; the session monitor fires `lost()` then.
//!
//! One task per session, not one per lock: the watches are futures polled together
//! ([`FuturesUnordered`]), each a few hundred bytes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::conn::session::{is_ours, Granted, NodeWatch, Session};
use crate::error::{is_session_gone, is_transient};

/// How one held node's watch ended.
enum Ended {
    /// The node is gone (or is not the one we hold any more).
    Deleted,
    /// Nothing to report: the session ended (the monitor reports it), the lease was released
    /// before the watch was set, or the session was dropped.
    Quiet,
}

type Watching = Pin<Box<dyn Future<Output = (String, Ended)> + Send>>;

/// The pause before setting a watch again after a connection error.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Watches the nodes of held leases, as their paths arrive on `granted`, until the session is
/// dropped and every watch has ended.
pub(crate) async fn watch_held(session: Weak<Session>, mut granted: mpsc::UnboundedReceiver<Granted>) {
    let mut watching: FuturesUnordered<Watching> = FuturesUnordered::new();
    let mut open = true;
    while open || !watching.is_empty() {
        tokio::select! {
            path = granted.recv(), if open => match path {
                Some((path, set)) => watching.push(Box::pin(watch_node(session.clone(), path, set))),
                None => open = false,
            },
            Some((path, ended)) = watching.next(), if !watching.is_empty() => {
                if let (Ended::Deleted, Some(session)) = (ended, session.upgrade()) {
                    session.node_gone(&path);
                }
            }
        }
    }
}

/// Sets a data watch on the held node at `path` (unless `set`, one set already, is given) and
/// waits for it to fire, setting it again after a data change or a connection error, for as long
/// as the lease is held.
async fn watch_node(session: Weak<Session>, path: String, mut set: Option<NodeWatch>) -> (String, Ended) {
    loop {
        // A client clone only while the request is in flight: a watch does not keep the session.
        let (client, czxid, id) = match session.upgrade() {
            Some(s) if s.is_terminated() => return (path, Ended::Quiet),
            Some(s) => match s.held_czxid(&path) {
                Some(czxid) => (s.client.clone(), czxid, s.id),
                None => {
                    // Released (or already lost) before we got here. A watch set already is
                    // fired by the release's delete: dropped unfired, it would send a request
                    // to remove it.
                    drop(s);
                    if let Some(watch) = set {
                        watch.await;
                    }
                    return (path, Ended::Quiet);
                }
            },
            None => return (path, Ended::Quiet),
        };
        if let Some(watch) = set.take() {
            drop(client);
            match fired(&path, watch.await) {
                Some(ended) => return (path, ended),
                None => continue,
            }
        }
        let answer = client.get_and_watch_data(&path).await;
        drop(client);
        match answer {
            Ok((_, stat, watcher)) if is_ours(&stat, czxid, id) => {
                if let Some(ended) = fired(&path, watcher.changed().await) {
                    return (path, ended);
                }
            }
            Ok((_, stat, _)) => {
                tracing::warn!(node = %path, czxid = stat.czxid, owner = %format_args!("{:#x}", stat.ephemeral_owner), "the held node is not ours any more");
                return (path, Ended::Deleted);
            }
            Err(zk::Error::NoNode) => return (path, Ended::Deleted),
            Err(e) if is_session_gone(&e) => return (path, Ended::Quiet),
            Err(e) if is_transient(&e) => {
                tracing::debug!(node = %path, error = %e, "could not watch the held node yet; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => {
                tracing::warn!(node = %path, error = %e, "cannot watch the held node; its deletion will go unnoticed");
                return (path, Ended::Quiet);
            }
        }
    }
}

/// How the watch on the held node at `path` ended with `event`; `None`: it is to be set again.
fn fired(path: &str, event: zk::WatchedEvent) -> Option<Ended> {
    match event.event_type {
        zk::EventType::NodeDeleted => Some(Ended::Deleted),
        zk::EventType::Session => Some(Ended::Quiet), // terminal: the monitor reports it
        _ => {
            tracing::debug!(node = %path, event = ?event.event_type, "held node changed; watching it again");
            None
        }
    }
}
