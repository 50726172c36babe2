//! The clean-up guards: what is left on the server when a caller gives up or goes away, and
//! whose `Drop` hands its deletion to [`locksmith_core::driver::cleanup::spawn`] (so the call that
//! dropped it, and `Locker::shutdown`, wait for it) or to the session's monitor.
//!
//! - [`PendingNode`]: a contender's node nobody holds yet (an attempt cancelled or ended without
//!   the lock); owned by [`crate::protocol::contender::Contender`].
//! - [`Unanswered`]: a release whose `delete` is not answered yet.

use std::sync::{Arc, Weak};

use locksmith_core::driver::armed::{Armed, CleanUp, CleanupTask};
use locksmith_core::driver::Lease;
use zookeeper_client as zk;

use crate::conn::leftover::{delete_protected, Leftover};
use crate::conn::session::{NodeWatch, Session};
use crate::error::is_session_gone;
use crate::layout;

/// A node of ours in a queue that no caller holds. Dropping it while armed deletes the node (or,
/// if the create's answer never came, the node the create may have made, found by its protected
/// prefix `_c_<uuid>-`).
pub(crate) struct PendingNode(Armed<Node>);

/// What a [`PendingNode`] deletes.
struct Node {
    session: Arc<Session>,
    /// The queue's node: the parent of its contenders.
    parent: String,
    /// The protected-mode id of the attempt.
    uuid: String,
    /// Our node's path, once its create is confirmed.
    path: Option<String>,
    /// A watch on our node, kept until the node's delete is answered: its event has fired it
    /// then (ZooKeeper sends it first), where dropping it unfired would send a request to remove
    /// it.
    watch: Option<NodeWatch>,
}

impl PendingNode {
    /// The guard of an attempt that will create a node under `parent`, protected by `uuid`;
    /// disarmed until [`PendingNode::arm`].
    pub(crate) fn new(session: Arc<Session>, parent: String, uuid: String) -> Self {
        PendingNode(Armed::disarmed(Node {
            session,
            parent,
            uuid,
            path: None,
            watch: None,
        }))
    }

    /// Keeps `watch`, a watch on our node, until the node's delete is answered (see the field).
    pub(crate) fn keep_until_deleted(&mut self, watch: NodeWatch) {
        self.0.watch = Some(watch);
    }

    /// A node of ours may exist from here on (its create is about to be sent).
    pub(crate) fn arm(&mut self) {
        self.0.arm();
    }

    /// The create is confirmed: the node at `path` is the one to delete.
    pub(crate) fn created(&mut self, path: String) {
        self.0.path = Some(path);
    }

    /// The node is gone or handed over to a lease: dropping the guard no longer deletes it.
    pub(crate) fn disarm(&mut self) {
        self.0.disarm();
    }
}

impl CleanUp for Node {
    fn task(&mut self) -> Option<CleanupTask> {
        let (client, session) = (self.session.client.clone(), Arc::downgrade(&self.session));
        match &self.path {
            Some(own) => {
                // The request is sent right here; the task only waits for the answer.
                let delete = client.delete(own, None);
                let (path, watch) = (own.clone(), self.watch.take());
                // Counted by locksmith-core (locksmith_core::driver::cleanup): the call that dropped the contender,
                // and Locker::shutdown, wait for the answer.
                Some(Box::pin(async move {
                    let deleted = delete.await;
                    drop(watch);
                    match deleted {
                        Ok(()) | Err(zk::Error::NoNode) => tracing::debug!(node = %path, "withdrew from the queue"),
                        Err(e) => remove_later(&session, Leftover::Node(path), &e),
                    }
                }))
            }
            None => {
                // The create was sent but its answer not seen: find the node by its protected
                // prefix. The listing is processed after the create (same session, in order).
                let (parent, marker) = (self.parent.clone(), layout::protected_marker(&self.uuid));
                let list = client.get_children(&parent); // sent now, answered after the create
                Some(Box::pin(async move {
                    let left = match list.await {
                        Ok((children, _)) => delete_protected(&client, &parent, &marker, &children).await,
                        Err(zk::Error::NoNode) => return,
                        // A connection loss fails the listing too, and the session (and so the
                        // node) may live on: the monitor looks again once connected.
                        Err(e) => Some((Leftover::Created { parent, marker }, e)),
                    };
                    if let Some((leftover, e)) = left {
                        remove_later(&session, leftover, &e);
                    }
                }))
            }
        }
    }

    fn unspawned(&mut self) {
        if self.path.is_none() {
            tracing::warn!(queue = %self.parent, "cancelled outside a runtime; a queued node may stay until the session ends");
        }
    }
}

/// A withdrawal that failed: the session's monitor retries it while the session lives.
fn remove_later(session: &Weak<Session>, leftover: Leftover, e: &zk::Error) {
    match session.upgrade() {
        Some(session) if !is_session_gone(e) => {
            tracing::debug!(?leftover, error = %e, "could not withdraw yet; the session monitor retries");
            session.remove_later(leftover);
        }
        _ => tracing::debug!(?leftover, error = %e, "could not withdraw; the node goes with the session"),
    }
}

/// A release whose delete is not answered yet: dropped armed (the release was cancelled), it has
/// the session's monitor delete the node as soon as it can (a shared [`Armed`] guard whose
/// clean-up registers the node with the monitor there and then, and spawns nothing).
pub(crate) struct Unanswered<'a>(Armed<Unreleased<'a>>);

/// The node of a release in flight, and the session whose monitor deletes it.
struct Unreleased<'a> {
    session: &'a Arc<Session>,
    lease: &'a Lease,
}

impl CleanUp for Unreleased<'_> {
    fn task(&mut self) -> Option<CleanupTask> {
        tracing::debug!(node = %self.lease.holder_id, "release cancelled before ZooKeeper answered; the session monitor deletes the node");
        self.session.register_for_removal(self.lease);
        None
    }
}

impl<'a> Unanswered<'a> {
    /// The guard of `lease`'s release on `session`; it does nothing unless `armed`.
    pub(crate) fn new(session: &'a Arc<Session>, lease: &'a Lease, armed: bool) -> Self {
        let node = Unreleased { session, lease };
        Unanswered(if armed { Armed::new(node) } else { Armed::disarmed(node) })
    }

    /// The delete was answered: dropping the guard does nothing.
    pub(crate) fn disarm(mut self) {
        self.0.disarm();
    }
}
