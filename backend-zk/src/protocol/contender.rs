//! One contender in a queue of EPHEMERAL_SEQUENTIAL nodes — a mutex's, a read-write lock's, an
//! election's, a semaphore's internal lock or its leases ([`Recipe`]): create the node, wait for
//! its turn by the one grant rule ([`locksmith_core::driver::queue::standing`]) watching one node, and
//! withdraw; whatever is left if the caller gives up or goes away is cleaned up by the contender's
//! guard ([`crate::cleanup::PendingNode`]).
//!
//! Round trips (the ZooKeeper client sends each request when the method is *called*, and the server
//! answers one session's requests in order, so requests issued back to back share one round trip):
//! - enqueue: `create` + `getChildren` (+ the `getChildren` of a [`Contender::peek`] node) sent
//!   together: **1 round trip** when the parent exists (+1 to create the missing parents, all
//!   pipelined, the first time);
//! - each wait: `getData`-with-watch on the one node [`standing`] names (1; the first wait sends
//!   one on our own node with it, see "Our own node"), the watch event, then `getChildren` behind
//!   a pipelined `sync` (1; the `sync` only on an ensemble, see [`Session::confirmed_read`]);
//! - giving up: `delete` of our node (1; sent synchronously even from `Drop`).
//!
//! **The hand-over.** On a server that runs alone, the delete event of the node we wait for is
//! taken as the listing less that node, with no request: if we stand first in it, we hold. Nodes
//! are only ever added behind ours (sequence numbers grow), so the real queue ahead of us is that
//! listing's or shorter, and the grant rule never lets fewer contenders ahead make us wait. The
//! lease counts from when the watch was sent: the server answered it on our session, so the
//! session (and our ephemeral node with it) lives at least a session timeout from then. That is
//! only so where the server that answered is the one that expires sessions, hence a server that
//! runs alone ([`Session::hands_over`]), and a watch set less than a sixth of a session timeout
//! ago (so that the lease's first renewal is not due at once), on a connection that was not lost
//! since (after a reconnection the server reports the deletions it missed in no set order: see
//! "Our own node"); otherwise the event is followed by a listing, as on an ensemble (behind a
//! `sync`).
//!
//! **Our own node.** The listing less the deleted node says nothing of our own node: one deleted
//! behind our back (an operator, a tool) while we waited would be handed the lock, while a
//! contender that queued after the deletion, behind the same node, is handed it too. So the
//! first wait watches our own node as well, in the same round trip, and a wait ends on its
//! deletion (the attempt starts over). ZooKeeper sends a session's watch events in the order of
//! the changes, and the client hands them on in that order, so a deletion of our node before the
//! one we wait for is seen first (the wait polls our node's watch first). Not across a
//! reconnection: the deletions the server missed are then reported in the order of the client's
//! `SetWatches`, so a wake-up after one lists the queue. The hand-over without a
//! listing needs that watch in place; a granted contender hands it to the held-node watch
//! ([`crate::wake::held`]), which then sends no request of its own.

use std::sync::Arc;

use futures_util::future::OptionFuture;
use locksmith_core::driver::queue::{standing, Standing};
use locksmith_core::driver::{sleep_until_deadline, Role};
use locksmith_core::LockError;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::PendingNode;
use crate::conn::session::{is_ours, node_watch, NodeWatch, Session};
use crate::error::{is_session_gone, is_transient};
use crate::layout;
use crate::protocol::recipe::Recipe;

/// How the attempt ended, when it did not get the lock.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The deadline passed.
    Timeout,
    /// The session ended, or our node vanished while we waited: start over on a (new) session.
    Restart(String),
    /// The deadline came while the server was failing (it did not answer).
    NoAnswer(String),
    /// Anything else: given to the caller.
    Fatal(zk::Error, &'static str),
    /// The request is refused (a semaphore's permit count that disagrees with its holders'); our
    /// nodes are withdrawn.
    Refused(LockError),
}

/// Our node, once the create is confirmed.
#[derive(Clone, Debug)]
pub(crate) struct OwnNode {
    /// The child name: `_c_<uuid>-lock-<seq>`, `_c_<uuid>-__READ__<seq>` ...
    pub(crate) name: String,
    /// The full path.
    pub(crate) path: String,
    /// The creation zxid: the fencing token.
    pub(crate) czxid: i64,
}

/// The contenders of a queue as one listing saw them.
#[derive(Debug)]
pub(crate) struct Listing {
    /// The contenders, in queue order.
    pub(crate) children: Vec<String>,
    /// The contenders of the [`Contender::peek`] node, listed in the same round trip (`None` if it
    /// was not listed: no peek, a missing node, or the enqueue had to retry).
    pub(crate) peeked: Option<Vec<String>>,
    /// When the listing was sent.
    pub(crate) sent: Instant,
}

/// A contender for one queue on one session. Dropping it while armed deletes its node (or, if the
/// create's answer never came, the node the create may have made): its [`PendingNode`] does.
pub(crate) struct Contender {
    session: Arc<Session>,
    recipe: Recipe,
    uuid: String,
    own: Option<OwnNode>,
    /// The clean-up of a node of ours that may exist on the server and is not handed over yet.
    pending: PendingNode,
    peek: Option<String>,
    /// The watch on our own node, once a wait set it (see "Our own node" in the module docs).
    own_watch: Option<NodeWatch>,
}

impl Drop for Contender {
    fn drop(&mut self) {
        // The clean-up's delete fires the watch; dropped before that, it would send a request.
        if let Some(watch) = self.own_watch.take() {
            self.pending.keep_until_deleted(watch);
        }
    }
}

/// The lock is ours: the node that holds it, still armed (dropping this deletes the node) until
/// the backend hands it out as a lease.
pub(crate) struct Granted {
    /// The contender that created the node; the backend disarms it.
    pub(crate) contender: Contender,
    /// The held node: its path is the lease's holder id, its czxid the fencing token.
    pub(crate) node: OwnNode,
    /// When the request that showed the grant was sent.
    pub(crate) sent: Instant,
    /// Whether the contender waited for a node ahead of it first (`Lease::waited`).
    pub(crate) waited: bool,
}

/// A fresh protected-mode id: a version-4 uuid per attempt, so that a create whose answer is lost
/// finds its node by the `_c_<uuid>-` prefix instead of orphaning it.
pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// How often a create is retried after a missing parent or a connection loss.
const CREATE_ATTEMPTS: usize = 5;

impl Contender {
    /// A contender that will create `recipe`'s node, protected by `uuid` (`_c_<uuid>-`).
    pub(crate) fn new(session: Arc<Session>, recipe: Recipe, uuid: String) -> Self {
        let pending = PendingNode::new(session.clone(), recipe.parent.clone(), uuid.clone());
        Contender {
            session,
            recipe,
            uuid,
            own: None,
            pending,
            peek: None,
            own_watch: None,
        }
    }

    /// Also lists the children of `path` in [`Contender::enqueue`]'s round trip.
    pub(crate) fn peek(&mut self, path: String) {
        self.peek = Some(path);
    }

    /// Our node, once created.
    pub(crate) fn own(&self) -> Option<&OwnNode> {
        self.own.as_ref()
    }

    /// Creates our node and lists the queue (and the peek node), pipelined: one round trip.
    pub(crate) async fn enqueue(&mut self) -> Result<Listing, Failure> {
        let client = self.session.client.clone();
        let prefix = layout::contender_prefix(&self.recipe.parent, &self.uuid, &self.recipe.base);
        for _ in 0..CREATE_ATTEMPTS {
            let sent = Instant::now();
            locksmith_core::metrics::round_trip(); // create + listings, pipelined
            self.pending.arm(); // from here on a node of ours may exist
                                // EPHEMERAL_SEQUENTIAL, with the session's ACL (see `crate::conn::session`).
            let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&self.session.acl));
            let create = client.create(&prefix, &self.recipe.data, &mode);
            let list = client.list_children(&self.recipe.parent); // pipelined: sent before create's answer
            let peek = self.peek.as_deref().map(|p| client.list_children(p));
            let peeked = async {
                match peek {
                    Some(listing) => listing.await.map(Some),
                    None => Ok(None),
                }
            };
            let (created, listed, peeked) = tokio::join!(create, list, peeked);
            // A missing peek node is no listing either: its contenders may be on their way.
            let peeked = peeked.ok().flatten().map(layout::sorted);
            match created {
                Ok((stat, sequence)) => {
                    let name = format!("{}{}{sequence}", layout::protected_marker(&self.uuid), self.recipe.base);
                    let path = layout::child_path(&self.recipe.parent, &name);
                    let czxid = if stat.is_invalid() {
                        self.czxid_of(&path).await?
                    } else {
                        stat.czxid
                    };
                    self.found(OwnNode { name, path, czxid });
                    return match listed {
                        Ok(children) => Ok(Listing {
                            children: layout::sorted(children),
                            peeked,
                            sent,
                        }),
                        Err(_) => self.list().await,
                    };
                }
                Err(zk::Error::NoNode) => {
                    // Refused: no node of ours exists (an earlier try that got no answer was
                    // looked for, in order, and not found).
                    self.pending.disarm();
                    self.create_parents().await?;
                }
                Err(e) if is_transient(&e) => {
                    // The create may have happened: look for our protected prefix (Curator's
                    // "protected mode") before creating again.
                    tracing::debug!(error = %e, "create answered with a connection error; looking for our node");
                    if let Some(node) = self.find_own().await? {
                        self.found(node);
                        return self.list().await;
                    }
                }
                Err(e) => {
                    // Refused (no permission, a bad ACL): nothing of ours to clean up. Left
                    // armed, the clean-up's own look was refused as well and kept the attempt on
                    // the session's list for ever, and `shutdown` reported it as not deleted.
                    self.pending.disarm();
                    return Err(classify(e, "creating the contender node"));
                }
            }
        }
        Err(Failure::Restart("could not create the contender node".into()))
    }

    /// Waits until our node holds by [`standing`] over the queue's roles. `listing` is the last
    /// listing. Returns our node, when the listing that showed it holding was sent, and whether it
    /// waited for a node ahead first.
    pub(crate) async fn wait_turn(
        &mut self,
        listing: Listing,
        deadline: Option<Instant>,
    ) -> Result<(OwnNode, Instant, bool), Failure> {
        let client = self.session.client.clone();
        let Listing {
            mut children, mut sent, ..
        } = listing;
        let mut waited = false;
        loop {
            let own = self
                .own
                .clone()
                .ok_or_else(|| Failure::Restart("no node of ours".into()))?;
            let Some(index) = children.iter().position(|c| *c == own.name) else {
                return Err(Failure::Restart(format!(
                    "our node {} vanished while waiting",
                    own.path
                )));
            };
            let Some(watched) = self.watched(&children, index)? else {
                return Ok((own, sent, waited));
            };
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Err(self.at_deadline());
            }
            // Watch only the node that stands in our way: its deletion is the only event that can
            // let us in (no herd). getData, not exists: on a missing node it leaves no watch behind.
            // Our own node's watch goes with it, once (both requests are sent when called).
            let blocker = layout::child_path(&self.recipe.parent, &children[watched]);
            waited = true;
            let watch_sent = Instant::now();
            let mut states = self.session.client.state_watcher();
            let own_answer: OptionFuture<_> = self
                .own_watch
                .is_none()
                .then(|| client.get_and_watch_data(&own.path))
                .into();
            let ahead = client.get_and_watch_data(&blocker);
            let (ahead, own_answer) = tokio::join!(ahead, own_answer);
            if let Some(answer) = own_answer {
                self.own_watch = self.own_watch_from(answer, &own)?;
            }
            let event = match ahead {
                Ok((_, _, watcher)) => match self.wait_for(watcher, deadline).await {
                    Woken::Ahead(event) => Some(event),
                    Woken::Own(event) if event.event_type == zk::EventType::NodeDeleted => {
                        return Err(Failure::Restart(format!(
                            "our node {} was deleted while waiting",
                            own.path
                        )));
                    }
                    Woken::Own(_) => None, // changed: list, and watch it again
                    Woken::Deadline => return Err(self.at_deadline()),
                },
                Err(zk::Error::NoNode) => None,
                Err(e) if is_transient(&e) => {
                    pause(deadline, &e).await?;
                    None
                }
                Err(e) => return Err(classify(e, "watching the node ahead")),
            };
            if event.is_some_and(|e| e.event_type == zk::EventType::NodeDeleted)
                && self.own_watch.is_some()
                && self.session.hands_over(watch_sent, &mut states)
            {
                // See "The hand-over" in the module docs: the listing less the deleted node. If we
                // do not stand first in it, the nodes still ahead in it may be gone too: list.
                children.remove(watched);
                if let Some(index) = children.iter().position(|c| *c == own.name) {
                    if self.watched(&children, index)?.is_none() {
                        return Ok((own, watch_sent, true));
                    }
                }
            }
            Listing { children, sent, .. } = self.list().await?;
        }
    }

    /// Waits for `ahead` (the watch on the node we wait for) to fire, for our own node's watch to
    /// fire (polled first: see "Our own node" in the module docs), or for the deadline.
    async fn wait_for(&mut self, ahead: zk::OneshotWatcher, deadline: Option<Instant>) -> Woken {
        let own = async {
            match self.own_watch.as_mut() {
                Some(watch) => watch.await,
                None => std::future::pending().await,
            }
        };
        let woken = tokio::select! {
            biased;
            event = own => Woken::Own(event),
            event = ahead.changed() => Woken::Ahead(event),
            () = sleep_until_deadline(deadline) => Woken::Deadline,
        };
        if matches!(woken, Woken::Own(_)) {
            self.own_watch = None; // fired
        }
        woken
    }

    /// The watch on our own node `own` from its `getData`'s `answer`: `None` if it could not be
    /// set (the hand-over then lists the queue); [`Failure::Restart`] if the node is gone or is
    /// not ours any more.
    fn own_watch_from(
        &self,
        answer: Result<(Vec<u8>, zk::Stat, zk::OneshotWatcher), zk::Error>,
        own: &OwnNode,
    ) -> Result<Option<NodeWatch>, Failure> {
        match answer {
            Ok((_, stat, watcher)) if is_ours(&stat, own.czxid, self.session.id) => Ok(Some(node_watch(watcher))),
            Ok(_) | Err(zk::Error::NoNode) => Err(Failure::Restart(format!(
                "our node {} was deleted while waiting",
                own.path
            ))),
            Err(e) => {
                tracing::debug!(node = %own.path, error = %e, "could not watch our own node; the hand-over will list the queue");
                Ok(None)
            }
        }
    }

    /// The watch on our own node a wait set, if any, for the held-node watch of a granted node.
    pub(crate) fn take_own_watch(&mut self) -> Option<NodeWatch> {
        self.own_watch.take()
    }

    /// The node our node at `index` of the queue `children` waits for, by [`standing`] over
    /// the queue's roles; `None` if it holds.
    fn watched(&self, children: &[String], index: usize) -> Result<Option<usize>, Failure> {
        let roles: Vec<Role> = children.iter().map(|c| (self.recipe.role_of)(c)).collect();
        Ok(match standing(&roles, index).map_err(Failure::Refused)? {
            Standing::Holds => None,
            Standing::After(i) => Some(i),
            // Not a role of our recipes (the semaphore counts its leases itself); the
            // predecessor is a safe node to wait for.
            Standing::AfterAny => Some(index.saturating_sub(1)),
        })
    }

    /// Why the deadline ended the wait: the lock was busy, or the server was out of reach (the
    /// client had lost its connection, so the watch could not have fired).
    pub(crate) fn at_deadline(&self) -> Failure {
        match self.session.state() {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => Failure::Timeout,
            state => Failure::NoAnswer(format!("no answer by the deadline: the session is {state}")),
        }
    }

    /// The node is handed over to a lease: dropping the contender no longer deletes it.
    pub(crate) fn disarm(&mut self) {
        self.pending.disarm();
    }

    /// Our node is `node`: the one the clean-up deletes from now on.
    fn found(&mut self, node: OwnNode) {
        self.pending.created(node.path.clone());
        self.own = Some(node);
    }

    /// Deletes our node now and waits for the answer (best effort; the guard's `Drop` retries in
    /// background).
    pub(crate) async fn withdraw(&mut self) {
        if let Some(own) = &self.own {
            locksmith_core::metrics::round_trip();
            match self.session.client.delete(&own.path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => self.pending.disarm(),
                Err(e) => tracing::debug!(node = %own.path, error = %e, "withdrawing failed; retrying in background"),
            }
        }
    }

    /// The sorted children of the queue's node, and when the request was sent. Connection errors
    /// are retried for at most twice the session timeout.
    pub(crate) async fn list(&self) -> Result<Listing, Failure> {
        let give_up = Instant::now() + self.session.timeout * 2;
        loop {
            let sent = Instant::now();
            locksmith_core::metrics::round_trip();
            let client = &self.session.client;
            let listed = || client.list_children(&self.recipe.parent);
            match self.session.confirmed_read(&self.recipe.parent, listed).await {
                Ok(children) => return Ok(listing(children, sent)),
                Err(zk::Error::NoNode) => return Ok(listing(Vec::new(), sent)),
                Err(e) if is_transient(&e) && Instant::now() < give_up => pause(None, &e).await?,
                Err(e) if is_transient(&e) => return Err(Failure::Restart(format!("listing the contenders: {e}"))),
                Err(e) => return Err(classify(e, "listing the contenders")),
            }
        }
    }

    /// [`Contender::list`] with a watch on the children (a semaphore's leases: what only the
    /// holder of its internal lock waits on).
    pub(crate) async fn list_and_watch(&self) -> Result<(Listing, zk::OneshotWatcher), Failure> {
        let give_up = Instant::now() + self.session.timeout * 2;
        loop {
            let sent = Instant::now();
            locksmith_core::metrics::round_trip();
            let client = &self.session.client;
            let listed = || client.list_and_watch_children(&self.recipe.parent);
            match self.session.confirmed_read(&self.recipe.parent, listed).await {
                Ok((children, watcher)) => return Ok((listing(children, sent), watcher)),
                Err(zk::Error::NoNode) => {
                    return Err(Failure::Restart(format!(
                        "{} vanished while waiting",
                        self.recipe.parent
                    )))
                }
                Err(e) if is_transient(&e) && Instant::now() < give_up => pause(None, &e).await?,
                Err(e) if is_transient(&e) => return Err(Failure::Restart(format!("listing the contenders: {e}"))),
                Err(e) => return Err(classify(e, "listing the contenders")),
            }
        }
    }

    async fn czxid_of(&self, path: &str) -> Result<i64, Failure> {
        locksmith_core::metrics::round_trip();
        match self.session.client.check_stat(path).await {
            Ok(Some(stat)) => Ok(stat.czxid),
            Ok(None) => Err(Failure::Restart(format!(
                "our node {path} vanished right after its creation"
            ))),
            Err(e) => Err(classify(e, "reading our node's stat")),
        }
    }

    /// Our node, if a create whose answer was lost made it.
    async fn find_own(&self) -> Result<Option<OwnNode>, Failure> {
        let marker = layout::protected_marker(&self.uuid);
        let Listing { children, .. } = self.list().await?;
        match children.into_iter().find(|c| c.starts_with(&marker)) {
            None => Ok(None),
            Some(name) => {
                let path = layout::child_path(&self.recipe.parent, &name);
                let czxid = self.czxid_of(&path).await?;
                Ok(Some(OwnNode { name, path, czxid }))
            }
        }
    }

    /// Creates the namespace and every node down to the queue's parent as containers, all
    /// requests pipelined (they are processed in order, so each parent exists before its child's
    /// create).
    async fn create_parents(&self) -> Result<(), Failure> {
        let client = &self.session.client;
        // Containers: the server deletes them once empty. With the session's ACL: only our
        // identity may delete a contender in them.
        let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&self.session.acl));
        let creates: Vec<_> = layout::ancestors_and_self(&self.recipe.parent)
            .into_iter()
            .map(|path| client.create(path, &[], &container))
            .collect();
        locksmith_core::metrics::round_trip(); // all creates pipelined
        let results = futures_join_all(creates).await;
        // The lock node itself made or there: so are its ancestors, whatever their creates
        // answered. ZooKeeper checks CREATE on a node's parent before it looks whether the node
        // exists, so an ancestor that exists under a node this identity may only read (an
        // operator's `/apps` above the namespace `/apps/billing`) answers NoAuth.
        if matches!(results.last(), Some(Ok(_) | Err(zk::Error::NodeExists))) {
            return Ok(());
        }
        for result in results {
            match result {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) if is_transient(&e) => pause(None, &e).await?,
                Err(e) => return Err(classify(e, "creating the lock node")),
            }
        }
        Ok(())
    }
}

/// What ended a wait ([`Contender::wait_for`]).
enum Woken {
    /// The watch on the node we wait for fired.
    Ahead(zk::WatchedEvent),
    /// The watch on our own node fired.
    Own(zk::WatchedEvent),
    /// The deadline passed.
    Deadline,
}

fn listing(children: Vec<String>, sent: Instant) -> Listing {
    Listing {
        children: layout::sorted(children),
        peeked: None,
        sent,
    }
}

/// Maps a client error: session loss restarts the attempt, the rest is fatal.
pub(crate) fn classify(e: zk::Error, what: &'static str) -> Failure {
    if is_session_gone(&e) {
        Failure::Restart(format!("{what}: {e}"))
    } else {
        Failure::Fatal(e, what)
    }
}

/// A short pause before retrying after the connection error `e`; `NoAnswer` if the deadline comes
/// first (the server was failing, not the lock busy).
async fn pause(deadline: Option<Instant>, e: &zk::Error) -> Result<(), Failure> {
    let until = Instant::now() + std::time::Duration::from_millis(50);
    match deadline {
        Some(d) if d <= until => {
            tokio::time::sleep_until(d).await;
            Err(Failure::NoAnswer(format!("no answer by the deadline: {e}")))
        }
        _ => {
            tokio::time::sleep_until(until).await;
            Ok(())
        }
    }
}

/// Awaits futures in order (their requests were all sent when they were created).
async fn futures_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(futures.len());
    for f in futures {
        out.push(f.await);
    }
    out
}
