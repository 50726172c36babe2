//! tokio-postgres errors → [`LockError`]: what the caller can do about them.

use std::time::Duration;

use locksmith_core::LockError;
use tokio_postgres::error::SqlState;

/// The error for `what` failing: [`LockError::Denied`] for a wrong password, a user that may not
/// log in or a missing privilege; [`LockError::Protocol`] for a data exception (a value the server
/// refused, which no retry changes); [`LockError::Unavailable`] for everything else (a server that is
/// down, restarting, or a connection lost: maybe worth retrying). The message is the server's,
/// which never contains the password.
pub(crate) fn pg_error(what: &str, err: tokio_postgres::Error) -> LockError {
    if let Some(db) = err.as_db_error() {
        let code = db.code();
        let denied = [
            SqlState::INVALID_PASSWORD,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::INVALID_CATALOG_NAME,
        ];
        if denied.contains(code) {
            return LockError::Denied(format!("postgres: {what}: {} ({})", db.message(), code.code()));
        }
        let message = format!("postgres: {what}: {} ({})", db.message(), code.code());
        // A data exception (class 22: a value the server cannot store or convert) comes back
        // the same however often it is retried: a locksmith bug, not an outage.
        if code.code().starts_with("22") {
            return LockError::Protocol(message);
        }
        return LockError::unavailable(message, err);
    }
    LockError::unavailable(format!("postgres: {what}: {err}"), err)
}

/// A call that took longer than `limit`.
pub(crate) fn timeout(what: &str, limit: Duration) -> LockError {
    LockError::Unavailable {
        message: format!("postgres: {what} took longer than {limit:?}"),
        source: None,
    }
}
