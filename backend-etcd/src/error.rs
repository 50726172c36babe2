//! Turning etcd client errors and timeouts into [`LockError`]s.

use std::future::Future;
use std::time::Duration;

use locksmith_core::driver::permanent;
use locksmith_core::driver::retry::{retry, Backoff, RetryError};
use locksmith_core::{LockError, Result};
use tokio::time::Instant;

/// Runs one request with a time limit; transport and server errors become
/// [`LockError::Unavailable`] that names `what` was being done.
pub async fn timed<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> Result<T> {
    locksmith_core::metrics::round_trip();
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(from_etcd(what, e)),
        Err(_) => Err(LockError::Unavailable {
            message: format!("{what}: no answer from etcd within {limit:?}"),
            source: None,
        }),
    }
}

/// Runs a request made by `call` with a time limit like [`timed`], and repeats it (with a short
/// backoff, within the same limit) when it failed without reaching etcd's state machine: the
/// connection to the chosen member could not be made (it is down: the next try may go to
/// another member), or the member has no leader right now (an election is under way).
pub async fn request<T, F, Fut>(what: &str, limit: Duration, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let deadline = Instant::now() + limit;
    // A step's error: etcd's, or `None` when no answer came within the limit.
    let answered = retry(
        NOT_APPLIED_RETRIES.give_up_after(limit),
        |_| {
            locksmith_core::metrics::round_trip();
            let call = tokio::time::timeout_at(deadline, call());
            async move { call.await.map_err(|_| None)?.map_err(Some) }
        },
        |e| {
            let heals = e.as_ref().is_some_and(never_applied);
            if heals {
                tracing::debug!(what, error = ?e, "etcd request not applied");
            }
            heals
        },
    )
    .await;
    match answered {
        Ok(v) => Ok(v),
        Err(
            RetryError::Permanent { error: Some(e), .. }
            | RetryError::GaveUp {
                last: Some(Some(e)), ..
            },
        ) => Err(from_etcd(what, e)),
        Err(_) => Err(LockError::Unavailable {
            message: format!("{what}: no answer from etcd within {limit:?}"),
            source: None,
        }),
    }
}

/// The pauses before a request that never reached etcd's state machine is sent again: 20 ms,
/// doubling to 250 ms (within the request's own limit).
const NOT_APPLIED_RETRIES: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(250));

/// Whether a failed request certainly had no effect, so that sending it again is safe.
fn never_applied(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let m = s.message();
            s.code() as i32 == GRPC_UNAVAILABLE && (m.contains("connect error") || m.contains("no leader"))
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// Maps a client error: everything is treated as a (possibly transient) unavailability, except
/// a request the server rejects as malformed, which is a protocol error, and a database at its
/// space quota (the NOSPACE alarm, lifted only by an operator), refused credentials or TLS that cannot be established (no TLS on the server, a certificate `ca=` does not vouch
/// for: [`locksmith_core::driver::permanent`]), which are [`LockError::Denied`]. The message says
/// in one line what failed; the client's whole error (hundreds of characters for a gRPC status)
/// stays the `source`.
pub fn from_etcd(what: &str, e: etcd_client::Error) -> LockError {
    // The client hands a TLS failure over as a gRPC status whose message is rustls's or
    // tokio-rustls's text, or as a transport error with it among its causes.
    let tls = match &e {
        // A refused client certificate arrives after the handshake, as a bare "transport
        // error" whose causes carry the server's TLS alert.
        etcd_client::Error::GRpcStatus(s) => {
            permanent::tls_failure_in(s.message()).or_else(|| permanent::tls_failure(s))
        }
        other => permanent::tls_failure(other),
    };
    if let Some(failure) = tls {
        return failure.denied(what, None, &short(&e));
    }
    match &e {
        etcd_client::Error::GRpcStatus(s) if is_denied(s.code() as i32, s.message()) => {
            LockError::Denied(format!("{what}: etcd says: {}", s.message()))
        }
        etcd_client::Error::GRpcStatus(s) if is_out_of_space(s.code() as i32, s.message()) => {
            LockError::Denied(format!(
                "{what}: etcd's database is at its space quota (the NOSPACE alarm; etcd says: {}): it takes \
             no write until an operator compacts and defragments it and disarms the alarm \
             (`etcdctl alarm disarm`); locks already held keep renewing and can be released",
                s.message()
            ))
        }
        etcd_client::Error::GRpcStatus(s) if s.code() as i32 == GRPC_INVALID_ARGUMENT => {
            LockError::Protocol(format!("{what}: etcd rejected the request: {}", s.message()))
        }
        _ => LockError::unavailable(format!("{what}: {}", short(&e)), e),
    }
}

/// Whether etcd refused a write because its database reached `--quota-backend-bytes`: it raised
/// the NOSPACE alarm, and refuses every write (a lease grant, a put) until an operator disarms it,
/// so waiting cannot mend it (deletes and lease keep-alives still go through).
fn is_out_of_space(code: i32, message: &str) -> bool {
    code == GRPC_RESOURCE_EXHAUSTED && message.contains("database space exceeded")
}

/// Whether the server refused our credentials or permissions: `Unauthenticated`,
/// `PermissionDenied`, or an auth failure etcd reports as `InvalidArgument`.
fn is_denied(code: i32, message: &str) -> bool {
    code == GRPC_PERMISSION_DENIED
        || code == GRPC_UNAUTHENTICATED
        || message.contains("authentication failed")
        || message.contains("permission denied")
        || message.contains("user name is empty")
}

/// One short line for a client error: a gRPC status as `Code: message`, anything else as its
/// first line.
fn short(e: &etcd_client::Error) -> String {
    let text = match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => other.to_string(),
    };
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// Whether the server said the lease a request used no longer exists.
pub fn is_lease_not_found(e: &LockError) -> bool {
    let LockError::Unavailable {
        source: Some(source), ..
    } = e
    else {
        return false;
    };
    matches!(
        source.downcast_ref::<etcd_client::Error>(),
        Some(etcd_client::Error::GRpcStatus(s)) if s.message().contains("requested lease not found")
    )
}

/// gRPC status code 3, `INVALID_ARGUMENT` (compared as a number to avoid a direct tonic dependency).
const GRPC_INVALID_ARGUMENT: i32 = 3;

/// gRPC status code 8, `RESOURCE_EXHAUSTED`.
const GRPC_RESOURCE_EXHAUSTED: i32 = 8;

/// gRPC status code 7, `PERMISSION_DENIED`.
const GRPC_PERMISSION_DENIED: i32 = 7;

/// gRPC status code 16, `UNAUTHENTICATED`.
const GRPC_UNAUTHENTICATED: i32 = 16;

/// gRPC status code 14, `UNAVAILABLE`.
const GRPC_UNAVAILABLE: i32 = 14;
