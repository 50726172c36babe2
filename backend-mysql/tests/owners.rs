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
    // A locker that died two hours ago, with a mailbox row and a watch (in one transaction, as
    // the harness's own locker may be forgetting dead lockers meanwhile). Bug: forgetting took
    // three statements, wakes, watches, then owners, and another locker's three could run
    // between a dead locker's rows being written: its owner row went, its other rows stayed for
    // good (3 runs of 8 failed, 1 of 10 with the rows written in one transaction).
    let mut txn = admin.begin().await.unwrap();
    for sql in [
        "INSERT INTO locksmith_owners (id, conn_id, seen_at) VALUES (42, 1, NOW(6) - INTERVAL 2 HOUR)",
        "INSERT INTO locksmith_wakes (owner, entry, lock_id) VALUES (42, NULL, 1)",
        "INSERT INTO locksmith_watches (lock_id, owner) VALUES (1, 42)",
    ] {
        sqlx::Executor::execute(&mut *txn, sql).await.unwrap();
    }
    txn.commit().await.unwrap();
    let live_before = count(&mut admin, "SELECT COUNT(*) FROM locksmith_owners WHERE id <> 42").await;
    let locker = locksmith_mysql::connect(&BackendUrl::parse(&harness.url).unwrap())
        .await
        .unwrap();
    // The dead locker's rows go, and the live lockers' (the harness's, and the new one's, which
    // registers with its wait connection, in a statement of its own) stay.
    within(
        Duration::from_secs(10),
        "the dead locker's rows to go, the live ones to stay",
        async {
            loop {
                let left = count(&mut admin, "SELECT COUNT(*) FROM locksmith_owners WHERE id = 42").await
                    + count(&mut admin, "SELECT COUNT(*) FROM locksmith_wakes WHERE owner = 42").await
                    + count(&mut admin, "SELECT COUNT(*) FROM locksmith_watches WHERE owner = 42").await;
                let live = count(&mut admin, "SELECT COUNT(*) FROM locksmith_owners").await;
                if left == 0 && live > live_before {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
    locker.shutdown().await.unwrap();
}
