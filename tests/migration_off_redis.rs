//! `examples/migrate_off_redis.rs`: at each step of the migration, old and new processes run at
//! the same time against one lock and are never inside the critical section together.
//! Needs Redis (`LOCKSMITH_TEST_REDIS`); the new backend is an in-process store and, with the
//! `etcd` or `zk` feature, also etcd or ZooKeeper.
#![cfg(feature = "redis")]

mod examples_support;
#[allow(dead_code)]
#[path = "../examples/migrate_off_redis.rs"]
mod migrate_off_redis;

use std::time::Duration;

use examples_support::{env_url, unique};
use migrate_off_redis::{drop_in_locker, dual_locker, new_only_locker, step1, step2, step3, OldRedisLock, StepReport};

const LIMIT: Duration = Duration::from_secs(180);

fn redis() -> String {
    env_url("LOCKSMITH_TEST_REDIS")
}

/// The new backends step 2 and 3 are tried with.
fn new_backends() -> Vec<(&'static str, String)> {
    #[allow(unused_mut)]
    let mut v = vec![("mem", format!("mem://{}", unique("new-store")))];
    #[cfg(feature = "etcd")]
    v.push(("etcd", env_url("LOCKSMITH_TEST_ETCD")));
    #[cfg(feature = "zk")]
    v.push(("zk", env_url("LOCKSMITH_TEST_ZK")));
    v
}

#[track_caller]
fn assert_excluded(report: &StepReport, kinds: &[&str], rounds: usize) {
    assert_eq!(report.max_inside, 1, "two processes were inside at once: {report:?}");
    for kind in kinds {
        assert_eq!(
            report.entries.get(kind),
            Some(&(rounds * count(kinds, kind))),
            "{kind}: {report:?}"
        );
    }
}

fn count(kinds: &[&str], kind: &str) -> usize {
    kinds.iter().filter(|k| *k == &kind).count()
}

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done after {LIMIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step1_drop_in_excludes_old_set_nx_processes() {
    let report = bounded("step 1", step1(&redis(), &unique("step1"), 8)).await.unwrap();
    assert_excluded(
        &report,
        &["old SET NX", "old SET NX", "drop-in (plain)", "drop-in (plain)"],
        8,
    );
}

/// The drop-in sees the old process's key and the old process sees the drop-in's, both ways.
#[tokio::test]
async fn step1_old_and_new_see_each_others_keys() {
    let name = unique("step1-keys");
    let mut old = OldRedisLock::connect(&redis()).await.unwrap();
    let new = drop_in_locker(&redis()).await.unwrap();

    let token = old
        .acquire(&name, Duration::from_secs(10), Duration::ZERO)
        .await
        .unwrap()
        .expect("free");
    assert!(
        new.lock(&name).try_acquire().await.unwrap().is_none(),
        "the drop-in ignored the old holder"
    );
    let info = new
        .backend()
        .inspect(&locksmith::driver::LockName::new(&name).unwrap())
        .await
        .unwrap();
    assert_eq!(
        info.holder.map(|h| h.holder_id),
        Some(token.clone()),
        "inspect shows the old holder's token"
    );
    assert!(old.release(&name, &token).await.unwrap());

    let guard = new
        .lock(&name)
        .try_acquire()
        .await
        .unwrap()
        .expect("free after the old release");
    assert!(old
        .acquire(&name, Duration::from_secs(10), Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
    let again = old
        .acquire(&name, Duration::from_secs(10), Duration::ZERO)
        .await
        .unwrap()
        .expect("free");
    assert!(old.release(&name, &again).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step2_dual_excludes_old_drop_in_and_dual_processes() {
    for (backend, new_url) in new_backends() {
        let report = bounded("step 2", step2(&redis(), &new_url, &unique("step2"), 6)).await;
        let report = report.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_excluded(&report, &["old SET NX", "drop-in (plain)", "dual", "dual"], 6);
    }
}

/// A dual process's token is the new backend's, and a dual acquire that cannot get the new
/// lock gives the Redis key back at once (old processes are not blocked by it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step2_dual_token_is_the_new_backends_and_rollback_frees_redis() {
    for (backend, new_url) in new_backends() {
        let name = unique("step2-rollback");
        let dual = dual_locker(&redis(), &new_url).await.unwrap();
        let new_only = new_only_locker(&new_url).await.unwrap();
        let guard = dual.lock(&name).acquire().await.unwrap();
        let shown = new_only
            .backend()
            .inspect(&locksmith::driver::LockName::new(&name).unwrap())
            .await
            .unwrap();
        if let Some(token) = shown.holder.and_then(|h| h.fencing_token) {
            assert_eq!(
                token,
                guard.fencing_token(),
                "{backend}: the dual token is not the new backend's"
            );
        }
        guard.release().await.unwrap();

        let blocker = new_only.lock(&name).acquire().await.unwrap();
        let attempt = dual.lock(&name).timeout(Duration::from_millis(1500)).acquire().await;
        assert!(
            attempt.is_err(),
            "{backend}: dual acquired while the new backend's lock was held"
        );
        let mut old = OldRedisLock::connect(&redis()).await.unwrap();
        let token = old
            .acquire(&name, Duration::from_secs(10), Duration::from_secs(5))
            .await
            .unwrap();
        let token = token.unwrap_or_else(|| panic!("{backend}: the Redis key was not rolled back"));
        assert!(old.release(&name, &token).await.unwrap());
        blocker.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step3_new_only_excludes_remaining_dual_processes() {
    for (backend, new_url) in new_backends() {
        let report = bounded("step 3", step3(&redis(), &new_url, &unique("step3"), 6)).await;
        let report = report.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_excluded(&report, &["dual", "new only", "new only"], 6);
    }
}
