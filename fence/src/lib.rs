//! Fenced stores: storage outside the lock service that refuses a stale lock holder's write.
//!
//! A lock holder can be paused past its lease and wake up still believing it holds the lock
//! (`docs/fencing.md`). What keeps the data safe is storage that remembers the highest
//! [fencing token](https://docs.rs/locksmith) it has accepted for a lock and refuses a write with
//! a lower one, *in the same atomic step as the write*. This crate makes that one call for two
//! common kinds of storage:
//!
//! - [`postgres::Fence`] (feature `postgres`): one row per lock in a table of your PostgreSQL
//!   database; [`postgres::Fence::admit`] in your own transaction, before its writes, refuses a
//!   stale token and makes later holders' transactions wait until yours has committed.
//! - [`objects::FencedObjects`] (feature `object-store`): objects written through the
//!   [`object_store`](https://docs.rs/object_store) crate (S3 and S3-compatible stores, GCS,
//!   memory; not Azure or the local file system, see [`objects::FencedObjects`])
//!   with the token in the object's metadata and a conditional put (`If-Match` on its ETag), so
//!   an object written by a later holder is never overwritten by an earlier one.
//!
//! Neither needs the lock service: the token is the only thing passed, so the process that
//! writes can be another one than the holder (a service that receives the holder's requests).
//!
//! # Module map
//!
//! | module | concern |
//! |---|---|
//! | `lib.rs` | [`FenceError`], the token's conversion |
//! | `postgres.rs` | the fence table and its one statement |
//! | `objects.rs` | the conditional-put loop over an `ObjectStore` |

// docs.rs (`--cfg docsrs`, nightly): each feature-gated item shows the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "object-store")]
#[cfg_attr(docsrs, doc(cfg(feature = "object-store")))]
pub mod objects;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;

/// Why a fenced write was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A later holder has written: this holder's token is below the highest the store accepted.
    /// The holder is stale and must stop (and roll back its transaction, where it has one).
    #[error("stale fencing token {token}: the store has accepted {highest} (a later holder wrote)")]
    Stale {
        /// The token this write carried.
        token: u64,
        /// The highest token the store has accepted.
        highest: u64,
    },
    /// A token or a name the store cannot keep (a token above `i64::MAX` for PostgreSQL's
    /// `bigint`, a table name that is not a plain identifier).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// Other writers kept changing the object between this writer's read and its conditional
    /// write, more times in a row than the retry limit.
    #[error("gave up after {0} conditional writes lost to other writers")]
    Contended(u32),
    /// The store failed (connection, permissions, a missing table); nothing is known to have
    /// been written.
    #[error("store error: {0}")]
    Store(Box<dyn std::error::Error + Send + Sync>),
}
