//! A lock used thousands of times between two vacuums keeps its reads short: a deleted entry's
//! index item stays in `entries_by_segment` until `VACUUM` (the test server runs none, as a busy
//! production server runs one a minute at most), and a read of the queue that walked them all
//! grew with every cycle. Each lock's row keeps where its queue starts (`locks.since`); what is
//! checked is the pages one read of the queue touches (the server's own count, not a time).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Family;

/// Cycles per lock: enough deleted entries to fill dozens of index pages.
const CYCLES: usize = 4000;
/// At most this many pages per read: the lock's row, the index's root and a leaf or two, the
/// heap page of what is there.
const MAX_PAGES: u64 = 10;

async fn pages(harness: &common::PgHarness, family: Family, name: &str) -> u64 {
    harness
        .look
        .queue_read_pages(family, &LockName::new(name).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_busy_queue_skip_its_deleted_entries() {
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=30s", harness.url);
    let locker = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let other = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();

    // A mutex taken and released alone: one statement each (alone.sql).
    for _ in 0..CYCLES {
        let guard = locker.lock("churn/mutex").try_acquire().await.unwrap().expect("free");
        guard.release().await.unwrap();
    }
    let mutex = pages(&harness, Family::Mutex, "churn/mutex").await;

    // A semaphore: every acquire and release is a full step (queue.sql, prune.sql).
    for _ in 0..CYCLES / 2 {
        let permit = locker.semaphore("churn/permits", 2).acquire().await.unwrap();
        permit.release().await.unwrap();
    }
    let semaphore = pages(&harness, Family::Semaphore, "churn/permits").await;

    // Hand-overs to a waiter of another locker, which then releases: the holder's leave grants
    // the waiter in one statement, and the queue empties after each round.
    for _ in 0..CYCLES / 4 {
        let held = locker.lock("churn/handover").acquire().await.unwrap();
        let waiter = {
            let other = other.clone();
            tokio::spawn(async move {
                let got = other
                    .lock("churn/handover")
                    .timeout(Duration::from_secs(10))
                    .acquire()
                    .await
                    .unwrap();
                got.release().await.unwrap();
            })
        };
        // Until the waiter is in the queue, so that the release hands the lock over.
        while harness
            .look
            .entries(Family::Mutex, &LockName::new("churn/handover").unwrap())
            .await
            .unwrap()
            .len()
            < 2
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        held.release().await.unwrap();
        waiter.await.unwrap();
    }
    let handover = pages(&harness, Family::Mutex, "churn/handover").await;

    assert!(
        mutex <= MAX_PAGES && semaphore <= MAX_PAGES && handover <= MAX_PAGES,
        "after {CYCLES} cycles one read of a queue touches {mutex} pages (mutex), {semaphore} \
         (semaphore), {handover} (hand-overs); at most {MAX_PAGES} expected"
    );
    // No entry is ever before its queue's start (the reads would miss it).
    let schema = harness.schema.clone();
    assert_eq!(common::entries_before_their_start(&schema).await, ["0"]);
    // The queues still work from where they start: a holder and a waiter are seen.
    let held = locker.lock("churn/mutex").acquire().await.unwrap();
    let busy = other.lock("churn/mutex").try_acquire().await.unwrap();
    assert!(busy.is_none(), "the mutex was granted twice");
    held.release().await.unwrap();
    locker.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}
