//! What a locker that died leaves (its owner row, mailbox rows, watches) is removed once it has
//! been unseen for an hour, by the next locker whose wait connection registers; a live locker's
//! rows stay.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::within;
use locksmith_core::driver::BackendUrl;
use sqlx::{Connection, Row};

async fn count(admin: &mut sqlx::MySqlConnection, sql: &str) -> i64 {
    sqlx::query(sql).fetch_one(&mut *admin).await.unwrap().get::<i64, _>(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lockers_rows_are_forgotten() {
    let harness = common::MyHarness::plain().await;
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    // A locker that died two hours ago, with a mailbox row and a watch.
    for sql in [
        "INSERT INTO locksmith_owners (id, conn_id, seen_at) VALUES (42, 1, NOW(6) - INTERVAL 2 HOUR)",
        "INSERT INTO locksmith_wakes (owner, entry, lock_id) VALUES (42, NULL, 1)",
        "INSERT INTO locksmith_watches (lock_id, owner) VALUES (1, 42)",
    ] {
        sqlx::Executor::execute(&mut admin, sql).await.unwrap();
    }
    let live_before = count(&mut admin, "SELECT COUNT(*) FROM locksmith_owners WHERE id <> 42").await;
    let locker = locksmith_mysql::connect(&BackendUrl::parse(&harness.url).unwrap())
        .await
        .unwrap();
    within(Duration::from_secs(10), "the dead locker's rows to go", async {
        loop {
            let left = count(&mut admin, "SELECT COUNT(*) FROM locksmith_owners WHERE id = 42").await
                + count(&mut admin, "SELECT COUNT(*) FROM locksmith_wakes WHERE owner = 42").await
                + count(&mut admin, "SELECT COUNT(*) FROM locksmith_watches WHERE owner = 42").await;
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // The live lockers (the harness's, and the new one) are still there.
    let live = count(&mut admin, "SELECT COUNT(*) FROM locksmith_owners").await;
    assert!(
        live > live_before,
        "{live} owner rows, {live_before} before the new locker"
    );
    locker.shutdown().await.unwrap();
}
