//! Work run under a lock: [`LockBuilder::run`] (and [`crate::LockAll::run`]), with [`Held`], the
//! view of the guard that the work is given.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lease::{Lease, LostReason};
use crate::locker::{LockBuilder, Locker};

/// What the work of [`LockBuilder::run`] is given: the held lock's name, fencing token, `lost()`
/// and guarded writes. Cheap to clone, `'static`, so it moves into the work's `async move` block;
/// it does not keep the lock (the guard stays with `run`, which releases it when the work ends),
/// and after that, [`Held::is_held`] is false and guarded writes through it fail with
/// [`LockError::NotHeld`].
#[derive(Clone)]
pub struct Held {
    locker: Locker,
    lease: Lease,
    /// Set when `run` has released (or is releasing) the guard.
    ended: Arc<AtomicBool>,
}

impl Held {
    pub(crate) fn new(guard: &LockGuard) -> Held {
        Held {
            locker: guard.locker().clone(),
            lease: guard.lease().clone(),
            ended: Arc::default(),
        }
    }

    fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
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
    /// let name = locker.lock("orders/42").run(|held| async move { held.name().to_owned() }).await?;
    /// assert_eq!(name, "orders/42");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.lease.name.as_str()
    }

    /// The fencing token (see [`LockGuard::fencing_token`]): pass it to the storage you write to.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let token = locker.lock("job").run(|held| async move { held.fencing_token() }).await?;
    /// assert!(token > 0);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// True while the lock is held (see [`LockGuard::is_held`]); false once it was lost or the
    /// work's `run` released it.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let held = locker.lock("job").run(|held| async move {
    ///     assert!(held.is_held());
    ///     held // kept past the end of `run`
    /// }).await?;
    /// assert!(!held.is_held()); // `run` released the lock
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        !self.ended.load(Ordering::SeqCst) && !self.lease.lost.is_lost() && !self.lease.lost.ran_out()
    }

    /// Resolves when the lock is lost (see [`LockGuard::lost`]). `run` already stops the work
    /// then; this is for work that hands it on (a task of its own, a child process).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// locker.lock("job").run(|held| async move {
    ///     let lost = held.lost(); // 'static: hand it to a task of its own
    ///     let helper = tokio::spawn(async move {
    ///         tokio::select! {
    ///             reason = lost => eprintln!("stopping: {reason}"),
    ///             _ = async { /* the helper's share of the work */ } => {}
    ///         }
    ///     });
    ///     helper.await.expect("the helper");
    /// }).await?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let signal = self.lease.lost.clone();
        async move { signal.wait().await }
    }

    /// Guarded writes under this lock (see [`LockGuard::guarded`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// locker.lock("billing").run(|held| async move {
    ///     held.guarded().put("/billing/last-run", "2026-11-24").await
    /// }).await??;
    /// # Ok(()) }
    /// ```
    pub fn guarded(&self) -> crate::Guarded<'_> {
        crate::Guarded::new(self.locker.backend().as_ref(), &self.lease)
    }

    /// A key for this lock's guarded writes (see [`LockGuard::data_key`]).
    ///
    /// # Errors
    ///
    /// As [`LockGuard::data_key`]: [`LockError::InvalidName`] for a bad suffix.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// locker.lock("billing").run(|held| async move {
    ///     let cursor = held.data_key("cursor")?;
    ///     held.guarded().put(&cursor, "17").await
    /// }).await??;
    /// # Ok(()) }
    /// ```
    pub fn data_key(&self, suffix: &str) -> Result<String> {
        let family = self.lease.kind.family();
        self.locker.backend().data_key(family, &self.lease.name, suffix)
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("name", &self.lease.name)
            .field("fencing_token", &self.lease.fencing_token)
            .field("held", &self.is_held())
            .finish()
    }
}

/// What the work of [`crate::LockAll::run`] is given: a [`Held`] for each lock of the set, in
/// the order they were taken (sorted by name), and one `lost()` for all of them.
#[derive(Clone, Debug)]
pub struct HeldAll {
    pub(crate) held: Vec<Held>,
}

impl HeldAll {
    /// The lock `name` of the set, if it is one.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let token = locker.lock_all(["a", "b"]).run(|all| async move {
    ///     all.get("b").map(|held| held.fencing_token())
    /// }).await?;
    /// assert!(token.is_some());
    /// # Ok(()) }
    /// ```
    pub fn get(&self, name: &str) -> Option<&Held> {
        self.held.iter().find(|h| h.name() == name)
    }

    /// Every lock of the set, sorted by name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let names = locker.lock_all(["b", "a"]).run(|all| async move {
    ///     all.iter().map(|held| held.name().to_owned()).collect::<Vec<_>>()
    /// }).await?;
    /// assert_eq!(names, ["a", "b"]); // sorted by name
    /// # Ok(()) }
    /// ```
    pub fn iter(&self) -> std::slice::Iter<'_, Held> {
        self.held.iter()
    }

    /// True while every lock of the set is held.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let held = locker.lock_all(["a", "b"]).run(|all| async move { all.is_held() }).await?;
    /// assert!(held);
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.held.iter().all(Held::is_held)
    }

    /// Resolves when any lock of the set is lost, with its name and why.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// locker.lock_all(["a", "b"]).run(|all| async move {
    ///     let lost = all.lost(); // 'static: hand it to a task of its own
    ///     tokio::spawn(async move {
    ///         tokio::select! {
    ///             (name, reason) = lost => eprintln!("{name} lost: {reason}"),
    ///             _ = async { /* the helper's share of the work */ } => {}
    ///         }
    ///     }).await.expect("the helper");
    /// }).await?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = (String, LostReason)> + Send + 'static {
        first_lost(
            self.held
                .iter()
                .map(|h| (h.name().to_owned(), h.lease.lost.clone()))
                .collect(),
        )
    }

    pub(crate) fn end(&self) {
        self.held.iter().for_each(Held::end);
    }
}

/// The wait for one lock's loss, with its name.
type LostWait = Pin<Box<dyn Future<Output = (String, LostReason)> + Send>>;

/// Resolves with the first of `signals` to fire, with its name (never, for none).
pub(crate) async fn first_lost(signals: Vec<(String, crate::lease::LostSignal)>) -> (String, LostReason) {
    let mut waits: Vec<LostWait> = signals
        .into_iter()
        .map(|(name, signal)| Box::pin(async move { (name, signal.wait().await) }) as LostWait)
        .collect();
    std::future::poll_fn(move |cx| {
        for wait in waits.iter_mut() {
            if let Poll::Ready(lost) = wait.as_mut().poll(cx) {
                return Poll::Ready(lost);
            }
        }
        Poll::Pending
    })
    .await
}

/// How the work ended.
pub(crate) enum Outcome<T> {
    Done(T),
    Lost(String, LostReason),
    Panicked(Box<dyn Any + Send>),
}

/// A future whose panic is caught and returned (`futures`' `catch_unwind`).
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::result::Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// Runs `work` until it ends or `lost` fires, whichever is first (a loss ready together with the
/// work's end wins: the work's result is not known to be safe then). The work is dropped when the
/// lock is lost.
pub(crate) async fn race<T>(
    work: impl Future<Output = T>,
    lost: impl Future<Output = (String, LostReason)>,
) -> Outcome<T> {
    let work = CatchUnwind(Box::pin(work));
    tokio::select! {
        biased;
        (name, reason) = lost => Outcome::Lost(name, reason),
        ended = work => match ended {
            Ok(value) => Outcome::Done(value),
            Err(panic) => Outcome::Panicked(panic),
        },
    }
}

/// The reason a lease that `is_held` says ran out was lost, before the watchdog could say it.
pub(crate) fn ran_out() -> LostReason {
    LostReason::RenewalFailed("the lease ran out before the work ended (no renewal was answered in time)".into())
}

/// The reason for a release that found the lock no longer ours after the work ended.
pub(crate) fn gone_at_release() -> LostReason {
    LostReason::LeaseGone("the release found the lock no longer held: it was lost before the work ended".into())
}

impl LockBuilder {
    /// Acquires the lock (as [`LockBuilder::acquire`], with this builder's TTL, timeout and
    /// `max_hold`), runs `work` under it, releases it, and returns the work's value.
    ///
    /// The work is given a [`Held`]: the lock's fencing token (pass it to what it writes) and
    /// guarded writes. If the lock is lost before the work ends ([`LockGuard::lost`]: renewal
    /// failed, the lease was removed on the server, `max_hold` passed), the work is **dropped**
    /// at its next `.await` and `run` returns [`LockError::Lost`], never the work's value: its
    /// writes may have raced with another holder. A loss noticed only as the work ended (the
    /// lease ran out with no renewal answered, or the release found the lock gone) is `Lost` too.
    ///
    /// The lock is released however the work ends: with a value (an `Err` of the work's own is a
    /// value: the work returns `Result<T, E>`, and `run` gives `Ok(Err(e))`), with a loss, or
    /// with a panic (the lock is released first, then the panic resumes in the caller). If the
    /// `run` future itself is dropped, the guard is dropped with it: released in the background
    /// at once ([`crate::Locker::shutdown`] waits for that).
    ///
    /// Fencing recipe: the lock alone cannot stop a holder paused past its lease (GC, a stopped
    /// VM) from writing late; `run` stops the work when it *notices* the loss, and the token
    /// makes the storage refuse what slipped through (the example below).
    ///
    /// # Errors
    ///
    /// Whatever [`LockBuilder::acquire`] returns (the work did not run then);
    /// [`LockError::Lost`] when the lock was lost before the work ended. A release that fails
    /// for another reason after the work ended while the lock was held
    /// ([`LockError::Unavailable`]: it goes on in the background) is logged, and the work's value
    /// returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work and the guard: the lock is released in the background
    /// at once, and a wait for it leaves nothing queued (as [`LockBuilder::acquire`]).
    ///
    /// # Panics
    ///
    /// If the work panics, once the lock is released, with the work's panic.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// use std::time::Duration;
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    ///
    /// let shipped = locker
    ///     .lock("orders/42")
    ///     .ttl(Duration::from_secs(10))
    ///     .timeout(Duration::from_secs(5))
    ///     .run(|held| async move {
    ///         // Committed only while the lock is held, checked by the server:
    ///         held.guarded().put("/orders/42/state", "shipped").await?;
    ///         // Storage outside the lock service: rejects writes below the highest token seen.
    ///         let token = held.fencing_token();
    ///         Ok::<_, locksmith::LockError>(token)
    ///     })
    ///     .await??; // the outer `?`: acquiring, or the lock lost; the inner: the work's own error
    /// assert!(shipped > 0);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let held = Held::new(&guard);
        let name = guard.name().to_owned();
        let lost = guard.lost();
        let outcome = race(work(held.clone()), async move { (name, lost.await) }).await;
        held.end();
        finish_run(guard, outcome).await
    }
}

/// Releases `guard` after its work ended as `outcome`, and says what `run` returns.
async fn finish_run<T>(guard: LockGuard, outcome: Outcome<T>) -> Result<T> {
    let name = guard.name().to_owned();
    match outcome {
        Outcome::Done(value) => {
            // Lost as the work ended, before the watchdog could say so: not safe either.
            let lost = guard.lost_reason().or_else(|| (!guard.is_held()).then(ran_out));
            let released = guard.release().await;
            match (lost, released) {
                (Some(reason), _) => Err(LockError::Lost { name, reason }),
                (None, Err(LockError::NotHeld { .. })) => Err(LockError::Lost {
                    name,
                    reason: gone_at_release(),
                }),
                (None, Err(e)) => {
                    tracing::warn!(lock = %name, error = %e, "the release after the work failed; the work ended while the lock was held");
                    Ok(value)
                }
                (None, Ok(())) => Ok(value),
            }
        }
        Outcome::Lost(name, reason) => {
            let _ = guard.release().await;
            Err(LockError::Lost { name, reason })
        }
        Outcome::Panicked(panic) => {
            let _ = guard.release().await;
            std::panic::resume_unwind(panic)
        }
    }
}
