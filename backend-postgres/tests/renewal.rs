//! Renewals never wait behind a backlog of steps: a locker that holds a lock with a short lease
//! while thousands of its own `try_acquire`s queue for its steps' connection keeps the lock (its
//! renewals and heartbeats have a connection of their own). A test binary of its own: the backlog
//! must not share the machine with other tests' load.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use lockcore::driver::BackendUrl;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_a_backlog_of_steps() {
    let harness = common::PgHarness::plain().await;
    let ttl = Duration::from_millis(600);
    let url = format!("{}&ttl={}ms", harness.url, ttl.as_millis());
    let locker = backend_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let held = locker.lock("held").acquire().await.unwrap();

    // A backlog of steps on this locker's one steps' connection: each try_acquire is a step, and
    // the release of what it got another.
    let start = Instant::now();
    let mut backlog = tokio::task::JoinSet::new();
    for i in 0..3000 {
        let locker = locker.clone();
        backlog.spawn(async move {
            // A long lease: these releases wait behind the backlog too, and lockcore stops
            // renewing a lease once its release has begun.
            let lock = locker.lock(format!("other/{i}")).ttl(Duration::from_secs(60));
            let got = lock.try_acquire().await.unwrap();
            got.expect("nobody else takes these").release().await.unwrap();
        });
    }
    while let Some(done) = backlog.join_next().await {
        done.unwrap();
    }
    let took = start.elapsed();
    assert!(
        took > ttl * 3,
        "the backlog ({took:?}) must outlast the lease several times for this test to mean anything"
    );
    assert_eq!(
        held.lost_reason(),
        None,
        "the lock was lost during a backlog of {took:?}"
    );
    held.release().await.expect("still held after the backlog");
    locker.shutdown().await.unwrap();
}
