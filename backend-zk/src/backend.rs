//! [`ZkBackend`]: the [`LockBackend`] over one ZooKeeper session at a time, for every lock kind.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{async_trait, BackendUrl, Lease, LockBackend, LockName, LockRequest, Outage};
use locksmith_core::{Family, Leader, LeaderWatch, LockError, LockInfo, Result};
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::Unanswered;
use crate::config::ZkConfig;
use crate::conn::session::Session;
use crate::conn::sessions::Sessions;
use crate::error::to_lock_error;
use crate::layout;
use crate::listing;
use crate::protocol::contender::{Failure, Granted};
use crate::protocol::election;
use crate::protocol::take::take;
use crate::renew::renew_all;

/// How many times one `acquire`/`try_acquire` starts over after its session ended or its node
/// vanished before it gives up with [`LockError::Unavailable`].
const MAX_RESTARTS: usize = 5;

/// The ZooKeeper lock backend. Build it with [`ZkBackend::connect`] (or [`crate::connect`] for a
/// ready [`locksmith_core::Locker`]).
///
/// It owns one ZooKeeper session, shared by every lock taken through it; when that session ends
/// (expiry, closed), the next request opens a new one (leases of the old one are reported lost).
pub struct ZkBackend {
    sessions: Arc<Sessions>,
    /// Never sent: dropping it (with the backend) ends the election observers.
    alive: watch::Sender<()>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("hosts", &self.config().connect_string)
            .field("namespace", &self.config().namespace)
            .finish()
    }
}

impl ZkBackend {
    /// Parses a `zk://` URL and establishes a session.
    ///
    /// Errors: [`LockError::InvalidUrl`] for a malformed URL or option;
    /// [`LockError::Unavailable`] if no session is established within the connect timeout.
    pub async fn connect(url: &BackendUrl) -> Result<Self> {
        let config = ZkConfig::from_url(url)?;
        Ok(ZkBackend {
            sessions: Arc::new(Sessions::connect(config).await?),
            alive: watch::channel(()).0,
        })
    }

    fn config(&self) -> &ZkConfig {
        &self.sessions.config
    }

    /// The session timeout the server granted to the current session: the TTL of every lease.
    pub async fn session_timeout(&self) -> Duration {
        self.sessions.current().await.timeout
    }

    /// The id of the current ZooKeeper session (the `ephemeralOwner` of its nodes).
    pub async fn session_id(&self) -> i64 {
        self.sessions.current().await.id
    }

    /// The absolute path of the lock node of the mutex `name` (its contenders are its children).
    pub fn lock_path(&self, name: &LockName) -> String {
        layout::lock_path(&self.config().namespace, name)
    }

    /// The absolute path of the node of `name` in `family`: the parent of the contenders of a
    /// mutex, read-write lock or election; a semaphore's has `locks` and `leases` under it (see
    /// the [crate docs](crate)).
    pub fn family_path(&self, family: Family, name: &LockName) -> String {
        layout::family_path(&self.config().namespace, family, name)
    }

    /// Turns a granted node into a lease: no await from here to the return, so a cancelled caller
    /// either gets the lease or the contender's clean-up guard deletes the node.
    fn grant(&self, session: &Session, req: &LockRequest, granted: Granted) -> Result<Lease> {
        let Granted {
            mut contender,
            node,
            sent,
            waited,
        } = granted;
        let token = u64::try_from(node.czxid)
            .map_err(|_| LockError::Protocol(format!("node {} has a negative czxid {}", node.path, node.czxid)))?;
        if req.ttl != session.timeout {
            tracing::debug!(requested = ?req.ttl, effective = ?session.timeout, "the lease TTL is the session timeout");
        }
        let lease = Lease {
            ttl: session.timeout,
            waited,
            ..req.lease(token, node.path, sent)
        };
        session.register(&lease, node.czxid, contender.take_own_watch());
        contender.disarm();
        Ok(lease)
    }

    /// One attempt at the lock; `wait` decides whether to queue or withdraw.
    ///
    /// A session that ends or a node that vanishes starts the attempt over (on a new session),
    /// [`MAX_RESTARTS`] times at most in a row (an attempt that waited longer than the outage
    /// budget first counts them anew); a server that fails is retried with backoff until the
    /// deadline (see [`locksmith_core::driver::Outage`]), which then answers `Unavailable`, not `Timeout`.
    async fn attempt(&self, req: &LockRequest, wait: bool, deadline: Option<Instant>) -> Result<Option<Lease>> {
        let budget = self.config().session_timeout * 2;
        let mut outage = Outage::new(deadline, budget);
        let mut restarts = 0;
        loop {
            let session = match self.sessions.session().await {
                Ok(session) => session,
                Err(e) => {
                    outage.failed(e).await?;
                    continue;
                }
            };
            let began = Instant::now();
            let taken = take(&session, &self.config().namespace, req, wait, deadline).await;
            // An attempt that ran longer than the outage budget before it failed was answered
            // meanwhile (it waited in the queue): what fails now is a new incident, with the whole
            // budget and every restart again, not the end of the last one.
            if began.elapsed() >= budget {
                outage.succeeded();
                restarts = 0;
            }
            match taken {
                Ok(Some(granted)) => return self.grant(&session, req, granted).map(Some),
                Ok(None) => return Ok(None),
                Err(Failure::Timeout) => return Err(LockError::Timeout(Duration::ZERO)), // the Locker reports its own timeout
                Err(Failure::NoAnswer(why)) => {
                    return Err(LockError::Unavailable {
                        message: format!("ZooKeeper: {why}"),
                        source: None,
                    })
                }
                Err(Failure::Fatal(e, what)) => return Err(to_lock_error(what, e)),
                Err(Failure::Refused(e)) => return Err(e),
                Err(Failure::Restart(why)) => {
                    restarts += 1;
                    tracing::warn!(lock = %req.name, reason = %why, restarts, "starting the lock attempt over");
                    let e = LockError::Unavailable {
                        message: format!("ZooKeeper: {why}"),
                        source: None,
                    };
                    if restarts > MAX_RESTARTS {
                        return Err(e);
                    }
                    outage.failed(e).await?;
                }
            }
        }
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn kind(&self) -> &'static str {
        "zk"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        self.attempt(req, false, None).await
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        match self.attempt(req, true, deadline).await? {
            Some(lease) => Ok(lease),
            None => Err(LockError::Protocol("a waiting acquire returned no lease".into())),
        }
    }

    /// Deletes the held node. Cancel-safe: the lease leaves the session's registry together
    /// with a guard that, if this call is dropped before ZooKeeper answered (its request may be
    /// lost with its connection), hands the node to the session's monitor to delete; otherwise
    /// the session, alive for its other locks, would keep an unowned node for as long as it
    /// lives.
    async fn release(&self, lease: &Lease) -> Result<()> {
        let session = self.sessions.current().await;
        let was_held = session.forget(&lease.holder_id);
        if session.is_terminated() {
            return Err(LockError::not_held(lease.name.as_str()));
        }
        // A lease declared lost is not ours any more, even if its node is still there: the node is
        // deleted all the same, but the answer is NotHeld.
        let lost = lease.lost.is_lost();
        let unanswered = Unanswered::new(&session, lease, was_held || lost);
        let answer = self
            .sessions
            .bounded(session.client.delete(&lease.holder_id, None))
            .await;
        unanswered.disarm();
        match answer {
            Ok(()) if !lost => Ok(()),
            Ok(()) | Err(zk::Error::NoNode) => Err(LockError::not_held(lease.name.as_str())),
            Err(e) => {
                if was_held || lost {
                    // Let the session's monitor delete it as soon as it can.
                    session.register_for_removal(lease);
                }
                if lost {
                    Err(LockError::not_held(lease.name.as_str()))
                } else {
                    Err(to_lock_error("deleting the lock node", e))
                }
            }
        }
    }

    /// One `multi`: the check that the holder's node exists, then the write (see `guarded.rs`).
    async fn write_guarded(&self, lease: &Lease, write: &locksmith_core::driver::GuardedWrite) -> Result<bool> {
        crate::guarded::write(&self.sessions, lease, write).await
    }

    /// A plain read of the node `key`.
    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        crate::guarded::read(&self.sessions, key).await
    }

    /// `<namespace>.data/<segment>/<suffix>` (see `guarded.rs`).
    fn data_key(&self, family: Family, lock: &LockName, suffix: &str) -> Result<String> {
        crate::guarded::data_key(&self.sessions.config.namespace, family, lock, suffix)
    }

    /// Opens no new session and deletes every node the session still has.
    async fn shutdown(&self) -> Result<()> {
        self.sessions.shutdown().await
    }

    /// The URL's `request_timeout`.
    fn request_timeout(&self) -> Duration {
        self.config().request_timeout
    }

    /// Nothing to extend per lock: one request confirms the session, the lease of every lock (see
    /// `renew.rs`).
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        let session = self.sessions.current().await;
        renew_all(&session, &self.config().namespace, leases).await
    }

    /// The locks of the namespace with contenders (see `listing.rs`).
    async fn list(&self, prefix: &str) -> Result<Vec<locksmith_core::ListedLock>> {
        listing::list(&self.sessions, &self.config().namespace, prefix).await
    }

    /// The holder and the waiters of the mutex `name` (see `listing.rs`).
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        listing::inspect(&self.sessions, &self.config().namespace, name).await
    }

    /// The first candidate of the election's node and its value (see *Elections* in the
    /// [crate docs](crate)).
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let session = self.sessions.session().await?;
        let path = self.family_path(Family::Election, name);
        self.sessions
            .bounded(election::read_leader(&session, &path))
            .await
            .map_err(|e| to_lock_error("reading the election's leader", e))
    }

    /// A task of the backend's with a children watch on the election's node (see *Elections* in
    /// the [crate docs](crate)).
    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        let first = self.leader(name).await?;
        let path = self.family_path(Family::Election, name);
        Ok(election::observe(
            self.sessions.clone(),
            path,
            first,
            self.alive.subscribe(),
        ))
    }
}
