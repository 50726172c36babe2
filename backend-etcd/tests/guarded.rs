//! etcd's own side of guarded writes (the shared suite is in `conformance.rs`): the holder's
//! condition in a transaction of the application's own ([`locksmith_etcd::owner_compare`], Go's
//! `Mutex.IsOwner()`), and keys of locksmith's namespace refused.

mod common;

use locksmith_core::conformance::guarded::unique_key;
use locksmith_core::conformance::{unique_name, Harness};
use locksmith_core::LockError;
use locksmith_etcd::etcd_client::{Txn, TxnOp};

/// A transaction of the application's own, conditioned on `owner_compare`, commits while the lock
/// is held and not after the lock was removed behind the holder's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_compare_guards_the_applications_own_transaction() {
    let h = common::EtcdHarness::plain().await;
    let locker = h.locker().await;
    let admin = common::admin(&common::env_url("LOCKSMITH_TEST_ETCD")).await;
    let key = unique_key("own_txn");
    let guard = locker.lock(unique_name("own_txn")).acquire().await.expect("acquire");
    let txn = |value: &'static str| {
        Txn::new()
            .when([locksmith_etcd::owner_compare(guard.lease())])
            .and_then([TxnOp::put(key.as_str(), value, None)])
    };
    let resp = admin.kv_client().txn(txn("held")).await.expect("txn");
    assert!(resp.succeeded(), "the holder's own transaction did not commit");

    h.delete_behind_back(&guard.lease().name).await;
    let resp = admin.kv_client().txn(txn("stale")).await.expect("txn");
    assert!(!resp.succeeded(), "a transaction of a removed lock committed");
    let got = admin.kv_client().get(key.as_str(), None).await.expect("get");
    assert_eq!(got.kvs().first().map(|kv| kv.value().to_vec()), Some(b"held".to_vec()));
    admin.kv_client().delete(key.as_str(), None).await.expect("delete");
}

/// Keys under locksmith's namespace (its lock keys) are refused, for writes and reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_the_lock_namespace_are_refused() {
    let h = common::EtcdHarness::plain().await;
    let locker = h.locker().await;
    let guard = locker.lock(unique_name("namespace")).acquire().await.expect("acquire");
    let own_key = guard.lease().holder_id.clone();
    let result = guard.guarded().delete(&own_key).await;
    assert!(matches!(result, Err(LockError::InvalidName(_))), "{result:?}");
    let result = guard.guarded().get(&own_key).await;
    assert!(matches!(result, Err(LockError::InvalidName(_))), "{result:?}");
    assert!(guard.is_held());
    guard.release().await.expect("release");
}
