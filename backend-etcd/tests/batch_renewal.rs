//! Renewal traffic does not grow with the number of held locks: one session keep-alive per tick
//! renews them all, and held locks cause no other requests. Counted on the client
//! ([`locksmith_etcd::EtcdBackend::stats`]: every request the backend sends), so other users of
//! the shared test server cannot disturb the count.

mod common;

use std::sync::Arc;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;
use locksmith_etcd::{Config, EtcdBackend};

const LOCKS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_held_locks_cost_one_keep_alive_per_tick() {
    common::init_tracing();
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let url = BackendUrl::parse(&common::with_query(&base, "ttl=1s")).expect("url");
    let backend = Arc::new(
        EtcdBackend::connect(Config::from_url(&url).expect("config"))
            .await
            .expect("connect"),
    );
    let locker = Locker::from_arc(backend.clone());
    let mut guards = Vec::new();
    for _ in 0..LOCKS {
        guards.push(
            locker
                .lock(unique_name("batch"))
                .try_acquire()
                .await
                .expect("try")
                .expect("free"),
        );
    }
    assert_eq!(locker.held_count(), LOCKS);
    let ttl = guards[0].ttl();
    // Let the first renewals line the locks up, then count over several TTLs.
    tokio::time::sleep(ttl).await;
    let before = backend.stats();
    let window = ttl * 4;
    tokio::time::sleep(window).await;
    let after = backend.stats();
    println!("over {window:?} with {LOCKS} held locks: before {before:?}, after {after:?}");
    for g in &guards {
        assert!(g.is_held(), "lost: {:?}", g.lost_reason());
    }
    let keep_alives = after.keep_alives - before.keep_alives;
    // One keep-alive per third of the TTL: 12 here. Renewing each lock would take 3,600.
    assert!(keep_alives >= 4, "only {keep_alives} keep-alives in {window:?}");
    assert!(
        keep_alives <= 24,
        "{keep_alives} keep-alives for {LOCKS} locks in {window:?}"
    );
    assert_eq!(
        after.transactions, before.transactions,
        "held locks caused transactions"
    );
    assert_eq!(
        after.watch_requests, before.watch_requests,
        "held locks caused watch requests"
    );
    for g in guards {
        g.release().await.expect("release");
    }
}
