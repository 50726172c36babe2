//! [`Guarded`]: the guarded writes of one held lock, as a user calls them (see `guarded.rs` for
//! what a guarded write is). A stale holder's write (paused past its lease, its lock taken away)
//! fails with [`LockError::NotHeld`] and never lands.

use std::fmt;

use crate::backend::{within_request_timeout, LockBackend};
use crate::error::{LockError, Result};
use crate::guarded::{validate_key, GuardedWrite};
use crate::lease::Lease;

/// Guarded writes of one held lock: each commits only if the lock is still held by this guard,
/// checked by the server atomically with the write. Made by [`crate::LockGuard::guarded`].
///
/// # Cancel safety
///
/// A write's future dropped before it answered may or may not have committed (as any write to a
/// server): it committed only if the lock was held when the server applied it.
pub struct Guarded<'a> {
    backend: &'a dyn LockBackend,
    lease: &'a Lease,
}

impl<'a> Guarded<'a> {
    pub(crate) fn new(backend: &'a dyn LockBackend, lease: &'a Lease) -> Self {
        Guarded { backend, lease }
    }

    /// Sets `key` to `value` if the lock is still held.
    ///
    /// # Errors
    ///
    /// [`LockError::NotHeld`] if the lock is no longer held (the write did not land);
    /// [`LockError::InvalidName`] / [`LockError::InvalidOption`] for a bad key or value;
    /// [`LockError::Unavailable`] if the server did not answer (the write may have landed, while
    /// the lock was held); [`LockError::InvalidOption`] on a backend without guarded writes.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it answered, the write may or may not have landed; if it landed, it landed
    /// while the lock was held (see [`Guarded`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("billing").acquire().await?;
    /// guard.guarded().put("/billing/last-run", "2026-11-24").await?;
    /// assert_eq!(guard.guarded().get("/billing/last-run").await?.as_deref(), Some(&b"2026-11-24"[..]));
    /// # Ok(()) }
    /// ```
    pub async fn put(&self, key: &str, value: impl Into<Vec<u8>>) -> Result<()> {
        let write = GuardedWrite::Put {
            key: key.to_owned(),
            value: value.into(),
        };
        self.write(&write).await.map(drop)
    }

    /// Removes `key` if the lock is still held; whether it existed.
    ///
    /// # Errors
    ///
    /// As [`Guarded::put`].
    ///
    /// # Cancel safety
    ///
    /// As [`Guarded::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("billing").acquire().await?;
    /// guard.guarded().put("/billing/tmp", "x").await?;
    /// assert!(guard.guarded().delete("/billing/tmp").await?);
    /// assert!(!guard.guarded().delete("/billing/tmp").await?); // nothing left to delete
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, key: &str) -> Result<bool> {
        self.write(&GuardedWrite::Delete { key: key.to_owned() }).await
    }

    /// Sets `key` to `value` if the lock is still held and the key's value is now `expected`
    /// (`None`: the key does not exist); whether it was set.
    ///
    /// # Errors
    ///
    /// As [`Guarded::put`]; a value that differs is `Ok(false)`, not an error.
    ///
    /// # Cancel safety
    ///
    /// As [`Guarded::put`].
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("billing").acquire().await?;
    /// let store = guard.guarded();
    /// assert!(store.compare_and_set("/billing/cursor", None, "1").await?); // created
    /// assert!(!store.compare_and_set("/billing/cursor", Some(b"7"), "8").await?); // value differs
    /// assert!(store.compare_and_set("/billing/cursor", Some(b"1"), "2").await?);
    /// # Ok(()) }
    /// ```
    pub async fn compare_and_set(&self, key: &str, expected: Option<&[u8]>, value: impl Into<Vec<u8>>) -> Result<bool> {
        let write = GuardedWrite::CompareAndSet {
            key: key.to_owned(),
            expected: expected.map(<[u8]>::to_vec),
            value: value.into(),
        };
        self.write(&write).await
    }

    /// Reads `key`: a plain read, not checked against the lock (reading cannot harm the data;
    /// write back with [`Guarded::compare_and_set`] to build on what was read).
    ///
    /// # Errors
    ///
    /// As [`Guarded::put`], without `NotHeld`.
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
    /// let guard = locker.lock("billing").acquire().await?;
    /// assert_eq!(guard.guarded().get("/billing/cursor").await?, None);
    /// guard.guarded().put("/billing/cursor", "17").await?;
    /// assert_eq!(guard.guarded().get("/billing/cursor").await?, Some(b"17".to_vec()));
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        within_request_timeout(self.backend, "reading a guarded key", self.backend.read_key(key)).await
    }

    /// Sends one guarded write: refused at once when the guard already knows the lock is lost.
    async fn write(&self, write: &GuardedWrite) -> Result<bool> {
        write.validate()?;
        if self.lease.lost.is_lost() {
            return Err(LockError::not_held(self.lease.name.as_str()));
        }
        let result = within_request_timeout(
            self.backend,
            "a guarded write",
            self.backend.write_guarded(self.lease, write),
        )
        .await;
        match &result {
            Ok(applied) => {
                tracing::debug!(lock = %self.lease.name, fencing_token = self.lease.fencing_token, ?write, applied, "guarded write")
            }
            Err(e) => {
                tracing::debug!(lock = %self.lease.name, fencing_token = self.lease.fencing_token, ?write, error = %e, "guarded write refused")
            }
        }
        result
    }
}

impl fmt::Debug for Guarded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("lock", &self.lease.name)
            .field("fencing_token", &self.lease.fencing_token)
            .finish()
    }
}
