//! The blocking API (feature `blocking`): locksmith for synchronous programs, with no async code
//! and no tokio runtime of their own, named as the async API is (as `reqwest::blocking` is to
//! `reqwest`, and `postgres` to `tokio-postgres`).
//!
//! ```
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), locksmith::LockError> {
//! let locker = locksmith::blocking::connect("mem://")?; // or redis://, file://, etcd://, ...
//! let guard = locker
//!     .lock("orders/42")
//!     .ttl(Duration::from_secs(10))
//!     .timeout(Duration::from_secs(5))
//!     .acquire()?;
//! // ... synchronous work; the lease is renewed meanwhile ...
//! println!("fencing token {}", guard.fencing_token());
//! guard.release()?;
//!
//! // Or: acquire, run, release (also on a panic), and the value back unless the lock was lost.
//! let token = locker.lock("orders/42").run(|guard| guard.fencing_token())?;
//! # assert!(token > 0);
//! locker.shutdown()?; // before main returns: nothing of this process is held after it
//! # Ok(()) }
//! ```
//!
//! Each [`connect`] starts a small tokio runtime of its own (one worker thread) that the
//! [`Locker`] keeps for its life: its watchdog renews every lease there while the calling thread
//! is busy with the work (or blocked in a system call), and the backend's connection lives there.
//! Every call blocks the calling thread until it has an answer. Dropping a guard releases its lock
//! before `drop` returns; dropping the last handle of a locker (its clones, guards, builders)
//! shuts it down.
//!
//! **Not from async code**: a call made where a tokio runtime runs (inside an `async fn` or a
//! `#[tokio::main]`, or a thread of a runtime such as `spawn_blocking`'s) would stall that
//! runtime or deadlock it; it answers [`LockError::BlockingInAsync`] instead (no panic, no wait).
//! Use the async API there, or call the blocking API from a thread of your own
//! (`std::thread::spawn`). A guard dropped (or released) there is released in the background,
//! on the locker's runtime, while the locker lives.
//!
//! Re-entry (see [`crate::LockError::WouldDeadlock`]): a thread asking again for a lock it holds
//! on the same locker is refused at once, as a task is in the async API.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::{ConnectOptions, Leader, ListedLock, LockError, LockInfo, LockKind, LostReason, Result};

/// The runtime of one [`connect`] and the locker that lives on it.
struct Shared {
    runtime: Option<tokio::runtime::Runtime>,
    locker: crate::Locker,
}

impl Shared {
    /// Runs `call` on this locker's runtime, blocking the calling thread; refused where a runtime
    /// runs.
    fn block_on<F: Future>(&self, call: &'static str, future: F) -> Result<F::Output> {
        refuse_in_async(call)?;
        match &self.runtime {
            Some(runtime) => Ok(runtime.block_on(future)),
            None => Err(LockError::Closed),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Dropped in async code: no blocking there. What is left expires after its TTL.
            runtime.shutdown_background();
            return;
        }
        if !self.locker.is_shut_down() {
            if let Err(e) = runtime.block_on(self.locker.shutdown()) {
                tracing::warn!(error = %e, "shutting down the blocking locker on drop");
            }
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

impl Shared {
    /// Runs `release` in the background on this locker's runtime (from async code, where
    /// blocking is refused): it runs there while the locker lives.
    fn release_in_background<F>(&self, release: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if let Some(runtime) = &self.runtime {
            drop(runtime.spawn(release));
        }
    }
}

/// [`LockError::BlockingInAsync`] where a tokio runtime runs.
fn refuse_in_async(call: &'static str) -> Result<()> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Err(LockError::BlockingInAsync { call }),
        Err(_) => Ok(()),
    }
}

/// A runtime of one worker thread for one locker.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("locksmith-blocking")
        .enable_all()
        .build()
        .map_err(|e| LockError::unavailable("starting the runtime of locksmith::blocking", e))
}

/// Connects to the backend named by `url` (as [`crate::connect`]) and returns a blocking
/// [`Locker`] over it, with a runtime of its own.
///
/// # Errors
///
/// As [`crate::connect`]; [`LockError::BlockingInAsync`] when called where a tokio runtime runs;
/// [`LockError::Unavailable`] if the runtime's thread cannot be started.
///
/// # Cancel safety
///
/// Not a future: it blocks until connected or failed.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), locksmith::LockError> {
/// let locker = locksmith::blocking::connect("mem://")?;
/// let guard = locker.lock("reports/daily").try_acquire()?.expect("free");
/// guard.release()?;
/// # Ok(()) }
/// ```
pub fn connect(url: &str) -> Result<Locker> {
    connect_with(url, &ConnectOptions::default())
}

/// [`connect`] with settings on top of the URL (as [`crate::connect_with`]).
///
/// # Errors
///
/// As [`connect`] and [`crate::connect_with`].
///
/// # Cancel safety
///
/// Not a future: it blocks until connected or failed.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), locksmith::LockError> {
/// use std::time::Duration;
/// let options = locksmith::ConnectOptions::new().connect_timeout(Duration::from_secs(2));
/// let locker = locksmith::blocking::connect_with("mem://", &options)?;
/// # drop(locker); Ok(()) }
/// ```
pub fn connect_with(url: &str, options: &ConnectOptions) -> Result<Locker> {
    refuse_in_async("connect")?;
    let runtime = runtime()?;
    let locker = runtime.block_on(crate::connect_with(url, options))?;
    Ok(Locker {
        shared: Arc::new(Shared {
            runtime: Some(runtime),
            locker,
        }),
    })
}

/// A blocking [`Locker`] over the async locker that `make` builds, run on the blocking locker's
/// own runtime: for what a URL alone does not say, such as a [`crate::Dual`] locker (one lock in
/// the old and the new backend at once, for a migration; see `docs/migration.md`).
///
/// # Errors
///
/// What `make` returns; [`LockError::BlockingInAsync`] when called where a tokio runtime runs;
/// [`LockError::Unavailable`] if the runtime's thread cannot be started.
///
/// # Cancel safety
///
/// Not a future: it blocks until `make`'s future has ended.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), locksmith::LockError> {
/// let locker = locksmith::blocking::from_async(|| async {
///     let old = locksmith::connect("mem://old-store").await?; // redis://...?layout=plain
///     let new = locksmith::connect("mem://new-store").await?; // etcd://...
///     Ok(locksmith::Dual::locker(&old, &new))
/// })?;
/// let guard = locker.lock("orders/42").acquire()?; // held in both
/// guard.release()?;
/// # Ok(()) }
/// ```
pub fn from_async<F, Fut>(make: F) -> Result<Locker>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<crate::Locker>>,
{
    refuse_in_async("from_async")?;
    let runtime = runtime()?;
    let locker = runtime.block_on(make())?;
    Ok(Locker {
        shared: Arc::new(Shared {
            runtime: Some(runtime),
            locker,
        }),
    })
}

/// A blocking connection to one lock backend (see the [module](self)): cheap to clone; clones
/// share the connection, runtime and watchdog.
#[derive(Clone)]
pub struct Locker {
    shared: Arc<Shared>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Locker")
            .field("locker", &self.shared.locker)
            .finish()
    }
}

impl Locker {
    fn builder(&self, inner: crate::LockBuilder) -> LockBuilder {
        LockBuilder {
            inner,
            shared: self.shared.clone(),
        }
    }

    /// Starts a request for the mutex `name` (see [`crate::Locker::lock`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("orders/42").acquire()?;
    /// assert!(locker.lock("orders/42").try_acquire()?.is_none());
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        self.builder(self.shared.locker.lock(name))
    }

    /// Starts a request for one permit of the semaphore `name` with `permits` permits (see
    /// [`crate::Locker::semaphore`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let a = locker.semaphore("api-quota", 2).acquire()?;
    /// let b = locker.semaphore("api-quota", 2).acquire()?;
    /// assert!(locker.semaphore("api-quota", 2).try_acquire()?.is_none());
    /// # drop((a, b)); Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        self.builder(self.shared.locker.semaphore(name, permits))
    }

    /// The read-write lock `name` (see [`crate::RwLock`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let config = locker.rwlock("config");
    /// let (r1, r2) = (config.read().acquire()?, config.read().acquire()?); // readers share
    /// assert!(config.write().try_acquire()?.is_none());
    /// # drop((r1, r2)); Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            locker: self.clone(),
            name: name.into(),
        }
    }

    /// The election `name` (see [`crate::Election`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let election = locker.election("scheduler");
    /// let leading = election.campaign("node-1").acquire()?;
    /// assert_eq!(election.leader()?.map(|l| l.term), Some(leading.term()));
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
        }
    }

    /// Starts a request for the mutexes `names`, all or none, taken in one global order (see
    /// [`crate::Locker::lock_all`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["accounts/bob", "accounts/alice"]).acquire()?;
    /// assert_eq!(both.names(), ["accounts/alice", "accounts/bob"]);
    /// both.release()?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I, S>(&self, names: I) -> LockAll
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockAll {
            inner: self.shared.locker.lock_all(names),
            shared: self.shared.clone(),
        }
    }

    /// Who holds `name` and how many wait (see [`crate::Locker::inspect`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Locker::inspect`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// assert!(locker.inspect("free")?.holder.is_none());
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, name: &str) -> Result<LockInfo> {
        self.shared
            .block_on("Locker::inspect", self.shared.locker.inspect(name))?
    }

    /// The locks in use under `prefix` (see [`crate::Locker::list`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Locker::list`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// assert!(locker.list("orders/")?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn list(&self, prefix: &str) -> Result<Vec<ListedLock>> {
        self.shared.block_on("Locker::list", self.shared.locker.list(prefix))?
    }

    /// Shuts the locker down (see [`crate::Locker::shutdown`]): every guard still held is
    /// released, the session ends; call it before `main` returns. Dropping the last handle of
    /// the locker does it too.
    ///
    /// # Errors
    ///
    /// As [`crate::Locker::shutdown`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until done.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("nightly").acquire()?;
    /// locker.shutdown()?;
    /// assert!(!guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn shutdown(&self) -> Result<()> {
        self.shared
            .block_on("Locker::shutdown", self.shared.locker.shutdown())?
    }

    /// How many guards of this locker are held (renewed by its watchdog).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("job").acquire()?;
    /// assert_eq!(locker.held_count(), 1);
    /// guard.release()?;
    /// assert_eq!(locker.held_count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn held_count(&self) -> usize {
        self.shared.locker.held_count()
    }

    /// The async locker underneath, for what the blocking API does not wrap (its calls must run
    /// on a runtime, not in this thread).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// assert_eq!(locker.as_async().backend().kind(), "mem");
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::Locker {
        &self.shared.locker
    }
}

/// Options of one blocking lock request (see [`crate::LockBuilder`]).
#[must_use = "a LockBuilder does nothing until acquire(), try_acquire() or run() is called"]
pub struct LockBuilder {
    inner: crate::LockBuilder,
    shared: Arc<Shared>,
}

impl LockBuilder {
    /// The lease time (see [`crate::LockBuilder::ttl`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let guard = locker.lock("job").ttl(Duration::from_secs(30)).acquire()?;
    /// assert_eq!(guard.ttl(), Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.inner = self.inner.ttl(ttl);
        self
    }

    /// How long [`LockBuilder::acquire`] waits at most (see [`crate::LockBuilder::timeout`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let other = locksmith::blocking::connect("mem://")?; // the same store: another "process"
    /// let _held = other.lock("job").acquire()?;
    /// let waited = locker.lock("job").timeout(Duration::from_millis(50)).acquire();
    /// assert!(matches!(waited, Err(locksmith::LockError::Timeout(_))));
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.inner = self.inner.timeout(timeout);
        self
    }

    /// A hard cap on how long the lock is held (see [`crate::LockBuilder::max_hold`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let guard = locker.lock("job").max_hold(Duration::from_millis(50)).acquire()?;
    /// let reason = guard.wait_lost(Duration::from_secs(5))?;
    /// assert_eq!(reason, Some(locksmith::LostReason::MaxHoldReached));
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.inner = self.inner.max_hold(max_hold);
        self
    }

    /// Blocks until the lock is held (or the timeout passes) and returns its guard.
    ///
    /// # Errors
    ///
    /// As [`crate::LockBuilder::acquire`] ([`LockError::WouldDeadlock`] when this thread holds
    /// the lock already on this locker); [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until it has the lock or an error, and leaves nothing queued on
    /// an error.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// use std::time::Duration;
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("orders/42").timeout(Duration::from_secs(5)).acquire()?;
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(self) -> Result<LockGuard> {
        let guard = self.shared.block_on("LockBuilder::acquire", self.inner.acquire())??;
        Ok(LockGuard::new(guard, self.shared))
    }

    /// One attempt: `Some(guard)` if the lock was free, `None` if it is held.
    ///
    /// # Errors
    ///
    /// As [`crate::LockBuilder::try_acquire`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("deploy").try_acquire()?.expect("free");
    /// assert!(locker.lock("deploy").try_acquire()?.is_none());
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn try_acquire(self) -> Result<Option<LockGuard>> {
        let guard = self
            .shared
            .block_on("LockBuilder::try_acquire", self.inner.try_acquire())??;
        Ok(guard.map(|g| LockGuard::new(g, self.shared)))
    }

    /// Acquires the lock, runs `work` on this thread with its guard, releases the lock (also
    /// when the work panics: the guard is released as the panic unwinds) and returns the work's
    /// value: the blocking twin of [`crate::LockBuilder::run`].
    ///
    /// Synchronous work cannot be stopped from outside: the watchdog renews the lease while it
    /// runs, and if the lock is lost meanwhile, the work runs on to its end, but its value is
    /// **not** returned: `run` answers [`LockError::Lost`]. Work that should stop early checks
    /// [`LockGuard::is_held`] between its steps; what it writes carries
    /// [`LockGuard::fencing_token`], so that the storage refuses a stale holder.
    ///
    /// # Errors
    ///
    /// As [`LockBuilder::acquire`] (the work did not run); [`LockError::Lost`] when the lock was
    /// lost before the work ended.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until the work ended and the lock was released.
    ///
    /// # Panics
    ///
    /// With the work's panic, once the lock is released.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let token = locker.lock("reports/daily").run(|guard| {
    ///     // ... the work, passing guard.fencing_token() to what it writes ...
    ///     guard.fencing_token()
    /// })?;
    /// # assert!(token > 0);
    /// # Ok(()) }
    /// ```
    pub fn run<T>(self, work: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.acquire()?;
        let value = work(&guard);
        let name = guard.name().to_owned();
        let lost = guard.lost_reason().or_else(|| (!guard.is_held()).then(ran_out));
        let released = guard.release();
        finish(name, value, lost, released)
    }
}

/// The reason of a lease that ran out while the work ran, before the watchdog said so.
fn ran_out() -> LostReason {
    LostReason::RenewalFailed("the lease ran out before the work ended (no renewal was answered in time)".into())
}

/// What `run` answers once the work ended with `value` and the release answered `released`.
fn finish<T>(name: String, value: T, lost: Option<LostReason>, released: Result<()>) -> Result<T> {
    match (lost, released) {
        (Some(reason), _) => Err(LockError::Lost { name, reason }),
        (None, Err(LockError::NotHeld { .. })) => Err(LockError::Lost {
            name,
            reason: LostReason::LeaseGone(
                "the release found the lock no longer held: it was lost before the work ended".into(),
            ),
        }),
        (None, Err(e)) => {
            tracing::warn!(lock = %name, error = %e, "the release after the work failed; the work ended while the lock was held");
            Ok(value)
        }
        (None, Ok(())) => Ok(value),
    }
}

/// A held lock (see [`crate::LockGuard`]): renewed in the background while it lives, released by
/// [`LockGuard::release`] or when dropped (before `drop` returns).
#[must_use = "dropping a LockGuard releases the lock at once"]
pub struct LockGuard {
    inner: Option<crate::LockGuard>,
    shared: Arc<Shared>,
}

impl LockGuard {
    fn new(inner: crate::LockGuard, shared: Arc<Shared>) -> Self {
        LockGuard {
            inner: Some(inner),
            shared,
        }
    }

    fn inner(&self) -> &crate::LockGuard {
        self.inner.as_ref().expect("a guard is only emptied when it ends")
    }

    /// The lock name.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("orders/42").acquire()?;
    /// assert_eq!(guard.name(), "orders/42");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.inner().name()
    }

    /// What this guard holds.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.rwlock("config").read().acquire()?;
    /// assert_eq!(guard.kind(), &locksmith::LockKind::Read);
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> &LockKind {
        self.inner().kind()
    }

    /// The fencing token (see [`crate::LockGuard::fencing_token`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let first = locker.lock("job").acquire()?;
    /// let token = first.fencing_token();
    /// first.release()?;
    /// assert!(locker.lock("job").acquire()?.fencing_token() > token);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.inner().fencing_token()
    }

    /// The lease time the server enforces.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let guard = locker.lock("job").ttl(Duration::from_secs(5)).acquire()?;
    /// assert_eq!(guard.ttl(), Duration::from_secs(5)); // mem:// enforces the TTL as given
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.inner().ttl()
    }

    /// True until the lock is lost (see [`crate::LockGuard::is_held`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("job").acquire()?;
    /// assert!(guard.is_held());
    /// locker.shutdown()?;
    /// assert!(!guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.inner().is_held()
    }

    /// Why the lock was lost, once it is.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("job").acquire()?;
    /// assert_eq!(guard.lost_reason(), None);
    /// locker.shutdown()?;
    /// assert_eq!(guard.lost_reason(), Some(locksmith::LostReason::Shutdown));
    /// # Ok(()) }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.inner().lost_reason()
    }

    /// Blocks until the lock is lost (`Some(reason)`) or `timeout` passes while it is held
    /// (`None`): the blocking form of [`crate::LockGuard::lost`].
    ///
    /// # Errors
    ///
    /// [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: waiting changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// use std::time::Duration;
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("job").acquire()?;
    /// assert_eq!(guard.wait_lost(Duration::from_millis(10))?, None); // still held
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<Option<LostReason>> {
        let lost = self.inner().lost();
        self.shared.block_on("LockGuard::wait_lost", async move {
            tokio::time::timeout(timeout, lost).await.ok()
        })
    }

    /// Guarded writes under this lock (see [`crate::LockGuard::guarded`]), blocking.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("billing").acquire()?;
    /// guard.guarded().put("/billing/last-run", "2026-11-24")?;
    /// assert_eq!(guard.guarded().get("/billing/last-run")?, Some(b"2026-11-24".to_vec()));
    /// # Ok(()) }
    /// ```
    pub fn guarded(&self) -> Guarded<'_> {
        Guarded { guard: self }
    }

    /// Says that this thread no longer holds the guard, for re-entry detection (see
    /// [`crate::LockGuard::detach_from_task`]): before handing it to another thread, when this
    /// one may ask for the same lock again before the other uses it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("jobs").acquire()?;
    /// guard.detach_from_thread();
    /// let worker = std::thread::spawn(move || guard.release());
    /// let next = locker.lock("jobs").acquire()?; // waits for the worker's release
    /// worker.join().expect("the worker")?;
    /// # drop(next); Ok(()) }
    /// ```
    pub fn detach_from_thread(&self) {
        self.inner().detach_from_task();
    }

    /// The async guard underneath (its lease, holder id, `lost()` future).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("job").acquire()?;
    /// assert_eq!(guard.as_async().lease().fencing_token, guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::LockGuard {
        self.inner()
    }

    /// Releases the lock and blocks until the backend confirms.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::release`]: [`LockError::NotHeld`] if the lock was lost.
    /// [`LockError::BlockingInAsync`] in async code (the lock is released in the background
    /// then).
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("job").acquire()?;
    /// guard.release()?;
    /// assert!(locker.lock("job").try_acquire()?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<()> {
        let guard = self.inner.take().expect("a guard is only emptied when it ends");
        if let Err(e) = refuse_in_async("LockGuard::release") {
            self.shared.release_in_background(guard.release());
            return Err(e);
        }
        self.shared.block_on("LockGuard::release", guard.release())?
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                self.shared.release_in_background(guard.release());
                return;
            }
            if let Ok(Err(e)) = self.shared.block_on("LockGuard::drop", guard.release()) {
                if !e.is_not_held() {
                    tracing::warn!(error = %e, "release on drop failed");
                }
            }
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Some(guard) => guard.fmt(f),
            None => f.write_str("LockGuard(released)"),
        }
    }
}

/// Blocking guarded writes of one held lock (see [`crate::Guarded`]).
pub struct Guarded<'a> {
    guard: &'a LockGuard,
}

impl Guarded<'_> {
    fn block_on<F: Future>(&self, call: &'static str, future: F) -> Result<F::Output> {
        self.guard.shared.block_on(call, future)
    }

    /// Sets `key` to `value` if the lock is still held (see [`crate::Guarded::put`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Guarded::put`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("billing").acquire()?;
    /// guard.guarded().put("/billing/last-run", "2026-11-24")?;
    /// # Ok(()) }
    /// ```
    pub fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> Result<()> {
        self.block_on("Guarded::put", self.guard.inner().guarded().put(key, value))?
    }

    /// Deletes `key` if the lock is still held (see [`crate::Guarded::delete`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Guarded::delete`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("billing").acquire()?;
    /// guard.guarded().put("/billing/tmp", "x")?;
    /// assert!(guard.guarded().delete("/billing/tmp")?);
    /// assert!(!guard.guarded().delete("/billing/tmp")?);
    /// # Ok(()) }
    /// ```
    pub fn delete(&self, key: &str) -> Result<bool> {
        self.block_on("Guarded::delete", self.guard.inner().guarded().delete(key))?
    }

    /// Sets `key` to `value` if it holds `expected` and the lock is still held (see
    /// [`crate::Guarded::compare_and_set`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Guarded::compare_and_set`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("billing").acquire()?;
    /// assert!(guard.guarded().compare_and_set("/billing/cursor", None, "1")?);
    /// assert!(!guard.guarded().compare_and_set("/billing/cursor", None, "1")?); // exists now
    /// # Ok(()) }
    /// ```
    pub fn compare_and_set(&self, key: &str, expected: Option<&[u8]>, value: impl Into<Vec<u8>>) -> Result<bool> {
        let guarded = self.guard.inner().guarded();
        self.block_on(
            "Guarded::compare_and_set",
            guarded.compare_and_set(key, expected, value),
        )?
    }

    /// Reads `key` (see [`crate::Guarded::get`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Guarded::get`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let guard = locker.lock("billing").acquire()?;
    /// assert_eq!(guard.guarded().get("/billing/cursor")?, None);
    /// # Ok(()) }
    /// ```
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.block_on("Guarded::get", self.guard.inner().guarded().get(key))?
    }
}

/// A read-write lock, by name (see [`crate::RwLock`]).
#[derive(Clone, Debug)]
pub struct RwLock {
    locker: Locker,
    name: String,
}

impl RwLock {
    /// A request for the read side.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let config = locker.rwlock("config");
    /// let r = config.read().acquire()?;
    /// assert!(config.read().try_acquire()?.is_some()); // readers share
    /// # drop(r); Ok(()) }
    /// ```
    pub fn read(&self) -> LockBuilder {
        self.locker
            .builder(self.locker.shared.locker.rwlock(self.name.clone()).read())
    }

    /// A request for the write side.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let config = locker.rwlock("config");
    /// let w = config.write().acquire()?;
    /// assert!(config.read().try_acquire()?.is_none());
    /// w.release()?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> LockBuilder {
        self.locker
            .builder(self.locker.shared.locker.rwlock(self.name.clone()).write())
    }

    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// assert_eq!(locker.rwlock("config").name(), "config");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One election, by name (see [`crate::Election`]).
#[derive(Clone, Debug)]
pub struct Election {
    locker: Locker,
    name: String,
}

impl Election {
    /// Starts a campaign with `value` (see [`crate::Election::campaign`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let election = locker.election("scheduler");
    /// let leading = election.campaign("10.0.0.7:8080").acquire()?;
    /// assert!(election.campaign("10.0.0.8:8080").try_acquire()?.is_none());
    /// leading.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn campaign(&self, value: impl Into<String>) -> Campaign {
        let request = self
            .locker
            .shared
            .locker
            .request(self.name.clone(), LockKind::Leader { value: value.into() });
        Campaign {
            builder: self.locker.builder(request),
        }
    }

    /// Who leads now (see [`crate::Election::leader`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Election::leader`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let election = locker.election("scheduler");
    /// let leading = election.campaign("host-a:8080").acquire()?;
    /// assert_eq!(election.leader()?.expect("a leader").value, "host-a:8080");
    /// leading.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn leader(&self) -> Result<Option<Leader>> {
        let election = self.locker.shared.locker.election(self.name.clone());
        self.locker
            .shared
            .block_on("Election::leader", async move { election.leader().await })?
    }

    /// The election's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// assert_eq!(locker.election("scheduler").name(), "scheduler");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The options of one campaign (see [`crate::Campaign`]).
#[must_use = "a Campaign does nothing until acquire() or try_acquire() is called"]
pub struct Campaign {
    builder: LockBuilder,
}

impl Campaign {
    /// The lease time of the leadership.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let leading = locker.election("scheduler").campaign("node-1").ttl(Duration::from_secs(5)).acquire()?;
    /// assert_eq!(leading.guard().ttl(), Duration::from_secs(5));
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.builder = self.builder.ttl(ttl);
        self
    }

    /// How long [`Campaign::acquire`] waits to lead.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let other = locksmith::blocking::connect("mem://")?; // the same store: another "process"
    /// let _leading = other.election("scheduler").campaign("node-1").acquire()?;
    /// let second = locker.election("scheduler").campaign("node-2").timeout(Duration::from_millis(50)).acquire();
    /// assert!(matches!(second, Err(locksmith::LockError::Timeout(_))));
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.builder = self.builder.timeout(timeout);
        self
    }

    /// Resign after this long, whatever the leader is doing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let leading = locker.election("scheduler").campaign("node-1").max_hold(Duration::from_millis(50)).acquire()?;
    /// assert_eq!(leading.wait_lost(Duration::from_secs(5))?, Some(locksmith::LostReason::MaxHoldReached));
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.builder = self.builder.max_hold(max_hold);
        self
    }

    /// Blocks in line until this candidate leads (or the timeout passes).
    ///
    /// # Errors
    ///
    /// As [`crate::Campaign::acquire`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until leading or an error, and leaves no candidate behind on an
    /// error.
    ///
    /// # Examples
    ///
    /// See [`Election::leader`].
    pub fn acquire(self) -> Result<LeaderGuard> {
        Ok(LeaderGuard {
            guard: self.builder.acquire()?,
        })
    }

    /// Leads now if nobody leads and nobody is in line; `None` otherwise.
    ///
    /// # Errors
    ///
    /// As [`crate::Campaign::try_acquire`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let leading = locker.election("cron").campaign("a").try_acquire()?.expect("nobody leads");
    /// assert!(locker.election("cron").campaign("b").try_acquire()?.is_none());
    /// # drop(leading); Ok(()) }
    /// ```
    pub fn try_acquire(self) -> Result<Option<LeaderGuard>> {
        Ok(self.builder.try_acquire()?.map(|guard| LeaderGuard { guard }))
    }
}

/// Leadership of an election (see [`crate::LeaderGuard`]): given up by [`LeaderGuard::resign`]
/// or when dropped.
#[must_use = "dropping a LeaderGuard resigns at once"]
#[derive(Debug)]
pub struct LeaderGuard {
    guard: LockGuard,
}

impl LeaderGuard {
    /// The term: this leader's fencing token.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let election = locker.election("scheduler");
    /// let first = election.campaign("node-1").acquire()?;
    /// let term = first.term();
    /// first.resign()?;
    /// assert!(election.campaign("node-2").acquire()?.term() > term);
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// True until the leadership is lost.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let leading = locker.election("scheduler").campaign("node-1").acquire()?;
    /// assert!(leading.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Blocks until the leadership is lost or `timeout` passes (see [`LockGuard::wait_lost`]).
    ///
    /// # Errors
    ///
    /// [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let leading = locker.election("scheduler").campaign("node-1").acquire()?;
    /// assert_eq!(leading.wait_lost(Duration::from_millis(10))?, None); // still leading
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<Option<LostReason>> {
        self.guard.wait_lost(timeout)
    }

    /// The underlying guard.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let leading = locker.election("scheduler").campaign("node-1").acquire()?;
    /// assert_eq!(leading.guard().fencing_token(), leading.term());
    /// # Ok(()) }
    /// ```
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Gives up the leadership: the next candidate in line leads.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let election = locker.election("scheduler");
    /// election.campaign("node-1").acquire()?.resign()?;
    /// assert_eq!(election.leader()?, None);
    /// # Ok(()) }
    /// ```
    pub fn resign(self) -> Result<()> {
        self.guard.release()
    }
}

/// A request for several mutexes at once (see [`crate::LockAll`]).
#[must_use = "a LockAll does nothing until acquire(), try_acquire() or run() is called"]
pub struct LockAll {
    inner: crate::LockAll,
    shared: Arc<Shared>,
}

impl LockAll {
    /// The lease time of every lock of the set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let both = locker.lock_all(["a", "b"]).ttl(Duration::from_secs(30)).acquire()?;
    /// assert!(both.as_async().guards().iter().all(|g| g.ttl() == Duration::from_secs(30)));
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.inner = self.inner.ttl(ttl);
        self
    }

    /// How long [`LockAll::acquire`] waits at most for the whole set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let other = locksmith::blocking::connect("mem://")?; // the same store: another "process"
    /// let _b = other.lock("b").acquire()?;
    /// let both = locker.lock_all(["a", "b"]).timeout(Duration::from_millis(50)).acquire();
    /// assert!(matches!(both, Err(locksmith::LockError::Timeout(_))));
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.inner = self.inner.timeout(timeout);
        self
    }

    /// A cap on how long each lock of the set is held.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let both = locker.lock_all(["a", "b"]).max_hold(Duration::from_millis(50)).acquire()?;
    /// let (_name, reason) = both.wait_lost(Duration::from_secs(5))?.expect("lost");
    /// assert_eq!(reason, locksmith::LostReason::MaxHoldReached);
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.inner = self.inner.max_hold(max_hold);
        self
    }

    /// Blocks until every lock of the set is held (see [`crate::LockAll::acquire`]).
    ///
    /// # Errors
    ///
    /// As [`crate::LockAll::acquire`] (what was taken is released first);
    /// [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until it has every lock or an error.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["accounts/bob", "accounts/alice"]).acquire()?;
    /// assert_eq!(both.names(), ["accounts/alice", "accounts/bob"]);
    /// both.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(self) -> Result<MultiGuard> {
        let set = self.shared.block_on("LockAll::acquire", self.inner.acquire())??;
        Ok(MultiGuard {
            inner: Some(set),
            shared: self.shared,
        })
    }

    /// One attempt at each lock (see [`crate::LockAll::try_acquire`]).
    ///
    /// # Errors
    ///
    /// As [`crate::LockAll::try_acquire`]; [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until answered.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let b = locker.lock("b").acquire()?;
    /// assert!(locker.lock_all(["a", "b"]).try_acquire()?.is_none());
    /// assert!(locker.lock("a").try_acquire()?.is_some()); // "a" was released
    /// # drop(b); Ok(()) }
    /// ```
    pub fn try_acquire(self) -> Result<Option<MultiGuard>> {
        let set = self
            .shared
            .block_on("LockAll::try_acquire", self.inner.try_acquire())??;
        Ok(set.map(|set| MultiGuard {
            inner: Some(set),
            shared: self.shared,
        }))
    }

    /// Takes the set, runs `work` on this thread, releases every lock and returns the work's
    /// value, unless a lock of the set was lost before it ended (see [`LockBuilder::run`]).
    ///
    /// # Errors
    ///
    /// As [`LockAll::acquire`]; [`LockError::Lost`] naming the lock lost.
    ///
    /// # Cancel safety
    ///
    /// Not a future: it blocks until the work ended and the locks were released.
    ///
    /// # Panics
    ///
    /// With the work's panic, once the locks are released.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// let locker = locksmith::blocking::connect("mem://")?;
    /// let moved = locker.lock_all(["accounts/alice", "accounts/bob"]).run(|set| {
    ///     // move money, with set.fencing_token("accounts/alice") and ..("accounts/bob")
    ///     set.is_held()
    /// })?;
    /// assert!(moved);
    /// # Ok(()) }
    /// ```
    pub fn run<T>(self, work: impl FnOnce(&MultiGuard) -> T) -> Result<T> {
        let set = self.acquire()?;
        let value = work(&set);
        let inner = set.inner();
        let lost = inner.lost_reason().or_else(|| {
            inner
                .guards()
                .iter()
                .find(|g| !g.is_held())
                .map(|g| (g.name().to_owned(), ran_out()))
        });
        let first = set.names().first().cloned().unwrap_or_default();
        match lost {
            Some((name, reason)) => {
                drop(set);
                Err(LockError::Lost { name, reason })
            }
            None => finish(first, value, None, set.release()),
        }
    }
}

/// Several locks held together (see [`crate::MultiGuard`]): released at once by
/// [`MultiGuard::release`] or when dropped.
#[must_use = "dropping a MultiGuard releases every lock at once"]
pub struct MultiGuard {
    inner: Option<crate::MultiGuard>,
    shared: Arc<Shared>,
}

impl MultiGuard {
    fn inner(&self) -> &crate::MultiGuard {
        self.inner.as_ref().expect("a guard is only emptied when it ends")
    }

    /// The names of the set, sorted.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["b", "a"]).acquire()?;
    /// assert_eq!(both.names(), ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> Vec<String> {
        self.inner().names().map(str::to_owned).collect()
    }

    /// The fencing token of the lock `name` of the set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["a", "b"]).acquire()?;
    /// assert!(both.fencing_token("a").is_some());
    /// assert_eq!(both.fencing_token("c"), None);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.inner().get(name).map(crate::LockGuard::fencing_token)
    }

    /// True while every lock of the set is held.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["a", "b"]).acquire()?;
    /// assert!(both.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.inner().is_held()
    }

    /// The first lock of the set found lost, with why.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["a", "b"]).acquire()?;
    /// locker.shutdown()?;
    /// assert_eq!(both.lost_reason(), Some(("a".to_owned(), locksmith::LostReason::Shutdown)));
    /// # Ok(()) }
    /// ```
    pub fn lost_reason(&self) -> Option<(String, LostReason)> {
        self.inner().lost_reason()
    }

    /// Blocks until a lock of the set is lost (its name and why) or `timeout` passes.
    ///
    /// # Errors
    ///
    /// [`LockError::BlockingInAsync`] in async code.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// use std::time::Duration;
    /// let both = locker.lock_all(["a", "b"]).acquire()?;
    /// assert_eq!(both.wait_lost(Duration::from_millis(10))?, None); // both still held
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<Option<(String, LostReason)>> {
        let lost = self.inner().lost();
        self.shared.block_on("MultiGuard::wait_lost", async move {
            tokio::time::timeout(timeout, lost).await.ok()
        })
    }

    /// The async set underneath.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["a", "b"]).acquire()?;
    /// assert_eq!(both.as_async().guards().len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::MultiGuard {
        self.inner()
    }

    /// Releases every lock of the set and blocks until the backend confirms.
    ///
    /// # Errors
    ///
    /// As [`crate::MultiGuard::release`]; [`LockError::BlockingInAsync`] in async code (the
    /// locks are released in the background then).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::blocking::connect("mem://")?;
    /// let both = locker.lock_all(["a", "b"]).acquire()?;
    /// both.release()?;
    /// assert!(locker.lock_all(["a", "b"]).try_acquire()?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<()> {
        let set = self.inner.take().expect("a guard is only emptied when it ends");
        if let Err(e) = refuse_in_async("MultiGuard::release") {
            self.shared.release_in_background(set.release());
            return Err(e);
        }
        self.shared.block_on("MultiGuard::release", set.release())?
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        if let Some(set) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                self.shared.release_in_background(set.release());
                return;
            }
            let _ = self.shared.block_on("MultiGuard::drop", set.release());
        }
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Some(set) => set.fmt(f),
            None => f.write_str("MultiGuard(released)"),
        }
    }
}
