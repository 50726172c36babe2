//! [`LockGuard`]: the handle of a held lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use tokio::time::Instant;

use crate::error::Result;
use crate::lease::{Lease, LostReason};
use crate::locker::Locker;
use crate::metrics::Labels;
use crate::release_again::release_once;

/// A held lock. Renewed in the background while it lives; released by [`LockGuard::release`] or,
/// in the background, when dropped (call [`Locker::shutdown`] before the process exits, so that
/// such a release is done before it does).
///
/// Holding a guard does not by itself make work safe: a holder can be paused (GC, swap, a stopped
/// VM) past its lease. Check [`LockGuard::lost`] / [`LockGuard::is_held`], and pass
/// [`LockGuard::fencing_token`] to the storage you write to, so that it can reject a stale holder.
#[must_use = "dropping a LockGuard releases the lock at once"]
pub struct LockGuard {
    locker: Locker,
    /// Shared with the watchdog's entry and the release (no copy of the lease per grant).
    lease: Arc<Lease>,
    watch_id: u64,
    finished: bool,
    labels: Labels,
    granted: Instant,
    /// The runtime the lock was taken on: the release runs there when the guard is released or
    /// dropped where no runtime runs.
    runtime: Option<tokio::runtime::Handle>,
    /// This guard's entry in its locker's re-entry detection (see [`LockGuard::detach_from_task`]).
    ticket: crate::reentry::Ticket,
}

impl LockGuard {
    pub(crate) fn new(locker: Locker, lease: Lease, max_hold: Option<std::time::Duration>, labels: Labels) -> Self {
        let lease = Arc::new(lease);
        let watch_id = locker.inner().watchdog.register(lease.clone(), max_hold);
        let on_lost = labels.clone();
        lease.lost.on_lost(move |reason| on_lost.lost(reason));
        let ticket = locker.inner().life.holders.insert(&lease);
        LockGuard {
            locker,
            lease,
            watch_id,
            finished: false,
            labels,
            granted: Instant::now(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            ticket,
        }
    }

    /// Stops renewing and counts the end of the guard.
    fn finish(&mut self) {
        self.finished = true;
        self.locker.inner().life.holders.remove(&self.ticket);
        self.locker.inner().watchdog.unregister(self.watch_id);
        self.labels.guard_ended(self.granted.elapsed());
    }

    /// This guard, recorded as taken by `holder` (re-entry detection).
    pub(crate) fn taken_by(self, holder: crate::reentry::Holder) -> Self {
        self.ticket.taken_by(holder);
        self
    }

    /// The locker the lock was taken through.
    pub(crate) fn locker(&self) -> &Locker {
        &self.locker
    }

    /// The lock name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("orders/42").acquire().await?;
    /// assert_eq!(guard.name(), "orders/42");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.lease.name.as_str()
    }

    /// What this guard holds: the mutex, a semaphore permit, a read-write lock's side, leadership.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::LockKind;
    /// let guard = locker.semaphore("api-quota", 3).acquire().await?;
    /// assert_eq!(guard.kind(), &LockKind::Permit { permits: 3 });
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> &crate::LockKind {
        &self.lease.kind
    }

    /// The fencing token: strictly greater than every earlier holder's token for this lock name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let first = locker.lock("job").acquire().await?;
    /// let token = first.fencing_token();
    /// first.release().await?;
    /// let second = locker.lock("job").acquire().await?;
    /// assert!(second.fencing_token() > token);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.ticket.touch();
        self.lease.fencing_token
    }

    /// The lease time the server enforces (the requested TTL, possibly rounded up by the backend).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let guard = locker.lock("job").ttl(Duration::from_secs(5)).acquire().await?;
    /// assert_eq!(guard.ttl(), Duration::from_secs(5)); // mem:// enforces the TTL as given
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    /// True until the lock is lost (see [`LockGuard::lost`]), and false as soon as its lease ran
    /// out with no renewal answered, or its `max_hold` passed, even before the watchdog could run
    /// to declare it lost (a process that was paused, a runtime whose threads were blocked):
    /// check it after such a pause, before acting as the holder.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("job").acquire().await?;
    /// assert!(guard.is_held());
    /// assert_eq!(guard.lost_reason(), None);
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.ticket.touch();
        !self.lease.lost.is_lost() && !self.lease.lost.ran_out()
    }

    /// Why the lock was lost, once it is.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::LostReason;
    /// let guard = locker.lock("job").acquire().await?;
    /// locker.shutdown().await?;
    /// assert_eq!(guard.lost_reason(), Some(LostReason::Shutdown));
    /// assert!(!guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.lease.lost.reason()
    }

    /// A future that resolves when the lock is lost: renewal failed for longer than the lease
    /// (minus a safety margin, so it fires *before* the server can hand the lock to someone else),
    /// the backend reports the lease gone, or `max_hold` passed. It never resolves while the lock
    /// is held, nor after the guard was released or dropped (nothing was lost then): race it
    /// against the work rather than wait on it alone. The future does not borrow the guard, so it
    /// can be raced against the guarded work (the example below).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("job").acquire().await?;
    /// tokio::select! {
    ///     reason = guard.lost() => eprintln!("stopping: {reason}"),
    ///     _ = async { /* the guarded work */ } => {}
    /// }
    /// guard.release().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.ticket.touch();
        let signal = self.lease.lost.clone();
        async move { signal.wait().await }
    }

    /// Says that no task of this process holds this guard any more, for re-entry detection,
    /// until it is next used: call it before handing the guard to another task that may not use
    /// it at once, when the task that took it may ask for the same lock again meanwhile.
    ///
    /// Re-entry detection ([`crate::LockError::WouldDeadlock`]) counts a guard as held by the
    /// tokio task that took it (outside any task, by the thread: `#[tokio::main]`'s body,
    /// `locksmith::blocking`), and by the task that last called one of its methods
    /// ([`LockGuard::fencing_token`], [`LockGuard::is_held`], [`LockGuard::lost`],
    /// [`LockGuard::guarded`], [`LockGuard::lease`]). A guard moved into another task and not
    /// yet used there still counts as its taker's: without this call, the taker asking for the
    /// lock again at once is refused instead of waiting for the other task's release.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("jobs").acquire().await?;
    /// guard.detach_from_task();
    /// let worker = tokio::spawn(async move {
    ///     // ... the job, under the lock ...
    ///     guard.release().await
    /// });
    /// // Waits for the worker's release (without the call above: WouldDeadlock at once).
    /// let next = locker.lock("jobs").acquire().await?;
    /// worker.await.expect("the worker")?;
    /// next.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn detach_from_task(&self) {
        self.ticket.detach();
    }

    /// Guarded writes under this lock: writes to the coordination store itself (etcd keys, Redis
    /// keys, ZooKeeper nodes, the memory backend's store) that commit only if this guard still
    /// holds the lock, checked by the server in the same atomic step. A write after the lock was
    /// lost fails with [`crate::LockError::NotHeld`] and never lands; `docs/fencing.md` of the
    /// repository says what each backend checks.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("billing").acquire().await?;
    /// guard.guarded().put("/billing/last-run", "2026-11-24").await?;
    /// assert!(guard.guarded().compare_and_set("/billing/cursor", None, "17").await?);
    /// assert_eq!(guard.guarded().get("/billing/cursor").await?.as_deref(), Some(&b"17"[..]));
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn guarded(&self) -> crate::Guarded<'_> {
        self.ticket.touch();
        crate::Guarded::new(self.locker.backend().as_ref(), &self.lease)
    }

    /// A key for this lock's guarded writes, named `suffix`: one that [`LockGuard::guarded`] can
    /// always write on this backend (on Redis Cluster it is in the lock's hash slot), outside
    /// locksmith's own lock keys, the same for every holder of the lock and different for every
    /// other lock or suffix.
    ///
    /// # Errors
    ///
    /// [`crate::LockError::InvalidName`] for a suffix that breaks the rules of lock names, or a
    /// key too long for the store.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("billing").acquire().await?;
    /// let cursor = guard.data_key("cursor")?;
    /// guard.guarded().put(&cursor, "17").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn data_key(&self, suffix: &str) -> Result<String> {
        let family = self.lease.kind.family();
        self.locker.backend().data_key(family, &self.lease.name, suffix)
    }

    /// The backend's record of this lease.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("job").acquire().await?;
    /// assert_eq!(guard.lease().fencing_token, guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> &Lease {
        self.ticket.touch();
        &self.lease
    }

    /// Releases the lock and waits for the backend to confirm.
    ///
    /// # Errors
    ///
    /// [`crate::LockError::NotHeld`] if the lock was no longer ours (lost, expired, already
    /// released by the watchdog after `max_hold`, or by [`Locker::shutdown`]), and always once
    /// [`LockGuard::lost`] has fired (what may be left of the lock is released all the same);
    /// [`crate::LockError::Unavailable`] if the backend did not confirm within its request
    /// timeout (the release is retried in the background; the lock expires after its TTL at
    /// the latest); [`crate::LockError::Protocol`] when awaited where no tokio runtime runs and
    /// the lock was taken on a current-thread runtime (the release is handed to it, see below).
    ///
    /// # Cancel safety
    ///
    /// The release runs to its end even if the returned future is dropped (a timeout around it,
    /// a `select!`): the drop moves the rest of it into a task of its own, and the lock is
    /// released all the same. [`Locker::shutdown`] waits for it. Awaited to its end, it runs in
    /// the caller's task and spawns nothing; awaited where no tokio runtime runs, it runs on the
    /// multi-thread runtime the lock was taken on (a current-thread one is handed the release,
    /// which runs when that runtime is next driven, and this call answers `Protocol`).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("job").acquire().await?;
    /// guard.release().await?;
    /// assert!(locker.lock("job").try_acquire().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.finish();
        let backend = self.locker.backend().clone();
        if self.lease.lost.reason() == Some(LostReason::Shutdown) {
            return Err(crate::LockError::not_held(self.lease.name.as_str()));
        }
        // Lost before: whatever the release finds, the lock was not held to the end. It still
        // releases what may be left (the watchdog's own release of it may not have run yet).
        let was_lost = self.lease.lost.is_lost();
        let span = tracing::info_span!(
            "release",
            lock = %self.lease.name,
            kind = crate::metrics::kind_label(&self.lease.kind),
            backend = backend.kind(),
            fencing_token = self.lease.fencing_token,
            round_trips = tracing::field::Empty,
        );
        let lease = self.lease.clone();
        let labels = self.labels.clone();
        let tally = self.locker.inner().life.tally.clone();
        let closed = self.locker.inner().life.closed.subscribe();
        let retries = tally.clone();
        let runtime = self.runtime.clone();
        // Boxed once here: the layers around it (its span, the round-trip count, the clean-up
        // tally) then move a pointer, not the whole release's future (docs/overhead.md).
        let release = Box::pin(async move {
            let (result, retry) = release_once(&backend, &lease, "releasing the lock", closed).await;
            labels.released(&result);
            match &result {
                Ok(()) => tracing::info!(fencing_token = lease.fencing_token, "released"),
                Err(e) => tracing::warn!(fencing_token = lease.fencing_token, error = %e, "release failed"),
            }
            if let Some(retry) = retry {
                // The caller has its answer; the lock is freed as soon as the server answers.
                crate::driver::cleanup::spawn_in(&retries, retry.run());
            }
            result
        });
        let in_span = span.clone();
        let (result, round_trips) = crate::metrics::counted(async move {
            // Created inside `counted`, so that the task's round trips count for this call.
            let task = crate::metrics::counting_for_caller(release.instrument(in_span));
            match crate::driver::cleanup::run_to_end(&tally, task) {
                Ok(release) => release.await,
                // Where no runtime runs, on the one the lock was taken on.
                Err(task) => release_on(&tally, runtime.as_ref(), task).await,
            }
        })
        .await;
        span.record("round_trips", round_trips);
        match result {
            Ok(()) | Err(crate::LockError::Unavailable { .. }) if was_lost => {
                Err(crate::LockError::not_held(self.lease.name.as_str()))
            }
            result => result,
        }
    }

    /// Stops renewing and forgets the lock *without releasing it*, as if this process had crashed:
    /// the lock stays held on the server until its TTL runs out. Meant for tests of crash recovery
    /// and for handing a lease over to code that renews it itself.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let guard = locker.lock("job").ttl(Duration::from_millis(100)).acquire().await?;
    /// let _lease = guard.abandon(); // as if this process had crashed
    /// assert!(locker.lock("job").try_acquire().await?.is_none());
    /// tokio::time::sleep(Duration::from_millis(300)).await; // the TTL runs out
    /// assert!(locker.lock("job").try_acquire().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn abandon(mut self) -> Lease {
        self.finish();
        tracing::info!(lock = %self.lease.name, "lock abandoned without release");
        Lease::clone(&self.lease)
    }
}

/// Runs `release` (a guard's, awaited where no tokio runtime runs) on `runtime`, the one its lock
/// was taken on. A current-thread runtime runs it only when next driven (maybe by the very thread
/// blocked here): it is handed over, not waited for.
async fn release_on(
    tally: &crate::driver::cleanup::Tally,
    runtime: Option<&tokio::runtime::Handle>,
    release: impl std::future::Future<Output = Result<()>> + Send + 'static,
) -> Result<()> {
    let current_thread = runtime.is_some_and(|r| r.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
    match crate::driver::cleanup::spawn_in_or(tally, runtime, release) {
        Some(_) if current_thread => Err(crate::LockError::Protocol(
            "release() awaited where no tokio runtime runs: the release was handed to the current-thread \
             runtime the lock was taken on, and runs when that runtime is next driven"
                .into(),
        )),
        Some(release) => release.await.unwrap_or_else(|_| {
            Err(crate::LockError::Unavailable {
                message: "the runtime the lock was taken on is gone: it expires after its TTL".into(),
                source: None,
            })
        }),
        None => Err(crate::LockError::Protocol("release needs a tokio runtime".into())),
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finish();
        let backend = self.locker.backend().clone();
        let lease = self.lease.clone();
        let labels = self.labels.clone();
        if self.lease.lost.reason() == Some(LostReason::Shutdown) {
            return; // released by Locker::shutdown
        }
        let closed = self.locker.inner().life.closed.subscribe();
        let release = async move {
            let (result, retry) = release_once(&backend, &lease, "releasing the lock", closed).await;
            labels.released(&result);
            match &result {
                Ok(()) => tracing::debug!(lock = %lease.name, "released on drop"),
                Err(e) => tracing::warn!(lock = %lease.name, error = %e, "release on drop failed"),
            }
            if let Some(retry) = retry {
                retry.run().await;
            }
        };
        let tally = &self.locker.inner().life.tally;
        match crate::driver::cleanup::spawn_in_or(tally, self.runtime.as_ref(), release) {
            Some(_) => {}
            None => tracing::warn!(
                lock = %self.lease.name,
                "LockGuard dropped outside a tokio runtime: not released, it expires after its TTL"
            ),
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lease.name)
            .field("fencing_token", &self.lease.fencing_token)
            .field("held", &self.is_held())
            .finish()
    }
}
