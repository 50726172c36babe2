//! Waiters are woken by the server, never by a poll: with a heartbeat of 30 s (the wait
//! connection's `SLEEP` then lasts that long), a hand-over still takes milliseconds, since the
//! releaser's `KILL QUERY` ends the waiting locker's `SLEEP` at once. The `KILL QUERY` goes to
//! the connection holding the waiting locker's mark (a named lock it holds while it waits), and
//! to no other client's.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;
use sqlx::{Connection, Row};

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

/// Twenty hand-overs between two lockers, each waiting for the other's release, well within one
/// heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiters_long_before_the_heartbeat() {
    let harness = common::MyHarness::plain().await;
    twenty_handovers(&harness.url_with("heartbeat=30s&ttl=30s")).await;
}

async fn twenty_handovers(url: &str) {
    let (a, b) = (connect(url).await, connect(url).await);
    let name = unique_name("woken");
    within(Duration::from_secs(20), "twenty hand-overs", async {
        let mut held = a.lock(&name).acquire().await.unwrap();
        let mut last = held.fencing_token();
        for round in 0..20 {
            let next = if round % 2 == 0 { b.clone() } else { a.clone() };
            let waiter = tokio::spawn({
                let name = name.clone();
                async move { next.lock(&name).acquire().await.unwrap() }
            });
            until_waiters(&a, &name, 1, Duration::from_secs(5)).await;
            held.release().await.unwrap();
            held = within(Duration::from_secs(2), "the woken waiter's grant", waiter)
                .await
                .unwrap();
            assert!(held.fencing_token() > last);
            last = held.fencing_token();
        }
        held.release().await.unwrap();
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// After a restart of the server, connection ids start again: the id a locker registered before
/// it may now be another client's connection, until that locker's wait connection registers its
/// new one. Here a waiting entry's locker has an owner row naming another client's connection,
/// and no wait connection holds that locker's mark (as after a restart), while that client runs
/// a long statement that even reads like a wait. The holder's release makes the entry hold and
/// writes its mailbox row, and interrupts nobody: the other client's statement ends on its own.
/// (Before the mark, a look at the process list matched the statement's text, and the release
/// killed it.) Both with the stored procedures and with the full steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_never_interrupts_another_clients_statement() {
    let harness = common::MyHarness::plain().await;
    for (round, options) in ["ttl=30s", "ttl=30s&procedures=off"].into_iter().enumerate() {
        let holder = connect(&harness.url_with(options)).await;
        let name = unique_name("stale");
        let held = holder.lock(&name).acquire().await.unwrap();
        let mut other = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
        let other_id: u64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS UNSIGNED)")
            .fetch_one(&mut other)
            .await
            .unwrap();
        let (gone_owner, gone_entry) = (1_000_000 + round as u64, 2_000_000 + round as u64);
        let mut rows = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
        let lock_id: u64 = sqlx::query("SELECT lock_id FROM locksmith_entries WHERE held = 1 AND owner <> ?")
            .bind(gone_owner)
            .fetch_all(&mut rows)
            .await
            .unwrap()
            .last()
            .expect("the holder's entry")
            .get(0);
        sqlx::query("INSERT INTO locksmith_owners (id, conn_id, seen_at) VALUES (?, ?, NOW(6))")
            .bind(gone_owner)
            .bind(other_id)
            .execute(&mut rows)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO locksmith_entries (id, lock_id, owner, role, permits, value, ttl_us, held, token, expires_at) \
             VALUES (?, ?, ?, 'x', 0, '', 30000000, 0, 0, NOW(6) + INTERVAL 30 SECOND)",
        )
        .bind(gone_entry)
        .bind(lock_id)
        .bind(gone_owner)
        .execute(&mut rows)
        .await
        .unwrap();
        let statement = tokio::spawn(async move {
            let slept = sqlx::query_scalar::<_, i64>("SELECT SLEEP(3) AS slept /* locksmith wait */")
                .fetch_one(&mut other)
                .await;
            (slept.map_err(|e| e.to_string()), other)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        held.release().await.unwrap();
        let woken: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM locksmith_wakes WHERE owner = ? AND entry = ?")
            .bind(gone_owner)
            .bind(gone_entry)
            .fetch_one(&mut rows)
            .await
            .unwrap();
        assert_eq!(
            woken, 1,
            "{options}: the release did not hand the lock to the waiting entry"
        );
        let (slept, other) = within(Duration::from_secs(10), "the other client's statement", statement)
            .await
            .unwrap();
        assert_eq!(
            slept,
            Ok(0),
            "{options}: the release interrupted another client's statement"
        );
        let _ = other.close().await;
        let _ = rows.close().await;
        holder.shutdown().await.unwrap();
    }
}

/// An observer of an election sees the leader resign and the next candidate lead at once, not
/// at its next heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_are_woken_by_a_resignation() {
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let (a, b, watcher) = (connect(&url).await, connect(&url).await, connect(&url).await);
    let name = unique_name("observed");
    let first = a.election(&name).campaign("a").acquire().await.unwrap();
    let mut watch = watcher.election(&name).observe().await.unwrap();
    assert_eq!(watch.leader().map(|l| l.value), Some("a".to_owned()));
    let second = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.election(&name).campaign("b").acquire().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.resign().await.unwrap();
    within(Duration::from_secs(3), "the observer to see b lead", async {
        loop {
            if watch.leader().is_some_and(|l| l.value == "b") {
                break;
            }
            watch.changed().await.unwrap();
        }
    })
    .await;
    second.await.unwrap().resign().await.unwrap();
    drop(watch);
    for locker in [a, b, watcher] {
        locker.shutdown().await.unwrap();
    }
}
