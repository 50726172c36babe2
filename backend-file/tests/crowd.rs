//! A crowd in one process: 1,000 waiters on one lock, each with a locker of its own, and all on
//! one locker (as the fault suite's load runs them). Every change of the lock wakes all of them;
//! the holder must keep its lease meanwhile, and all must be served, in the order they queued.
//!
//! Before the waiters of a process shared one read of the state per change, each woken waiter
//! read and pruned the whole file on a runtime thread (checking the liveness of every locker in
//! it): a change cost the process O(N²) work, the holder's renewals went unanswered and it lost
//! its lock about a minute in.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::FileHarness;
use locksmith_core::conformance::{unique_name, Harness};
use locksmith_core::Locker;

const WAITERS: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_with_a_locker_each_leave_the_holder_its_lease_and_are_served_in_order() {
    crowd(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_on_one_locker_leave_the_holder_its_lease_and_are_served_in_order() {
    crowd(true).await;
}

async fn crowd(one_locker: bool) {
    let h = FileHarness::new();
    let holder = h.locker().await;
    let shared = h.locker().await;
    let name = unique_name("crowd");
    let ttl = Duration::from_secs(2);
    let guard = holder.lock(&name).ttl(ttl).acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::with_capacity(WAITERS)));
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..WAITERS {
        let locker: Locker = if one_locker { shared.clone() } else { h.locker().await };
        let (lock, order) = (name.clone(), order.clone());
        waiters.spawn(async move {
            let got = locker
                .lock(&lock)
                .ttl(ttl)
                .timeout(Duration::from_secs(120))
                .acquire()
                .await;
            let got = got.map_err(|e| format!("waiter {i}: {e}"))?;
            order.lock().unwrap().push(i);
            got.release().await.map_err(|e| format!("waiter {i} releasing: {e}"))?;
            if !one_locker {
                locker
                    .shutdown()
                    .await
                    .map_err(|e| format!("waiter {i} shutting down: {e}"))?;
            }
            Ok::<(), String>(())
        });
        // Queued before the next one starts: the order the grants must keep.
        while holder.inspect(&name).await.unwrap().waiters < i + 1 {
            assert!(guard.is_held(), "the holder lost its lease with {i} waiters queued");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // Every waiter woken a few times more by the waiters' own heartbeats.
    tokio::time::sleep(ttl).await;
    assert!(
        guard.is_held(),
        "the holder lost its lease with all {WAITERS} waiters queued"
    );
    guard.release().await.unwrap();
    while let Some(done) = waiters.join_next().await {
        done.unwrap().unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), WAITERS);
    let out_of_order: Vec<_> = order.windows(2).filter(|w| w[1] < w[0]).collect();
    assert!(out_of_order.is_empty(), "served out of queue order: {out_of_order:?}");
    shared.shutdown().await.unwrap();
    holder.shutdown().await.unwrap();
}
