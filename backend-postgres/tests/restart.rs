//! PostgreSQL restarted while a lock is held and another waits (the server keeps its data, as
//! in production): the holder keeps its lock (its renewals ride out the short outage) or is told
//! it lost it before anyone else is granted; the waiter rides out the restart (its LISTEN
//! connection comes back) and gets the lock once it is released; fencing tokens keep growing.
//! A test binary of its own: the restart would disturb other tests.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_lock_its_queue_and_its_tokens() {
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=4s&request_timeout=1s&connect_timeout=1s", harness.url);
    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let name = unique_name("restart");

    let held = a.lock(&name).acquire().await.unwrap();
    let first = held.fencing_token();
    let released = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let (b, name, released) = (b.clone(), name.clone(), released.clone());
        async move {
            let guard = b.lock(&name).timeout(Duration::from_secs(30)).acquire().await.unwrap();
            (guard.fencing_token(), released.load(Ordering::SeqCst))
        }
    });
    within(Duration::from_secs(10), "the waiter to queue", async {
        while a.inspect(&name).await.unwrap().waiters < 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    {
        let _start_again = OnDrop::start("postgres");
        backends(&["stop", "postgres"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    } // started again here
      // Past the outage, the holder still holds: its renewals went through again within its TTL.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(held.lost_reason(), None, "the holder lost its lock to a short restart");
    assert!(!waiter.is_finished(), "the waiter was granted while the holder held");

    released.store(true, Ordering::SeqCst);
    held.release().await.expect("released after the restart");
    let (token, after_release) = within(Duration::from_secs(20), "the waiter's grant", waiter)
        .await
        .unwrap();
    assert!(after_release, "the waiter was granted before the holder released");
    assert!(
        token > first,
        "token {token} after {first}: tokens must survive the restart"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
