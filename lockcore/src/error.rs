//! The one error type of locksmith.

use std::time::Duration;

/// A boxed error from a backend's client library, kept as the `source` of [`LockError::Unavailable`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when taking, renewing or releasing a lock.
///
/// Each variant is a distinct case a caller may want to match on: a timeout is not a failure of the
/// backend, a lost lock is not a bad argument.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// `acquire` waited for the whole timeout without getting the lock. Nothing was left behind.
    #[error("timed out after {0:?} waiting for the lock")]
    Timeout(Duration),

    /// The lock is not (or no longer) held by this holder: it was released, it expired, or it was
    /// taken away on the server. Renewal returns this when the lease is gone; `release` returns it
    /// when there was nothing of ours to release.
    #[error("lock {name:?} is not held by this holder")]
    NotHeld {
        /// The lock name as the user gave it.
        name: String,
    },

    /// The lock name is empty, too long, or contains a NUL byte.
    #[error("invalid lock name: {0}")]
    InvalidName(String),

    /// An option given in code is out of range: a zero or absurd TTL, a zero `max_hold`. (A bad
    /// URL parameter is [`LockError::InvalidUrl`].)
    #[error("invalid option: {0}")]
    InvalidOption(String),

    /// The backend URL cannot be used: malformed, unknown scheme, an option the backend does not
    /// know or a bad value of one, or a backend whose Cargo feature is not compiled in.
    #[error("invalid backend URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given, with its password (if any) replaced by `***`.
        url: String,
        /// Why it was rejected, e.g. "the `etcd` feature of locksmith is not enabled".
        reason: String,
    },

    /// The backend could not be reached or did not answer in time (connection refused, server
    /// down, request timeout). The operation may be retried.
    #[error("backend unavailable: {message}")]
    Unavailable {
        /// What was being done, e.g. "connecting to etcd at 127.0.0.1:23790".
        message: String,
        /// The client library's error, if there was one.
        #[source]
        source: Option<BoxError>,
    },

    /// The backend answered, but with something the lock protocol does not expect (a corrupt key,
    /// an unexpected node type, a script error).
    #[error("unexpected backend state: {0}")]
    Protocol(String),

    /// The [`crate::Locker`] was shut down ([`crate::Locker::shutdown`]): it takes no more locks,
    /// and a request still waiting when it was shut down ends with this.
    #[error("the locker was shut down")]
    Closed,

    /// We were refused, for a reason no retry mends: a wrong user or password, a database that
    /// does not exist, our identity may not do this (an ACL, a role without permission, a lock
    /// directory we may not write). Retrying with the same settings does not help. (Its text
    /// says "refused", not "refused by the server": `file://` has no server.)
    #[error("refused: {0}")]
    Denied(String),

    /// The lock was lost while work ran under it ([`crate::LockBuilder::run`],
    /// [`crate::LockAll::run`]): its lease could not be renewed, was removed on the server, or
    /// reached `max_hold`, before the work ended. The work was stopped (an async work is dropped at
    /// its next await) and its result, if it had one, is not returned: another holder may have
    /// had the lock meanwhile.
    #[error("lock {name:?} was lost while the work ran: {reason}")]
    Lost {
        /// The lock name as the user gave it (for several names, the one that was lost).
        name: String,
        /// Why it was lost.
        reason: crate::LostReason,
    },

    /// The task asking for the lock already holds `name` on the same [`crate::Locker`], in a way
    /// that would keep this request from ever being granted (a second mutex request, a write
    /// request while holding a read, every permit of a semaphore already its own): waiting would
    /// be a self-deadlock until the timeout, so the request is refused at once. Nothing was
    /// queued. The [crate documentation](crate#re-entry) says exactly what is detected.
    #[error("would deadlock: the calling task (or thread) already holds {held} of {name:?} (fencing token {fencing_token}) on this locker; release it first (a guard handed to another task: detach_from_task() before handing it on)")]
    WouldDeadlock {
        /// The lock name as the user gave it.
        name: String,
        /// What the task holds of it: `"the mutex"`, `"the write lock"`, `"3 permits"`, ...
        held: String,
        /// The fencing token of the guard the task holds.
        fencing_token: u64,
    },

    /// A call of [`locksmith::blocking`] was made from inside an async context (where a tokio
    /// runtime runs: an `async fn`, a `#[tokio::main]`, a thread of a runtime's, `spawn_blocking`'s
    /// included): blocking there would stall the runtime, or deadlock it. Use the async API there,
    /// or call the blocking API from a thread of your own (`std::thread::spawn`).
    ///
    /// [`locksmith::blocking`]: https://docs.rs/locksmith/latest/locksmith/blocking/index.html
    #[error("locksmith::blocking::{call} was called inside an async context (a tokio runtime); use the async API there, or call it from a thread of your own (std::thread::spawn)")]
    BlockingInAsync {
        /// The blocking call, e.g. `"LockBuilder::acquire"`.
        call: &'static str,
    },
}

impl LockError {
    /// Builds [`LockError::Unavailable`] from a message and the client library's error.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use std::error::Error;
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    /// let e = locksmith::LockError::unavailable("connecting to etcd at 127.0.0.1:2379", refused);
    /// assert!(e.source().is_some());
    /// ```
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        LockError::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Builds [`LockError::NotHeld`] for the named lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// let e = locksmith::LockError::not_held("orders/42");
    /// assert!(e.is_not_held());
    /// ```
    pub fn not_held(name: impl Into<String>) -> Self {
        LockError::NotHeld { name: name.into() }
    }

    /// True when the error says the lock is no longer ours (as opposed to a transient failure).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let guard = locker.lock("job").acquire().await?;
    /// locker.shutdown().await?; // releases every guard
    /// assert!(guard.release().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn is_not_held(&self) -> bool {
        matches!(self, LockError::NotHeld { .. })
    }

    /// The error's message followed by the message of each error in its `source()` chain, joined
    /// by `": "` ([`crate::driver::text_with_sources`]): what a lost lock's reason or a log line
    /// says, so that the client library's error (a refused connection, a TLS alert, a timeout) is
    /// not dropped with the `source`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// let refused = std::io::Error::other("connection refused");
    /// let e = locksmith::LockError::unavailable("renewing on redis at 127.0.0.1:6379", refused);
    /// assert_eq!(
    ///     e.with_sources(),
    ///     "backend unavailable: renewing on redis at 127.0.0.1:6379: connection refused"
    /// );
    /// ```
    pub fn with_sources(&self) -> String {
        text_with_sources(self)
    }
}

/// `err`'s message followed by the message of each error in its `source()` chain, joined by
/// `": "`, each part that the text so far does not already say: one line for a lost lock's
/// reason, a log or an error message, where a client library (tokio-postgres, sqlx, redis) says
/// only "error performing TLS handshake" or "io error" and leaves the why to its sources.
///
/// # Examples
///
/// ```
/// use locksmith_core::driver::text_with_sources;
/// let refused = std::io::Error::other("connection refused");
/// let e = locksmith_core::LockError::unavailable("connecting to 127.0.0.1:5432", refused);
/// assert_eq!(
///     text_with_sources(&e),
///     "backend unavailable: connecting to 127.0.0.1:5432: connection refused"
/// );
/// ```
pub fn text_with_sources(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// `Result` with [`LockError`].
pub type Result<T, E = LockError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal names no server: `file://` refuses a lock directory it may not write, and has
    /// none (it read "refused by the server: cannot open …").
    #[test]
    fn a_refusal_names_no_server() {
        let e = LockError::Denied("cannot open the lock file /run/locks/a: Permission denied (os error 13)".into());
        assert_eq!(
            e.to_string(),
            "refused: cannot open the lock file /run/locks/a: Permission denied (os error 13)"
        );
    }
}
