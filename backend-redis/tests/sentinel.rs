//! Redis Sentinel with locks held and waiters waiting: a `SENTINEL FAILOVER`, a killed master, and
//! replica confirmation (`min_replicas`), against the test servers' master, replica and three
//! sentinels (`LOCKSMITH_TEST_REDIS_SENTINEL`).
//!
//! What must hold through a failover: the holder keeps its lock (its watchdog renews it on the
//! new master) or is told it lost it before anyone else gets it; a waiter queued before the
//! failover gets the lock once it is released; fencing tokens keep growing.

mod common;

use std::time::Duration;

use common::{backends, holds_through, sentinel_url, wait_for_change, with_options, FAULTS};
use lockcore::conformance::servers::OnDrop;
use lockcore::conformance::{unique_name, within};
use lockcore::{LockError, LostReason};

/// The data server that is not the master now.
fn other(master: &str) -> &'static str {
    if master == "sentinel-m" {
        "sentinel-r"
    } else {
        "sentinel-m"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_keeps_held_locks_and_wakes_waiters() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // Until the old master is turned into a replica (and drops its clients), renewals reach it
    // and are lost with it: the lease must outlast that window (1-3 s here), as it does with the
    // default TTL.
    holds_through(&sentinel_url(), Duration::from_secs(6), |_| async {
        let old = backends(&["leader", "redis-sentinel"]).await;
        let new = backends(&["failover", "redis-sentinel"]).await;
        assert_ne!(old, new, "the failover did not move the master");
    })
    .await;
    // New locks work on the new master, from a locker that connected before the failover too.
    let c = common::locker(&sentinel_url()).await;
    assert!(c
        .lock(unique_name("sentinel-after"))
        .try_acquire()
        .await
        .expect("try")
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_master_keeps_a_confirmed_lock() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // Leases must outlast the failover (down after 1 s, then an election) plus the old master's
    // return as a replica: until a replica is back, renewals cannot be confirmed.
    let url = with_options(&sentinel_url(), "min_replicas=1");
    holds_through(&url, Duration::from_secs(14), |_| async {
        let old = backends(&["leader", "redis-sentinel"]).await;
        let _restart = OnDrop::start(&old);
        backends(&["kill", &old]).await;
        let new = wait_for_change(&["leader", "redis-sentinel"], &old, Duration::from_secs(30)).await;
        assert_eq!(new, other(&old));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_grants_are_given_back() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // One replica; two are asked for: no grant can be confirmed.
    let greedy = common::locker(&with_options(&sentinel_url(), "min_replicas=2&replica_timeout=200ms")).await;
    let plain = common::locker(&sentinel_url()).await;
    let name = unique_name("unconfirmed");
    match greedy.lock(&name).try_acquire().await {
        Err(LockError::Unavailable { message, .. }) => {
            assert!(message.contains("min_replicas=2"), "{message}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let result = greedy.lock(&name).timeout(Duration::from_secs(1)).acquire().await;
    assert!(
        matches!(result, Err(LockError::Unavailable { .. } | LockError::Timeout(_))),
        "{result:?}"
    );
    // Nothing was kept: the lock is free and nobody is queued.
    let info = plain.inspect(&name).await.expect("inspect");
    assert!(info.holder.is_none() && info.waiters == 0, "{info:?}");
    assert!(plain.lock(&name).try_acquire().await.expect("try").is_some());

    // A server without replicas cannot confirm anything either.
    let lonely = common::locker(&with_options(
        &common::redis_url(),
        "min_replicas=1&replica_timeout=100ms",
    ))
    .await;
    let result = lonely.lock(unique_name("lonely")).try_acquire().await;
    assert!(matches!(result, Err(LockError::Unavailable { .. })), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_renewals_fire_lost() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = with_options(&sentinel_url(), "min_replicas=1&replica_timeout=200ms");
    let a = common::locker(&url).await;
    let held = a
        .lock(unique_name("unconfirmed-renewal"))
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    let master = backends(&["leader", "redis-sentinel"]).await;
    let replica = other(&master);
    let _restart = OnDrop::start(replica);
    backends(&["stop", replica]).await;
    let reason = within(
        Duration::from_secs(15),
        "lost() with no replica to confirm renewals",
        held.lost(),
    )
    .await;
    assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
}
