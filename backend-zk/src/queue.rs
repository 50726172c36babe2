//! One contender in a lock's queue: create the EPHEMERAL_SEQUENTIAL node, wait for the
//! predecessor to go, and clean up whatever is left if the caller gives up or goes away.
//!
//! Round trips (the ZooKeeper client sends each request when the method is *called*, and the server
//! answers one session's requests in order, so requests issued back to back share one round trip):
//! - enqueue: `create` + `getChildren` sent together: **1 round trip** when the lock node exists
//!   (+1 to create the missing namespace/lock nodes, all pipelined, the first time);
//! - each wait: `getData`-with-watch on the predecessor (1), the watch event, then `getChildren` (1);
//! - giving up: `delete` of our node (1; sent synchronously even from `Drop`).

use std::sync::Arc;

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{is_session_gone, is_transient};
use crate::layout;
use crate::session::Session;

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
}

/// Our node, once the create is confirmed.
#[derive(Clone, Debug)]
pub(crate) struct OwnNode {
    /// The child name: `_c_<uuid>-lock-<seq>`.
    pub(crate) name: String,
    /// The full path.
    pub(crate) path: String,
    /// The creation zxid: the fencing token.
    pub(crate) czxid: i64,
}

/// The lock is ours: our node is first in line.
pub(crate) struct Granted {
    pub(crate) node: OwnNode,
    /// When the request that showed us first was sent.
    pub(crate) sent: Instant,
}

/// A contender for one lock on one session. Dropping it while [`Contender::armed`] deletes its
/// node (or, if the create's answer never came, the node the create may have made).
pub(crate) struct Contender {
    session: Arc<Session>,
    lock_path: String,
    uuid: String,
    own: Option<OwnNode>,
    /// Whether a node of ours may exist on the server and is not handed over yet.
    armed: bool,
}

/// How often a create is retried after a missing parent or a connection loss.
const CREATE_ATTEMPTS: usize = 5;

impl Contender {
    pub(crate) fn new(session: Arc<Session>, lock_path: String) -> Self {
        Contender {
            session,
            lock_path,
            uuid: uuid::Uuid::new_v4().to_string(),
            own: None,
            armed: false,
        }
    }

    /// Creates our node and lists the lock's contenders, pipelined (one round trip). Returns them
    /// in queue order, and when the listing was sent.
    pub(crate) async fn enqueue(&mut self) -> Result<(Vec<String>, Instant), Failure> {
        let client = self.session.client.clone();
        let prefix = layout::contender_prefix(&self.lock_path, &self.uuid);
        let data = format!("locksmith pid={}", std::process::id());
        for _ in 0..CREATE_ATTEMPTS {
            let sent = Instant::now();
            self.armed = true; // from here on a node of ours may exist
                               // EPHEMERAL_SEQUENTIAL, with the session's ACL (see `crate::session`).
            let contender = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&self.session.acl));
            let create = client.create(&prefix, data.as_bytes(), &contender);
            let list = client.list_children(&self.lock_path); // pipelined: sent before create's answer
            let (created, listed) = tokio::join!(create, list);
            match created {
                Ok((stat, sequence)) => {
                    let name = format!(
                        "{}{}{sequence}",
                        layout::protected_marker(&self.uuid),
                        layout::LOCK_NAME
                    );
                    let path = layout::child_path(&self.lock_path, &name);
                    let czxid = if stat.is_invalid() {
                        self.czxid_of(&path).await?
                    } else {
                        stat.czxid
                    };
                    self.own = Some(OwnNode { name, path, czxid });
                    return match listed {
                        Ok(children) => Ok((layout::sorted(children), sent)),
                        Err(_) => self.list().await,
                    };
                }
                Err(zk::Error::NoNode) => self.create_parents().await?,
                Err(e) if is_transient(&e) => {
                    // The create may have happened: look for our protected prefix (Curator's
                    // "protected mode") before creating again.
                    tracing::debug!(error = %e, "create answered with a connection error; looking for our node");
                    if let Some(node) = self.find_own().await? {
                        self.own = Some(node);
                        return self.list().await;
                    }
                }
                Err(e) => return Err(classify(e, "creating the contender node")),
            }
        }
        Err(Failure::Restart("could not create the contender node".into()))
    }

    /// Waits until our node is first. `children`/`sent` are the last listing and when it was sent.
    pub(crate) async fn wait_turn(
        &mut self,
        mut children: Vec<String>,
        mut sent: Instant,
        deadline: Option<Instant>,
    ) -> Result<Granted, Failure> {
        let client = self.session.client.clone();
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
            if index == 0 {
                return Ok(Granted { node: own, sent });
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Err(self.at_deadline());
            }
            // Watch only the node right before ours: its deletion is the only event that can make
            // us first (no herd). getData, not exists: on a missing node it leaves no watch behind.
            let predecessor = layout::child_path(&self.lock_path, &children[index - 1]);
            match client.get_and_watch_data(&predecessor).await {
                Ok((_, _, watcher)) => match deadline {
                    Some(d) => tokio::select! {
                        _ = watcher.changed() => {}
                        _ = tokio::time::sleep_until(d) => return Err(self.at_deadline()),
                    },
                    None => {
                        watcher.changed().await;
                    }
                },
                Err(zk::Error::NoNode) => {}
                Err(e) if is_transient(&e) => pause(deadline, &e).await?,
                Err(e) => return Err(classify(e, "watching the predecessor")),
            }
            (children, sent) = self.list().await?;
        }
    }

    /// Why the deadline ended the wait: the lock was busy, or the server was out of reach (the
    /// client had lost its connection, so the watch could not have fired).
    fn at_deadline(&self) -> Failure {
        match self.session.state() {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => Failure::Timeout,
            state => Failure::NoAnswer(format!("no answer by the deadline: the session is {state}")),
        }
    }

    /// The lock is handed over to a lease: dropping the contender no longer deletes the node.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes our node now and waits for the answer (best effort; `Drop` retries in background).
    pub(crate) async fn withdraw(&mut self) {
        if let Some(own) = &self.own {
            match self.session.client.delete(&own.path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => self.armed = false,
                Err(e) => tracing::debug!(node = %own.path, error = %e, "withdrawing failed; retrying in background"),
            }
        }
    }

    /// The sorted children of the lock node, and when the request was sent.
    /// Connection errors are retried for at most twice the session timeout.
    async fn list(&self) -> Result<(Vec<String>, Instant), Failure> {
        let give_up = Instant::now() + self.session.timeout * 2;
        loop {
            let sent = Instant::now();
            match self.session.client.list_children(&self.lock_path).await {
                Ok(children) => return Ok((layout::sorted(children), sent)),
                Err(zk::Error::NoNode) => return Ok((Vec::new(), sent)),
                Err(e) if is_transient(&e) && Instant::now() < give_up => pause(None, &e).await?,
                Err(e) if is_transient(&e) => return Err(Failure::Restart(format!("listing the contenders: {e}"))),
                Err(e) => return Err(classify(e, "listing the lock's contenders")),
            }
        }
    }

    async fn czxid_of(&self, path: &str) -> Result<i64, Failure> {
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
        let (children, _) = self.list().await?;
        match children.into_iter().find(|c| c.starts_with(&marker)) {
            None => Ok(None),
            Some(name) => {
                let path = layout::child_path(&self.lock_path, &name);
                let czxid = self.czxid_of(&path).await?;
                Ok(Some(OwnNode { name, path, czxid }))
            }
        }
    }

    /// Creates the namespace and lock nodes as containers, all requests pipelined (they are
    /// processed in order, so each parent exists before its child's create).
    async fn create_parents(&self) -> Result<(), Failure> {
        let client = &self.session.client;
        // Containers: the server deletes them once empty. With the session's ACL: only our
        // identity may delete a contender in them.
        let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&self.session.acl));
        let creates: Vec<_> = layout::ancestors_and_self(&self.lock_path)
            .into_iter()
            .map(|path| client.create(path, &[], &container))
            .collect();
        for result in futures_join_all(creates).await {
            match result {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) if is_transient(&e) => pause(None, &e).await?,
                Err(e) => return Err(classify(e, "creating the lock node")),
            }
        }
        Ok(())
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.session.client.clone();
        match &self.own {
            Some(own) => {
                // The request is sent right here; the task only waits for the answer.
                let delete = client.delete(&own.path, None);
                let path = own.path.clone();
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        match delete.await {
                            Ok(()) | Err(zk::Error::NoNode) => tracing::debug!(node = %path, "withdrew from the queue"),
                            Err(e) => tracing::warn!(node = %path, error = %e, "could not withdraw; the node goes with the session"),
                        }
                    });
                }
            }
            None => {
                // The create was sent but its answer not seen: find the node by its protected
                // prefix. The listing is processed after the create (same session, in order).
                let (lock_path, marker) = (self.lock_path.clone(), layout::protected_marker(&self.uuid));
                let list = client.get_children(&lock_path); // sent now, answered after the create
                let Ok(handle) = tokio::runtime::Handle::try_current() else {
                    tracing::warn!(lock = %lock_path, "cancelled outside a runtime; a queued node may stay until the session ends");
                    return;
                };
                handle.spawn(async move {
                    let children = match list.await {
                        Ok((children, _)) => children,
                        Err(zk::Error::NoNode) => return,
                        Err(e) => {
                            tracing::warn!(lock = %lock_path, error = %e, "could not look for a cancelled node");
                            return;
                        }
                    };
                    for child in children.iter().filter(|c| c.starts_with(&marker)) {
                        let path = layout::child_path(&lock_path, child);
                        if let Err(e) = client.delete(&path, None).await {
                            tracing::debug!(node = %path, error = %e, "could not delete a cancelled node");
                        }
                    }
                });
            }
        }
    }
}

/// Maps a client error: session loss restarts the attempt, the rest is fatal.
fn classify(e: zk::Error, what: &'static str) -> Failure {
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
