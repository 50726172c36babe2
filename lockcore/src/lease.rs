//! What a backend is asked for ([`LockRequest`]) and what it hands back ([`Lease`]), with the
//! [`LostSignal`] through which both the backend and the watchdog can declare a lease lost.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::name::LockName;

/// The smallest TTL locksmith accepts: 50 ms. Backends may raise it (etcd to whole seconds,
/// ZooKeeper to twice its tick time) and report the effective value in [`Lease::ttl`].
pub const MIN_TTL: Duration = Duration::from_millis(50);

/// The largest TTL locksmith accepts: 24 hours (86 400 s). Longer leases are almost always a unit
/// mistake, and a crashed holder would block everyone for that long.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The TTL used when the caller sets none: 15 s. Redis and `mem://` take another default from
/// their URL's `ttl=` (see [`crate::LockBuilder::ttl`]).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// The most permits a semaphore may have: 10 000.
pub const MAX_PERMITS: u32 = 10_000;

/// One request to a backend: which lock, what of it, for how long a lease.
#[derive(Clone, Debug)]
pub struct LockRequest {
    /// The validated lock name; backends build keys from [`LockName::encoded`].
    pub name: LockName,
    /// The requested lease time, within [`MIN_TTL`]..=[`MAX_TTL`].
    pub ttl: Duration,
    /// What is asked for: the mutex, a semaphore's permit, a read-write lock's side, leadership.
    pub kind: LockKind,
}

impl LockRequest {
    /// A request for the mutex `name`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// use std::time::Duration;
    /// use locksmith::{driver::{LockName, LockRequest}, LockKind};
    /// let req = LockRequest::mutex(LockName::new("job")?, Duration::from_secs(10));
    /// assert_eq!(req.kind, LockKind::Mutex);
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn mutex(name: LockName, ttl: Duration) -> Self {
        LockRequest {
            name,
            ttl,
            kind: LockKind::Mutex,
        }
    }

    /// The lease a backend grants for this request: its name, kind and TTL, the fencing token
    /// `fencing_token`, the backend's identity of the holder `holder_id`, counted from `sent` (when
    /// the request that obtained it was sent), with a new lost signal. A backend whose server
    /// enforces another TTL (a session's) sets [`Lease::ttl`] to it.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// use std::time::Duration;
    /// use locksmith::driver::{LockName, LockRequest};
    /// let req = LockRequest::mutex(LockName::new("job")?, Duration::from_secs(10));
    /// let lease = req.lease(7, "holder-1".into(), tokio::time::Instant::now());
    /// assert_eq!((lease.fencing_token, lease.ttl, lease.lost.is_lost()), (7, Duration::from_secs(10), false));
    /// # Ok(()) }
    /// ```
    pub fn lease(&self, fencing_token: u64, holder_id: String, sent: Instant) -> Lease {
        Lease {
            name: self.name.clone(),
            kind: self.kind.clone(),
            fencing_token,
            ttl: self.ttl,
            holder_id,
            acquired_at: sent,
            waited: false,
            lost: LostSignal::new(),
        }
    }
}

/// What a [`LockRequest`] asks for. Each [`Family`] is a namespace of its own: a mutex, a
/// semaphore, a read-write lock and an election named `x` are four independent things.
///
/// All of them are one FIFO queue per name, granted in order by one rule (see
/// [`crate::driver::queue::standing`]); they differ in who may hold at once.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// The mutex: one holder.
    Mutex,
    /// One permit of a semaphore with `permits` permits (1 to [`MAX_PERMITS`]): at most that many
    /// holders. Every holder and waiter of one semaphore must ask for the same count: a request
    /// that disagrees with one queued before it is refused with [`crate::LockError::InvalidOption`].
    Permit {
        /// The semaphore's permit count.
        permits: u32,
    },
    /// A read-write lock's read side: held together with other readers, never with a writer.
    Read,
    /// A read-write lock's write side: one holder, no reader. A waiting writer makes the readers
    /// that come after it wait too (no writer starvation).
    Write,
    /// Leadership of an election, campaigning with `value` (what [`crate::Election::leader`]
    /// shows, e.g. the candidate's address): one leader; the fencing token is its term.
    Leader {
        /// The candidate's value.
        value: String,
    },
}

impl LockKind {
    /// The family (namespace) of this kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{Family, LockKind};
    /// assert_eq!(LockKind::Read.family(), Family::RwLock);
    /// assert_eq!(LockKind::Permit { permits: 3 }.family(), Family::Semaphore);
    /// ```
    pub fn family(&self) -> Family {
        match self {
            LockKind::Mutex => Family::Mutex,
            LockKind::Permit { .. } => Family::Semaphore,
            LockKind::Read | LockKind::Write => Family::RwLock,
            LockKind::Leader { .. } => Family::Election,
        }
    }

    /// How this kind shares the lock with the others of its queue.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{driver::Role, LockKind};
    /// assert_eq!(LockKind::Read.role(), Role::Shared);
    /// assert_eq!(LockKind::Permit { permits: 3 }.role(), Role::Permit(3));
    /// ```
    pub fn role(&self) -> Role {
        match self {
            LockKind::Mutex | LockKind::Write | LockKind::Leader { .. } => Role::Exclusive,
            LockKind::Read => Role::Shared,
            LockKind::Permit { permits } => Role::Permit(*permits),
        }
    }

    /// The value a candidate campaigns with ([`LockKind::Leader`]); empty for every other kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::LockKind;
    /// assert_eq!(LockKind::Leader { value: "10.0.0.7".into() }.campaign_value(), "10.0.0.7");
    /// assert_eq!(LockKind::Mutex.campaign_value(), "");
    /// ```
    pub fn campaign_value(&self) -> &str {
        match self {
            LockKind::Leader { value } => value,
            _ => "",
        }
    }
}

/// How an entry of a queue shares the lock (see [`crate::driver::queue::standing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Alone: the first entry of the queue holds it (a mutex, a writer, a leader).
    Exclusive,
    /// With the other shared entries: held when no exclusive entry is ahead (a reader).
    Shared,
    /// One of `n`: held when fewer than `n` entries are ahead (a semaphore permit).
    Permit(u32),
}

/// The families of lock kinds. Each has its own namespace on every backend: backends put
/// [`Family::suffix`] after the encoded name, and [`LockName::encoded`] never contains a `.`, so
/// the keys of different families never mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Family {
    /// Mutexes ([`LockKind::Mutex`]).
    Mutex,
    /// Semaphores ([`LockKind::Permit`]).
    Semaphore,
    /// Read-write locks ([`LockKind::Read`], [`LockKind::Write`]).
    RwLock,
    /// Elections ([`LockKind::Leader`]).
    Election,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 4] = [Family::Mutex, Family::Semaphore, Family::RwLock, Family::Election];

    /// What backends append to [`LockName::encoded`] for this family's keys: nothing for a
    /// mutex (the layout of earlier versions), `.sem`, `.rw`, `.elect`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::Family;
    /// assert_eq!(Family::Mutex.suffix(), "");
    /// assert_eq!(Family::Election.suffix(), ".elect");
    /// ```
    pub fn suffix(self) -> &'static str {
        match self {
            Family::Mutex => "",
            Family::Semaphore => ".sem",
            Family::RwLock => ".rw",
            Family::Election => ".elect",
        }
    }

    /// The family's name in messages: `mutex`, `semaphore`, `read-write lock`, `election`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// assert_eq!(locksmith::Family::RwLock.name(), "read-write lock");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Family::Mutex => "mutex",
            Family::Semaphore => "semaphore",
            Family::RwLock => "read-write lock",
            Family::Election => "election",
        }
    }

    /// `name`'s encoded form with this family's suffix: the one key/path segment backends use.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{driver::LockName, Family};
    /// assert_eq!(Family::Semaphore.segment(&LockName::new("api/quota")?), "api%2Fquota.sem");
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn segment(self, name: &LockName) -> String {
        let (encoded, suffix) = (name.encoded(), self.suffix());
        let mut segment = String::with_capacity(encoded.len() + suffix.len());
        segment.push_str(encoded);
        segment.push_str(suffix);
        segment
    }

    /// The name and family of a [`Family::segment`]; `None` for anything else.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{driver::LockName, Family};
    /// let (name, family) = Family::parse_segment("api%2Fquota.sem").expect("a segment");
    /// assert_eq!((name.as_str(), family), ("api/quota", Family::Semaphore));
    /// assert!(Family::parse_segment("api.unknown").is_none());
    /// assert!(Family::parse_segment("api").is_some_and(|(_, f)| f == Family::Mutex));
    /// # let _ = LockName::new("x");
    /// ```
    pub fn parse_segment(segment: &str) -> Option<(LockName, Family)> {
        let (encoded, family) = match segment.find('.') {
            None => (segment, Family::Mutex),
            Some(dot) => (
                &segment[..dot],
                *Family::ALL.iter().find(|f| f.suffix() == &segment[dot..])?,
            ),
        };
        Some((LockName::decode(encoded)?, family))
    }
}

/// A held lock, as a backend reports it.
///
/// The guard keeps it and hands it back to the backend for renewal and release.
#[derive(Clone)]
pub struct Lease {
    /// The lock name.
    pub name: LockName,
    /// What is held: the mutex, a permit, a side of a read-write lock, leadership (as requested).
    pub kind: LockKind,
    /// The fencing token: strictly greater than the token of every earlier holder of this name on
    /// this backend. Storage that accepts writes only with a token at least as large as the last it
    /// saw rejects a stale holder's late writes.
    pub fencing_token: u64,
    /// The lease time the server actually enforces (may be larger than requested).
    pub ttl: Duration,
    /// The backend's identity of this holder: the etcd key, the ZooKeeper node path, the Redis
    /// token. Opaque to locksmith-core; shown in logs.
    pub holder_id: String,
    /// When the request that obtained this lease (or last refreshed it on the server) was *sent*.
    /// The watchdog counts the lease from here, so it can only under-estimate what is left.
    pub acquired_at: Instant,
    /// Whether the request found the lock taken and this grant came after it waited (a hand-over,
    /// or a takeover from an expired holder), not at its first attempt. [`LockRequest::lease`]
    /// sets `false`; a backend's waiting path sets `true` (`Lease { waited: true, ..lease }`).
    /// The `locksmith_handovers_total` metric counts these grants.
    pub waited: bool,
    /// Fired when the lease is lost. A backend that learns of a loss by itself (a watch, a session
    /// expiry) fires it; the watchdog fires it when renewal fails.
    pub lost: LostSignal,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("fencing_token", &self.fencing_token)
            .field("ttl", &self.ttl)
            .field("holder_id", &self.holder_id)
            .field("waited", &self.waited)
            .field("lost", &self.lost.reason())
            .finish()
    }
}

/// Why a lock was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// No renewal succeeded for longer than the lease (minus a safety margin): the server may
    /// already have expired it. Carries the last renewal error.
    RenewalFailed(String),
    /// The backend reports the lease gone: expired, revoked, session expired, or the key/node was
    /// deleted behind the holder's back.
    LeaseGone(String),
    /// The `max_hold` time passed; locksmith stopped renewing and released the lock.
    MaxHoldReached,
    /// The guard's [`crate::Locker`] was shut down ([`crate::Locker::shutdown`]), which released
    /// the lock.
    Shutdown,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::RenewalFailed(e) => write!(f, "renewal failed for longer than the lease: {e}"),
            LostReason::LeaseGone(e) => write!(f, "the lease is gone on the server: {e}"),
            LostReason::MaxHoldReached => f.write_str("max_hold reached; the lock was released"),
            LostReason::Shutdown => f.write_str("the locker was shut down; the lock was released"),
        }
    }
}

/// A one-shot, clonable "this lease is lost" flag with a future to wait on it.
///
/// The first [`LostSignal::fire`] wins; later calls keep the first reason.
#[derive(Clone)]
pub struct LostSignal(Arc<LostState>);

/// What the clones of one [`LostSignal`] share, in one allocation (one is made on every grant).
struct LostState {
    tx: watch::Sender<Option<LostReason>>,
    /// Called once with the reason when the signal fires (locksmith-core's metrics).
    hook: std::sync::Mutex<Option<LostHook>>,
    /// Until when the lease is surely valid, as the watchdog last counted it (`None`: not
    /// counted): [`crate::LockGuard::is_held`] is false past it even before the watchdog runs.
    valid_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

type LostHook = Box<dyn FnOnce(&LostReason) + Send>;

impl Default for LostSignal {
    fn default() -> Self {
        LostSignal(Arc::new(LostState {
            tx: watch::channel(None).0,
            hook: std::sync::Mutex::new(None),
            valid_until: std::sync::Mutex::new(None),
        }))
    }
}

impl LostSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the lease lost. Returns true if this call was the one that fired it.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// use locksmith::{driver::LostSignal, LostReason};
    /// let lost = LostSignal::new();
    /// assert!(lost.fire(LostReason::LeaseGone("the key was deleted".into())));
    /// assert!(!lost.fire(LostReason::MaxHoldReached)); // the first reason stays
    /// assert!(lost.is_lost());
    /// assert!(matches!(lost.reason(), Some(LostReason::LeaseGone(_))));
    /// ```
    pub fn fire(&self, reason: LostReason) -> bool {
        let fired = self.0.tx.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason.clone());
                true
            } else {
                false
            }
        });
        if fired {
            let hook = self.0.hook.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(hook) = hook {
                hook(&reason);
            }
        }
        fired
    }

    /// Calls `hook` once with the reason when the signal fires (at once if it has fired).
    pub(crate) fn on_lost(&self, hook: impl FnOnce(&LostReason) + Send + 'static) {
        let mut slot = self.0.hook.lock().unwrap_or_else(|e| e.into_inner());
        match self.reason() {
            Some(reason) => {
                drop(slot);
                hook(&reason);
            }
            None => *slot = Some(Box::new(hook)),
        }
    }

    /// Whether the lease has been declared lost.
    pub fn is_lost(&self) -> bool {
        self.0.tx.borrow().is_some()
    }

    /// Records until when the lease is surely valid (the watchdog, at each grant and renewal).
    pub(crate) fn set_valid_until(&self, until: tokio::time::Instant) {
        *self.0.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// Whether the lease ran out by the watchdog's last count (from its grant or its last
    /// answered renewal): no renewal was answered in time (or its `max_hold` passed), whether or
    /// not the watchdog has run since to declare it lost. A backend asks it (with [`LostSignal::is_lost`]) to tell a lease
    /// that may have been taken from it from one that surely was not.
    pub fn ran_out(&self) -> bool {
        let until = *self.0.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        until.is_some_and(|t| t <= tokio::time::Instant::now())
    }

    /// The reason, once lost.
    pub fn reason(&self) -> Option<LostReason> {
        self.0.tx.borrow().clone()
    }

    /// Resolves with the reason when the lease is lost (at once if it already is).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: waiting changes nothing; a loss that happens meanwhile is seen by the next
    /// call (and by [`LostSignal::reason`]).
    ///
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use locksmith::{driver::LostSignal, LostReason};
    /// let lost = LostSignal::new();
    /// let waiter = tokio::spawn({ let lost = lost.clone(); async move { lost.wait().await } });
    /// lost.fire(LostReason::MaxHoldReached);
    /// assert_eq!(waiter.await.unwrap(), LostReason::MaxHoldReached);
    /// # }
    /// ```
    pub async fn wait(&self) -> LostReason {
        let mut rx = self.0.tx.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait; the fallback
        // only keeps this free of panics.
        let reason = rx.wait_for(Option::is_some).await.ok().and_then(|r| r.clone());
        reason.unwrap_or_else(|| LostReason::LeaseGone("lost signal closed".into()))
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LostSignal").field(&self.reason()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_reason_wins_and_wakes_waiters() {
        let s = LostSignal::new();
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.wait().await }
        });
        assert!(!s.is_lost());
        assert!(s.fire(LostReason::MaxHoldReached));
        assert!(!s.fire(LostReason::LeaseGone("x".into())));
        assert_eq!(waiter.await.unwrap(), LostReason::MaxHoldReached);
        assert_eq!(s.wait().await, LostReason::MaxHoldReached);
    }
}
