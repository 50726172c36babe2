//! `locksmith_handovers_total` counts the grants that waited for another holder, on every backend,
//! whichever way the backend hands a lock over: a wake-up and the waiter's own request (the
//! in-process backend), or a notification that is itself the grant, with no request of the
//! waiter's (etcd, ZooKeeper on a server that runs alone, Redis, PostgreSQL, MySQL). The counter used to
//! be decided by when the grant's lease started, which a direct hand-over counts from the waiter's
//! last request, before it waited: those hand-overs were not counted.

use std::time::{Duration, Instant};

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::LockName;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// The `locksmith_handovers_total` of `url` after an uncontended acquire, one hand-over from it
/// to a waiter, and one back. Runs on this thread's runtime (the recorder is this thread's).
async fn handovers(url: &str) -> u64 {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (a, b) = (
        locksmith::connect(url).await.expect("connect"),
        locksmith::connect(url).await.expect("connect"),
    );
    let name = unique_name("handover-metric");
    let lock_name = LockName::new(&name).expect("a valid name");
    let mut holder = a.lock(&name).acquire().await.expect("acquire");
    for waiter in [&b, &a] {
        let waiting = waiter.lock(&name).acquire();
        tokio::pin!(waiting);
        // Poll the waiter until the server shows it queued, then release.
        let started = Instant::now();
        loop {
            let polled = tokio::time::timeout(Duration::from_millis(20), &mut waiting).await;
            assert!(polled.is_err(), "{url}: the waiter got a held lock");
            let info = a.backend().inspect(&lock_name).await.expect("inspect");
            if info.waiters >= 1 {
                // Queued; give it time to read the queue behind it too (ZooKeeper serves the
                // listing sent with the create after the create, maybe after a quick release).
                let polled = tokio::time::timeout(Duration::from_millis(150), &mut waiting).await;
                assert!(polled.is_err(), "{url}: the waiter got a held lock");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{url}: the waiter never queued"
            );
        }
        holder.release().await.expect("release");
        holder = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the waiter is served")
            .expect("acquire");
    }
    holder.release().await.expect("release");
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| key.key().name() == "locksmith_handovers_total")
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn the_in_process_backend_counts_its_handovers() {
    assert_eq!(handovers("mem://").await, 2);
}

#[cfg(all(feature = "etcd", feature = "zk", feature = "redis"))]
#[tokio::test]
async fn every_server_backend_counts_its_handovers() {
    use locksmith_core::conformance::env_url;
    for var in ["LOCKSMITH_TEST_ETCD", "LOCKSMITH_TEST_ZK", "LOCKSMITH_TEST_REDIS"] {
        let url = env_url(var);
        assert_eq!(handovers(&url).await, 2, "{url}");
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_counts_its_handovers() {
    let url = format!(
        "{}?schema=handover_metric",
        locksmith_core::conformance::env_url("LOCKSMITH_TEST_POSTGRES")
    );
    assert_eq!(handovers(&url).await, 2, "{url}");
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_counts_its_handovers() {
    let url = locksmith_core::conformance::env_url("LOCKSMITH_TEST_MYSQL");
    assert_eq!(handovers(&url).await, 2, "{url}");
}

#[cfg(feature = "file")]
#[tokio::test]
async fn file_counts_its_handovers() {
    let dir = std::env::temp_dir().join(format!("locksmith-handover-metric-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let url = format!("file://{}", dir.display());
    assert_eq!(handovers(&url).await, 2, "{url}");
    let _ = std::fs::remove_dir_all(&dir);
}
