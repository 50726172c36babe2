//! Mapping the ZooKeeper client's errors onto [`LockError`].

use locksmith_core::LockError;
use zookeeper_client as zk;

/// Whether `e` says the session itself is gone (its ephemeral nodes are gone or going): the lock
/// protocol must start over on a new session.
pub(crate) fn is_session_gone(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::SessionMoved
    )
}

/// Whether `e` is the server's answer to the request itself (as opposed to a failure to get one).
fn is_answer(e: &zk::Error) -> bool {
    use zk::Error::*;
    matches!(
        e,
        NoNode
            | NodeExists
            | NotEmpty
            | BadVersion
            | NoAuth
            | InvalidAcl
            | NoChildrenForEphemerals
            | BadArguments(_)
            | Unimplemented
            | QuotaExceeded
            | ReconfigDisabled
            | RuntimeInconsistent
            | UnexpectedErrorCode(_)
            | MarshallingError
            | UnmarshalError { .. }
            | NotReadOnly
            | NoWatcher
    )
}

/// Whether `e` is a connection hiccup after which the same session may carry on: a lost
/// connection (reported as `ConnectionLoss` or as the I/O error itself), a timeout, throttling.
pub(crate) fn is_transient(e: &zk::Error) -> bool {
    !is_answer(e) && !is_session_gone(e) && !matches!(e, zk::Error::AuthFailed)
}

/// `e` as a [`LockError`]: connectivity and session problems are `Unavailable` (retryable); an
/// answer the protocol does not expect is `Protocol`.
pub(crate) fn to_lock_error(what: &str, e: zk::Error) -> LockError {
    if matches!(e, zk::Error::NoAuth | zk::Error::AuthFailed) {
        return LockError::Denied(format!(
            "ZooKeeper: {what}: {e} (the node's ACL does not let this identity do it)"
        ));
    }
    if is_answer(&e) {
        LockError::Protocol(format!("ZooKeeper: {what}: {e}"))
    } else {
        LockError::unavailable(format!("ZooKeeper: {what}"), e)
    }
}
