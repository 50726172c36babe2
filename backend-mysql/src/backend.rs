//! `impl LockBackend` for MySQL and MariaDB: each method calls its step.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::{async_trait, BackendUrl, GuardedWrite, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{Family, Leader, LeaderWatch, ListedLock, LockInfo, PruneReport, Result};

use locksmith_core::driver::armed::Armed;

use crate::cleanup::Releasing;
use crate::config::{Config, Layout};
use crate::conn::Conn;
use crate::getlock::Sessions;
use crate::layout::segment;
use crate::protocol::call::may_hold_in_row;
use crate::protocol::queue::{entry_id, leave_at_close, release, settle};
use crate::protocol::{election, wait};
use crate::{guarded, listing, renew};

/// A locker's backend on a MySQL or MariaDB server: two connections (steps, and the wait
/// connection), whatever its number of locks and waiters.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> locksmith_core::Result<()> {
/// use locksmith_core::driver::BackendUrl;
/// let url = BackendUrl::parse("mysql://app:secret@db:3306/locks")?;
/// let backend = locksmith_mysql::MysqlBackend::connect(&url).await?;
/// let locker = locksmith_core::Locker::new(backend);
/// locker.lock("job").acquire().await?.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MysqlBackend {
    conn: Arc<Conn>,
    /// With `layout=get_lock`: the sessions of its `GET_LOCK` locks.
    get_lock: Option<Arc<Sessions>>,
}

impl MysqlBackend {
    /// Connects to the server of `url` and makes the tables where they are missing.
    ///
    /// # Errors
    ///
    /// `InvalidUrl` for a bad URL; `Denied` for a wrong password, a missing database or right,
    /// or TLS that cannot be established; `Unavailable` when the server cannot be reached (with
    /// several hosts: none takes writes now); `Protocol` with `replication=sync` (the default
    /// with several hosts) for a primary without semi-synchronous replication.
    ///
    /// # Cancel safety
    ///
    /// Dropped, nothing is left but a connection that closes.
    pub async fn connect(url: &BackendUrl) -> Result<MysqlBackend> {
        let config = Config::parse(url)?;
        let get_lock = (config.layout == Layout::GetLock).then(|| Arc::new(Sessions::new(config.clone())));
        let conn = Arc::new(Conn::connect(config).await?);
        crate::wake::start(&conn);
        crate::prune::keep_pruning(&conn, crate::prune::EVERY, crate::prune::IDLE);
        Ok(MysqlBackend { conn, get_lock })
    }

    /// Starts more passes of pruning for this locker than the one about every 10 minutes that
    /// every locker runs: about every `every`, removing the rows idle for `idle` (tests of the
    /// automatic passes). They stop when the locker is shut down or dropped.
    #[doc(hidden)]
    pub fn keep_pruning(&self, every: Duration, idle: Duration) {
        crate::prune::keep_pruning(&self.conn, every, idle);
    }

    #[doc(hidden)] // a test hook: removes a lock's holders as another client would
    pub async fn delete_holders(&self, family: Family, name: &LockName) -> Result<u64> {
        // Another client's delete: InnoDB may pick it as a deadlock's victim; it goes again.
        let mut tries = 0;
        let n = loop {
            match listing::delete_holders(&self.conn, family, name).await {
                Err(e) if tries < 5 && crate::error::is_deadlock(&e) => tries += 1,
                other => break other?,
            }
        };
        settle(&self.conn, segment(family, name)?, false).await?;
        Ok(n)
    }

    #[doc(hidden)] // a test hook: every entry of a lock, live or not
    pub async fn entries(&self, family: Family, name: &LockName) -> Result<Vec<String>> {
        listing::entry_ids(&self.conn, family, name).await
    }
}

#[async_trait]
impl LockBackend for MysqlBackend {
    fn kind(&self) -> &'static str {
        "mysql"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        match &self.get_lock {
            Some(sessions) => sessions.try_acquire(&self.conn, req).await,
            None => wait::try_acquire(&self.conn, req).await,
        }
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        match &self.get_lock {
            Some(sessions) => sessions.acquire(&self.conn, req, deadline).await,
            None => wait::acquire(&self.conn, req, deadline).await,
        }
    }

    /// # Cancel safety
    ///
    /// Dropped part-way, the release of the entry runs in a clean-up task of its own (with
    /// `layout=get_lock`, a `GET_LOCK` session dropped half-way is closed, which frees its name).
    async fn release(&self, lease: &Lease) -> Result<()> {
        let seg = segment(lease.kind.family(), &lease.name)?;
        let id = entry_id(&lease.holder_id)?;
        let name = lease.name.as_str().to_owned();
        let in_row = may_hold_in_row(&lease.kind);
        let mut releasing = Armed::new(Releasing {
            conn: self.conn.clone(),
            seg: seg.clone(),
            id,
            token: lease.fencing_token,
            name: name.clone(),
            in_row,
        });
        // `layout=get_lock`: the named lock first, then the grant (a locksmith waiter granted
        // next finds the name free, or waits for it in GET_LOCK).
        if let Some(sessions) = &self.get_lock {
            sessions.release(id).await;
        }
        let released = release(&self.conn, seg, id, lease.fencing_token, name, in_row).await;
        releasing.disarm();
        released
    }

    /// Removes the rows of locks idle for `idle` (`prune.rs`).
    ///
    /// # Cancel safety
    ///
    /// Each pass (one transaction) runs to its end; dropped between them, the rest waits.
    async fn prune(&self, idle: Duration, dry_run: bool) -> Result<PruneReport> {
        crate::prune::prune(&self.conn, idle, dry_run).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        match &self.get_lock {
            Some(sessions) => sessions.renew_many(&self.conn, leases).await,
            None => renew::renew_many(&self.conn, leases).await,
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        listing::inspect(&self.conn, name).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListedLock>> {
        listing::list(&self.conn, prefix).await
    }

    /// `layout=get_lock` has no elections: [`locksmith_core::LockError::InvalidOption`], as a
    /// campaign gets (not "nobody leads").
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        if self.get_lock.is_some() {
            return Err(crate::getlock::no_such_kind(Family::Election));
        }
        election::leader(&self.conn, name).await
    }

    /// As [`MysqlBackend::leader`], refused under `layout=get_lock`.
    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        if self.get_lock.is_some() {
            return Err(crate::getlock::no_such_kind(Family::Election));
        }
        election::observe(&self.conn, name).await
    }

    async fn write_guarded(&self, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
        guarded::write(&self.conn, lease, write).await
    }

    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        guarded::read(&self.conn, key).await
    }

    async fn shutdown(&self) -> Result<()> {
        self.conn.refuse_new_steps();
        // `layout=get_lock`: every session closed, which frees its names.
        if let Some(sessions) = &self.get_lock {
            sessions.close();
        }
        // What is still queued (a release that got no answer) leaves with its waiters woken,
        // once the holders kept in rows are freed (which close does again if this fails).
        if let Err(e) = self.conn.free_rows().await {
            tracing::debug!(error = %e, "mysql: freeing the holders kept in rows at shutdown failed");
        }
        if let Ok(own) = listing::own_entries(&self.conn).await {
            for (seg, id) in own {
                if let Err(e) = leave_at_close(&self.conn, seg, id).await {
                    tracing::debug!(error = %e, "mysql: an entry left at shutdown expires instead");
                }
            }
        }
        self.conn.close().await
    }

    fn default_ttl(&self) -> Option<Duration> {
        self.conn.config.ttl
    }

    fn request_timeout(&self) -> Duration {
        self.conn.config.request_timeout
    }
}
