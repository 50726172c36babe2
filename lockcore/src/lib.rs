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
//! ## Work under a lock
//!
//! [`LockBuilder::run`] takes the lock, runs the work with a [`Held`] (fencing token, guarded
//! writes), stops the work and answers [`LockError::Lost`] if the lock is lost before the work
//! ends (never the work's value then), releases the lock however the work ends (a value, an
//! error, a panic) and returns the work's value:
//!
//! ```
//! # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
//! let token = locker
//!     .lock("reports/daily")
//!     .run(|held| async move {
//!         // ... the work, passing held.fencing_token() to what it writes ...
//!         held.fencing_token()
//!     })
//!     .await?;
//! # assert!(token > 0);
//! # Ok(()) }
//! ```
//!
//! ## Several locks at once
//!
//! [`Locker::lock_all`] takes a set of mutexes in one global order (sorted, duplicates removed),
//! so two callers naming them in different orders cannot deadlock; one timeout for the set; every
//! guard or none (a failure or cancellation part-way releases what was taken at once); one
//! [`MultiGuard::lost`] for the set, and [`LockAll::run`].
//!
//! ```
//! # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
//! let both = locker.lock_all(["accounts/bob", "accounts/alice"]).acquire().await?;
//! // ... move money from one to the other ...
//! both.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Re-entry
//!
//! Locks are **not re-entrant**, as in DistributedLock (.NET), and unlike Redisson's `RLock`
//! (which counts re-entries by thread): a guard is one holder, one fencing token, one release.
//! What locksmith adds is an answer instead of a self-deadlock: an `acquire` of a lock that the
//! *same task* already holds *on the same [`Locker`]*, such that its own guards would keep the
//! request from ever being granted, fails at once with [`LockError::WouldDeadlock`] naming the
//! lock and the token held, with nothing queued, instead of waiting for its timeout:
//!
//! - a mutex, a write lock or an election's leadership, while the task holds any guard of it;
//! - a read lock while the task holds the write lock (a read after a read is granted: readers
//!   share; but a writer that queued in between makes the second read wait behind it, and the
//!   writer waits for the first read: that deadlock lasts until the read's timeout and is not
//!   detected, so take one read per task);
//! - a semaphore permit while every permit of the semaphore is the task's own (a second permit
//!   with permits to spare is granted).
//!
//! `try_acquire` never waits and answers `None` as for any held lock; [`LockAll`] refuses a set
//! that has a name the task holds. Two tasks that contend are never refused, whatever locker
//! they share. Precisely, the holder of a guard is:
//!
//! - the tokio task that took it ([`tokio::task::try_id`]) or, where no task runs (the body of
//!   `#[tokio::main]`, a runtime's `block_on`, `locksmith::blocking`), the thread;
//! - within that task, the future whose request took it, told apart by the waker it is polled
//!   with: the futures that a `FuturesUnordered` polls (`buffer_unordered`,
//!   `for_each_concurrent`) each have their own, so they contend like tasks. Futures that share
//!   the task's waker (the branches of one `tokio::join!` or `select!`) count as one holder: a
//!   second branch asking for a lock the first holds is refused; give such branches tasks of
//!   their own. A future that holds a lock while it awaits a `FuturesUnordered` whose futures
//!   ask for it is not detected (they wait, and deadlock until their timeout);
//! - once a method of the guard is called in another task, that task (any future of it). A
//!   guard moved into another task and not used there yet still counts as its taker's: call
//!   [`LockGuard::detach_from_task`] before handing it on if the taker may ask again meanwhile.
//!
//! Another [`Locker`] (another connection) is another holder, as another process is: a request
//! there waits, as it should. A token register's own lock (named with
//! [`REGISTER_LOCK_PREFIX`]) is never checked: each admission takes and releases it, so the
//! admissions of one task wait for each other's turn.
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
mod multi;
mod name;
mod outage;
mod reentry;
mod register;
mod release_again;
mod run;
mod rwlock;
mod store;
mod watchdog;

pub use backend::{HolderInfo, ListedLock, LockInfo, PruneReport};
pub use dual::Dual;
pub use election::{Campaign, Election, Leader, LeaderGuard, LeaderWatch, MAX_VALUE_LEN};
pub use error::{BoxError, LockError, Result};
pub use guard::LockGuard;
pub use guarded::{MAX_GUARDED_KEY_LEN, MAX_GUARDED_VALUE_LEN};
pub use lease::{Family, LockKind, LostReason, DEFAULT_TTL, MAX_PERMITS, MAX_TTL, MIN_TTL};
pub use locker::{LockBuilder, Locker};
pub use memory::MemoryBackend;
pub use multi::{LockAll, MultiGuard};
pub use name::MAX_NAME_LEN;
pub use register::{Admission, TokenRegister, REGISTER_LOCK_PREFIX};
pub use run::{Held, HeldAll};
pub use rwlock::RwLock;
pub use store::Guarded;
