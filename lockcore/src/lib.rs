//! # locksmith-core — the locksmith lock contract
//!
//! One distributed-lock API over several coordination services. This crate holds everything that is
//! the same on every backend, in two parts for two audiences.
//!
//! **Applications** (usually through the `locksmith` facade, which re-exports this part and
//! connects by URL) use the crate root:
//!
//! - [`Locker`] and [`LockGuard`]: a builder for TTL, timeout and `max_hold`; a guard with a
//!   fencing token, a background watchdog that renews the lease, a `lost()` future, and release on
//!   `release().await` or on drop; [`Locker::shutdown`] before the process ends;
//! - beyond the mutex, with the same guard: semaphores ([`Locker::semaphore`]), read-write locks
//!   ([`Locker::rwlock`]) and leader election ([`Locker::election`]), all one FIFO queue per name;
//! - [`Guarded`] ([`LockGuard::guarded`]): writes to the coordination store itself that commit
//!   only while the lock is held, checked by the server atomically with the write;
//! - [`LockError`] (what can go wrong, and which errors are worth retrying), [`LostReason`];
//! - [`LockInfo`] and [`ListedLock`], what `inspect` and `list` show;
//! - [`MemoryBackend`], the embedded backend (`mem://`), and [`Dual`], one lock held in two
//!   backends at once, for migrations;
//! - [`metrics`], the counters and histograms every locker records.
//!
//! **Backend authors** use [`driver`]: the [`driver::LockBackend`] trait, the request and lease
//! types, the name encoding, the URL parsers, the shared queue rule and clean-up; and
//! [`conformance`] (feature `conformance`), the test suite every backend runs.
//!
//! ## Quickstart
//!
//! ```
//! # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
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
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item shows the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
mod descriptor;
pub mod driver;
mod dual;
mod election;
mod error;
mod guard;
mod guarded;
mod lease;
mod locker;
mod memory;
pub mod metrics;
mod name;
mod outage;
mod register;
mod release_again;
mod rwlock;
mod store;
mod watchdog;

pub use backend::{HolderInfo, ListedLock, LockInfo, PruneReport};
pub use dual::Dual;
pub use election::{Campaign, Election, Leader, LeaderGuard, LeaderWatch, MAX_VALUE_LEN};
pub use error::{BoxError, LockError, Result};
pub use guard::LockGuard;
pub use guarded::{GuardedWrite, MAX_GUARDED_KEY_LEN, MAX_GUARDED_VALUE_LEN};
pub use lease::{Family, LockKind, LostReason, DEFAULT_TTL, MAX_PERMITS, MAX_TTL, MIN_TTL};
pub use locker::{LockBuilder, Locker};
pub use memory::MemoryBackend;
pub use name::MAX_NAME_LEN;
pub use register::{Admission, TokenRegister, REGISTER_LOCK_PREFIX};
pub use rwlock::RwLock;
pub use store::Guarded;
