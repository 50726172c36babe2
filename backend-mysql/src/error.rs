//! sqlx's errors → [`LockError`]: what the caller can do about them. `Denied` for what no retry
//! changes (a wrong password, a missing database or right, TLS that cannot be established),
//! `Unavailable` for what can heal (the server down, a lock wait that timed out, a deadlock
//! InnoDB broke, a primary demoted under its clients: its writes refused until they reconnect to
//! the promoted replica).

use std::time::Duration;

use locksmith_core::driver::{permanent, text_with_sources};
use locksmith_core::LockError;

/// The server's error numbers this backend tells apart.
mod number {
    /// `ER_DBACCESS_DENIED_ERROR`: no right on the database.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// `ER_ACCESS_DENIED_ERROR`: a wrong user or password.
    pub const ACCESS_DENIED: u16 = 1045;
    /// `ER_BAD_DB_ERROR`: no such database.
    pub const BAD_DB: u16 = 1049;
    /// `ER_TABLEACCESS_DENIED_ERROR`, `ER_COLUMNACCESS_DENIED_ERROR`, `ER_SPECIFIC_ACCESS_DENIED_ERROR`.
    pub const TABLE_ACCESS_DENIED: u16 = 1142;
    pub const COLUMN_ACCESS_DENIED: u16 = 1143;
    pub const SPECIFIC_ACCESS_DENIED: u16 = 1227;
    /// `ER_TOO_MANY_USER_CONNECTIONS`, `ER_CON_COUNT_ERROR`: heals when others disconnect.
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// `ER_DATA_TOO_LONG`: a value longer than its column.
    pub const DATA_TOO_LONG: u16 = 1406;
    /// `ER_QUERY_INTERRUPTED`: a `KILL QUERY` (the wake-up of a wait connection between waits, or in
    /// its fallback `SLEEP`).
    pub const QUERY_INTERRUPTED: u16 = 1317;
    /// `ER_LOCK_DEADLOCK`: InnoDB rolled the transaction back to break a deadlock.
    pub const DEADLOCK: u16 = 1213;
    /// `ER_LOCK_WAIT_TIMEOUT`: a row lock not granted within `innodb_lock_wait_timeout`.
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_NO_SUCH_THREAD`: a `KILL QUERY` of a connection that is gone.
    pub const NO_SUCH_THREAD: u16 = 1094;
    /// `ER_OPTION_PREVENTS_STATEMENT`: a write refused by `read_only` (or MySQL's
    /// `super_read_only`): the server was demoted, a replica promoted in its place.
    pub const OPTION_PREVENTS_STATEMENT: u16 = 1290;
}

/// `ER_UNKNOWN_SYSTEM_VARIABLE`: a setting this server does not have.
pub(crate) const UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;

/// The server's error number of `err`, if the server answered with an error.
pub(crate) fn server_number(err: &sqlx::Error) -> Option<u16> {
    match err {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    }
}

/// Whether `err` is the interruption of a statement by `KILL QUERY`.
pub(crate) fn interrupted(err: &sqlx::Error) -> bool {
    server_number(err) == Some(number::QUERY_INTERRUPTED)
}

/// Whether `err` is a transaction InnoDB rolled back to break a deadlock, or a lock wait that
/// timed out: worth running again from its start.
pub(crate) fn is_deadlock(err: &LockError) -> bool {
    let LockError::Unavailable {
        source: Some(source), ..
    } = err
    else {
        return false;
    };
    source
        .downcast_ref::<sqlx::Error>()
        .and_then(server_number)
        .is_some_and(|n| n == number::DEADLOCK || n == number::LOCK_WAIT_TIMEOUT)
}

/// Whether `err` is a `KILL QUERY` of a connection that no longer exists.
pub(crate) fn no_such_thread(err: &sqlx::Error) -> bool {
    server_number(err) == Some(number::NO_SUCH_THREAD)
}

/// Whether `err` says the connection itself is unusable (as opposed to one statement's error):
/// the connection is closed, or its server takes no more writes (a demoted primary: the
/// connection opened again goes to the promoted replica, `conn/dial.rs`). A statement that met
/// it changed nothing.
pub(crate) fn connection_lost(err: &sqlx::Error) -> bool {
    if server_number(err) == Some(number::OPTION_PREVENTS_STATEMENT) {
        return true;
    }
    !matches!(
        err,
        sqlx::Error::Database(_) | sqlx::Error::RowNotFound | sqlx::Error::ColumnDecode { .. }
    )
}

/// `err`, met while doing `what`, as a [`LockError`].
pub(crate) fn mysql_error(what: &str, err: sqlx::Error) -> LockError {
    if let Some(n) = server_number(&err) {
        let message = format!("mysql: {what}: {err} (error {n})");
        return match n {
            number::DB_ACCESS_DENIED
            | number::ACCESS_DENIED
            | number::BAD_DB
            | number::TABLE_ACCESS_DENIED
            | number::COLUMN_ACCESS_DENIED
            | number::SPECIFIC_ACCESS_DENIED => LockError::Denied(message),
            number::TOO_MANY_CONNECTIONS => LockError::unavailable(
                format!("{message}: the server is at its connection limit (each locker keeps two connections)"),
                err,
            ),
            number::DATA_TOO_LONG => LockError::InvalidName(message),
            number::OPTION_PREVENTS_STATEMENT => LockError::unavailable(
                format!("{message}: the server takes no writes (a demoted primary, or a replica)"),
                err,
            ),
            _ => LockError::unavailable(message, err),
        };
    }
    let text = text_with_sources(&err);
    if let Some(failure) = permanent::tls_failure(&err) {
        return failure.denied(&format!("mysql: {what}"), None, &text);
    }
    if matches!(err, sqlx::Error::Tls(_)) {
        return LockError::Denied(format!("mysql: {what}: TLS cannot be established: {text}"));
    }
    LockError::unavailable(format!("mysql: {what}: {text}"), err)
}

/// A column of an answer that is not what the statement returns.
pub(crate) fn decode(what: &str, err: sqlx::Error) -> LockError {
    LockError::Protocol(format!("mysql: {what}: unexpected answer: {err}"))
}

/// A request that took longer than its bound.
pub(crate) fn timeout(what: &str, limit: Duration) -> LockError {
    LockError::Unavailable {
        message: format!("mysql: {what} took longer than {limit:?}"),
        source: None,
    }
}
