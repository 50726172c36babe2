//! [`RwLock`]: a read-write lock, by name (from [`crate::Locker::rwlock`]).

use crate::lease::LockKind;
use crate::locker::{LockBuilder, Locker};

/// A read-write lock: many readers at once, or one writer. Waiting is FIFO, and a waiting writer
/// makes the readers that come after it wait too, so writers are never starved. Fencing tokens
/// follow arrival: a writer's token is greater than that of every reader and writer before it.
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
/// let config = locker.rwlock("config");
/// let r1 = config.read().acquire().await?;
/// let r2 = config.read().acquire().await?; // readers share
/// assert!(config.write().try_acquire().await?.is_none());
/// r1.release().await?;
/// r2.release().await?;
/// let w = config.write().acquire().await?;
/// assert!(w.fencing_token() > 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    locker: Locker,
    name: String,
}

impl RwLock {
    pub(crate) fn new(locker: Locker, name: String) -> Self {
        RwLock { locker, name }
    }

    /// A request for the read side; set options on the builder, then acquire.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let config = locker.rwlock("config");
    /// let r1 = config.read().acquire().await?;
    /// let r2 = config.read().try_acquire().await?; // readers share
    /// assert!(r2.is_some());
    /// # drop(r1);
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> LockBuilder {
        self.locker.build(self.name.clone(), LockKind::Read)
    }

    /// A request for the write side; set options on the builder, then acquire.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let config = locker.rwlock("config");
    /// let w = config.write().acquire().await?;
    /// assert!(config.read().try_acquire().await?.is_none()); // the writer excludes readers
    /// w.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> LockBuilder {
        self.locker.build(self.name.clone(), LockKind::Write)
    }

    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// assert_eq!(locker.rwlock("config").name(), "config");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
}
