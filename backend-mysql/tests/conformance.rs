//! The MySQL backend (on the MariaDB of `scripts/backends`) against the shared conformance
//! suites, and the election suite's observer behind a proxy that cuts its connections.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::election;
use locksmith_core::driver::BackendUrl;

locksmith_core::conformance_tests!(common::MyHarness::plain().await);
locksmith_core::primitive_tests!(common::MyHarness::plain().await);
locksmith_core::guarded_tests!(common::MyHarness::plain().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_rides_out_outages() {
    let harness = common::MyHarness::plain().await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let upstream = url.hosts[0].to_addr(3306);
    let through = harness.url.replacen(&upstream, "{addr}", 1);
    election::election_observer_rides_out_outages(&harness, &upstream, Duration::from_secs(2), |addr| async move {
        let sep = if through.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{sep}ttl=2s&request_timeout=1s&connect_timeout=1s",
            through.replace("{addr}", &addr)
        );
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to mysql through the proxy")
    })
    .await;
}

/// The backend's `release` dropped before it sent anything (it waited for the locker's steps'
/// connection, busy with a step that another session's row lock holds up): its clean-up
/// releases, and the lock is free long before its TTL (30 s) would have freed it. The shared
/// suite's `backend_release_cancelled_releases` drops a release that already sent its step; this
/// one cuts it off earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_before_it_sent_anything_still_releases() {
    use locksmith_core::conformance::lifecycle;
    use locksmith_core::driver::LockName;
    use locksmith_core::Family;
    use sqlx::Connection;

    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("ttl=30s&request_timeout=10s");
    let connect = || async {
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
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
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let segment = Family::Mutex.segment(&LockName::new(&busy).unwrap());
    sqlx::Executor::execute(&mut admin, "BEGIN").await.unwrap();
    sqlx::query("SELECT 1 FROM locksmith_locks WHERE segment = ? FOR UPDATE")
        .bind(&segment)
        .fetch_all(&mut admin)
        .await
        .unwrap();
    let a2 = a.clone();
    let trying = tokio::spawn(async move { a2.lock(&busy).try_acquire().await.map(|g| g.is_some()) });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let backend = a.backend().clone();
    let mut release = Box::pin(backend.release(&lease));
    let polled = lifecycle::poll_once(release.as_mut()).await;
    assert!(!polled, "the release finished although the steps' connection was busy");
    drop(release);
    sqlx::Executor::execute(&mut admin, "COMMIT").await.unwrap();
    assert!(trying.await.unwrap().unwrap(), "the try on the other lock");

    let guard = tokio::time::timeout(Duration::from_secs(10), b.lock(&name).acquire())
        .await
        .expect("the lock was not released by the dropped release's clean-up")
        .unwrap();
    guard.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
