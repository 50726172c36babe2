//! The trait every backend implements: exactly the primitives a coordination service must provide.
//! Everything a user touches (the builder, the guard, the watchdog) is built on it once, in locksmith-core.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::Result;
use crate::lease::{Lease, LockRequest};
use crate::name::LockName;

/// What [`LockBackend::inspect`] reports about one lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// The current holder, if the lock is held.
    pub holder: Option<HolderInfo>,
    /// How many waiters are queued for the lock (those this backend can see).
    pub waiters: usize,
}

/// The current holder of a lock, as [`LockBackend::inspect`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    /// The backend's identity of the holder (same as [`Lease::holder_id`] of its guard).
    pub holder_id: String,
    /// The holder's fencing token, where the backend stores it next to the holder.
    pub fencing_token: Option<u64>,
    /// Time left before the server expires the holder's lease unless renewed, where known.
    pub ttl_remaining: Option<Duration>,
}

/// A lock that [`LockBackend::list`] found: someone holds it or waits for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedLock {
    /// The lock's name.
    pub name: String,
    /// Which kind of lock it is.
    pub family: crate::Family,
    /// Its holder and waiter entries.
    pub entries: usize,
}

impl ListedLock {
    /// What [`LockBackend::list`] returns, from the lock segments a backend found on its server
    /// (each a [`crate::Family::segment`], with its number of entries): segments that are not
    /// locksmith's or hold no entries are left out, names are kept when they start with `prefix`,
    /// and the result is sorted by name then family.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// use locksmith::{Family, ListedLock};
    /// let found = [("orders%2F42.sem", 2), ("orders%2F7", 0), ("not.ours", 1), ("users%2F1", 1)];
    /// let listed = ListedLock::from_segments("orders/", found);
    /// assert_eq!(listed.len(), 1); // no entries, not locksmith's, another prefix: left out
    /// assert_eq!((listed[0].name.as_str(), listed[0].family, listed[0].entries), ("orders/42", Family::Semaphore, 2));
    /// ```
    pub fn from_segments<'a>(prefix: &str, segments: impl IntoIterator<Item = (&'a str, usize)>) -> Vec<ListedLock> {
        let mut out: Vec<ListedLock> = segments
            .into_iter()
            .filter(|(_, entries)| *entries > 0)
            .filter_map(|(segment, entries)| {
                let (name, family) = crate::Family::parse_segment(segment)?;
                name.as_str().starts_with(prefix).then(|| ListedLock {
                    name: name.as_str().to_owned(),
                    family,
                    entries,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.name, a.family).cmp(&(&b.name, b.family)));
        out
    }
}

/// What [`LockBackend::prune`] (and [`crate::Locker::prune`]) removed, or with `dry_run` would
/// remove: counts of what the backend keeps per lock and per locker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneReport {
    /// Locks nobody held or waited for, idle for the given time, whose state is gone (PostgreSQL:
    /// rows of the `locks` table; `file://`: a lock's files).
    pub locks: u64,
    /// What dead lockers left (PostgreSQL: rows of the `owners` table of lockers whose heartbeat
    /// ended that long ago; `file://`: nothing, the liveness files of dead lockers are removed
    /// when a locker opens the directory).
    pub owners: u64,
    /// Whether nothing was removed: the counts are what a prune would have removed.
    pub dry_run: bool,
}

impl PruneReport {
    /// A report of `locks` and `owners` removed (or, with `dry_run`, that would be).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// use locksmith::PruneReport;
    /// let total = PruneReport::new(3, 1, false) + PruneReport::new(2, 0, false);
    /// assert_eq!((total.locks, total.owners), (5, 1));
    /// ```
    pub fn new(locks: u64, owners: u64, dry_run: bool) -> PruneReport {
        PruneReport { locks, owners, dry_run }
    }

    /// A report of nothing removed (`dry_run` as asked).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// let report = locksmith::PruneReport::empty(true);
    /// assert_eq!((report.locks, report.owners, report.dry_run), (0, 0, true));
    /// ```
    pub fn empty(dry_run: bool) -> PruneReport {
        PruneReport {
            dry_run,
            ..PruneReport::default()
        }
    }
}

/// One report's counts added to another's (one pass after another); `dry_run` is the first's.
impl std::ops::Add for PruneReport {
    type Output = PruneReport;

    fn add(self, other: PruneReport) -> PruneReport {
        PruneReport {
            locks: self.locks + other.locks,
            owners: self.owners + other.owners,
            dry_run: self.dry_run,
        }
    }
}

/// A distributed-lock backend.
///
/// Every request carries a [`crate::LockKind`]: the mutex, a semaphore permit, a read-write lock's
/// side, or an election's leadership. Each [`crate::Family`] is a namespace of its own (keys built
/// from [`crate::Family::segment`]), and within one name's queue [`crate::driver::queue::standing`] says
/// who holds. A backend that cannot serve a kind (a layout made for another library's keys, a
/// mode that cannot keep its promises) refuses it with [`crate::LockError::InvalidOption`], saying
/// why.
///
/// Implementations must uphold, for every lock name and kind:
/// - **Mutual exclusion:** at most one unexpired lease at a time (a semaphore: at most its permit
///   count; a read-write lock: readers only, or one writer).
/// - **Fencing:** [`Lease::fencing_token`] strictly increases across holders.
/// - **Independence:** names only ever compete with themselves; keys and paths are built from
///   [`crate::name::LockName::encoded`].
/// - **Cancellation safety:** if a future returned by [`LockBackend::acquire`] or
///   [`LockBackend::try_acquire`] is dropped at any await point, nothing is left behind on the
///   server: no waiter entry, and no lease obtained but not yet returned (clean up from a `Drop`
///   guard that spawns the deletion with [`crate::driver::cleanup::spawn`], so that the call that started
///   it, and [`crate::Locker::shutdown`], can wait for it). The same holds for
///   [`LockBackend::release`]: dropped part-way, it still releases (a clean-up guard armed before
///   the first await).
/// - **FIFO:** waiters get the lock in the order they started waiting.
/// - **Expiry per lease:** a lease the watchdog stops renewing (its guard was abandoned, its
///   process is gone) expires on the server after about its TTL, even when the backend's session
///   stays alive for other leases of the same connection.
///
/// The trait is dyn-compatible; [`crate::Locker`] holds an `Arc<dyn LockBackend>`.
///
/// Users do not call these methods: they hand a backend to [`crate::Locker`] (or a URL to
/// `locksmith::connect`), which calls it. [`crate::MemoryBackend`] is the implementation to read
/// first (one process, no server); every method's `# Errors` and `# Cancel safety` say what an
/// implementation must guarantee, which the conformance suite (feature `conformance`) checks.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// use std::sync::Arc;
/// use locksmith::{driver::LockBackend, Locker, MemoryBackend};
///
/// let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
/// assert_eq!(backend.kind(), "mem");
/// let locker = Locker::from_arc(backend);
/// let guard = locker.lock("job").acquire().await?;
/// assert_eq!(locker.inspect("job").await?.waiters, 0);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// A short name for logs and errors: `"mem"`, `"etcd"`, `"zk"`, `"redis"`.
    fn kind(&self) -> &'static str;

    /// One attempt: the lease if the lock was free (and nobody was queued for it), `None` if it is
    /// held or another waiter is first in line. Never waits for the lock.
    ///
    /// # Errors
    ///
    /// [`crate::LockError::Unavailable`] when the server could not be reached or did not answer;
    /// [`crate::LockError::Denied`] when it refused the request (credentials, permissions);
    /// [`crate::LockError::InvalidOption`] for a kind this backend cannot serve, or a semaphore
    /// whose permit count disagrees with its holders and waiters; [`crate::LockError::Protocol`]
    /// for an answer the lock protocol does not expect. Whatever the error, nothing of this attempt
    /// may stay on the server (or its removal has been spawned, see below).
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe (see the trait docs): dropped at any await point, it leaves no entry and
    /// no lease behind; what it may have created on the server is deleted by a clean-up guard
    /// spawned with [`crate::driver::cleanup::spawn`], which [`crate::Locker::shutdown`] waits for.
    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>>;

    /// Waits until the lock is held, in FIFO order with other waiters, or without limit when
    /// `deadline` is `None`. At `deadline` it returns [`crate::LockError::Timeout`] if it was
    /// waiting for the lock (and removes its waiter entry), or [`crate::LockError::Unavailable`]
    /// if it was retrying a server that failed (see [`crate::outage::Outage`]). It need not cut short a
    /// request in flight at the deadline: the [`crate::Locker`] gives up on it shortly after, as a
    /// server that did not answer. Must be cancellation-safe (see the trait docs).
    ///
    /// # Errors
    ///
    /// [`crate::LockError::Timeout`] at `deadline` while waiting for the lock;
    /// [`crate::LockError::Unavailable`] at `deadline` while retrying a server that fails, or,
    /// without a deadline, once an outage outlasted the backend's budget (see
    /// [`crate::driver::Outage`]); [`crate::LockError::Denied`],
    /// [`crate::LockError::InvalidOption`] and [`crate::LockError::Protocol`] as
    /// [`LockBackend::try_acquire`]. Before any error is returned, the waiter entry has been removed
    /// (or its removal spawned with [`crate::driver::cleanup::spawn`]).
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe (see the trait docs): dropped while waiting, its waiter entry is removed
    /// in the background, and a lease granted but not yet returned is released; the clean-up is
    /// spawned with [`crate::driver::cleanup::spawn`], so [`crate::Locker::shutdown`] waits for it.
    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease>;

    /// Releases the lease. [`crate::LockError::NotHeld`] if it was no longer ours (expired, taken
    /// away, already released).
    ///
    /// # Errors
    ///
    /// [`crate::LockError::NotHeld`] as above; [`crate::LockError::Unavailable`] when the server
    /// did not answer (the locker retries the release in the background until the lease has
    /// surely expired); [`crate::LockError::Denied`] when it refused the delete.
    ///
    /// # Cancel safety
    ///
    /// Dropped at any await point (its request timeout cut it off, its connection was lost), it
    /// still releases: a backend that forgets the lease before the server confirmed the delete
    /// arms a clean-up guard first (spawned with [`crate::driver::cleanup::spawn`]), or leaves the lease
    /// where its expiry will find it. Checked by the conformance suites (`lifecycle`, and
    /// `deadlines`, which loses a release's request with its connection).
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// Renews many leases at once; returns one result per lease, in order: `Ok` when the lease
    /// was extended by its TTL from now, [`crate::LockError::NotHeld`] when it is gone (the
    /// watchdog then fires its lost signal), any other error when the renewal could not be done
    /// (the watchdog retries until the lease runs out).
    ///
    /// The watchdog calls only this, with every lease of the Locker that is due, so a backend
    /// renews them in as few requests as it can: etcd and ZooKeeper renew their one session for all
    /// locks, Redis extends every key in one script call.
    ///
    /// # Errors
    ///
    /// Per lease, in the returned vector: [`crate::LockError::NotHeld`] for a lease that is gone;
    /// [`crate::LockError::Unavailable`] (or any other error) when the renewal could not be done,
    /// which the watchdog retries.
    ///
    /// # Cancel safety
    ///
    /// The watchdog cuts a call off at the request timeout (or when the batch's first lease runs
    /// out, if sooner): dropped at any await point, a renewal may have extended some of the
    /// leases and not others, which is harmless (renewing only extends what exists, and the next
    /// round renews them all again). It must create nothing.
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>>;

    /// Renews one lease: [`LockBackend::renew_many`] with one lease.
    ///
    /// # Errors
    ///
    /// As [`LockBackend::renew_many`] for its one lease; [`crate::LockError::Protocol`] if
    /// `renew_many` returned no result.
    ///
    /// # Cancel safety
    ///
    /// As [`LockBackend::renew_many`].
    async fn renew(&self, lease: &Lease) -> Result<()> {
        let mut results = self.renew_many(std::slice::from_ref(lease)).await;
        results
            .pop()
            .unwrap_or_else(|| Err(crate::LockError::Protocol("no renewal result".into())))
    }

    /// Who holds `name` right now and how many wait: a read-only look for operators (the CLI's
    /// `inspect`), never used for locking decisions.
    ///
    /// # Errors
    ///
    /// [`crate::LockError::Unavailable`] when the server did not answer;
    /// [`crate::LockError::Denied`] when it refused the read; [`crate::LockError::Protocol`] for
    /// state the backend cannot read as a lock.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: a read only, it leaves nothing behind.
    async fn inspect(&self, name: &LockName) -> Result<LockInfo>;

    /// The locks of this backend's namespace whose names start with `prefix` and that have holders
    /// or waiters now, sorted by name then family: a read-only look for operators (the CLI's
    /// `list`). The default refuses (a backend that cannot enumerate its locks).
    ///
    /// # Errors
    ///
    /// The default: [`crate::LockError::InvalidOption`]. An implementation:
    /// [`crate::LockError::Unavailable`] when the server did not answer,
    /// [`crate::LockError::Denied`] when it refused the read.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: a read only, it leaves nothing behind.
    async fn list(&self, prefix: &str) -> Result<Vec<ListedLock>> {
        let _ = prefix;
        Err(crate::LockError::InvalidOption(format!(
            "{} cannot list its locks",
            self.kind()
        )))
    }

    /// Who leads the election `name` now: the holder of its [`crate::LockKind::Leader`] queue, with
    /// its value and term. The default refuses (a backend without elections).
    ///
    /// # Errors
    ///
    /// The default: [`crate::LockError::InvalidOption`]. An implementation:
    /// [`crate::LockError::Unavailable`] when the server did not answer,
    /// [`crate::LockError::Denied`] when it refused the read, [`crate::LockError::Protocol`] for a
    /// leader entry it cannot read (a value that is not UTF-8).
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: a read only, it leaves nothing behind.
    async fn leader(&self, name: &LockName) -> Result<Option<crate::Leader>> {
        let _ = name;
        Err(crate::LockError::InvalidOption(format!(
            "{} has no elections",
            self.kind()
        )))
    }

    /// Watches the election `name`: the current leader at once, then every change, pushed by the
    /// server (a watch, a notification), never by polling. The observation runs in a task of the
    /// backend's, which rides out outages and ends when the returned watch is dropped. The default
    /// refuses (a backend without elections).
    ///
    /// # Errors
    ///
    /// The default: [`crate::LockError::InvalidOption`]. An implementation:
    /// [`crate::LockError::Unavailable`] when the first read of the leader failed,
    /// [`crate::LockError::Denied`] when the server refused it. Later failures are not errors: the
    /// observation's task rides them out.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: dropped before it returned, it leaves no observation task running (the
    /// task belongs to the [`crate::LeaderWatch`] it returns, which aborts it when dropped).
    async fn observe(&self, name: &LockName) -> Result<crate::LeaderWatch> {
        let _ = name;
        Err(crate::LockError::InvalidOption(format!(
            "{} has no elections",
            self.kind()
        )))
    }

    /// Applies `write` only if `lease` is still held, checked by the server atomically with the
    /// write (one etcd transaction, one ZooKeeper `multi`, one Redis script): `Ok(true)` when it
    /// applied (a put; a delete of a key that existed; a compare-and-set whose value matched),
    /// `Ok(false)` when it did not (nothing to delete, a value that differs),
    /// [`crate::LockError::NotHeld`] when the lease is gone (nothing written). The write was
    /// validated ([`crate::driver::GuardedWrite::validate`]); keys inside the backend's lock namespace are
    /// refused ([`crate::guarded::refuse_if_inside`]). The default refuses (a backend without a
    /// store to write to).
    ///
    /// # Errors
    ///
    /// [`crate::LockError::NotHeld`] when the lease is gone (nothing written);
    /// [`crate::LockError::InvalidOption`] from the default; [`crate::LockError::InvalidName`] for
    /// a key inside the backend's lock namespace ([`crate::driver::refuse_if_inside`]);
    /// [`crate::LockError::Unavailable`] when the server did not answer (the write may or
    /// may not have been applied); [`crate::LockError::Denied`] when it refused the write.
    ///
    /// # Cancel safety
    ///
    /// Dropped after its request was sent, the write may or may not have been applied, as any write
    /// to a server; if applied, it was applied while the lease was held (the check and the write are
    /// one atomic step). It must leave nothing else behind.
    async fn write_guarded(&self, lease: &Lease, write: &crate::guarded::GuardedWrite) -> Result<bool> {
        let _ = (lease, write);
        Err(crate::LockError::InvalidOption(format!(
            "{} has no guarded writes",
            self.kind()
        )))
    }

    /// Reads a key of the store [`LockBackend::write_guarded`] writes to (a plain read). The
    /// default refuses (a backend without a store).
    ///
    /// # Errors
    ///
    /// The default: [`crate::LockError::InvalidOption`]. An implementation:
    /// [`crate::LockError::Unavailable`] when the server did not answer,
    /// [`crate::LockError::Denied`] when it refused the read.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: a read only, it leaves nothing behind.
    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let _ = key;
        Err(crate::LockError::InvalidOption(format!(
            "{} has no guarded writes",
            self.kind()
        )))
    }

    /// A key of the store [`LockBackend::write_guarded`] writes to that belongs with the lock
    /// `lock` of `family`, named `suffix` among that lock's keys: a guarded write under that lock
    /// can always reach it (on Redis Cluster it is in the lock's hash slot), it is outside
    /// locksmith's lock namespace, and two locks or two suffixes never share a key. The default,
    /// for stores that take any key (PostgreSQL's rows, the memory backend):
    /// `/locksmith-data/<segment>/<encoded suffix>` (the lock's [`crate::Family::segment`];
    /// [`crate::driver::data_key_under`]). etcd and ZooKeeper put it beside their namespace
    /// (`<namespace>.data/…`), Redis in the lock's hash slot. Users reach it through
    /// [`crate::LockGuard::data_key`].
    ///
    /// # Errors
    ///
    /// [`crate::LockError::InvalidName`] for an invalid suffix (the rules of lock names) or a key
    /// too long for the store.
    fn data_key(&self, family: crate::Family, lock: &LockName, suffix: &str) -> Result<String> {
        crate::guarded::data_key_under("/locksmith-data", family, lock, suffix)
    }

    /// Removes the state of locks that nobody holds or waits for and that have been idle for at
    /// least `idle` (no grant and no holder's lease for that long), and what dead lockers left
    /// behind; with `dry_run`, only counts what it would remove. `idle` zero: every lock that
    /// nobody holds or waits for now. A lock that is held or waited for is never touched, and a
    /// lock used again after it was removed goes on with fencing tokens above every earlier one.
    ///
    /// The default removes nothing: etcd, ZooKeeper and Redis keep nothing of a lock once its
    /// last holder and waiter are gone (their keys and nodes are deleted, or expire with their
    /// lease or session), nor does `mem://`. PostgreSQL removes idle lock rows and dead
    /// lockers' owner rows, `file://` idle lock files; both also do it by themselves now and then
    /// (see their crate docs).
    ///
    /// # Errors
    ///
    /// What the backend's requests can fail with: [`crate::LockError::Denied`] when the server
    /// refused the deletes (a PostgreSQL user without the grants of this release),
    /// [`crate::LockError::Unavailable`] when it did not answer.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: dropped at any await point, what it removed stays removed and what it
    /// had not reached stays for the next prune; a lock is removed whole or not at all (PostgreSQL:
    /// one transaction per pass; `file://`: one lock at a time under that lock's own file lock).
    async fn prune(&self, idle: Duration, dry_run: bool) -> Result<PruneReport> {
        let _ = idle;
        Ok(PruneReport::empty(dry_run))
    }

    /// Ends this backend's session or connections, once [`crate::Locker::shutdown`] has released
    /// every lock of the locker and waited for its clean-up: etcd revokes its session lease,
    /// ZooKeeper deletes every node its session still has, so that nothing of this process
    /// outlives it on the server.
    /// The backend takes no more requests afterwards. Bounded by the request timeout. Default:
    /// nothing to end.
    ///
    /// # Errors
    ///
    /// [`crate::LockError::Unavailable`] when the server did not answer (what the session held then
    /// expires with its TTL); [`crate::LockError::Denied`] when it refused the end of the session.
    ///
    /// # Cancel safety
    ///
    /// [`crate::Locker::shutdown`] cuts it off at the request timeout: dropped, the session is not
    /// ended at once and what it still held expires with its TTL, as after a crash.
    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    /// The TTL of a lock whose builder sets none ([`crate::LockBuilder::ttl`]): the backend URL's
    /// `ttl=` on the backends whose TTL is per lock (Redis, `mem://`). The default, `None`, leaves
    /// it at [`crate::DEFAULT_TTL`].
    fn default_ttl(&self) -> Option<Duration> {
        None
    }

    /// How often the watchdog should renew a lease of `ttl`. Default: a third of it.
    fn renew_interval(&self, ttl: Duration) -> Duration {
        ttl / 3
    }

    /// The longest one call other than a waiting `acquire` may take (`try_acquire`, `release`,
    /// `renew_many`, `inspect`, reconnecting included): the backend's request timeout (its URL's
    /// `request_timeout`). locksmith-core cuts off a call that takes longer with
    /// [`crate::LockError::Unavailable`]; every call must be cancellation-safe anyway.
    fn request_timeout(&self) -> Duration {
        DEFAULT_REQUEST_TIMEOUT
    }
}

/// The request timeout of a backend that does not set one: 5 s (see
/// [`LockBackend::request_timeout`]).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Releases `lease` within the backend's request timeout (see [`bounded`]); `what` says which
/// release it is in the error.
pub(crate) async fn bounded_release(backend: &dyn LockBackend, what: &str, lease: &Lease) -> Result<()> {
    within_request_timeout(backend, what, backend.release(lease)).await
}

/// Runs one backend call within the backend's request timeout (see [`bounded`]).
pub(crate) async fn within_request_timeout<T>(
    backend: &dyn LockBackend,
    what: &str,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    bounded(backend, what, backend.request_timeout(), call).await
}

/// Runs one backend call within `limit`; past it, [`crate::LockError::Unavailable`] saying what was
/// being done. The call is dropped then, which every backend call tolerates (cancellation safety).
pub(crate) async fn bounded<T>(
    backend: &dyn LockBackend,
    what: &str,
    limit: Duration,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(crate::LockError::Unavailable {
            message: format!("{} did not answer within {limit:?} ({what})", backend.kind()),
            source: None,
        }),
    }
}
