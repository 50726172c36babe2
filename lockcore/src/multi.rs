//! Several locks at once: [`Locker::lock_all`], [`LockAll`], [`MultiGuard`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lease::LostReason;
use crate::locker::Locker;
use crate::name::LockName;
use crate::run::{first_lost, gone_at_release, race, ran_out, Held, HeldAll, Outcome};

impl Locker {
    /// Starts a request for the mutexes `names`, all of them or none: set options on the
    /// builder, then [`LockAll::acquire`], [`LockAll::try_acquire`] or [`LockAll::run`]
    /// (Redisson's `MultiLock`; "transfer between two accounts").
    ///
    /// The names are taken one after the other in one global order, sorted (by their bytes) with
    /// duplicates removed, whatever order they are given in: two callers asking for `[a, b]` and
    /// `[b, a]` both take `a` first, so neither can hold one while waiting for the other's (no
    /// deadlock), and FIFO queues keep either from starving. One timeout covers the whole set;
    /// a failure or cancellation part-way releases what was taken at once.
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
    /// let both = locker
    ///     .lock_all(["accounts/bob", "accounts/alice"])
    ///     .ttl(Duration::from_secs(10))
    ///     .timeout(Duration::from_secs(5))
    ///     .acquire()
    ///     .await?;
    /// assert_eq!(both.names().collect::<Vec<_>>(), ["accounts/alice", "accounts/bob"]);
    /// let alice = both.get("accounts/alice").expect("in the set").fencing_token();
    /// assert!(locker.lock("accounts/bob").try_acquire().await?.is_none());
    /// # let _ = alice;
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I, S>(&self, names: I) -> LockAll
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort();
        names.dedup();
        LockAll {
            locker: self.clone(),
            names,
            ttl: None,
            timeout: None,
            max_hold: None,
        }
    }
}

/// Options of a request for several mutexes at once. Created by [`Locker::lock_all`].
#[must_use = "a LockAll does nothing until acquire(), try_acquire() or run() is awaited"]
pub struct LockAll {
    locker: Locker,
    /// Sorted, without duplicates: the order they are taken in.
    names: Vec<String>,
    ttl: Option<Duration>,
    timeout: Option<Duration>,
    max_hold: Option<Duration>,
}

impl LockAll {
    /// The lease time of every lock of the set (see [`crate::LockBuilder::ttl`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let both = locker.lock_all(["a", "b"]).ttl(Duration::from_secs(30)).acquire().await?;
    /// assert!(both.guards().iter().all(|g| g.ttl() == Duration::from_secs(30)));
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long [`LockAll::acquire`] waits at most for the whole set (default: no limit), from
    /// the call to the last lock taken. Zero makes exactly one attempt at each lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// # let other = locksmith::Locker::from_arc(locker.backend().clone());
    /// let _b = other.lock("b").acquire().await?; // another process's, say
    /// let both = locker.lock_all(["a", "b"]).timeout(Duration::from_millis(50)).acquire().await;
    /// assert!(matches!(both, Err(locksmith::LockError::Timeout(_))));
    /// assert!(locker.lock("a").try_acquire().await?.is_some()); // "a" was released
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A cap on how long each lock of the set is held (see [`crate::LockBuilder::max_hold`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let both = locker.lock_all(["a", "b"]).max_hold(Duration::from_millis(50)).acquire().await?;
    /// let (_name, reason) = both.lost().await;
    /// assert_eq!(reason, locksmith::LostReason::MaxHoldReached);
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// The names, in the order they are taken: sorted, without duplicates.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let set = locker.lock_all(["b", "a", "b"]);
    /// assert_eq!(set.names(), ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Checks the names before any is taken.
    fn check(&self) -> Result<()> {
        if self.names.is_empty() {
            return Err(LockError::InvalidOption("lock_all needs at least one lock name".into()));
        }
        for name in &self.names {
            LockName::new(name)?;
        }
        Ok(())
    }

    fn builder(&self, name: &str) -> crate::LockBuilder {
        let mut builder = self.locker.lock(name);
        if let Some(ttl) = self.ttl {
            builder = builder.ttl(ttl);
        }
        if let Some(max_hold) = self.max_hold {
            builder = builder.max_hold(max_hold);
        }
        builder
    }

    /// Waits until every lock of the set is held (or the timeout passes) and returns one guard
    /// for them all.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] (with the whole set's timeout) when it passed before the last lock
    /// was taken; otherwise what [`crate::LockBuilder::acquire`] returns for the lock that
    /// failed ([`LockError::WouldDeadlock`] included, for a name this task holds already);
    /// [`LockError::InvalidOption`] for an empty set, [`LockError::InvalidName`] for a bad name
    /// (before any lock is taken). On every error, the locks taken so far have been released
    /// before it is returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the guards taken so far (released in the background at once)
    /// and the wait in progress (which leaves nothing queued, as [`crate::LockBuilder::acquire`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["accounts/bob", "accounts/alice"]).acquire().await?;
    /// assert!(both.is_held());
    /// assert!(locker.lock("accounts/alice").try_acquire().await?.is_none());
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(self) -> Result<MultiGuard> {
        self.check()?;
        let start = Instant::now();
        let deadline = match self.timeout {
            Some(t) => Some(
                start
                    .checked_add(t)
                    .ok_or_else(|| LockError::InvalidOption(format!("timeout {t:?} is too large")))?,
            ),
            None => None,
        };
        let mut taken = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let mut builder = self.builder(name);
            if let Some(deadline) = deadline {
                builder = builder.timeout(deadline.saturating_duration_since(Instant::now()));
            }
            match builder.acquire().await {
                Ok(guard) => taken.push(guard),
                Err(e) => {
                    let _ = release_all(taken).await;
                    return Err(match (e, self.timeout) {
                        (LockError::Timeout(_), Some(total)) => LockError::Timeout(total),
                        (e, _) => e,
                    });
                }
            }
        }
        Ok(MultiGuard { guards: taken })
    }

    /// One attempt at each lock, in order: `Some` with every guard if all were free, `None`
    /// (having released the ones it took) as soon as one is held by another.
    ///
    /// # Errors
    ///
    /// As [`crate::LockBuilder::try_acquire`] for the lock that failed (the ones taken before it
    /// are released first); [`LockError::InvalidOption`] for an empty set.
    ///
    /// # Cancel safety
    ///
    /// As [`LockAll::acquire`]: what was taken is released at once.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let b = locker.lock("b").acquire().await?;
    /// assert!(locker.lock_all(["a", "b"]).try_acquire().await?.is_none());
    /// assert!(locker.lock("a").try_acquire().await?.is_some()); // "a" was released
    /// # drop(b);
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<MultiGuard>> {
        self.check()?;
        let mut taken = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let mut builder = self.builder(name);
            if let Some(t) = self.timeout {
                builder = builder.timeout(t);
            }
            match builder.try_acquire().await {
                Ok(Some(guard)) => taken.push(guard),
                other => {
                    let _ = release_all(taken).await;
                    return other.map(|_| None);
                }
            }
        }
        Ok(Some(MultiGuard { guards: taken }))
    }

    /// Takes the whole set ([`LockAll::acquire`]), runs `work` under it, releases every lock and
    /// returns the work's value: [`crate::LockBuilder::run`] for several locks. The work is given
    /// a [`HeldAll`] (each lock's fencing token and guarded writes); it is dropped, and `run`
    /// answers [`LockError::Lost`] naming the lock, when any lock of the set is lost before it
    /// ends.
    ///
    /// # Errors
    ///
    /// As [`LockAll::acquire`] (the work did not run then); [`LockError::Lost`] when a lock of
    /// the set was lost before the work ended.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work and every guard: released in the background at once.
    ///
    /// # Panics
    ///
    /// If the work panics, once every lock is released, with the work's panic.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let tokens = locker
    ///     .lock_all(["accounts/alice", "accounts/bob"])
    ///     .run(|held| async move {
    ///         // move money from alice to bob, passing both tokens to the ledger
    ///         held.iter().map(|h| h.fencing_token()).collect::<Vec<_>>()
    ///     })
    ///     .await?;
    /// assert_eq!(tokens.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(HeldAll) -> Fut,
        Fut: Future<Output = T>,
    {
        let set = self.acquire().await?;
        let held = HeldAll {
            held: set.guards.iter().map(Held::new).collect(),
        };
        let outcome = race(work(held.clone()), set.lost()).await;
        held.end();
        match outcome {
            Outcome::Done(value) => {
                let lost = set.lost_reason().or_else(|| {
                    set.guards
                        .iter()
                        .find(|g| !g.is_held())
                        .map(|g| (g.name().to_owned(), ran_out()))
                });
                let names: Vec<String> = set.names().map(str::to_owned).collect();
                let released = release_each(set.guards).await;
                if let Some((name, reason)) = lost {
                    return Err(LockError::Lost { name, reason });
                }
                for (name, result) in names.into_iter().zip(released) {
                    match result {
                        Ok(()) => {}
                        Err(LockError::NotHeld { .. }) => {
                            return Err(LockError::Lost {
                                name,
                                reason: gone_at_release(),
                            })
                        }
                        Err(e) => {
                            tracing::warn!(lock = %name, error = %e, "the release after the work failed; the work ended while the lock was held")
                        }
                    }
                }
                Ok(value)
            }
            Outcome::Lost(name, reason) => {
                let _ = release_all(set.guards).await;
                Err(LockError::Lost { name, reason })
            }
            Outcome::Panicked(panic) => {
                let _ = release_all(set.guards).await;
                std::panic::resume_unwind(panic)
            }
        }
    }
}

/// Releases every guard at once; the first error, if any.
async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    release_each(guards).await.into_iter().collect()
}

/// Releases every guard at once (concurrently); each one's answer, in order.
async fn release_each(guards: Vec<LockGuard>) -> Vec<Result<()>> {
    let mut releases: Vec<Pin<Box<dyn Future<Output = Result<()>> + Send>>> = guards
        .into_iter()
        .map(|g| Box::pin(g.release()) as Pin<Box<_>>)
        .collect();
    let mut results: Vec<Option<Result<()>>> = releases.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (release, result) in releases.iter_mut().zip(results.iter_mut()) {
            if result.is_none() {
                match release.as_mut().poll(cx) {
                    Poll::Ready(r) => *result = Some(r),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

/// Several held locks, taken together by [`Locker::lock_all`]: renewed while it lives; released
/// all at once by [`MultiGuard::release`] or when dropped. One [`MultiGuard::lost`] for the set.
#[must_use = "dropping a MultiGuard releases every lock at once"]
pub struct MultiGuard {
    /// Sorted by name.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The names of the set, sorted.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["b", "a"]).acquire().await?;
    /// assert_eq!(both.names().collect::<Vec<_>>(), ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.guards.iter().map(LockGuard::name)
    }

    /// The guard of `name`, if it is in the set (its fencing token, guarded writes).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// assert!(both.get("a").is_some_and(|g| g.fencing_token() > 0));
    /// assert!(both.get("c").is_none());
    /// # Ok(()) }
    /// ```
    pub fn get(&self, name: &str) -> Option<&LockGuard> {
        self.guards.iter().find(|g| g.name() == name)
    }

    /// Every guard of the set, sorted by name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// let tokens: Vec<u64> = both.guards().iter().map(|g| g.fencing_token()).collect();
    /// assert_eq!(tokens.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// True while every lock of the set is held (see [`LockGuard::is_held`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// assert!(both.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Resolves when any lock of the set is lost, with its name and why (see
    /// [`LockGuard::lost`]); never while all are held, nor after the set was released.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// tokio::select! {
    ///     (name, reason) = both.lost() => eprintln!("{name} lost: {reason}"),
    ///     _ = async { /* the work under both locks */ } => {}
    /// }
    /// both.release().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = (String, LostReason)> + Send + 'static {
        first_lost(
            self.guards
                .iter()
                .map(|g| (g.name().to_owned(), g.lease().lost.clone()))
                .collect(),
        )
    }

    /// The first lock of the set found lost, with why, once one is.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// assert_eq!(both.lost_reason(), None);
    /// locker.shutdown().await?;
    /// assert_eq!(both.lost_reason(), Some(("a".to_owned(), locksmith::LostReason::Shutdown)));
    /// # Ok(()) }
    /// ```
    pub fn lost_reason(&self) -> Option<(String, LostReason)> {
        self.guards
            .iter()
            .find_map(|g| g.lost_reason().map(|r| (g.name().to_owned(), r)))
    }

    /// See [`LockGuard::detach_from_task`]: for every guard of the set.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// both.detach_from_task();
    /// let worker = tokio::spawn(async move { both.release().await });
    /// let a = locker.lock("a").acquire().await?; // waits for the worker's release
    /// worker.await.expect("the worker")?;
    /// # drop(a);
    /// # Ok(()) }
    /// ```
    pub fn detach_from_task(&self) {
        self.guards.iter().for_each(LockGuard::detach_from_task);
    }

    /// The guards, each to be released on its own.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// let mut guards = both.into_guards();
    /// let b = guards.pop().expect("b");
    /// guards.pop().expect("a").release().await?; // "a" freed, "b" still held
    /// assert_eq!(b.name(), "b");
    /// # Ok(()) }
    /// ```
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// Releases every lock of the set, at once, and waits for the backend to confirm.
    ///
    /// # Errors
    ///
    /// The first error of the releases (see [`LockGuard::release`]): [`LockError::NotHeld`] for
    /// a lock that was lost; every other lock is released all the same.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`]: each release runs to its end even if the future is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let both = locker.lock_all(["a", "b"]).acquire().await?;
    /// both.release().await?;
    /// assert!(locker.lock_all(["a", "b"]).try_acquire().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<()> {
        release_all(self.guards).await
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.guards.iter()).finish()
    }
}
