//! Turning the Redis client's errors into [`LockError`]s.

use locksmith_core::driver::permanent;
use locksmith_core::LockError;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

/// Server-side script errors are protocol errors; refused credentials and TLS that cannot be
/// established (a certificate `ca=` does not vouch for, a server without TLS:
/// [`locksmith_core::driver::permanent`]) are [`LockError::Denied`]; everything else (I/O,
/// timeouts, a server that is loading or read-only) means the server is not usable right now.
pub(crate) fn map_error(e: RedisError, what: &str, addr: &str) -> LockError {
    if let Some(failure) = permanent::tls_failure(&e) {
        return failure.denied(&format!("{what} on redis"), Some(addr), &e.to_string());
    }
    if e.kind() == ErrorKind::AuthenticationFailed || e.code() == Some("NOPERM") || e.code() == Some("WRONGPASS") {
        return LockError::Denied(format!(
            "{what} on redis at {addr}: {}",
            e.detail().unwrap_or("authentication failed")
        ));
    }
    // A server over its maxmemory (with noeviction) refuses what needs memory until memory is
    // freed: an outage that can heal, but one the message must name (the client's words are only
    // in the source, which a waiter's "no answer at the deadline" does not show).
    if e.code() == Some("OOM") {
        return LockError::unavailable(
            format!(
                "{what} on redis at {addr}: the server is out of memory (OOM: used memory is over its \
                 maxmemory): free memory or raise maxmemory"
            ),
            e,
        );
    }
    match e.kind() {
        ErrorKind::Parse
        | ErrorKind::UnexpectedReturnType
        | ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoScript | ServerErrorKind::CrossSlot) => {
            LockError::Protocol(format!("{what} on redis at {addr}: {e}"))
        }
        _ => LockError::unavailable(format!("{what} on redis at {addr}"), e),
    }
}

/// Whether `e` says its server gave no answer (a timeout, a connection refused, failed or
/// dropped) or is being failed over (`READONLY`, `CLUSTERDOWN`, `MASTERDOWN`), rather than an
/// answer that was an error.
pub(crate) fn is_unanswered(e: &LockError) -> bool {
    let LockError::Unavailable {
        source: Some(source), ..
    } = e
    else {
        return false;
    };
    source.downcast_ref::<RedisError>().is_some_and(|e| {
        e.is_timeout()
            || e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || matches!(e.code(), Some("READONLY" | "CLUSTERDOWN" | "MASTERDOWN"))
    })
}

pub(crate) fn is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
}
