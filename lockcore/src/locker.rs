//! [`Locker`], the user's entry point, and [`LockBuilder`], the options of one lock request.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{bounded, bounded_release, within_request_timeout, LockBackend, LockInfo};
use crate::driver::cleanup::Entered;
use crate::election::{Election, MAX_VALUE_LEN};
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lease::{LockKind, LockRequest, DEFAULT_TTL, MAX_PERMITS, MAX_TTL, MIN_TTL};
use crate::metrics::{counted, failure_outcome, LabelSets, Labels, NameLabel};
use crate::name::LockName;
use crate::rwlock::RwLock;
use crate::watchdog::Watchdog;

/// The span of a lock request (`$name`: `"acquire"` or `"try_acquire"`) of `$req` on `$backend`,
/// with the fields recorded once known (its fencing token, outcome and round trips) still empty.
macro_rules! request_span {
    ($name:literal, $req:ident, $backend:ident) => {
        tracing::info_span!(
            $name,
            lock = %$req.name,
            kind = crate::metrics::kind_label(&$req.kind),
            backend = $backend.kind(),
            fencing_token = tracing::field::Empty,
            outcome = tracing::field::Empty,
            round_trips = tracing::field::Empty,
        )
    };
}

/// How long after its deadline an `acquire` is cut off if the backend has not returned by itself
/// (it is then inside a request that the server does not answer).
const DEADLINE_GRACE: Duration = Duration::from_millis(500);

/// A connection to one lock backend, shared by all the locks taken through it.
///
/// Cheap to clone; clones share the connection and the watchdog. Build it from a backend with
/// [`Locker::new`], or from a URL with `locksmith::connect`.
///
/// Use a locker on one tokio runtime: its watchdog (the task that renews every guard's lease)
/// runs on the runtime where the first guard was taken, and the server backends' connections on
/// the runtime that connected. Once that runtime stops being driven (a `block_on` that returned,
/// a `#[tokio::test]` that ended), leases of guards taken on another runtime are not renewed and
/// run out. Give each runtime its own locker (several `#[tokio::test]`s: one each, not one in a
/// `static`).
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// use std::time::Duration;
/// use locksmith::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// let guard = locker.lock("orders/42").ttl(Duration::from_secs(10)).acquire().await?;
/// assert!(locker.lock("orders/42").try_acquire().await?.is_none());
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) watchdog: Arc<Watchdog>,
    /// Whether the locker was shut down, and its clean-up in flight (shared with the lockers made
    /// from it by [`Locker::with_name_label`]).
    pub(crate) life: Arc<Life>,
    /// The `name` label of this locker's metrics, if any (see [`Locker::with_name_label`]).
    name_label: Option<NameLabel>,
    /// The metrics of each label set used so far.
    label_sets: LabelSets,
}

impl Locker {
    /// A locker over `backend`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// assert_eq!(locker.backend().kind(), "mem");
    /// ```
    pub fn new(backend: impl LockBackend) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// A locker over a shared backend.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use std::sync::Arc;
    /// use locksmith::{driver::LockBackend, Locker, MemoryBackend};
    ///
    /// let backend: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
    /// let (a, b) = (Locker::from_arc(backend.clone()), Locker::from_arc(backend));
    /// assert!(Arc::ptr_eq(a.backend(), b.backend()));
    /// ```
    pub fn from_arc(backend: Arc<dyn LockBackend>) -> Self {
        let life = Arc::new(Life::default());
        let watchdog = Arc::new(Watchdog::new(
            backend.clone(),
            life.tally.clone(),
            life.closed.subscribe(),
        ));
        Locker {
            inner: Arc::new(Inner {
                backend,
                watchdog,
                life,
                name_label: None,
                label_sets: LabelSets::default(),
            }),
        }
    }

    /// This locker with a `name` label on its metrics: `label` turns a lock name into the label's
    /// value, or `None` for no label (see [`crate::metrics`]). Lock names are unbounded and each
    /// label value is a time series, so map them onto a few: e.g. the part before the first `/`
    /// (`|name| name.split('/').next().map(str::to_owned)`). The returned locker shares this one's
    /// connection, watchdog and [`Locker::shutdown`].
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let locker = locker.with_name_label(|name| name.split('/').next().map(str::to_owned));
    /// let guard = locker.lock("orders/42").acquire().await?; // counted under name="orders"
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_name_label(self, label: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Locker {
        Locker {
            inner: Arc::new(Inner {
                watchdog: self.inner.watchdog.clone(),
                life: self.inner.life.clone(),
                backend: self.inner.backend.clone(),
                name_label: Some(Arc::new(label)),
                label_sets: LabelSets::default(),
            }),
        }
    }

    /// The metric labels of a request.
    fn labels(&self, req: &LockRequest) -> Labels {
        self.inner.label_sets.get(
            self.inner.backend.kind(),
            &req.kind,
            req.name.as_str(),
            self.inner.name_label.as_ref(),
        )
    }

    /// Starts a request for the mutex `name`; set options on the builder, then call
    /// [`LockBuilder::acquire`] or [`LockBuilder::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("orders/42").acquire().await?;
    /// assert!(locker.lock("orders/42").try_acquire().await?.is_none());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        self.build(name.into(), LockKind::Mutex)
    }

    /// Starts a request for one permit of the semaphore `name`, which has `permits` permits (1 to
    /// [`MAX_PERMITS`]): at most that many guards of it are held at once, across every client.
    /// Every client must give the same count; one that disagrees with the semaphore's holders and
    /// waiters gets [`LockError::InvalidOption`]. Waiting is FIFO; each guard has its own fencing
    /// token, greater than every earlier permit's.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let a = locker.semaphore("api-quota", 2).acquire().await?;
    /// let b = locker.semaphore("api-quota", 2).acquire().await?;
    /// assert!(locker.semaphore("api-quota", 2).try_acquire().await?.is_none());
    /// # drop((a, b)); Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        self.build(name.into(), LockKind::Permit { permits })
    }

    /// The read-write lock `name` (see [`RwLock`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let config = locker.rwlock("config");
    /// let (r1, r2) = (config.read().acquire().await?, config.read().acquire().await?);
    /// assert!(config.write().try_acquire().await?.is_none()); // readers hold it
    /// # drop((r1, r2));
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self.clone(), name.into())
    }

    /// The election `name` (see [`Election`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let leader = locker.election("scheduler").campaign("node-1").acquire().await?;
    /// assert_eq!(locker.election("scheduler").leader().await?.map(|l| l.value), Some("node-1".to_owned()));
    /// # drop(leader);
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self.clone(), name.into())
    }

    /// A request for `kind` of the lock `name`: what [`Locker::lock`], [`Locker::semaphore`],
    /// [`RwLock::read`]/[`RwLock::write`] and [`crate::Election::campaign`] build, for code that
    /// chooses the kind at run time (a command-line tool).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::LockKind;
    /// let kind = LockKind::Permit { permits: 2 }; // chosen at run time
    /// let guard = locker.request("api-quota", kind.clone()).acquire().await?;
    /// assert_eq!(guard.kind(), &kind);
    /// # Ok(()) }
    /// ```
    pub fn request(&self, name: impl Into<String>, kind: LockKind) -> LockBuilder {
        self.build(name.into(), kind)
    }

    pub(crate) fn build(&self, name: String, kind: LockKind) -> LockBuilder {
        LockBuilder {
            locker: self.clone(),
            name,
            kind,
            ttl: None,
            timeout: None,
            max_hold: None,
        }
    }

    /// The token register `name`: the highest fencing token admitted for one resource, kept in
    /// the coordination store, for a service that receives tokens and cannot check them in its
    /// own storage (see [`crate::TokenRegister`]). Every client that names the same register
    /// shares it. Needs guarded writes (every backend but `file://`, a Redis quorum and a
    /// dual-write migration; there, admissions fail with [`LockError::InvalidOption`]).
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] if `name` breaks the rules of lock names (with the register's
    /// lock prefix, [`crate::REGISTER_LOCK_PREFIX`], counted in its length).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let register = locker.token_register("payments-db")?;
    /// let guard = locker.lock("payments").acquire().await?;
    /// assert!(register.admit(guard.fencing_token()).await?.is_admitted());
    /// # Ok(()) }
    /// ```
    pub fn token_register(&self, name: &str) -> Result<crate::TokenRegister> {
        crate::TokenRegister::new(self.clone(), name)
    }

    /// The backend behind this locker.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// assert_eq!(locker.backend().kind(), "mem");
    /// # Ok(()) }
    /// ```
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.inner.backend
    }

    /// Who holds `name` right now and how many wait: a read-only look for operators (the CLI's
    /// `inspect`), never a basis for locking decisions. Bounded by the backend's request timeout.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for a bad name; [`LockError::Unavailable`] when the server did
    /// not answer within the request timeout; [`LockError::Denied`] when it refused the read;
    /// [`LockError::Closed`] after [`Locker::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read only, nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("orders/42").acquire().await?;
    /// let info = locker.inspect("orders/42").await?;
    /// assert_eq!(info.holder.map(|h| h.fencing_token), Some(Some(guard.fencing_token())));
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let name = LockName::new(name)?;
        self.check_open()?;
        let backend = self.backend();
        within_request_timeout(backend.as_ref(), "inspecting a lock", backend.inspect(&name)).await
    }

    /// The locks whose names start with `prefix` that someone holds or waits for, with their kind
    /// and number of entries: a read-only look for operators (the CLI's `list`). Bounded by the
    /// backend's request timeout.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] when the server did not answer within the request timeout;
    /// [`LockError::Denied`] when it refused the read; [`LockError::Closed`] after
    /// [`Locker::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read only, nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("orders/42").acquire().await?;
    /// let listed = locker.list("orders/").await?;
    /// assert_eq!(listed.len(), 1);
    /// assert_eq!(listed[0].name, "orders/42");
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, prefix: &str) -> Result<Vec<crate::ListedLock>> {
        self.check_open()?;
        let backend = self.backend();
        within_request_timeout(backend.as_ref(), "listing locks", backend.list(prefix)).await
    }

    /// Removes what the backend keeps of locks that nobody holds or waits for and that have been
    /// idle for at least `idle` (zero: every such lock, now), and what dead lockers left behind;
    /// with `dry_run`, only counts it (see [`LockBackend::prune`]). What each backend removes:
    /// PostgreSQL, rows of its `locks` and `owners` tables; `file://`, a lock's files in the
    /// directory; etcd, ZooKeeper, Redis and `mem://` keep nothing of an unused lock, and report
    /// nothing. A held or waited-for lock is never touched, and fencing tokens of a lock used
    /// again stay above every earlier one. PostgreSQL and `file://` also prune by themselves
    /// (after an idle hour); this is the call for an operator (`locksmith prune`).
    ///
    /// Not bounded by one request timeout: the backend works in passes (each bounded) until
    /// nothing more is left.
    ///
    /// # Errors
    ///
    /// [`LockError::Denied`] when the server refused the deletes (PostgreSQL: a user without the
    /// grants `locksmith init --sql --grant` prints); [`LockError::Unavailable`] when it did not
    /// answer; [`LockError::Closed`] after [`Locker::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: each pass removes what it removes in one transaction (PostgreSQL) or one lock
    /// at a time under the lock's own file lock (`file://`); dropped, the passes stop and what is
    /// left stays for the next prune.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> locksmith_core::Result<()> {
    /// let locker = locksmith_core::Locker::new(locksmith_core::MemoryBackend::new());
    /// let report = locker.prune(std::time::Duration::from_secs(3600), true).await?;
    /// assert_eq!(report.locks, 0); // mem:// keeps nothing of an unused lock
    /// # Ok(()) }
    /// ```
    pub async fn prune(&self, idle: Duration, dry_run: bool) -> Result<crate::PruneReport> {
        self.check_open()?;
        self.backend().prune(idle, dry_run).await
    }

    /// How many guards of this locker the watchdog is renewing right now.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("job").acquire().await?;
    /// assert_eq!(locker.held_count(), 1);
    /// guard.release().await?;
    /// assert_eq!(locker.held_count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn held_count(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Shuts this locker down: what to call before `main` returns (or a worker ends) so that
    /// nothing it took outlives it.
    ///
    /// In order: new requests and those still waiting end with [`LockError::Closed`] (a waiter
    /// leaves its queue), and are waited for; every guard still held is lost
    /// ([`crate::LostReason::Shutdown`]) and released; the clean-up still running in the
    /// background (releases of dropped guards, cancelled acquires leaving their queues) is waited
    /// for; then the backend ends its session
    /// ([`LockBackend::shutdown`], with a request timeout of its own: etcd revokes its lease,
    /// ZooKeeper deletes the nodes it knows its session created and opens no new session,
    /// PostgreSQL removes the locker's entries in one statement, `file://` its entries). Other
    /// processes can take the locks as soon as it returns, instead of after their TTL. (A node
    /// or key whose create was still unanswered when the wait above ran out goes with its
    /// session or TTL.)
    ///
    /// Without it, a process that ends right after dropping a guard (an early `?`) or giving up on
    /// an `acquire` usually exits before the background release ran: the lock stays held until its
    /// lease runs out.
    ///
    /// Every clone of this locker (and those made by [`Locker::with_name_label`]) shares the
    /// shutdown. Lockers built with [`Locker::from_arc`] over the same backend share its
    /// connection: shut down the last of them. Calling it again does no harm.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] if clean-up was still running when the request timeout passed,
    /// or the backend could not end its session. A request future that was polled and is then
    /// no longer polled (kept in a `select!` that moved on) cannot end, and holds this wait until
    /// the request timeout: drop such futures before shutting down. A release that failed is logged, not returned:
    /// its lock expires after its TTL, as after a crash.
    ///
    /// # Cancel safety
    ///
    /// The releases it started run on when the future is dropped; only the wait for them and
    /// the end of the session are given up (the session then ends after its TTL).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith_core::LockError> {
    /// # use locksmith_core as locksmith;
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let result = async {
    ///     let guard = locker.lock("nightly").acquire().await?;
    ///     // ... work that may fail with `?`, dropping the guard ...
    ///     guard.release().await
    /// }
    /// .await;
    /// locker.shutdown().await?; // nothing of this process is held after this line
    /// result
    /// # }
    /// ```
    pub async fn shutdown(&self) -> Result<()> {
        let backend = self.backend();
        let limit = backend.request_timeout();
        // A backend's timeout too large for an `Instant`: a day is as good as forever here.
        let deadline = Instant::now()
            .checked_add(limit)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        let life = &self.inner.life;
        if !life.closed.send_replace(true) {
            tracing::info!(backend = backend.kind(), "shutting the locker down");
        }
        // Every guard still held: lost, then released (a clean-up the wait below includes).
        self.inner.watchdog.end_all(crate::LostReason::Shutdown);
        // The requests in flight (told by `closed` to end) and the clean-up still running: a
        // request that ends now leaves its queue, or releases what it was granted, before the
        // count reaches zero (see `LockBuilder::begin`).
        let settled = tokio::time::timeout_at(deadline, life.tally.idle()).await.is_ok();
        // A request timeout of its own: what the wait above left of it could be nothing, and the
        // session's end (etcd's revoke, PostgreSQL's one statement that frees every entry) is
        // what frees the rest at once.
        let ended = bounded(backend.as_ref(), "ending the session", limit, backend.shutdown()).await;
        if !settled {
            let running = life.tally.in_flight();
            return Err(LockError::Unavailable {
                message: format!(
                    "{} request(s) or clean-up task(s) of {} still unanswered after {limit:?} at shutdown; what they held expires after its TTL",
                    running,
                    backend.kind()
                ),
                source: None,
            });
        }
        ended
    }

    /// Whether [`Locker::shutdown`] was called.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// assert!(!locker.is_shut_down());
    /// locker.shutdown().await?;
    /// assert!(locker.is_shut_down());
    /// assert!(matches!(locker.lock("job").acquire().await, Err(locksmith::LockError::Closed)));
    /// # Ok(()) }
    /// ```
    pub fn is_shut_down(&self) -> bool {
        *self.inner.life.closed.borrow()
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The guard of a granted `lease`; if the locker was shut down while the grant was on its
    /// way, the lock is released and the answer is [`LockError::Closed`]. The guard is
    /// registered before the check: a shutdown that had not set its flag by then finds it when it
    /// takes every guard; one that had is seen here, and dropping the guard releases it (counted
    /// in the shutdown's wait), unless the shutdown took it already.
    fn guard(&self, lease: crate::lease::Lease, max_hold: Option<Duration>, labels: Labels) -> Result<LockGuard> {
        let guard = LockGuard::new(self.clone(), lease, max_hold, labels);
        if self.is_shut_down() {
            drop(guard);
            return Err(LockError::Closed);
        }
        Ok(guard)
    }

    /// The locker's shutdown flag (`true` once [`Locker::shutdown`] began).
    pub(crate) fn closed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.life.closed.subscribe()
    }

    /// [`LockError::Closed`] once the locker is shut down.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_shut_down() {
            Err(LockError::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs a backend call of a lock request: it ends with [`LockError::Closed`] if the locker is
    /// shut down meanwhile, and if it fails (other than by a backend that does not answer) it
    /// returns only once the clean-up it started has ended, for at most the request timeout.
    ///
    /// `cut_wait`: the call ran under the caller's own timeout, shorter than the backend's
    /// request timeout. Its [`LockError::Unavailable`] may then say only that the caller's time
    /// ran out, not that the server does not answer, and the clean-up is waited for too, for at
    /// most `cut_wait`: a process that exits on that error must not leave what the cut request
    /// created.
    async fn request_call<T>(
        &self,
        call: impl std::future::Future<Output = Result<T>>,
        cut_wait: Option<Duration>,
    ) -> Result<T> {
        let life = &self.inner.life;
        let mut closed = life.closed.subscribe();
        let watched = async {
            tokio::select! {
                result = call => result,
                _ = closed.wait_for(|c| *c) => Err(LockError::Closed),
            }
        };
        let (result, own) = crate::driver::cleanup::scoped(&life.tally, watched).await;
        // A backend that does not answer cannot take a clean-up request either: the clean-up
        // goes on in the background (and Locker::shutdown waits for it).
        let wait = match &result {
            Ok(_) => None,
            Err(LockError::Unavailable { .. }) => cut_wait,
            Err(_) => Some(self.backend().request_timeout()),
        };
        if let Some(limit) = wait.filter(|_| own.in_flight() > 0) {
            if !own.idle_within(limit).await {
                tracing::warn!(
                    "the clean-up of a failed attempt did not end within {limit:?}; it goes on in the background"
                );
            }
        }
        result
    }
}

/// What the lockers made from one [`Locker::from_arc`] share about their life.
#[derive(Default)]
pub(crate) struct Life {
    /// The background clean-up of these lockers in flight.
    pub(crate) tally: crate::driver::cleanup::Tally,
    /// Set once by [`Locker::shutdown`].
    pub(crate) closed: tokio::sync::watch::Sender<bool>,
    /// Which task holds which guard: re-entry detection (see [`crate::reentry`]).
    pub(crate) holders: crate::reentry::Holders,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker").field("backend", &self.inner.backend).finish()
    }
}

/// Options of one lock request. Created by [`Locker::lock`], [`Locker::semaphore`],
/// [`RwLock::read`] and [`RwLock::write`].
#[must_use = "a LockBuilder does nothing until acquire() or try_acquire() is awaited"]
pub struct LockBuilder {
    locker: Locker,
    name: String,
    kind: LockKind,
    /// `None`: the backend's [`LockBackend::default_ttl`], else [`DEFAULT_TTL`].
    ttl: Option<Duration>,
    timeout: Option<Duration>,
    max_hold: Option<Duration>,
}

impl LockBuilder {
    /// The lease time (allowed 50 ms to 24 h). The lease is renewed in the background while the
    /// guard lives; the TTL is how long the lock outlives a holder that crashed or was cut off.
    ///
    /// Default: the backend URL's `ttl=` where the TTL is per lock (`redis://…?ttl=5s`,
    /// `mem://?ttl=5s`; see [`LockBackend::default_ttl`]), else [`DEFAULT_TTL`] (15 s). A TTL set
    /// here wins over the URL's.
    ///
    /// [`LockGuard::ttl`] is the value the server enforces, which can differ: on etcd and ZooKeeper
    /// every lock of a connection lives on the connection's session, whose TTL is set in the URL
    /// (`?ttl=` / `?session_timeout=`) and rounded by the server; the per-lock TTL does not change
    /// it. On Redis and `mem://` the per-lock TTL is used as given.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let guard = locker.lock("job").ttl(Duration::from_secs(30)).acquire().await?;
    /// assert_eq!(guard.ttl(), Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long [`LockBuilder::acquire`] waits at most (default: no limit). On timeout it returns
    /// [`LockError::Timeout`] and leaves nothing behind. Zero makes exactly one attempt, like
    /// [`LockBuilder::try_acquire`] but answering `Timeout` when the lock is taken.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// use locksmith::LockError;
    /// # let other = locksmith::Locker::from_arc(locker.backend().clone());
    /// let _held = other.lock("job").acquire().await?; // another process's, say
    /// let waited = locker.lock("job").timeout(Duration::from_millis(50)).acquire().await;
    /// assert!(matches!(waited, Err(LockError::Timeout(_))));
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A hard cap on how long the lock is held: once `max_hold` has passed since it was acquired, the
    /// watchdog stops renewing, fires [`LockGuard::lost`] with
    /// [`crate::LostReason::MaxHoldReached`] and releases the lock, whatever the holder is doing.
    /// A cap too far away to reach (`Duration::MAX`) is no cap.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// use locksmith::LostReason;
    /// let guard = locker.lock("job").max_hold(Duration::from_millis(50)).acquire().await?;
    /// assert_eq!(guard.lost().await, LostReason::MaxHoldReached);
    /// assert!(locker.lock("job").acquire().await.is_ok()); // released by the watchdog
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// What [`LockBuilder::acquire`] and [`LockBuilder::try_acquire`] start with: the request,
    /// checked ([`LockBuilder::request`]), on a locker that is not shut down; its backend; its
    /// metric labels.
    /// Checks the request and that the locker is open: the request, the backend, the labels,
    /// and the request's count in the locker's [`Locker::shutdown`] wait. The count is taken
    /// before the check and held until the request has returned its guard or its error, so that
    /// a shutdown either finds the locker closed here or waits until this request has left its
    /// queue or released what it was granted (a process that exits once `shutdown` returned, with
    /// an acquire still spawned, left a waiter in the queue or a grant nobody would release).
    fn begin(&self) -> Result<(LockRequest, Arc<dyn LockBackend>, Labels, Entered)> {
        let req = self.request()?;
        let in_flight = self.locker.inner.life.tally.enter();
        self.locker.check_open()?;
        let backend = self.locker.inner().backend.clone();
        let labels = self.locker.labels(&req);
        Ok((req, backend, labels, in_flight))
    }

    fn request(&self) -> Result<LockRequest> {
        let name = LockName::new(&self.name)?;
        let ttl = self
            .ttl
            .or_else(|| self.locker.inner().backend.default_ttl())
            .unwrap_or(DEFAULT_TTL);
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(LockError::InvalidOption(format!(
                "ttl {ttl:?} is outside the allowed range {MIN_TTL:?}..={MAX_TTL:?}"
            )));
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(LockError::InvalidOption("max_hold must be greater than zero".into()));
        }
        let fits = |t: Duration| {
            Instant::now()
                .checked_add(t)
                .and_then(|d| d.checked_add(DEADLINE_GRACE))
                .is_some()
        };
        if self.timeout.is_some_and(|t| !fits(t)) {
            return Err(LockError::InvalidOption(format!(
                "timeout {:?} is too large",
                self.timeout
            )));
        }
        match &self.kind {
            LockKind::Permit { permits } if !(1..=MAX_PERMITS).contains(permits) => {
                return Err(LockError::InvalidOption(format!(
                    "a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"
                )));
            }
            LockKind::Leader { value } if value.len() > MAX_VALUE_LEN => {
                return Err(LockError::InvalidOption(format!(
                    "a campaign value has at most {MAX_VALUE_LEN} bytes, not {}",
                    value.len()
                )));
            }
            // PostgreSQL's text cannot hold NUL, and every backend takes the same values.
            LockKind::Leader { value } if value.contains('\0') => {
                return Err(LockError::InvalidOption(
                    "a campaign value may not contain a NUL character".into(),
                ));
            }
            _ => {}
        }
        Ok(LockRequest {
            name,
            ttl,
            kind: self.kind.clone(),
        })
    }

    /// Waits until the lock is held (or the timeout passes) and returns its guard.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when the timeout passed while the lock was held by others;
    /// [`LockError::Unavailable`] when the backend did not answer (a waiter with time left rides
    /// out an outage); [`LockError::Closed`] after [`Locker::shutdown`];
    /// [`LockError::WouldDeadlock`] at once, with nothing queued, when this task's own guards of
    /// the lock on this locker would keep the request from being granted (see the
    /// [crate documentation](crate#re-entry)); the option and name
    /// errors of the builder. Whatever the error, this attempt's queue entry has been removed
    /// before it is returned (unless the backend stopped answering: then the removal goes on in
    /// the background, and [`Locker::shutdown`] waits for it), so a process may exit right away.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future leaves no waiter behind on the backend: the queue entry is
    /// removed in the background ([`Locker::shutdown`] waits for that), and a grant that raced
    /// with the cancellation is released.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let guard = locker.lock("orders/42").timeout(Duration::from_secs(5)).acquire().await?;
    /// assert!(guard.is_held());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(self) -> Result<LockGuard> {
        let (req, backend, labels, _in_flight) = self.begin()?;
        // Re-entry: refused before anything is queued (see `crate::reentry`).
        let me = crate::reentry::Holder::current().await;
        self.locker.inner.life.holders.check(&req.name, &req.kind, &me)?;
        let span = request_span!("acquire", req, backend);
        async {
            let start = Instant::now();
            let attempt = || async { match self.timeout {
                None => backend.acquire(&req, None).await,
                // A zero timeout is exactly one attempt, whatever the round-trip time.
                Some(t) if t.is_zero() => {
                    let limit = backend.request_timeout();
                    bounded(backend.as_ref(), "trying to take the lock", limit, backend.try_acquire(&req))
                        .await
                        .and_then(|lease| lease.ok_or(LockError::Timeout(t)))
                }
                Some(t) => {
                    // The backend returns at the deadline by itself when it is waiting for the lock
                    // (`Timeout`) or retrying a server that fails (`Unavailable`). One still inside
                    // a request DEADLINE_GRACE later is waiting for a server that does not answer.
                    // `request` checked that both fit in an `Instant` (from a moment before `start`,
                    // so this is the same check); a value too large would be a bug: no deadline.
                    let Some(deadline) = start.checked_add(t) else {
                        return Err(LockError::InvalidOption(format!("timeout {t:?} is too large")));
                    };
                    let late = deadline.checked_add(DEADLINE_GRACE).unwrap_or(deadline);
                    tokio::time::timeout_at(late, backend.acquire(&req, Some(deadline)))
                        .await
                        .unwrap_or_else(|_| {
                            Err(LockError::Unavailable {
                                message: format!(
                                    "{} did not answer by the deadline (a request was still in flight {DEADLINE_GRACE:?} after it)",
                                    backend.kind()
                                ),
                                source: None,
                            })
                        })
                }
            } };
            let call = async {
                let lease = attempt().await?;
                if !crate::watchdog::ran_out(&lease) {
                    return Ok(lease);
                }
                // Granted, but its caller polled the acquire again only after the lease ran out
                // (it left the call pending unpolled): another may hold the lock now. Released,
                // and asked for once more, within the same deadline.
                release_ran_out(backend.as_ref(), &lease, "acquire").await;
                attempt().await
            };
            // Boxed once here: the layers around it (the round-trip count, the span) then move a
            // pointer, not the whole request's future (docs/overhead.md, fifteenth pass).
            let (result, round_trips) = counted(Box::pin(self.locker.request_call(call, None))).await;
            let span = tracing::Span::current();
            span.record("round_trips", round_trips);
            match result {
                Ok(lease) => {
                    let waited = start.elapsed();
                    span.record("fencing_token", lease.fencing_token);
                    span.record("outcome", "acquired");
                    tracing::info!(fencing_token = lease.fencing_token, ?waited, "acquired");
                    if lease.ttl != req.ttl {
                        tracing::debug!(requested = ?req.ttl, effective = ?lease.ttl, "the backend enforces another TTL");
                    }
                    labels.acquire_ended("acquired", waited, lease.waited);
                    self.locker.guard(lease, self.max_hold, labels).map(|g| g.taken_by(me.clone()))
                }
                Err(LockError::Timeout(_)) => {
                    let waited = self.timeout.unwrap_or_default();
                    span.record("outcome", "timeout");
                    tracing::info!(?waited, "timed out");
                    labels.acquire_ended("timeout", start.elapsed(), false);
                    Err(LockError::Timeout(waited))
                }
                Err(e) => {
                    span.record("outcome", failure_outcome(&e));
                    // The caller has the error to act on (and the CLI prints it): no warning of
                    // its own, which said it a second time.
                    tracing::info!(error = %e, "acquire failed");
                    labels.acquire_ended(failure_outcome(&e), start.elapsed(), false);
                    Err(e)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt: `Some(guard)` if the lock was free, `None` if it is held (or another waiter is
    /// first in line). Never waits for the lock. A server that does not answer within the
    /// backend's request timeout (or the builder's [`LockBuilder::timeout`], if shorter) gives
    /// [`LockError::Unavailable`]. When the builder's timeout cut an attempt that the server may
    /// have carried out, that error comes once the attempt's clean-up has ended (a round trip or
    /// two on a server that answers; half a second more at most, as an `acquire`'s deadline
    /// grace): the process may exit on it and leave nothing held.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] and [`LockError::InvalidOption`] for bad input (before any
    /// request); [`LockError::Unavailable`] as above; [`LockError::Denied`] when the server
    /// refused the request; [`LockError::Closed`] after [`Locker::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockBuilder::acquire`]: a dropped attempt leaves nothing held or queued.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let first = locker.lock("job").try_acquire().await?.expect("the lock is free");
    /// assert!(locker.lock("job").try_acquire().await?.is_none());
    /// first.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        let (req, backend, labels, _in_flight) = self.begin()?;
        let me = crate::reentry::Holder::current().await;
        let span = request_span!("try_acquire", req, backend);
        let request_timeout = backend.request_timeout();
        let (limit, cut_wait) = match self.timeout {
            Some(t) if !t.is_zero() && t < request_timeout => (t, Some(DEADLINE_GRACE.min(request_timeout))),
            _ => (request_timeout, None),
        };
        let attempt = || {
            bounded(
                backend.as_ref(),
                "trying to take the lock",
                limit,
                backend.try_acquire(&req),
            )
        };
        let call = async {
            match attempt().await? {
                // Granted, but collected after its lease ran out (as in `acquire`): tried once more.
                Some(lease) if crate::watchdog::ran_out(&lease) => {
                    release_ran_out(backend.as_ref(), &lease, "try").await;
                    attempt().await
                }
                answer => Ok(answer),
            }
        };
        let start = Instant::now();
        let (result, round_trips) = counted(Box::pin(self.locker.request_call(call, cut_wait)))
            .instrument(span.clone())
            .await;
        span.record("round_trips", round_trips);
        let outcome = match &result {
            Ok(Some(lease)) => {
                span.record("fencing_token", lease.fencing_token);
                "acquired"
            }
            Ok(None) => "busy",
            Err(e) => failure_outcome(e),
        };
        span.record("outcome", outcome);
        labels.acquire_ended(outcome, start.elapsed(), false);
        match result? {
            Some(lease) => self
                .locker
                .guard(lease, self.max_hold, labels)
                .map(|g| Some(g.taken_by(me))),
            None => Ok(None),
        }
    }
}

/// Releases `lease`, granted to an `acquire` or a `try` (`call`, for the log) whose caller took it
/// only after it ran out (it left the call pending unpolled past the lease's TTL): another may
/// hold the lock now, and what is left of this grant is freed before the call asks again. Its
/// error is only logged: the lease is given up on either way.
async fn release_ran_out(backend: &dyn LockBackend, lease: &crate::lease::Lease, call: &str) {
    tracing::info!(
        fencing_token = lease.fencing_token,
        call,
        "the lease ran out before the caller took it; releasing it and asking again"
    );
    if let Err(e) = bounded_release(backend, "releasing a lease that ran out", lease).await {
        tracing::debug!(error = %e, "the release of a lease that ran out failed");
    }
}
