//! A holder lives by its lease alone: when its locker's owner row is gone (forgotten by the
//! sweep after a long idle time, or deleted by an operator), a lock it then takes is still
//! exclusive, and it keeps it while it renews.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

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
