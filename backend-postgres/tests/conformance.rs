//! The PostgreSQL backend against the shared conformance suites, and the election suite's
//! observer behind a proxy that cuts its connections.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{election, lifecycle};
use locksmith_core::driver::BackendUrl;

locksmith_core::conformance_tests!(common::PgHarness::plain().await);
locksmith_core::primitive_tests!(common::PgHarness::plain().await);
locksmith_core::guarded_tests!(common::PgHarness::plain().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_rides_out_outages() {
    let harness = common::PgHarness::plain().await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let upstream = url.hosts[0].to_addr(5432);
    let through = harness.url.replacen(&upstream, "{addr}", 1);
    election::election_observer_rides_out_outages(&harness, &upstream, Duration::from_secs(2), |addr| async move {
        let url = format!(
            "{}&ttl=2s&request_timeout=1s&connect_timeout=1s",
            through.replace("{addr}", &addr)
        );
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to postgres through the proxy")
    })
    .await;
}

/// The backend's `release` dropped before it sent anything (its step waited for the locker's
/// steps' connection, busy with another step that the server holds up): the rest of it runs in
/// a clean-up task, and the lock is free long before its TTL (30 s) would have freed it. The
/// shared suite's `backend_release_cancelled_releases` drops a release that already sent its
/// statement; this one cuts it off earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_before_it_sent_anything_still_releases() {
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=30s&request_timeout=10s", harness.url);
    let schema = harness.schema.clone();
    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let (name, busy) = (
        locksmith_core::conformance::unique_name("dropped_release"),
        locksmith_core::conformance::unique_name("busy"),
    );
    a.lock(&busy).acquire().await.unwrap().release().await.unwrap(); // its row exists now
    let lease = a.lock(&name).acquire().await.unwrap().abandon();

    // Another session holds the row of `busy`: a's try on it waits there, on a's steps' connection.
    let admin = common::hold_row(&schema, &busy).await;
    let a2 = a.clone();
    let trying = tokio::spawn(async move { a2.lock(&busy).try_acquire().await.map(|g| g.is_some()) });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let backend = a.backend().clone();
    let mut release = Box::pin(backend.release(&lease));
    let polled = lifecycle::poll_once(release.as_mut()).await;
    assert!(!polled, "the release finished although the steps' connection was busy");
    drop(release);
    admin.batch_execute("COMMIT").await.unwrap();
    assert!(trying.await.unwrap().unwrap(), "the try on the other lock");

    let guard = tokio::time::timeout(Duration::from_secs(10), b.lock(&name).acquire())
        .await
        .expect("the lock was not released by the dropped release's clean-up")
        .unwrap();
    guard.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
