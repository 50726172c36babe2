//! `impl LockBackend` for PostgreSQL: each method calls its step.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::{async_trait, BackendUrl, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{Family, Leader, LeaderWatch, ListedLock, LockError, LockInfo, PruneReport, Result};

use crate::advisory::Sessions;
use crate::config::Config;
use crate::conn::Conn;
use crate::error::pg_error;
use crate::layout::{segment, Layout};
use crate::protocol::queue::Op;
use crate::protocol::{election, wait};
use crate::{cleanup, listing, renew};

/// Locks in the tables of one PostgreSQL schema (see the [crate docs](crate)). Each backend is
/// one locker: its own connection and owner row.
#[derive(Clone, Debug)]
pub struct PgBackend {
    conn: Arc<Conn>,
    /// With `layout=advisory`: the sessions of its advisory locks.
    advisory: Option<Arc<Sessions>>,
}

impl PgBackend {
    /// Connects to the server of a `postgres://` URL and creates the tables if missing. Errors:
    /// [`LockError::InvalidUrl`] for a bad URL, [`LockError::Denied`] for a wrong password or a
    /// missing privilege, [`LockError::Unavailable`] when the server cannot be reached within
    /// `connect_timeout`.
    pub async fn connect(url: &BackendUrl) -> Result<PgBackend> {
        let config = Config::parse(url)?;
        let advisory = (config.layout == Layout::Advisory).then(|| Arc::new(Sessions::new(config.clone())));
        let conn = Conn::open(config).await?;
        crate::idle::keep_pruning(&conn, crate::idle::EVERY, crate::idle::IDLE);
        Ok(PgBackend { conn, advisory })
    }

    /// Starts more passes of pruning for this locker than the one about every 10 minutes that
    /// every locker runs: about every `every`, removing the rows idle for `idle` (tests of the
    /// automatic passes). They stop when the locker is shut down or dropped.
    #[doc(hidden)]
    pub fn keep_pruning(&self, every: Duration, idle: Duration) {
        crate::idle::keep_pruning(&self.conn, every, idle);
    }

    /// The live entries of `name` in `family`, as `holder:<holder id>` or `waiter:<holder id>`
    /// (what is in the tables now, for tests and operators).
    ///
    /// # Errors
    ///
    /// What the read can fail with.
    #[doc(hidden)] // a test hook: operators read a lock with `Locker::inspect`
    pub async fn entries(&self, family: Family, name: &LockName) -> Result<Vec<String>> {
        listing::entries(&self.conn, &segment(family, name)).await
    }

    /// How many pages one read of the queue of `name` in `family` touches (the server's
    /// `EXPLAIN (ANALYZE, BUFFERS)` count): what each step on it pays to read it, which must not
    /// grow with the number of entries it had before (tests and operators).
    ///
    /// # Errors
    ///
    /// What the read can fail with.
    #[doc(hidden)] // a test hook: operators read a lock with `Locker::inspect`
    pub async fn queue_read_pages(&self, family: Family, name: &LockName) -> Result<u64> {
        listing::queue_read_pages(&self.conn, &segment(family, name)).await
    }

    /// Deletes the holders of `name` in `family` behind their backs, as an operator's `DELETE`
    /// would (tests), and wakes its waiters.
    ///
    /// # Errors
    ///
    /// What the delete can fail with.
    #[doc(hidden)] // a test hook: operators read a lock with `Locker::inspect`
    pub async fn delete_holders(&self, family: Family, name: &LockName) -> Result<u64> {
        let seg = segment(family, name);
        let guard = self.conn.client().await?;
        let client = guard.as_deref().ok_or(LockError::Closed)?;
        let n: i64 = (self.conn.statements())
            .write(client, &self.conn.sql.delete_holders, &[&seg], false)
            .await
            .and_then(|rows| rows.first().map_or(Ok(0), |row| row.try_get(0)))
            .map_err(|e| pg_error("deleting holders", e))?;
        drop(guard);
        // A step passes the lock on, as the holders' expiry would have.
        self.conn.step(&seg, Op::Sweep, Duration::ZERO).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

#[async_trait]
impl LockBackend for PgBackend {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        match &self.advisory {
            Some(advisory) => advisory.try_acquire(&self.conn, req).await,
            None => wait::try_acquire(&self.conn, req).await,
        }
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        match &self.advisory {
            Some(advisory) => advisory.acquire(&self.conn, req, deadline).await,
            None => wait::acquire(&self.conn, req, deadline).await,
        }
    }

    /// # Cancel safety
    ///
    /// It runs in the caller's task; dropped part-way, the rest runs in a clean-up task of its
    /// own (`cleanup::release`), to its end.
    async fn release(&self, lease: &Lease) -> Result<()> {
        let first = self.advisory.as_ref().map(|advisory| advisory.releasing(lease));
        cleanup::release(&self.conn, first, lease).await
    }

    /// One statement: the holder's entry checked and locked, then the write (see `guarded.rs`).
    async fn write_guarded(&self, lease: &Lease, write: &locksmith_core::driver::GuardedWrite) -> Result<bool> {
        crate::guarded::write(&self.conn, lease, write).await
    }

    /// A plain read of `key` in the data table.
    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        crate::guarded::read(&self.conn, key).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        match &self.advisory {
            Some(advisory) => advisory.renew_many(&self.conn, leases).await,
            None => renew::renew_many(&self.conn, leases).await,
        }
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        listing::inspect(&self.conn, name).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListedLock>> {
        listing::list(&self.conn, prefix).await
    }

    /// `layout=advisory` has no elections: [`LockError::InvalidOption`], as a campaign gets (not
    /// "nobody leads").
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        if self.advisory.is_some() {
            return Err(crate::advisory::no_such_kind(Family::Election));
        }
        election::leader(&self.conn, name).await
    }

    /// As [`PgBackend::leader`], refused under `layout=advisory`.
    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        if self.advisory.is_some() {
            return Err(crate::advisory::no_such_kind(Family::Election));
        }
        election::observe(&self.conn, name).await
    }

    /// Removes this locker's owner row and entries, closes its LISTEN connection and (with
    /// `layout=advisory`) the sessions of its advisory locks.
    async fn shutdown(&self) -> Result<()> {
        if let Some(advisory) = &self.advisory {
            advisory.close();
        }
        self.conn.close().await
    }

    /// Removes idle lock rows and dead lockers' owner rows, in passes of at most 100 rows a
    /// table (see the [crate docs](crate#idle-rows)).
    async fn prune(&self, idle: Duration, dry_run: bool) -> Result<PruneReport> {
        crate::idle::prune(&self.conn, idle, dry_run).await
    }

    fn default_ttl(&self) -> Option<Duration> {
        self.conn.config.ttl
    }

    fn request_timeout(&self) -> Duration {
        self.conn.config.request_timeout
    }
}
