//! Leader election: [`Election`] (from [`crate::Locker::election`]), [`Campaign`],
//! [`LeaderGuard`], and what a backend reports: [`Leader`], [`LeaderWatch`].
//!
//! An election is a lock queue like a mutex's, in a namespace of its own: candidates queue in
//! arrival order, the first one leads, its fencing token is its **term** (strictly increasing
//! from one leader to the next), and its value (an address, a host name) is what everyone else
//! sees of it. When the leader resigns, crashes (its lease runs out) or is cut off, the next
//! candidate in line leads. This is etcd's `concurrency.Election` and Curator's `LeaderLatch`.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::within_request_timeout;
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lease::{LockKind, LostReason};
use crate::locker::{LockBuilder, Locker};
use crate::name::LockName;

/// The largest campaign value accepted: 64 KiB (65 536 bytes; every backend stores it with the
/// candidate's entry).
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// Who leads an election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The value the leader campaigned with.
    pub value: String,
    /// Its term: its fencing token, greater than every earlier leader's.
    pub term: u64,
    /// The backend's identity of the leader's entry (as [`crate::lease::Lease::holder_id`]).
    pub holder_id: String,
}

/// The leadership of one election as the server pushes its changes (see [`Election::observe`],
/// which says how a handover from one leader to the next is reported). Dropping it stops the
/// observation.
///
/// For backends: a handover (the leader gone while a candidate waits in line) is one change,
/// from the old leader to the new one: while nobody holds but a live candidate is about to, send
/// nothing and wait for its grant.
pub struct LeaderWatch {
    rx: watch::Receiver<Option<Leader>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The shutdown of the locker it was made by (`true` once shut down): the watch ends then.
    closed: Option<watch::Receiver<bool>>,
}

impl LeaderWatch {
    /// For backends: a watch whose values `task` sends (the current leader first, then every
    /// change it sees). The task is aborted when the watch is dropped.
    pub fn new(rx: watch::Receiver<Option<Leader>>, task: tokio::task::JoinHandle<()>) -> Self {
        LeaderWatch {
            rx,
            task: Some(task),
            closed: None,
        }
    }

    /// This watch, ended (its task stopped, [`LeaderWatch::changed`] failing with
    /// [`LockError::Closed`]) once `closed`, a locker's shutdown, turns true.
    pub(crate) fn ending_with(mut self, closed: watch::Receiver<bool>) -> Self {
        self.closed = Some(closed);
        self
    }

    /// The leader as last seen (`None`: nobody leads).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let watch = election.observe().await?;
    /// assert_eq!(watch.leader(), None); // nobody leads yet
    /// # Ok(()) }
    /// ```
    pub fn leader(&self) -> Option<Leader> {
        self.rx.borrow().clone()
    }

    /// Waits for the next change of leader and returns the new one (`None`: nobody leads now).
    /// Changes that happen in quick succession may be seen as one. While the server cannot be
    /// reached, the last leader seen stays; the backend keeps trying and reports the next change.
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] if the observation ended for good (the backend was dropped);
    /// [`LockError::Closed`] once the locker is shut down (the observation stops then).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a change that arrives while no call waits is kept, and the next call returns
    /// at once with the latest leader (use it in `select!` loops).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let mut watch = election.observe().await?;
    /// let leader = election.campaign("node-1").acquire().await?;
    /// let seen = watch.changed().await?.expect("a leader");
    /// assert_eq!((seen.value.as_str(), seen.term), ("node-1", leader.term()));
    /// # Ok(()) }
    /// ```
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let shut_down = async {
            // Err: every handle of the locker is gone without a shutdown; the backend may live
            // on (`Locker::from_arc`), and the observation with it.
            let ended = match &mut self.closed {
                Some(closed) => closed.wait_for(|c| *c).await.is_ok(),
                None => false,
            };
            if !ended {
                std::future::pending::<()>().await;
            }
        };
        // Biased: once the locker is shut down, the backend's observer may end too (its `rx`
        // then fails), and the answer must be `Closed`, not `Unavailable`, whichever came first.
        let changed = tokio::select! {
            biased;
            () = shut_down => {
                if let Some(task) = self.task.take() {
                    task.abort();
                }
                return Err(LockError::Closed);
            }
            changed = self.rx.changed() => changed,
        };
        let is_shut_down = self.closed.as_ref().is_some_and(|c| *c.borrow());
        if changed.is_err() && is_shut_down {
            return Err(LockError::Closed);
        }
        match changed {
            Ok(()) => Ok(self.rx.borrow_and_update().clone()),
            Err(_) => Err(LockError::Unavailable {
                message: "the observation of the election ended".into(),
                source: None,
            }),
        }
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderWatch").field("leader", &self.leader()).finish()
    }
}

/// One election, by name. Created by [`crate::Locker::election`].
#[derive(Clone, Debug)]
pub struct Election {
    locker: Locker,
    name: String,
}

impl Election {
    pub(crate) fn new(locker: Locker, name: String) -> Self {
        Election { locker, name }
    }

    /// Starts a campaign with `value` (what the others see of this candidate, e.g. its address):
    /// at most [`MAX_VALUE_LEN`] bytes, without a NUL character, on every backend (the campaign
    /// ends with [`LockError::InvalidOption`] otherwise); set options on it, then
    /// [`Campaign::acquire`] to wait until this candidate leads.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let leader = election.campaign("10.0.0.7:8080").acquire().await?;
    /// assert!(election.campaign("10.0.0.8:8080").try_acquire().await?.is_none());
    /// leader.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn campaign(&self, value: impl Into<String>) -> Campaign {
        Campaign {
            builder: self
                .locker
                .build(self.name.clone(), LockKind::Leader { value: value.into() }),
        }
    }

    /// Who leads now (`None`: nobody), read from the server. Bounded by the backend's request
    /// timeout.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for a bad election name; [`LockError::Unavailable`] when the
    /// server did not answer within the request timeout; [`LockError::Closed`] after
    /// [`crate::Locker::shutdown`].
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
    /// let election = locker.election("scheduler");
    /// assert_eq!(election.leader().await?, None);
    /// let leader = election.campaign("node-1").acquire().await?;
    /// assert_eq!(election.leader().await?.map(|l| l.term), Some(leader.term()));
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let name = LockName::new(&self.name)?;
        self.locker.check_open()?;
        let backend = self.locker.backend();
        within_request_timeout(backend.as_ref(), "reading the leader", backend.leader(&name)).await
    }

    /// Watches the leadership: the current leader at once ([`LeaderWatch::leader`]), then every
    /// change as the server pushes it ([`LeaderWatch::changed`]), without polling.
    ///
    /// A handover is one change on every backend: when the leader resigns, is cut off or its
    /// lease runs out while a candidate waits in line, observers see the old leader, then the new
    /// one, never nobody in between. The backends differ only in when, within the handover, the
    /// change is seen:
    /// - etcd and ZooKeeper report the next candidate as soon as the old leader's key or node is
    ///   gone, a moment before that candidate's `acquire` returns (its key or node is already
    ///   first in line); Redis and `mem://` report it once it has been granted, and until then
    ///   keep showing the old leader, a moment after its `resign` returned (one notification and
    ///   one round trip on Redis).
    /// - A candidate that crashed while in line: etcd and ZooKeeper report it as the leader until
    ///   its session expires (then the next one); Redis keeps showing the previous leader until
    ///   the crashed candidate's queue entry goes stale (its URL's `waiter_ttl`), then reports the
    ///   next live candidate once granted, or nobody.
    /// - An observer that starts in the middle of a handover on Redis or `mem://` reports nobody
    ///   first (it has no earlier leader to keep), then the new leader; so can
    ///   [`Election::leader`], a single read.
    ///
    /// A [`crate::Dual`] locker reports the new backend's leadership, and may report nobody for
    /// an instant between two leaders (see `locksmith_core::dual`).
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`] for a bad election name; [`LockError::Unavailable`] when the
    /// first read of the leader failed; [`LockError::Closed`] after [`crate::Locker::shutdown`]
    /// (and the watch's [`LeaderWatch::changed`] ends with it once the locker is shut down).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future (or the returned watch) stops the observation.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let mut watch = election.observe().await?;
    /// let leader = election.campaign("node-1").acquire().await?;
    /// assert_eq!(watch.changed().await?.map(|l| l.value), Some("node-1".to_owned()));
    /// leader.resign().await?;
    /// assert_eq!(watch.changed().await?, None); // nobody leads now
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self) -> Result<LeaderWatch> {
        let name = LockName::new(&self.name)?;
        self.locker.check_open()?;
        let backend = self.locker.backend();
        let watch = within_request_timeout(
            backend.as_ref(),
            "starting to observe the election",
            backend.observe(&name),
        )
        .await?;
        Ok(watch.ending_with(self.locker.closed()))
    }

    /// The election's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// assert_eq!(locker.election("scheduler").name(), "scheduler");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The options of one campaign. Created by [`Election::campaign`].
#[must_use = "a Campaign does nothing until acquire() or try_acquire() is awaited"]
pub struct Campaign {
    builder: LockBuilder,
}

impl Campaign {
    /// The lease time of the leadership (see [`LockBuilder::ttl`]): how long a leader that crashed
    /// or was cut off keeps leading before the next candidate takes over.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let leader = locker.election("scheduler").campaign("node-1").ttl(Duration::from_secs(5)).acquire().await?;
    /// assert_eq!(leader.guard().ttl(), Duration::from_secs(5));
    /// # Ok(()) }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.builder = self.builder.ttl(ttl);
        self
    }

    /// How long [`Campaign::acquire`] waits to lead (default: no limit); see
    /// [`LockBuilder::timeout`].
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
    /// let _leader = other.election("scheduler").campaign("node-1").acquire().await?; // another process's
    /// let election = locker.election("scheduler");
    /// let second = election.campaign("node-2").timeout(Duration::from_millis(50)).acquire().await;
    /// assert!(matches!(second, Err(locksmith::LockError::Timeout(_))));
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.builder = self.builder.timeout(timeout);
        self
    }

    /// Resign after this long, whatever the leader is doing (see [`LockBuilder::max_hold`]).
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
    /// let leader = locker.election("scheduler").campaign("node-1").max_hold(Duration::from_millis(50)).acquire().await?;
    /// assert_eq!(leader.lost().await, LostReason::MaxHoldReached);
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.builder = self.builder.max_hold(max_hold);
        self
    }

    /// Waits in line until this candidate leads (or the timeout passes).
    ///
    /// # Errors
    ///
    /// As [`LockBuilder::acquire`]: [`LockError::Timeout`] when the timeout passed,
    /// [`LockError::Unavailable`] when the server could not be reached within the deadline,
    /// [`LockError::Closed`] after [`crate::Locker::shutdown`], invalid names and options.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future leaves no candidate and no leadership behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let leader = locker.election("scheduler").campaign("node-1").acquire().await?;
    /// assert!(leader.is_leader());
    /// leader.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(self) -> Result<LeaderGuard> {
        self.builder.acquire().await.map(LeaderGuard::new)
    }

    /// Leads now if nobody leads and nobody is in line; `None` otherwise.
    ///
    /// # Errors
    ///
    /// As [`LockBuilder::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`LockBuilder::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let first = election.campaign("node-1").try_acquire().await?;
    /// assert!(first.is_some());
    /// assert!(election.campaign("node-2").try_acquire().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(self) -> Result<Option<LeaderGuard>> {
        Ok(self.builder.try_acquire().await?.map(LeaderGuard::new))
    }
}

/// Leadership of an election: renewed in the background while it lives; given up by
/// [`LeaderGuard::resign`] or when dropped. Check [`LeaderGuard::lost`] and pass
/// [`LeaderGuard::term`] to what the leader writes to, as with any fencing token.
#[must_use = "dropping a LeaderGuard resigns at once"]
#[derive(Debug)]
pub struct LeaderGuard {
    guard: LockGuard,
}

impl LeaderGuard {
    fn new(guard: LockGuard) -> Self {
        LeaderGuard { guard }
    }

    /// The term: this leader's fencing token, greater than every earlier leader's.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let first = election.campaign("node-1").acquire().await?;
    /// let term = first.term();
    /// first.resign().await?;
    /// assert!(election.campaign("node-2").acquire().await?.term() > term);
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// The election's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let leader = locker.election("scheduler").campaign("node-1").acquire().await?;
    /// assert_eq!(leader.name(), "scheduler");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// True until the leadership is lost (see [`LeaderGuard::lost`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let leader = locker.election("scheduler").campaign("node-1").acquire().await?;
    /// assert!(leader.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership is lost, before the next candidate can lead (see
    /// [`LockGuard::lost`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let leader = locker.election("scheduler").campaign("node-1").acquire().await?;
    /// tokio::select! {
    ///     reason = leader.lost() => eprintln!("no longer leading: {reason}"),
    ///     _ = async { /* the leader's work */ } => {}
    /// }
    /// leader.resign().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// Gives up the leadership: the next candidate in line leads.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`LockError::NotHeld`] if the leadership was already lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the resignation runs to its end even if the future is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let first = election.campaign("node-1").acquire().await?;
    /// first.resign().await?;
    /// assert_eq!(election.leader().await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// The underlying guard (its lease, TTL, holder id).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let leader = locker.election("scheduler").campaign("node-1").acquire().await?;
    /// assert_eq!(leader.guard().fencing_token(), leader.term());
    /// # Ok(()) }
    /// ```
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Stops renewing without resigning, as if this process had crashed: the next candidate leads
    /// once the lease runs out (see [`LockGuard::abandon`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let election = locker.election("scheduler");
    /// let leader = election.campaign("node-1").ttl(Duration::from_millis(100)).acquire().await?;
    /// let _lease = leader.abandon(); // as if this process had crashed
    /// assert!(election.leader().await?.is_some()); // leads until the TTL runs out
    /// # Ok(()) }
    /// ```
    pub fn abandon(self) -> crate::lease::Lease {
        self.guard.abandon()
    }
}
