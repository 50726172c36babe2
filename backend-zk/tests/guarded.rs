//! ZooKeeper's own side of guarded writes (the shared suite runs in `conformance.rs`): a refused
//! write leaves nothing behind, its missing parents included, and a key that is no ZooKeeper
//! path is `InvalidName` for every operation.

mod common;

use std::time::Duration;

use common::ZkHarness;
use locksmith_core::conformance::guarded::unique_key;
use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::{unique_name, Harness};
use locksmith_core::driver::{BackendUrl, GuardedWrite};
use locksmith_core::LockError;

/// Bug: a compare-and-set of an absent key created the key's missing parents before the write
/// that checks the lock, so a holder whose node was already gone on the server (deleted behind
/// its back, its session not yet told) was refused with `NotHeld` and still left empty parents
/// behind: the next holder's `compare_and_set(parent, None, v)` then answered false, and
/// `get(parent)` an empty value. Each parent is now created under the same check.
///
/// The holder's answers (and the delete's event) wait in a proxy while its node is deleted and
/// it starts the write: its session still counts the lock as held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_creates_no_parent() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let upstream = BackendUrl::parse(&base).expect("test URL").hosts[0].to_addr(2181);
    let proxy = Proxy::start(&upstream).await;
    let admin = common::admin(&base).await;
    let locker = common::locker(&format!("zk://{}", proxy.addr()), "session_timeout=10s").await;
    let guard = locker
        .lock(unique_name("guarded_parents"))
        .acquire()
        .await
        .expect("acquire");
    let stale = guard.lease().clone();
    let key = unique_key("fresh");
    let parent = key.rsplit_once('/').unwrap().0.to_owned();
    proxy.set(Mode::Freeze {
        to_server: false,
        to_client: true,
    });
    admin
        .delete(&stale.holder_id, None)
        .await
        .expect("delete the holder's node");
    let write = GuardedWrite::CompareAndSet {
        key: key.clone(),
        expected: None,
        value: b"stale".to_vec(),
    };
    let backend = locker.backend().clone();
    let writing = tokio::spawn(async move { backend.write_guarded(&stale, &write).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set(Mode::Forward);
    let result = writing.await.unwrap();
    assert!(matches!(result, Err(LockError::NotHeld { .. })), "{result:?}");
    let left = admin.check_stat(&parent).await.expect("look");
    assert!(left.is_none(), "a refused write created the parent {parent}");
    drop(guard);
}

/// Keys that pass the shared checks but break ZooKeeper's path rules (`.` and `..` segments,
/// control characters) are `InvalidName` for every operation, as `Guarded` documents. (Before,
/// a compare-and-set and a read answered `Protocol`, and `/a/..` did for a put too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_no_zookeeper_path_are_invalid_names() {
    let h = ZkHarness::plain().await;
    let locker = h.locker().await;
    let guard = locker
        .lock(unique_name("guarded_paths"))
        .acquire()
        .await
        .expect("acquire");
    let store = guard.guarded();
    for key in [
        "/g/./k",
        "/g/../k",
        "/g/..",
        "/g/.",
        "/g/\u{1}",
        "/g/a\u{7f}",
        "/g/\u{e000}",
        "/g/\u{1f512}",
    ] {
        let results = [
            ("put", store.put(key, "v").await.map(|_| ())),
            ("delete", store.delete(key).await.map(|_| ())),
            (
                "compare_and_set",
                store.compare_and_set(key, None, "v").await.map(|_| ()),
            ),
            ("get", store.get(key).await.map(|_| ())),
        ];
        for (op, result) in results {
            assert!(
                matches!(result, Err(LockError::InvalidName(_))),
                "{op} {key:?}: {result:?}"
            );
        }
    }
    assert!(guard.is_held());
    guard.release().await.expect("release");
}
