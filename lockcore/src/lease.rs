//! What a backend is asked for ([`LockRequest`]) and what it hands back ([`Lease`]), with the
//! [`LostSignal`] through which both the backend and the watchdog can declare a lease lost.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::name::LockName;

/// The smallest TTL locksmith accepts. Backends may raise it (etcd to whole seconds, ZooKeeper to
/// twice its tick time) and report the effective value in [`Lease::ttl`].
pub const MIN_TTL: Duration = Duration::from_millis(50);

/// The largest TTL locksmith accepts: longer leases are almost always a unit mistake, and a crashed
/// holder would block everyone for that long.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The TTL used when the caller sets none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// One request to a backend: which lock, for how long a lease.
#[derive(Clone, Debug)]
pub struct LockRequest {
    /// The validated lock name; backends build keys from [`LockName::encoded`].
    pub name: LockName,
    /// The requested lease time, within [`MIN_TTL`]..=[`MAX_TTL`].
    pub ttl: Duration,
}

/// A held lock, as a backend reports it.
///
/// The guard keeps it and hands it back to the backend for renewal and release.
#[derive(Clone)]
pub struct Lease {
    /// The lock name.
    pub name: LockName,
    /// The fencing token: strictly greater than the token of every earlier holder of this name on
    /// this backend. Storage that accepts writes only with a token at least as large as the last it
    /// saw rejects a stale holder's late writes.
    pub fencing_token: u64,
    /// The lease time the server actually enforces (may be larger than requested).
    pub ttl: Duration,
    /// The backend's identity of this holder: the etcd key, the ZooKeeper node path, the Redis
    /// token. Opaque to lockcore; shown in logs.
    pub holder_id: String,
    /// When the request that obtained this lease (or last refreshed it on the server) was *sent*.
    /// The watchdog counts the lease from here, so it can only under-estimate what is left.
    pub acquired_at: Instant,
    /// Fired when the lease is lost. A backend that learns of a loss by itself (a watch, a session
    /// expiry) fires it; the watchdog fires it when renewal fails.
    pub lost: LostSignal,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("fencing_token", &self.fencing_token)
            .field("ttl", &self.ttl)
            .field("holder_id", &self.holder_id)
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
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::RenewalFailed(e) => write!(f, "renewal failed for longer than the lease: {e}"),
            LostReason::LeaseGone(e) => write!(f, "the lease is gone on the server: {e}"),
            LostReason::MaxHoldReached => f.write_str("max_hold reached; the lock was released"),
        }
    }
}

/// A one-shot, clonable "this lease is lost" flag with a future to wait on it.
///
/// The first [`LostSignal::fire`] wins; later calls keep the first reason.
#[derive(Clone)]
pub struct LostSignal {
    tx: Arc<watch::Sender<Option<LostReason>>>,
}

impl Default for LostSignal {
    fn default() -> Self {
        LostSignal {
            tx: Arc::new(watch::channel(None).0),
        }
    }
}

impl LostSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the lease lost. Returns true if this call was the one that fired it.
    pub fn fire(&self, reason: LostReason) -> bool {
        self.tx.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        })
    }

    /// Whether the lease has been declared lost.
    pub fn is_lost(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// The reason, once lost.
    pub fn reason(&self) -> Option<LostReason> {
        self.tx.borrow().clone()
    }

    /// Resolves with the reason when the lease is lost (at once if it already is).
    pub async fn wait(&self) -> LostReason {
        let mut rx = self.tx.subscribe();
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
