//! The trait every backend implements: exactly the primitives a coordination service must provide.
//! Everything a user touches (the builder, the guard, the watchdog) is built on it once, in lockcore.

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

/// A distributed-lock backend.
///
/// Implementations must uphold, for every lock name:
/// - **Mutual exclusion:** at most one unexpired lease at a time.
/// - **Fencing:** [`Lease::fencing_token`] strictly increases across holders.
/// - **Independence:** names only ever compete with themselves; keys and paths are built from
///   [`crate::LockName::encoded`].
/// - **Cancellation safety:** if a future returned by [`LockBackend::acquire`] or
///   [`LockBackend::try_acquire`] is dropped at any await point, nothing is left behind on the
///   server: no waiter entry, and no lease obtained but not yet returned (clean up from a `Drop`
///   guard that spawns the deletion).
/// - **FIFO:** waiters get the lock in the order they started waiting.
/// - **Expiry per lease:** a lease the watchdog stops renewing (its guard was abandoned, its
///   process is gone) expires on the server after about its TTL, even when the backend's session
///   stays alive for other leases of the same connection.
///
/// The trait is dyn-compatible; [`crate::Locker`] holds an `Arc<dyn LockBackend>`.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// A short name for logs and errors: `"mem"`, `"etcd"`, `"zk"`, `"redis"`.
    fn kind(&self) -> &'static str;

    /// One attempt: the lease if the lock was free (and nobody was queued for it), `None` if it is
    /// held or another waiter is first in line. Never waits for the lock.
    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>>;

    /// Waits until the lock is held, in FIFO order with other waiters. Returns
    /// [`crate::LockError::Timeout`] at `deadline` (and removes its waiter entry), or waits without
    /// limit when `deadline` is `None`. Must be cancellation-safe (see the trait docs).
    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease>;

    /// Releases the lease. [`crate::LockError::NotHeld`] if it was no longer ours (expired, taken
    /// away, already released).
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// Extends the lease by its TTL from now. [`crate::LockError::NotHeld`] when the lease is gone
    /// (the caller then fires its lost signal); any other error is treated as transient and retried.
    async fn renew(&self, lease: &Lease) -> Result<()>;

    /// Who holds `name` right now and how many wait: a read-only look for operators (the CLI's
    /// `inspect`), never used for locking decisions.
    async fn inspect(&self, name: &LockName) -> Result<LockInfo>;

    /// Renews many leases at once; returns one result per lease, in order.
    ///
    /// The watchdog calls only this. The default renews one lease after the other; backends that can
    /// do better override it: etcd and ZooKeeper renew one session for all locks of a client, Redis
    /// extends every key in one scripted round trip.
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        let mut results = Vec::with_capacity(leases.len());
        for lease in leases {
            results.push(self.renew(lease).await);
        }
        results
    }

    /// How often the watchdog should renew a lease of `ttl`. Default: a third of it.
    fn renew_interval(&self, ttl: Duration) -> Duration {
        ttl / 3
    }
}
