//! A held lock outlives a backlog of its locker's steps: 500 waiters of the same locker joining
//! another lock at once queue 500 steps on the locker's steps' connection, longer than the held
//! lock's TTL; its renewals go first in line and keep it.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_a_backlog_of_its_lockers_steps() {
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("request_timeout=30s");
    let connect = || async {
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let (kept, busy) = (unique_name("kept"), unique_name("busy"));
    let guard = a.lock(&kept).ttl(Duration::from_secs(1)).acquire().await.unwrap();
    let blocker = b.lock(&busy).ttl(Duration::from_secs(60)).acquire().await.unwrap();

    let mut waiters = tokio::task::JoinSet::new();
    for _ in 0..500 {
        let (a, busy) = (a.clone(), busy.clone());
        waiters.spawn(async move { a.lock(&busy).ttl(Duration::from_secs(60)).acquire().await });
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < until {
        assert!(guard.is_held(), "the kept lock was lost: {:?}", guard.lost_reason());
        assert!(
            b.lock(&kept).try_acquire().await.unwrap().is_none(),
            "the kept lock was granted to another locker"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    guard.release().await.unwrap();
    waiters.abort_all();
    while waiters.join_next().await.is_some() {}
    blocker.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
