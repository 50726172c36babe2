//! One ZooKeeper session: the client, the leases held through it, a monitor task that turns
//! session events into `lost()` signals and reaps leases nobody renews any more, and a watch task
//! that notices held nodes deleted behind our back ([`crate::wake::held`]).
//!
//! The session *is* the lease: the client's heartbeats keep it alive, and every contender node it
//! created is ephemeral, so the server deletes them all when the session expires. The registry of
//! held leases exists for what the server cannot know:
//! - which leases to declare lost when the session ends (monitor, at once);
//! - which leases to declare lost when their node is deleted (watch task), and which deletions are
//!   our own releases (forgotten before the `delete` is sent: no `lost()`);
//! - which leases were abandoned while the process and its session live on (a guard forgotten
//!   with `abandon()`, a watchdog that stopped): a lease not renewed within its TTL is deleted by
//!   the monitor, as the server would delete it if the process had died.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use locksmith_core::driver::{Lease, LockName, LostSignal};
use locksmith_core::{LockError, LostReason, Result};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::conn::leftover::Leftover;

/// A connected ZooKeeper session and the leases held through it.
pub(crate) struct Session {
    /// The client; clones share the session.
    pub(crate) client: zk::Client,
    /// The server's session id (the `ephemeralOwner` of our nodes).
    pub(crate) id: i64,
    /// The session timeout the server granted: the effective TTL of every lease.
    pub(crate) timeout: Duration,
    /// The ACL of every node this session creates (see [`acl`]).
    pub(crate) acl: Vec<zk::Acl>,
    /// The connect string names one server, and it runs alone (see [`runs_alone`]): its reads
    /// are the state of the server that expires sessions, so [`Session::confirmed_read`] sends
    /// no `sync` before them.
    standalone: bool,
    held: Mutex<HashMap<String, Held>>,
    /// Nodes of ours that must go but whose `delete` failed (a withdrawal during a connection
    /// loss, a semaphore's internal lock after the grant): the monitor retries them.
    leftovers: Mutex<Vec<Leftover>>,
    /// Newly held nodes, for the watch task.
    granted: mpsc::UnboundedSender<Granted>,
}

/// A data watch set on one of our nodes (its `getData` answered with our czxid and session), not
/// fired yet: what a waiting contender hands over with the node it is granted.
pub(crate) type NodeWatch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send + Sync>>;

/// The watch `watcher` as a [`NodeWatch`].
pub(crate) fn node_watch(watcher: zk::OneshotWatcher) -> NodeWatch {
    Box::pin(watcher.changed())
}

/// Whether the node whose stat is `stat` is the one we created (creation zxid `czxid`) on the
/// session `session`: not one made again under the same path since.
pub(crate) fn is_ours(stat: &zk::Stat, czxid: i64, session: i64) -> bool {
    stat.czxid == czxid && stat.ephemeral_owner == session
}

/// A node just granted, for the watch task: its path, and the watch already set on it, if any.
pub(crate) type Granted = (String, Option<NodeWatch>);

/// A lease held through this session, keyed by its node path.
struct Held {
    name: LockName,
    czxid: i64,
    lost: LostSignal,
    /// When the monitor deletes the node unless a renewal moves this on.
    expires: Instant,
    /// Released by its holder but not deleted yet: the monitor deletes it without firing `lost()`.
    released: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &format_args!("{:#x}", self.id))
            .field("timeout", &self.timeout)
            .field("state", &self.state())
            .finish()
    }
}

impl Session {
    /// Establishes a new session, giving up with [`LockError::Unavailable`] after the connect
    /// timeout, and starts its monitor task. The paths of the leases it grants arrive on the
    /// returned receiver, for the caller's watch task ([`crate::wake::held::watch_held`]).
    pub(crate) async fn connect(config: &ZkConfig) -> Result<(Arc<Session>, mpsc::UnboundedReceiver<Granted>)> {
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        if let Some(auth) = &config.digest_auth {
            connector = connector.with_auth("digest", auth);
        }
        let what = format!("connecting to ZooKeeper at {}", config.connect_string);
        // The client keeps TLS failures to itself: a handshake of our own names one that no
        // retry changes (`tls_check`), instead of waiting out the connect timeout.
        let attempt = async {
            let connecting = connect_until_answered(connector, config);
            match &config.tls {
                None => Ok(connecting.await),
                Some(tls) => {
                    let delay = (config.connect_timeout / 4).min(Duration::from_millis(500));
                    tokio::select! {
                        answer = connecting => Ok(answer),
                        refused = tls_refused(tls, &config.connect_string, &what, delay) => Err(refused),
                    }
                }
            }
        };
        let client = match tokio::time::timeout(config.connect_timeout, attempt).await {
            Ok(Err(refused)) => return Err(refused),
            Ok(Ok(answer)) => match answer {
            Ok(client) => client,
            Err(zk::Error::BadArguments(reason)) => {
                return Err(LockError::InvalidUrl {
                    url: config.connect_string.clone(),
                    reason: reason.to_string(),
                })
            }
            Err(zk::Error::AuthFailed) => {
                return Err(LockError::Denied(format!("{what}: the server refused the credentials")))
            }
            Err(e) => return Err(LockError::unavailable(what, e)),
            },
            Err(_) => {
                return Err(LockError::Unavailable {
                    message: format!(
                        "{what}: no server established a session within connect_timeout={:?} (unreachable, or accepting connections without answering)",
                        config.connect_timeout
                    ),
                    source: None,
                })
            }
        };
        let standalone = !config.connect_string.contains(',') && runs_alone(&client, config.request_timeout).await;
        let (granted, granted_paths) = mpsc::unbounded_channel();
        let session = Arc::new(Session {
            acl: acl(config),
            standalone,
            id: client.session_id().0,
            timeout: client.session_timeout(),
            held: Mutex::new(HashMap::new()),
            leftovers: Mutex::new(Vec::new()),
            granted,
            client,
        });
        tracing::info!(session = %format_args!("{:#x}", session.id), timeout = ?session.timeout, standalone, "ZooKeeper session established");
        tokio::spawn(monitor(Arc::downgrade(&session), session.client.state_watcher()));
        Ok((session, granted_paths))
    }

    /// `read`'s answer, given only after the server that expires sessions (the leader of an
    /// ensemble) has heard of this session since `read` was called: the session was alive there
    /// then, or the read fails. A server that runs alone is that server, so `read` goes alone;
    /// otherwise a `sync` of `path` goes first, pipelined (one round trip: the client sends each
    /// request as it is made, and the server answers a session's requests in order). `sync` goes
    /// through the leader, so the read behind it reflects the leader's state when the sync reached
    /// it. Without it, a follower cut off from the quorum answers from its own stale state for
    /// `syncLimit` ticks: a contender whose session the leader side had already expired (its node
    /// deleted, the lock granted to the next in line) found itself first in that stale listing
    /// and was granted too, with the older token (the fault suite's `net-partition` on
    /// zk/ensemble, an election: a term that went backwards; `tests/cut_off_follower.rs`).
    pub(crate) async fn confirmed_read<T, F>(
        &self,
        path: &str,
        read: impl FnOnce() -> F,
    ) -> std::result::Result<T, zk::Error>
    where
        F: std::future::Future<Output = std::result::Result<T, zk::Error>>,
    {
        if self.standalone {
            return read().await;
        }
        let sync = self.client.sync(path);
        let (synced, answer) = tokio::join!(sync, read());
        synced.and(answer)
    }

    /// Whether a waiter may take the delete event of the node ahead of it as the next listing,
    /// with its lease counted from `watch_sent`, when its watch request was sent (see "The
    /// hand-over" in [`crate::protocol::contender`]): only on a server that runs alone, which
    /// expires sessions itself, so its answer to the watch shows the session alive there; and
    /// only while less than a sixth of the session timeout has passed since, so the lease starts
    /// with most of its time left and its first renewal (due a third of the timeout after
    /// `watch_sent`) is not due at once. A waiter that waited longer lists the queue: one request
    /// either way, and this one on the way to the grant rather than right after it.
    ///
    /// And only if the connection was not lost since (`states`, taken when the watch was sent, saw
    /// no change of the session's state): the client sets its watches again when it reconnects
    /// (`SetWatches`), and the server then reports the deletions it missed in the order the client
    /// listed its watches, not in the order they happened. The deletion of our own node could come
    /// after the one of the node ahead, and a listing would have shown it gone.
    pub(crate) fn hands_over(&self, watch_sent: Instant, states: &mut zk::StateWatcher) -> bool {
        let reconnected = states.changed().now_or_never().is_some();
        self.standalone && watch_sent.elapsed() < self.timeout / 6 && !reconnected
    }

    /// The client's view of the session state.
    pub(crate) fn state(&self) -> zk::SessionState {
        self.client.state()
    }

    /// True once the session can never be used again (expired, closed, auth failed).
    pub(crate) fn is_terminated(&self) -> bool {
        self.state().is_terminated()
    }

    fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts tracking a lease just obtained through this session, and watching its node (with
    /// `watch`, when one is set on it already).
    pub(crate) fn register(&self, lease: &Lease, czxid: i64, watch: Option<NodeWatch>) {
        let held = Held {
            name: lease.name.clone(),
            czxid,
            lost: lease.lost.clone(),
            expires: lease.acquired_at + lease.ttl,
            released: false,
        };
        self.held().insert(lease.holder_id.clone(), held);
        if self.granted.send((lease.holder_id.clone(), watch)).is_err() {
            // Only when the watch task is gone, which it is not while the session lives.
            tracing::warn!(node = %lease.holder_id, "cannot watch the held node; its deletion will go unnoticed");
        }
    }

    /// Hands a released lease whose delete failed to the monitor, which retries it at once.
    pub(crate) fn register_for_removal(&self, lease: &Lease) {
        let held = Held {
            name: lease.name.clone(),
            czxid: i64::try_from(lease.fencing_token).unwrap_or(-1),
            lost: lease.lost.clone(),
            expires: Instant::now(),
            released: true,
        };
        self.held().insert(lease.holder_id.clone(), held);
    }

    /// Has the monitor delete `leftover`, a node of ours that nobody holds (a withdrawal that
    /// failed), as soon as it can while the session lives.
    pub(crate) fn remove_later(&self, leftover: Leftover) {
        self.leftovers.lock().unwrap_or_else(|e| e.into_inner()).push(leftover);
    }

    /// Deletes the nodes handed to [`Session::remove_later`]; those that fail again stay for the
    /// next round.
    async fn delete_leftovers(&self) {
        let due = std::mem::take(&mut *self.leftovers.lock().unwrap_or_else(|e| e.into_inner()));
        for leftover in due {
            match leftover.remove(&self.client).await {
                None => tracing::debug!("deleted a leftover node"),
                Some((leftover, e)) => {
                    tracing::debug!(?leftover, error = %e, "could not delete a leftover node yet");
                    self.remove_later(leftover);
                }
            }
        }
    }

    /// For `Locker::shutdown`: deletes every node this session still has — leftovers of failed
    /// withdrawals, releases whose delete failed, locks still registered — each within `limit`.
    /// `Ok` when none is left. What it could not delete (no answer, an error, or this call dropped
    /// by its caller's bound) goes back to the leftovers: the monitor deletes it as soon as
    /// ZooKeeper answers again, for as long as the session lives.
    pub(crate) async fn delete_everything(&self, limit: std::time::Duration) -> Result<()> {
        let mut nodes = std::mem::take(&mut *self.leftovers.lock().unwrap_or_else(|e| e.into_inner()));
        nodes.extend(self.held().drain().map(|(path, held)| {
            held.lost.fire(locksmith_core::LostReason::Shutdown);
            Leftover::Node(path)
        }));
        let mut pending = PutBack { session: self, nodes };
        let mut failed = 0;
        // Each node leaves `pending` only once its delete has ended.
        while let Some(node) = pending.nodes.last().cloned() {
            locksmith_core::metrics::round_trip();
            let what = format!("{node:?}");
            let result = tokio::time::timeout(limit, node.clone().remove(&self.client)).await;
            pending.nodes.pop();
            match result {
                Ok(None) => tracing::debug!(node = what, "deleted at shutdown"),
                Ok(Some((left, e))) => {
                    failed += 1;
                    tracing::warn!(node = what, error = %e, "could not delete a node at shutdown; the session's monitor retries it");
                    self.remove_later(left);
                }
                Err(_) => {
                    failed += 1;
                    tracing::warn!(
                        node = what,
                        "no answer deleting a node at shutdown; the session's monitor retries it"
                    );
                    self.remove_later(node);
                }
            }
        }
        if failed > 0 {
            return Err(LockError::Unavailable {
                message: format!(
                    "{failed} ZooKeeper node(s) could not be deleted at shutdown; they are deleted as soon as ZooKeeper answers again, or go when the session ends"
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// The creation zxid of the held node at `path`, if this session holds it.
    pub(crate) fn held_czxid(&self, path: &str) -> Option<i64> {
        self.held().get(path).filter(|h| !h.released).map(|h| h.czxid)
    }

    /// Records that the leases at `paths` were confirmed by a request sent at `sent`: each one
    /// that is still held (not released, not lost meanwhile) keeps its node until `sent + TTL` at
    /// least. Returns, per path, whether it is still held.
    pub(crate) fn renewed<'a>(&self, paths: impl IntoIterator<Item = &'a str>, sent: Instant) -> Vec<bool> {
        let mut held = self.held();
        paths
            .into_iter()
            .map(|path| match held.get_mut(path) {
                Some(h) if !h.released => {
                    h.expires = h.expires.max(sent + self.timeout);
                    true
                }
                _ => false,
            })
            .collect()
    }

    /// The held node at `path` is gone from the server: unless we released it ourselves, its lease
    /// is lost.
    pub(crate) fn node_gone(&self, path: &str) {
        let Some(held) = self.held().remove(path) else { return };
        if !held.released
            && held.lost.fire(LostReason::LeaseGone(format!(
                "the lock node {path} was deleted on the server"
            )))
        {
            tracing::warn!(lock = %held.name, node = %path, "lock lost: its node was deleted behind our back");
        }
    }

    /// Stops tracking the lease at `path` (released or gone); true if it was tracked.
    pub(crate) fn forget(&self, path: &str) -> bool {
        self.held().remove(path).is_some()
    }

    /// Fires `lost()` of every tracked lease and forgets them all.
    fn lose_all(&self, why: &str) {
        let all: Vec<(String, Held)> = self.held().drain().collect();
        for (path, held) in all {
            if !held.released && held.lost.fire(LostReason::LeaseGone(why.to_owned())) {
                tracing::warn!(lock = %held.name, node = %path, reason = why, "lock lost");
            }
        }
    }

    /// Deletes the nodes of leases nobody renewed within their TTL, firing their `lost()` first.
    async fn reap_abandoned(&self) {
        let now = Instant::now();
        // Marked released, so that the watch event of the delete below does not fire lost() again.
        let due: Vec<(String, LockName, LostSignal, bool)> = self
            .held()
            .iter_mut()
            .filter(|(_, h)| h.expires <= now)
            .map(|(path, h)| {
                let was_released = std::mem::replace(&mut h.released, true);
                (path.clone(), h.name.clone(), h.lost.clone(), was_released)
            })
            .collect();
        for (path, name, lost, released) in due {
            if !released
                && lost.fire(LostReason::LeaseGone(
                    "not renewed within its TTL; deleted by the backend".into(),
                ))
            {
                tracing::warn!(lock = %name, node = %path, "lease not renewed within its TTL (abandoned?): deleting its node");
            }
            match self.client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    self.forget(&path);
                }
                // Kept: the next round tries again, unless the session ends first.
                Err(e) => tracing::debug!(node = %path, error = %e, "could not delete an abandoned lease yet"),
            }
        }
    }
}

/// Whether the server `client` is connected to runs alone, not as a member of an ensemble: its
/// configuration node (`/zookeeper/config`, ZooKeeper 3.5 and later) is empty. A member of an
/// ensemble lists the ensemble's servers there, whether or not dynamic reconfiguration is on.
/// Anything else (an older server without the node, a read refused, no answer within `limit`)
/// counts as an ensemble: the safe side, which only costs a `sync` per confirmed read.
async fn runs_alone(client: &zk::Client, limit: Duration) -> bool {
    match tokio::time::timeout(limit, client.get_config()).await {
        Ok(Ok((config, _))) => config.is_empty(),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cannot read the server's configuration; taking it for an ensemble member");
            false
        }
        Err(_) => false,
    }
}

/// The ACL of the nodes a session creates: with credentials, all permissions for its own
/// identity (ZooKeeper's `auth` scheme: whoever authenticated as it) and the `admin`, if named,
/// and nothing for anyone else — so no other client can delete a contender (which needs DELETE on
/// its lock node) and break the lock. Without credentials the nodes are open, like Curator's
/// default; the server then enforces nothing.
fn acl(config: &ZkConfig) -> Vec<zk::Acl> {
    if config.digest_auth.is_none() {
        return zk::Acls::anyone_all().iter().cloned().collect();
    }
    let mut acl: Vec<zk::Acl> = zk::Acls::creator_all().iter().cloned().collect();
    if let Some(admin) = &config.admin {
        acl.push(zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", admin)));
    }
    acl
}

/// Establishes a session with `connector`, starting over each time the client gives up with
/// `Timeout`: it tries only until the session timeout has passed since it began (its deadline for
/// a first session), so without this a URL whose `session_timeout` is shorter than its
/// `connect_timeout` would give up early (a server slow to answer on a busy machine, the new
/// leader of an ensemble still syncing). Every other error is the answer. The caller bounds the
/// whole by `connect_timeout`; each attempt lasts a session timeout, so this never spins.
async fn connect_until_answered(
    connector: zk::Connector,
    config: &ZkConfig,
) -> std::result::Result<zk::Client, zk::Error> {
    loop {
        let attempt = connector.clone();
        let answer = match &config.tls {
            None => attempt.connect(&config.connect_string).await,
            Some(tls) => secure_connect(attempt, tls, &config.connect_string).await,
        };
        match answer {
            Err(zk::Error::Timeout) => {
                tracing::debug!(servers = %config.connect_string, "no session within the session timeout; trying again until connect_timeout");
            }
            answer => return answer,
        }
    }
}

/// [`crate::conn::tls_check::refused`]; without TLS support, never.
#[cfg(feature = "tls")]
async fn tls_refused(
    tls: &locksmith_core::driver::url::TlsFiles,
    connect_string: &str,
    what: &str,
    delay: Duration,
) -> LockError {
    crate::conn::tls_check::refused(tls, connect_string, what, delay).await
}

#[cfg(not(feature = "tls"))]
async fn tls_refused(_: &locksmith_core::driver::url::TlsFiles, _: &str, _: &str, _: Duration) -> LockError {
    std::future::pending().await
}

/// Connects over TLS with the URL's CA and client certificate.
#[cfg(feature = "tls")]
async fn secure_connect(
    connector: zk::Connector,
    tls: &locksmith_core::driver::url::TlsFiles,
    hosts: &str,
) -> std::result::Result<zk::Client, zk::Error> {
    locksmith_core::driver::tls::install_provider();
    let pem = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut options = zk::TlsOptions::new();
    if let Some(ca) = &tls.ca {
        options = options.with_pem_ca(&pem(ca))?;
    }
    if let Some((cert, key)) = &tls.identity {
        options = options.with_pem_identity(&pem(cert), &pem(key))?;
    }
    connector.with_tls(options).secure_connect(hosts).await
}

#[cfg(not(feature = "tls"))]
async fn secure_connect(
    _: zk::Connector,
    _: &locksmith_core::driver::url::TlsFiles,
    _: &str,
) -> std::result::Result<zk::Client, zk::Error> {
    Err(zk::Error::BadArguments(&"zks:// needs the `tls` feature"))
}

/// The nodes [`Session::delete_everything`] has not tried yet: those still here when it ends
/// (dropped by its caller's bound) go back to the session's leftovers.
struct PutBack<'a> {
    session: &'a Session,
    nodes: Vec<Leftover>,
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        for node in self.nodes.drain(..) {
            self.session.remove_later(node);
        }
    }
}

/// Watches the session state and reaps abandoned leases until the session is dropped or ends.
///
/// Curator's connection states map onto the guard like this:
/// - `SUSPENDED` (disconnected, session maybe alive): nothing fires at once; renewals fail, and the
///   watchdog fires `lost()` (`RenewalFailed`) once no renewal succeeded for TTL − TTL/10;
/// - `RECONNECTED` within the session timeout: locks are still held, renewals succeed again;
/// - `LOST` (session expired, closed, or auth failed): `lost()` fires here at once (`LeaseGone`).
async fn monitor(session: Weak<Session>, mut states: zk::StateWatcher) {
    let tick = match session.upgrade() {
        Some(s) => (s.timeout / 10).max(Duration::from_millis(10)),
        None => return,
    };
    loop {
        let state = tokio::select! {
            state = states.changed() => Some(state),
            _ = tokio::time::sleep(tick) => None,
        };
        let Some(session) = session.upgrade() else { return };
        match state {
            Some(state) if state.is_terminated() => {
                tracing::warn!(session = %format_args!("{:#x}", session.id), %state, "ZooKeeper session ended (Curator: LOST)");
                session.lose_all(&format!("the ZooKeeper session {:#x} ended: {state}", session.id));
                return;
            }
            Some(zk::SessionState::Disconnected) => tracing::warn!(
                session = %format_args!("{:#x}", session.id),
                "disconnected from ZooKeeper (Curator: SUSPENDED); locks are lost if this lasts near the session timeout"
            ),
            Some(state) => {
                tracing::info!(session = %format_args!("{:#x}", session.id), %state, "ZooKeeper connection state")
            }
            None => {
                session.reap_abandoned().await;
                session.delete_leftovers().await;
            }
        }
    }
}
