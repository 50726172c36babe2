//! Fencing tokens after the lock's row lost its last commits, as on a replica promoted after a
//! failover that missed them: the counter is behind (or the row is gone), and the clock floor
//! (`GREATEST(counter + 1, server clock in µs)`) still puts the next token above every earlier
//! one.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Family;

async fn connect(url: &str) -> locksmith_core::Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_past_a_counter_that_went_back_or_a_row_that_is_gone() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await;
    let name = unique_name("data_loss");
    let segment = Family::Mutex.segment(&LockName::new(&name).unwrap());
    let table = format!("{}.locksmith_locks", harness.database);

    let mut last = 0;
    for lost in [
        format!("UPDATE {table} SET token = 0 WHERE segment = '{segment}'"),
        format!("UPDATE {table} SET token = token - 1000000000 WHERE segment = '{segment}'"),
        format!("DELETE FROM {table} WHERE segment = '{segment}'"),
    ] {
        let guard = locker.lock(&name).acquire().await.unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.release().await.unwrap();
        common::run_as_test_user(&lost).await;
        let after = locker.lock(&name).acquire().await.unwrap();
        assert!(
            after.fencing_token() > last,
            "token {} after {last} once the row lost its commits ({lost})",
            after.fencing_token()
        );
        last = after.fencing_token();
        after.release().await.unwrap();
    }
    locker.shutdown().await.unwrap();
}
