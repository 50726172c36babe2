//! `examples/lost_lock.rs`: the guarded work stops when `lost()` fires — the lock removed behind
//! the holder's back (mem, and Redis with a `DEL`), or `max_hold` reached (every backend).

mod examples_support;
#[allow(dead_code)]
#[path = "../examples/lost_lock.rs"]
mod lost_lock;

use std::time::Duration;

use locksmith::LostReason;
use lost_lock::{guarded_work, removed_behind_back, with_max_hold, Outcome};

#[tokio::test]
async fn work_stops_when_the_lock_is_removed_behind_its_back() {
    let url = format!("mem://{}", examples_support::unique("lost"));
    let outcome = removed_behind_back(&url, "job", Duration::from_millis(200))
        .await
        .unwrap();
    match outcome {
        Outcome::Cancelled {
            steps_done,
            reason: LostReason::LeaseGone(_),
        } => assert!(steps_done < 1000),
        other => panic!("the work was not cancelled by the removal: {other:?}"),
    }
    // The lock is free for the next holder.
    let locker = locksmith::connect(&url).await.unwrap();
    assert!(locker.lock("job").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn work_runs_to_the_end_while_the_lock_is_held() {
    let locker = locksmith::connect("mem://").await.unwrap();
    let guard = locker.lock(examples_support::unique("held")).acquire().await.unwrap();
    match guarded_work(&guard, 5, Duration::from_millis(10)).await {
        Outcome::Finished { steps } => assert_eq!(steps, 5),
        other => panic!("{other:?}"),
    }
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_stops_at_max_hold_on_every_backend() {
    for (backend, url) in examples_support::backend_urls() {
        let name = examples_support::unique("max-hold");
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            with_max_hold(&url, &name, Duration::from_millis(300)),
        )
        .await
        .unwrap_or_else(|_| panic!("{backend}: max_hold never fired"))
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert!(
            matches!(outcome, Outcome::Cancelled { steps_done, reason: LostReason::MaxHoldReached } if steps_done < 1000),
            "{backend}: {outcome:?}"
        );
        // The watchdog released it: another holder gets it without waiting for the TTL.
        let locker = locksmith::connect(&url).await.unwrap();
        let next = locker.lock(&name).timeout(Duration::from_secs(3)).acquire().await;
        assert!(
            next.is_ok(),
            "{backend}: the lock was not released after max_hold: {next:?}"
        );
        next.unwrap().release().await.unwrap();
    }
}

/// An operator deletes the lock's key on Redis while the work runs.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_stops_when_the_redis_key_is_deleted() {
    let url = examples_support::env_url("LOCKSMITH_TEST_REDIS");
    let name = examples_support::unique("redis-del");
    let locker = locksmith::connect(&url).await.unwrap();
    let guard = locker.lock(&name).ttl(Duration::from_secs(2)).acquire().await.unwrap();
    let key = format!(
        "locksmith:{{{}}}:lock",
        locksmith::driver::LockName::new(&name).unwrap().encoded()
    );
    let operator = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(&mut con).await.unwrap();
        assert_eq!(deleted, 1, "no key {key} on Redis");
    });
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        guarded_work(&guard, 100_000, Duration::from_millis(20)),
    )
    .await
    .expect("the deletion was never noticed");
    operator.await.unwrap();
    assert!(
        matches!(
            outcome,
            Outcome::Cancelled {
                reason: LostReason::LeaseGone(_),
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(guard.release().await.is_err_and(|e| e.is_not_held()));
}
