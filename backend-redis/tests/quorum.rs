//! Several independent masters (LOCKSMITH_TEST_REDIS_QUORUM, redis-q1..q3): the lock works with
//! one master down and fails clearly with two down. Every server is started again at the end,
//! whatever happens. One test function, because it stops shared servers.

mod common;

use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::LockError;
use locksmith_redis::LockKeys;

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

    // A waiter with time left rides the outage out, and gets the lock once the masters are back
    // (empty, and granting nothing for their restart delay). (Before, its first attempt's
    // Unavailable ended it at once.)
    let waiter = tokio::spawn({
        let (a, name) = (a.clone(), name.clone());
        async move { a.lock(&name).timeout(Duration::from_secs(60)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    if waiter.is_finished() {
        panic!("the waiter gave up with two masters down: {:?}", waiter.await);
    }
    backends(&["start", "redis-q1"]);
    backends(&["start", "redis-q2"]);
    let guard = tokio::time::timeout(Duration::from_secs(90), waiter)
        .await
        .expect("acquire hung after restore")
        .expect("waiter task")
        .expect("acquire after restore");
    guard.release().await.expect("release");

    // A token from masters whose clocks are ahead (q1's and q2's counters set 120 s ahead of the
    // clocks, so that every majority has one), every counter near its hourly expiry: a counter
    // at the token (counted on past its clock, or raised to it from another master's) is kept
    // until its own clock has passed it, or its next token would come out below it.
    let keys = LockKeys::for_url(&BackendUrl::parse(&url).unwrap(), &LockName::new(&name).unwrap()).unwrap();
    let mut admins = Vec::new();
    for server in &servers {
        admins.push(common::admin(server).await);
    }
    let time: Vec<String> = redis::cmd("TIME").query_async(&mut admins[0]).await.unwrap();
    let ahead = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap() + 120_000_000;
    for (i, admin) in admins.iter_mut().enumerate() {
        let _: () = redis::cmd("SET")
            .arg(&keys.fence)
            .arg(if i < 2 { ahead } else { 1 })
            .arg("PX")
            .arg(5000)
            .query_async(admin)
            .await
            .unwrap();
    }
    let guard = a.lock(&name).acquire().await.expect("acquire");
    let token = guard.fencing_token();
    assert!(token > ahead, "token {token} below the counters {ahead} of q1 and q2");
    let mut at_token = 0;
    for admin in &mut admins {
        let value: Option<u64> = redis::cmd("GET").arg(&keys.fence).query_async(admin).await.unwrap();
        if value == Some(token) {
            at_token += 1;
            let pttl: i64 = redis::cmd("PTTL").arg(&keys.fence).query_async(admin).await.unwrap();
            assert!(
                pttl > 60_000,
                "at {token}, 120 s ahead of its clock, a counter expires in {pttl} ms"
            );
        }
    }
    assert!(at_token >= 2, "{at_token} masters' counters at the token {token}");
    guard.release().await.expect("release");
}
