//! tokio-postgres errors → [`LockError`]: what the caller can do about them.

use std::time::Duration;

use locksmith_core::driver::{permanent, text_with_sources};
use locksmith_core::LockError;
use tokio_postgres::error::SqlState;

/// The error for `what` failing: [`LockError::Denied`] for a wrong or missing password, a user
/// that may not log in, a missing privilege, or TLS that cannot be established
/// ([`locksmith_core::driver::permanent`]); [`LockError::Protocol`] for a data exception (a value the server
/// refused, which no retry changes); [`LockError::Unavailable`] for everything else (a server that is
/// down, restarting, or a connection lost: maybe worth retrying). The message is the server's or
/// the client's with its causes, which never contain the password.
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
        // Class 53, a server out of resources: it heals when others let go (so it stays
        // Unavailable), but the operator must know which limit was reached.
        if let Some(hint) = out_of_resources(code) {
            return LockError::unavailable(format!("{message}: {hint}"), err);
        }
        return LockError::unavailable(message, err);
    }
    let message = format!("postgres: {what}: {}", text_with_sources(&err));
    // TLS that cannot be established (`sslmode=require` at a server without TLS, a certificate
    // `ca=` does not vouch for): no retry changes it.
    if let Some(failure) = permanent::tls_failure(&err) {
        return failure.denied(&format!("postgres: {what}"), None, &text_with_sources(&err));
    }
    // The server asked for a password and none was given: no retry brings one.
    if message.contains("password missing") {
        return LockError::Denied(format!(
            "{message} (give it in the URL, with password_file= or in LOCKSMITH_PASSWORD)"
        ));
    }
    LockError::unavailable(message, err)
}

/// What a server out of resources (SQLSTATE class 53) ran out of, and what frees it.
fn out_of_resources(code: &SqlState) -> Option<&'static str> {
    match code.code() {
        "53300" => Some(
            "the server is at its connection limit (max_connections, or the role's or database's \
             CONNECTION LIMIT); each locker keeps one connection: close idle sessions, put a pooler \
             in front (see listen=), or raise the limit",
        ),
        "53100" => Some("the server's disk is full: free space on it (locks held keep their rows)"),
        "53200" => Some("the server is out of memory"),
        _ => None,
    }
}

/// A call that took longer than `limit`.
pub(crate) fn timeout(what: &str, limit: Duration) -> LockError {
    LockError::Unavailable {
        message: format!("postgres: {what} took longer than {limit:?}"),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_out_of_resources_is_named() {
        let connections = out_of_resources(&SqlState::TOO_MANY_CONNECTIONS).unwrap();
        assert!(connections.contains("connection limit") && connections.contains("max_connections"));
        assert!(out_of_resources(&SqlState::DISK_FULL).unwrap().contains("disk is full"));
        assert!(out_of_resources(&SqlState::OUT_OF_MEMORY)
            .unwrap()
            .contains("out of memory"));
        assert!(out_of_resources(&SqlState::T_R_SERIALIZATION_FAILURE).is_none());
    }
}
