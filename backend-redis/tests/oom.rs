//! A Redis server over `maxmemory` (with the default `noeviction` policy) refuses what needs
//! memory, a new grant among them, but a holder can still give its lock up: the scripts that
//! release or leave run out of memory too (`allow-oom` on their functions; a plain script runs
//! until a write that needs memory, which `DEL` and `ZREM` are not). Before that flag, a full
//! server kept every lock until its TTL. Its own test binary: it makes the shared test server
//! refuse writes for a moment.

mod common;

use locksmith_core::conformance::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_out_of_memory_still_takes_releases() {
    common::init_logs();
    let url = common::redis_url();
    let mut admin = common::admin(&url).await;
    let locker = common::locker(&url).await;
    let name = unique_name("oom");
    let held = locker.lock(&name).acquire().await.expect("acquire");
    let permit = locker.semaphore(&name, 2).acquire().await.expect("a permit");

    let before: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(&mut admin)
        .await
        .expect("CONFIG GET");
    let before = before.get(1).cloned().unwrap_or_else(|| "0".into());
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory");
    // Everything that must be checked runs before the limit is lifted again; the assertions after.
    let refused = locker.lock(unique_name("oom_other")).try_acquire().await;
    let released = held.release().await;
    let permit_released = permit.release().await;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(&before)
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory back");

    assert!(refused.is_err(), "a grant on a server out of memory: {refused:?}");
    released.expect("releasing on a server out of memory");
    permit_released.expect("releasing a permit on a server out of memory");
    // Given up for real: the lock is free at once.
    let again = locker.lock(&name).try_acquire().await.expect("try again");
    assert!(again.is_some(), "the released lock is still held");
    again.unwrap().release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
}
