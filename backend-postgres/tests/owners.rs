//! A holder lives by its lease alone: when its locker's owner row is gone (forgotten by the
//! sweep after a long idle time, or deleted by an operator), a lock it then takes is still
//! exclusive, and it keeps it while it renews.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_without_an_owner_row_still_excludes() {
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=1s", harness.url);
    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let schema = harness.schema.clone();
    // Idle lockers whose rows were forgotten (what sql/sweep.sql does after 10 minutes).
    common::run_as_owner(&format!("DELETE FROM \"{schema}\".owners")).await;

    let held = a.lock("job").try_acquire().await.unwrap().expect("free");
    assert!(
        b.lock("job").try_acquire().await.unwrap().is_none(),
        "a second holder was granted"
    );
    // Through renewals (1 s lease), still held, still exclusive.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(held.lost_reason(), None);
    assert!(
        b.lock("job").try_acquire().await.unwrap().is_none(),
        "a second holder was granted"
    );
    held.release().await.unwrap();
    assert!(b.lock("job").try_acquire().await.unwrap().is_some());
}

/// Bug: a waiter granted by its own step told the next waiter in line to step in when its
/// *locker's* owner row would expire (read while it still waited), not when its own lease would:
/// a locker that also waits on a lock with a long TTL keeps its owner row that far ahead, so
/// when the new holder died, the lock stayed taken for that long instead of one TTL.
///
/// D holds `y` (60 s); locker L waits on `y` with a 60 s TTL (its owner row lives ~60 s ahead)
/// and on `x` as W1, first in line behind H (1 s TTL); W2 (locker M) is second. H dies: W1 is
/// granted by its own step, and dies too (abandoned, 1 s lease): W2 must follow within a few
/// seconds, not ~60.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_waiter_follows_the_new_holder_s_lease_not_its_owner_row() {
    let harness = common::PgHarness::plain().await;
    let connect = || async { harness.locker().await };
    let (d, l, m) = (connect().await, connect().await, connect().await);
    let short = Duration::from_secs(1);
    let long = Duration::from_secs(60);
    let _y = d.lock("y").ttl(long).acquire().await.unwrap();
    let waiting_y = {
        let l = l.clone();
        tokio::spawn(async move { l.lock("y").ttl(long).timeout(long).acquire().await })
    };
    let h = d.lock("x").ttl(short).acquire().await.unwrap();
    let w1 = {
        let l = l.clone();
        tokio::spawn(async move { l.lock("x").ttl(short).timeout(long).acquire().await })
    };
    locksmith_core::conformance::until_waiters(&d, "x", 1, Duration::from_secs(10)).await;
    let w2 = {
        let m = m.clone();
        tokio::spawn(async move { m.lock("x").ttl(short).timeout(long).acquire().await })
    };
    locksmith_core::conformance::until_waiters(&d, "x", 2, Duration::from_secs(10)).await;
    let _ = h.abandon();
    let w1 = tokio::time::timeout(Duration::from_secs(10), w1)
        .await
        .expect("W1 was not granted after H's lease ran out")
        .unwrap()
        .unwrap();
    let _ = w1.abandon();
    let w2 = tokio::time::timeout(Duration::from_secs(8), w2)
        .await
        .expect("W2 was not granted 8 s after W1 (1 s lease) died")
        .unwrap()
        .unwrap();
    w2.release().await.unwrap();
    waiting_y.abort();
}
