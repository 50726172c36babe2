//! Waiters are woken by the server, never by a poll: with a heartbeat of 30 s (the wait
//! connection's `SLEEP` then lasts that long), a hand-over still takes milliseconds, since the
//! releaser's `KILL QUERY` ends the waiting locker's `SLEEP` at once.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

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
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let (a, b) = (connect(&url).await, connect(&url).await);
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
