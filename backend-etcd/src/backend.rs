//! [`EtcdBackend`]: the [`LockBackend`] over one etcd session, and which protocol serves each
//! lock kind: the exclusive kinds (mutex, writer, leader) queue as the mutex always did
//! ([`crate::protocol::exclusive`]); the kinds that share a lock (semaphore permits, readers) read the
//! queue ahead of them ([`crate::protocol::shared`]); elections are read and observed by
//! [`crate::protocol::election`].

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{async_trait, Lease, LockBackend, LockName, LockRequest, Role};
use locksmith_core::{Leader, LeaderWatch, LockError, LockInfo, Result};
use tokio::time::Instant;

use crate::cleanup::PendingKey;
use crate::config::Config;
use crate::conn::session::Session;
use crate::conn::sweeper;
use crate::layout::Layout;
use crate::listing;
use crate::protocol::election;
use crate::protocol::requests;
use crate::renew;

/// The etcd lock backend: one client and one session lease, shared by every lock of the
/// [`locksmith_core::Locker`] built on it. See the [crate docs](crate) for the algorithm.
pub struct EtcdBackend {
    session: Arc<Session>,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.session.cfg.endpoints)
            .field("layout", &self.session.cfg.layout)
            .field("lease", &self.session.lease_id().map(|id| format!("{id:x}")))
            .finish()
    }
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        self.session.close();
    }
}

/// Counters of the requests an [`EtcdBackend`] has sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EtcdStats {
    /// KV transactions (every read and write of the lock protocol is one), retries included.
    pub transactions: u64,
    /// Keep-alives of the session lease.
    pub keep_alives: u64,
    /// Watch create and cancel requests on the shared watch stream.
    pub watch_requests: u64,
}

impl EtcdBackend {
    /// Connects as configured: creates the client and grants the session lease, failing with
    /// [`LockError::Unavailable`] when the cluster does not answer within the connect timeout.
    pub async fn connect(cfg: Config) -> Result<Self> {
        let session = Session::start(cfg).await?;
        sweeper::start(&session);
        Ok(EtcdBackend { session })
    }

    /// The key layout in use.
    pub fn layout(&self) -> &Layout {
        &self.session.cfg.layout
    }

    /// The effective session TTL (what every lease of this backend reports as its TTL).
    pub fn session_ttl(&self) -> Duration {
        self.session.ttl()
    }

    /// The current session lease id, if one is alive.
    pub fn session_lease_id(&self) -> Option<i64> {
        self.session.lease_id()
    }

    /// How many requests this backend has sent so far (for tests and monitoring).
    pub fn stats(&self) -> EtcdStats {
        let s = &self.session.conn.stats;
        EtcdStats {
            transactions: s.txns.load(Ordering::Relaxed),
            keep_alives: s.keep_alives.load(Ordering::Relaxed),
            watch_requests: s.watch_requests.load(Ordering::Relaxed),
        }
    }

    /// The URL's `request_timeout`: the time limit of every request.
    pub(crate) fn limit(&self) -> Duration {
        self.session.cfg.request_timeout
    }

    /// The session (for the protocol modules).
    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        self.layout().supports(req.kind.family())?;
        self.layout().check_name(&req.name)?;
        match req.kind.role() {
            Role::Exclusive => self.try_exclusive(req).await,
            Role::Shared | Role::Permit(_) => self.try_shared(req).await,
        }
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        self.layout().supports(req.kind.family())?;
        self.layout().check_name(&req.name)?;
        match req.kind.role() {
            Role::Exclusive => self.acquire_exclusive(req, deadline).await,
            Role::Shared | Role::Permit(_) => self.acquire_shared(req, deadline).await,
        }
    }

    /// Deletes the holder's key (if it is still that revision). Cancel-safe: the lock leaves the
    /// session's registry (so that its keep-alives stop counting it as renewed) together with a
    /// clean-up guard that deletes the key if this call is dropped before etcd answered;
    /// otherwise the session's keep-alives would keep an unowned key alive for as long as the
    /// process lives.
    async fn release(&self, lease: &Lease) -> Result<()> {
        let rev = i64::try_from(lease.fencing_token).unwrap_or(i64::MAX);
        let held = self.session.held.take(&lease.holder_id, rev);
        // The key's watch is cancelled after the delete's answer (or when this future is
        // dropped), not before the delete: the cancel would reach the server first and hold up
        // the delete, a hand-over's first step. A delete event the watch reports meanwhile finds
        // the key out of the registry and is ignored.
        let _watch = held
            .as_ref()
            .and_then(|h| h.watch_id)
            .map(|id| self.session.hub.cancel_on_drop(id));
        let releasing =
            held.map(|h| PendingKey::releasing(self.session.clone(), lease.holder_id.clone(), rev, h.lease_id, h.slot));
        match requests::delete(&self.session.conn, &lease.holder_id, Some(rev)).await {
            Ok(deleted) => {
                // The slot (Go layout) is freed only now that the key is gone.
                let was_held = releasing.map(PendingKey::disarm).is_some();
                if deleted && was_held {
                    Ok(())
                } else {
                    Err(LockError::not_held(lease.name.as_str()))
                }
            }
            Err(e) => {
                // Dropping the guard deletes the key in the background, retried while the
                // session owns the lease.
                drop(releasing);
                Err(e)
            }
        }
    }

    /// One transaction: the write, if the holder's key still has its create revision (see
    /// `guarded.rs`).
    async fn write_guarded(&self, lease: &Lease, write: &locksmith_core::driver::GuardedWrite) -> Result<bool> {
        crate::guarded::write(&self.session.conn, self.layout(), lease, write).await
    }

    /// A plain read of `key`.
    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        crate::guarded::read(&self.session.conn, self.layout(), key).await
    }

    /// `<namespace>.data/<segment>/<suffix>` (see `guarded.rs`).
    fn data_key(&self, family: locksmith_core::Family, lock: &LockName, suffix: &str) -> Result<String> {
        crate::guarded::data_key(self.layout(), family, lock, suffix)
    }

    /// Revokes the session lease (every key of this backend goes at once) and takes no more
    /// requests.
    async fn shutdown(&self) -> Result<()> {
        self.session.shutdown().await
    }

    /// One keep-alive of the session lease renews every lock of this backend on the server (see
    /// `renew.rs`).
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        renew::renew_many(&self.session, leases).await
    }

    /// The holder, its fencing token and lease TTL, and the waiters (see `listing.rs`).
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.layout().check_name(name)?;
        listing::inspect(&self.session, name).await
    }

    /// Every key of the namespace, tallied by lock (see `listing.rs`).
    async fn list(&self, prefix: &str) -> Result<Vec<locksmith_core::ListedLock>> {
        listing::list(&self.session, prefix).await
    }

    /// The oldest key of the election's prefix: its value, its create revision (the term).
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        self.layout().supports(locksmith_core::Family::Election)?;
        self.layout().check_name(name)?;
        let prefix = self.layout().prefix(locksmith_core::Family::Election, name);
        Ok(election::read_leader(&self.session.conn, &prefix).await?.0)
    }

    /// A task of this backend's that follows the election's first key (see the crate docs).
    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        self.layout().supports(locksmith_core::Family::Election)?;
        self.layout().check_name(name)?;
        let prefix = self.layout().prefix(locksmith_core::Family::Election, name);
        election::observe(&self.session, prefix).await
    }

    /// A third of the TTL, as usual; all locks of the session share one TTL, so they fall due
    /// together and are renewed by one keep-alive.
    fn renew_interval(&self, ttl: Duration) -> Duration {
        ttl / 3
    }

    /// The URL's `request_timeout`.
    fn request_timeout(&self) -> Duration {
        self.limit()
    }
}
