//! # lockcore — the locksmith lock contract
//!
//! One distributed-lock API over several coordination services. This crate holds everything that is
//! the same on every backend:
//!
//! - [`LockBackend`], the trait a backend implements: `acquire`, `try_acquire`, `release`, `renew`
//!   (and `renew_many`, for backends that renew many leases in one request);
//! - [`Locker`] and [`LockGuard`], the API users hold: a builder for TTL, timeout and `max_hold`;
//!   a guard with a fencing token, a background watchdog that renews the lease, a `lost()` future,
//!   and release on `release().await` or on drop;
//! - beyond the mutex, with the same guard: semaphores ([`Locker::semaphore`]), read-write locks
//!   ([`Locker::rwlock`]) and leader election ([`Locker::election`]), all one FIFO queue per name
//!   granted by one rule ([`queue`]);
//! - [`LockName`], the validation and the one collision-free encoding of lock names;
//! - [`MemoryBackend`], the embedded backend (`mem://`);
//! - [`Descriptor`], what a backend crate tells the facade about itself (schemes, options, TTL);
//! - [`Dual`], one lock held in two backends at once, for migrations;
//! - [`Outage`], how a backend's waiting `acquire` rides out an outage;
//! - [`conformance`] (feature `conformance`), the test suite every backend runs.
//!
//! ## Quickstart
//!
//! ```
//! # extern crate lockcore as locksmith; // users depend on the locksmith facade
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! use std::time::Duration;
//! use locksmith::{Locker, MemoryBackend};
//!
//! let locker = Locker::new(MemoryBackend::new());
//! let guard = locker
//!     .lock("orders/42")
//!     .ttl(Duration::from_secs(10))
//!     .timeout(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! // Pass the fencing token to the storage you write to: it rejects writes of stale holders.
//! let token = guard.fencing_token();
//! assert!(locker.lock("orders/42").try_acquire().await?.is_none());
//! guard.release().await?;
//! let next = locker.lock("orders/42").try_acquire().await?.expect("free again");
//! assert!(next.fencing_token() > token);
//! # Ok(()) }
//! ```
//!
//! The design (the contract, the guard and watchdog, fencing, name encoding) is explained in
//! `docs/design.md` of the repository.

#![warn(missing_docs)]

mod backend;
pub mod cleanup;
#[cfg(feature = "conformance")]
pub mod conformance;
mod descriptor;
mod dual;
mod election;
mod error;
mod guard;
mod lease;
mod locker;
mod memory;
pub mod metrics;
mod name;
mod outage;
pub mod queue;
mod rwlock;
pub mod url;
mod watchdog;

pub use backend::{HolderInfo, ListedLock, LockBackend, LockInfo, DEFAULT_REQUEST_TIMEOUT};
pub use descriptor::{Connecting, Descriptor, TtlScope};
pub use dual::Dual;
pub use election::{Campaign, Election, Leader, LeaderGuard, LeaderWatch, MAX_VALUE_LEN};
pub use error::{BoxError, LockError, Result};
pub use guard::LockGuard;
pub use lease::{
    Family, Lease, LockKind, LockRequest, LostReason, LostSignal, Role, DEFAULT_TTL, MAX_PERMITS, MAX_TTL, MIN_TTL,
};
pub use locker::{LockBuilder, Locker};
pub use memory::MemoryBackend;
pub use name::{LockName, MAX_NAME_LEN};
pub use outage::Outage;
pub use rwlock::RwLock;
pub use url::BackendUrl;

/// Re-exported so backends implement [`LockBackend`] with the same macro version.
pub use async_trait::async_trait;
