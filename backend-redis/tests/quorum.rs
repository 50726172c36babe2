//! Several independent masters (LOCKSMITH_TEST_REDIS_QUORUM, redis-q1..q3): the lock works with
//! one master down and fails clearly with two down. Every server is started again at the end,
//! whatever happens. One test function, because it stops shared servers.

mod common;

use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::LockName;
use locksmith_core::LockError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_of_independent_masters() {
    let url = common::with_options(
        &common::env_url("LOCKSMITH_TEST_REDIS_QUORUM"),
        "connect_timeout=1s&response_timeout=1s",
    );
    common::init_logs();
    let _restore = [OnDrop::start("redis-q1"), OnDrop::start("redis-q2")];
    let servers = common::quorum_hosts();
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let name = unique_name("quorum");

    // All up: exclusion and increasing fencing tokens.
    let mut last = 0;
    for i in 0..4 {
        let locker = if i % 2 == 0 { &a } else { &b };
        let guard = locker.lock(&name).acquire().await.expect("acquire");
        assert!(
            !guard.lease().waited,
            "an uncontended acquire waited: {:?}",
            guard.lease()
        );
        assert!(
            guard.fencing_token() > last,
            "token {} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        let other = if i % 2 == 0 { &b } else { &a };
        assert!(
            other.lock(&name).try_acquire().await.expect("try").is_none(),
            "two holders"
        );
        let info = a
            .backend()
            .inspect(&LockName::new(&name).unwrap())
            .await
            .expect("inspect");
        assert_eq!(info.holder.expect("holder").holder_id, guard.lease().holder_id);
        guard.release().await.expect("release");
    }

    // A waiter gets the lock after the holder releases, and its grant says it waited.
    let held = a.lock(&name).acquire().await.expect("acquire");
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).timeout(Duration::from_secs(20)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    let next = waiter.await.expect("waiter").expect("acquire after release");
    assert!(next.lease().waited, "a hand-over: {:?}", next.lease());
    next.release().await.expect("release");

    // One master down: still acquires, still excludes, renews past the TTL.
    backends(&["stop", "redis-q1"]);
    let one_down = common::locker(&url).await; // connecting needs only a majority
    let guard = one_down
        .lock(&name)
        .ttl(Duration::from_millis(1500))
        .acquire()
        .await
        .expect("acquire with one master down");
    assert!(
        b.lock(&name).try_acquire().await.expect("try").is_none(),
        "two holders with one master down"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(guard.is_held(), "lost with one master down: {:?}", guard.lost_reason());
    guard.release().await.expect("release");

    // Two masters down: a clear error, no hang. (Another engineer's `scripts/backends up` may
    // start the stopped servers again at any moment: if that happened, stop them and try again.)
    let mut checked = false;
    for _ in 0..3 {
        for (id, server) in [("redis-q1", &servers[0]), ("redis-q2", &servers[1])] {
            if common::answers(server).await {
                backends(&["stop", id]);
            }
        }
        let result = tokio::time::timeout(Duration::from_secs(30), a.lock(&name).try_acquire())
            .await
            .expect("hung");
        let connect = locksmith_redis::connect(&locksmith_core::driver::BackendUrl::parse(&url).unwrap()).await;
        if !(common::answers(&servers[0]).await || common::answers(&servers[1]).await) {
            match result {
                Err(LockError::Unavailable { message, .. }) => {
                    assert!(message.contains("majority"), "{message}");
                    eprintln!("two masters down: {message}");
                }
                other => panic!("expected Unavailable with two of three masters down, got {other:?}"),
            }
            assert!(matches!(connect, Err(LockError::Unavailable { .. })), "{connect:?}");
            checked = true;
            break;
        }
        eprintln!("a stopped master was started again behind our back; repeating the check");
    }
    assert!(checked, "could not keep two masters down long enough to check");

    // Restored: works again (q1 and q2 come back empty).
    backends(&["start", "redis-q1"]);
    backends(&["start", "redis-q2"]);
    let guard = tokio::time::timeout(Duration::from_secs(30), a.lock(&name).acquire())
        .await
        .expect("acquire hung after restore")
        .expect("acquire after restore");
    guard.release().await.expect("release");
}
