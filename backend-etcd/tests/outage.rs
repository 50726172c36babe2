//! A hung server (SIGSTOP of `LOCKSMITH_TEST_ETCD`'s process): renewals, `try_acquire` and
//! `acquire` fail within their timeouts instead of hanging, the holder is told by `lost()`, and
//! everything works again once the server resumes. The server is resumed at the end, whatever
//! happened. (One test in this file: nothing else may use the server while it is stopped.)

mod common;

use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockError, LostReason};

const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_fails_requests_instead_of_hanging() {
    common::init_tracing();
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let url = BackendUrl::parse(&common::with_query(&base, "ttl=2s&request_timeout=1s")).expect("url");
    let locker = locksmith_etcd::connect(&url).await.expect("connect");
    let name = unique_name("outage");
    let guard = locker.lock(&name).acquire().await.expect("acquire");

    let resume = OnDrop::resume("etcd");
    backends(&["pause", "etcd"]);
    let reason = within(PATIENCE, "lost() while the server is hung", guard.lost()).await;
    assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
    let tried = within(
        PATIENCE,
        "try_acquire on a hung server",
        locker.lock(unique_name("outage")).try_acquire(),
    )
    .await;
    assert!(matches!(tried, Err(LockError::Unavailable { .. })), "{tried:?}");
    // acquire rides out short outages (TTL + request timeout), then gives up.
    let waited = within(
        PATIENCE,
        "acquire on a hung server",
        locker.lock(unique_name("outage")).acquire(),
    )
    .await;
    assert!(matches!(waited, Err(LockError::Unavailable { .. })), "{waited:?}");
    drop(resume);

    // Back to normal: the same locker takes the lock again (its old key goes with its lease).
    let again = within(
        PATIENCE,
        "acquire after the server resumed",
        locker.lock(&name).acquire(),
    )
    .await
    .expect("acquire");
    assert!(again.fencing_token() > guard.fencing_token());
    again.release().await.expect("release");
    assert!(matches!(guard.release().await, Err(LockError::NotHeld { .. })));
}
