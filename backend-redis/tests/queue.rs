//! The waiter queue survives waiters that died without cleaning up: their entries go stale and
//! are skipped.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};

/// Puts a fake waiter at the head of the queue whose entry stays live for `live_ms` more
/// milliseconds of server time, as a crashed process would leave it.
async fn plant_dead_waiter(url: &str, name: &str, live_ms: i64) {
    let keys =
        locksmith_redis::LockKeys::for_url(&BackendUrl::parse(url).unwrap(), &LockName::new(name).unwrap()).unwrap();
    let mut admin = common::admin(url).await;
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut admin).await.expect("TIME");
    let now_ms = secs * 1000 + micros / 1000;
    let dead = "deadbeefdeadbeefdeadbeefdeadbeef";
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(&keys.queue)
        .arg(0)
        .arg(dead)
        .ignore()
        .cmd("HSET")
        .arg(&keys.alive)
        .arg(dead)
        .arg(now_ms + live_ms)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&keys.queue)
        .arg(60_000)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&keys.alive)
        .arg(60_000)
        .ignore()
        .query_async(&mut admin)
        .await
        .expect("plant");
}

async fn waiter_after_dead_head(live_ms: i64) {
    let url = common::with_options(&common::redis_url(), "waiter_ttl=1s");
    let name = unique_name("dead_waiter");
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let held = a.lock(&name).acquire().await.expect("acquire");
    plant_dead_waiter(&url, &name, live_ms).await;
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release"); // wakes the dead head if it still looks alive
    let guard = within(Duration::from_secs(15), "the live waiter behind a dead one", waiter)
        .await
        .unwrap()
        .expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_entry_is_skipped_at_release() {
    waiter_after_dead_head(-1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_that_goes_stale_while_head_is_skipped_by_the_next_heartbeat() {
    waiter_after_dead_head(1500).await;
}
