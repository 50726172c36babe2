//! The one-call steps (stored procedures, `protocol/call.rs`) and the multi-statement steps
//! (`procedures=off`, or a user without `CREATE ROUTINE`) keep one queue: lockers of both kinds
//! on one lock take it in arrival order, with growing tokens, woken by the server; the
//! procedures are created at connect where missing.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::within;
use locksmith_core::driver::BackendUrl;
use sqlx::{Connection, Row};

async fn connect(url: &str) -> locksmith_core::Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_with_and_without_procedures_share_one_fifo_queue() {
    let harness = common::MyHarness::plain().await;
    let with = connect(&harness.url).await;
    let without = connect(&harness.url_with("procedures=off")).await;
    let late = connect(&harness.url).await;
    let name = "procedures/fifo";
    let first = with.lock(name).acquire().await.unwrap();
    // A waiter of the multi-statement steps, then one of the procedures, behind it.
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (who, locker) in [("without", without.clone()), ("late", late.clone())] {
        let tx = tx.clone();
        waiters.push(tokio::spawn(async move {
            let guard = locker.lock(name).acquire().await.unwrap();
            tx.send((who, guard.fencing_token())).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            guard.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let released = first.fencing_token();
    first.release().await.unwrap();
    let mut seen = Vec::new();
    within(
        Duration::from_secs(10),
        "both waiters to take the lock in turn",
        async {
            while seen.len() < 2 {
                seen.push(order.recv().await.unwrap());
            }
        },
    )
    .await;
    assert_eq!(seen.iter().map(|(w, _)| *w).collect::<Vec<_>>(), ["without", "late"]);
    assert!(
        seen[0].1 > released && seen[1].1 > seen[0].1,
        "tokens grow: {released} {seen:?}"
    );
    for w in waiters {
        w.await.unwrap();
    }
    // And back: a holder of the multi-statement steps hands over to a waiter of the procedures.
    let held = without.lock(name).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let with = with.clone();
        async move { with.lock(name).acquire().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = held.fencing_token();
    held.release().await.unwrap();
    let next = within(Duration::from_secs(10), "the waiter to take the lock", waiter)
        .await
        .unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    for l in [with, without, late] {
        l.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_procedures_are_created_where_missing() {
    let harness = common::MyHarness::plain().await;
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let count = "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() \
                 AND ROUTINE_NAME IN ('locksmith_enter_v2', 'locksmith_release_v2')";
    let n = |row: sqlx::mysql::MySqlRow| row.get::<i64, _>(0);
    assert_eq!(n(sqlx::query(count).fetch_one(&mut admin).await.unwrap()), 2);
    sqlx::Executor::execute(&mut admin, "DROP PROCEDURE locksmith_release_v2")
        .await
        .unwrap();
    let locker = connect(&harness.url).await;
    assert_eq!(n(sqlx::query(count).fetch_one(&mut admin).await.unwrap()), 2);
    let guard = locker.lock("procedures/made").acquire().await.unwrap();
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}
