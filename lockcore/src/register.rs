//! [`TokenRegister`]: the highest fencing token a resource has admitted, kept in the coordination
//! store, for a service that receives tokens with its requests and has no store of its own that
//! can compare them (the third case of `docs/fencing.md`, beside guarded writes and the fenced
//! SQL row or object). Built on the shared machinery only: an admission takes the register's own
//! lock, reads the highest token and writes the new one with a guarded compare-and-set, so it is
//! atomic on every backend with guarded writes and needs nothing of a backend but those.

use std::fmt;
use std::time::Duration;

use crate::backend::within_request_timeout;
use crate::error::{LockError, Result};
use crate::guard::LockGuard;
use crate::lease::Family;
use crate::locker::Locker;
use crate::name::LockName;

/// Where registers keep their locks: `locksmith-register/<name>` (a lock of that name is the
/// register's; `locksmith list` shows it while an admission runs).
pub const REGISTER_LOCK_PREFIX: &str = "locksmith-register/";

/// The suffix of the register's value among its lock's data keys ([`LockGuard::data_key`]).
const VALUE_SUFFIX: &str = "highest";

/// How long an admission waits for the register's lock unless told otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times an admission starts over when its lock was lost before its write landed.
const ATTEMPTS: u32 = 5;

/// What [`TokenRegister::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Admission {
    /// The token was at least the highest admitted before (`previous`; `None` for the first
    /// token): it is the highest now. Go on with the request that carried it.
    Admitted {
        /// The highest token before this one.
        previous: Option<u64>,
    },
    /// The token was below `highest`: it comes from a holder whose lock has since been granted
    /// to someone else. Refuse the request that carried it.
    Stale {
        /// The highest token admitted.
        highest: u64,
    },
}

impl Admission {
    /// Whether the token was admitted.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let register = locker.token_register("payments-api")?;
    /// assert!(register.admit(7).await?.is_admitted());
    /// assert!(!register.admit(6).await?.is_admitted());
    /// # Ok(()) }
    /// ```
    pub fn is_admitted(&self) -> bool {
        matches!(self, Admission::Admitted { .. })
    }
}

/// A register of the highest fencing token admitted for one resource, shared by every client of
/// the coordination store: [`TokenRegister::admit`] admits a token at least as high as every
/// token admitted before and refuses a lower one. Made by [`Locker::token_register`].
///
/// The register orders admissions, not the work that follows them: a service that admits a
/// token and then writes must not let an earlier admission's write land after a later one's
/// (one worker per resource, or its own lock held from the admission to the write). Where the
/// resource can check the token in its own write (a SQL row, an object store's conditional put,
/// the coordination store's guarded writes), prefer that: it needs no such care.
///
/// # Cancel safety
///
/// An admission dropped before it answered may or may not have admitted its token (as any write
/// to a server); its lock is released as every dropped acquire's or guard's is.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
/// use locksmith::Admission;
///
/// let register = locker.token_register("payments-api")?;
/// assert!(register.admit(41).await?.is_admitted());
/// assert_eq!(register.admit(40).await?, Admission::Stale { highest: 41 });
/// assert_eq!(register.highest().await?, Some(41));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TokenRegister {
    locker: Locker,
    lock: LockName,
    timeout: Duration,
}

impl TokenRegister {
    pub(crate) fn new(locker: Locker, name: &str) -> Result<TokenRegister> {
        LockName::new(name)?;
        let lock = LockName::new(&format!("{REGISTER_LOCK_PREFIX}{name}"))?;
        // The key that holds the value, too: a name whose key is too long for the store would
        // make every admission fail.
        locker.backend().data_key(Family::Mutex, &lock, VALUE_SUFFIX)?;
        Ok(TokenRegister {
            locker,
            lock,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// How long [`TokenRegister::admit`] waits for the register's lock (default 30 s).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use std::time::Duration;
    /// let register = locker.token_register("payments-api")?.timeout(Duration::from_secs(2));
    /// assert!(register.admit(1).await?.is_admitted());
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Admits `token` if it is at least the highest token admitted so far (an equal token is
    /// admitted again: a holder sends its token with every request), else answers
    /// [`Admission::Stale`] and changes nothing.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] if the register's lock was not had within the timeout;
    /// [`LockError::Unavailable`] if the server did not answer (the token may have been admitted),
    /// or if the register's lock was lost five times in a row before its write landed;
    /// [`LockError::Closed`] after [`Locker::shutdown`]; [`LockError::InvalidOption`] on a backend without guarded writes (`file://`, a Redis
    /// quorum, a dual-write migration); [`LockError::Protocol`] if the register's key holds
    /// something other than a token.
    ///
    /// # Cancel safety
    ///
    /// A dropped admission may or may not have admitted its token (its compare-and-set may have
    /// reached the server); the register's lock it held or waited for is released, or its queue
    /// entry removed, in the background, as for any dropped acquire or guard.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::Admission;
    /// let register = locker.token_register("payments-api")?;
    /// assert_eq!(register.admit(41).await?, Admission::Admitted { previous: None });
    /// assert_eq!(register.admit(41).await?, Admission::Admitted { previous: Some(41) });
    /// assert_eq!(register.admit(40).await?, Admission::Stale { highest: 41 });
    /// # Ok(()) }
    /// ```
    pub async fn admit(&self, token: u64) -> Result<Admission> {
        for _ in 0..ATTEMPTS {
            let guard = self
                .locker
                .lock(self.lock.as_str())
                .timeout(self.timeout)
                .acquire()
                .await?;
            let outcome = admit_under(&guard, token).await;
            // The outcome stands whatever the release says: the write was checked by the server.
            if let Err(e) = guard.release().await {
                tracing::debug!(register = %self.lock, error = %e, "releasing a register's lock failed");
            }
            match outcome {
                Ok(Some(admission)) => return Ok(admission),
                // The lock was lost before the write (nothing written), or the value changed
                // under a lock that had been lost: start over.
                Ok(None) => continue,
                Err(e) if e.is_not_held() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(LockError::Unavailable {
            message: format!(
                "the token register {:?} lost its lock {ATTEMPTS} times in a row",
                self.lock.as_str()
            ),
            source: None,
        })
    }

    /// The highest token admitted, `None` before the first (a plain read).
    ///
    /// # Errors
    ///
    /// [`LockError::Unavailable`] if the server did not answer within the request timeout;
    /// [`LockError::InvalidOption`] on a backend without guarded writes; [`LockError::Protocol`]
    /// if the register's key holds something other than a token.
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
    /// let register = locker.token_register("payments-api")?;
    /// assert_eq!(register.highest().await?, None);
    /// register.admit(41).await?;
    /// assert_eq!(register.highest().await?, Some(41));
    /// # Ok(()) }
    /// ```
    pub async fn highest(&self) -> Result<Option<u64>> {
        let backend = self.locker.backend();
        let key = backend.data_key(Family::Mutex, &self.lock, VALUE_SUFFIX)?;
        let read = backend.read_key(&key);
        let value = within_request_timeout(backend.as_ref(), "reading a token register", read).await?;
        value.as_deref().map(parse).transpose()
    }
}

impl fmt::Debug for TokenRegister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRegister")
            .field("lock", &self.lock.as_str())
            .finish()
    }
}

/// One admission while `guard` holds the register's lock: `None` if the compare-and-set found
/// another value than the one read (only a holder that had lost the lock could have written it).
async fn admit_under(guard: &LockGuard, token: u64) -> Result<Option<Admission>> {
    let key = guard.data_key(VALUE_SUFFIX)?;
    let store = guard.guarded();
    let current = store.get(&key).await?;
    let highest = current.as_deref().map(parse).transpose()?;
    match highest {
        Some(highest) if token < highest => return Ok(Some(Admission::Stale { highest })),
        Some(highest) if token == highest => {
            return Ok(Some(Admission::Admitted {
                previous: Some(highest),
            }))
        }
        _ => {}
    }
    let written = store
        .compare_and_set(&key, current.as_deref(), token.to_string())
        .await?;
    Ok(written.then_some(Admission::Admitted { previous: highest }))
}

/// A register's value: a token in decimal.
fn parse(value: &[u8]) -> Result<u64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            LockError::Protocol(format!(
                "a token register holds {:?}, not a token",
                String::from_utf8_lossy(value)
            ))
        })
}
