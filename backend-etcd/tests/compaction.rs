//! A held key's watch and compaction (`LOCKSMITH_TEST_ETCD`): the watch starts at the key's
//! create revision + 1, and etcd cancels a watch whose start was compacted away. The backend then
//! reads the key and watches it again: a deletion after that must still fire `lost()`.
//!
//! In a binary of its own: compacting the test server's history under other tests' watches is
//! what the backend must survive, but not what those tests are about.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::LostReason;

/// A lock held across a compaction of its key's history, its key then deleted behind its back:
/// `lost()` fires. The watch opened again after the compaction used to reuse the cancelled
/// watch's id, which etcd still knew and refused (the stream keeps a compacted watcher until
/// the client cancels it), so nothing watched the key any more and `lost()` never fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_deleted_after_its_watch_was_compacted_fires_lost() {
    common::init_tracing();
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let url = locksmith_core::driver::BackendUrl::parse(&common::with_query(&base, "ttl=10s")).expect("URL");
    let locker = locksmith_etcd::connect(&url).await.expect("connect");
    let admin = common::admin(&base).await;
    let mut kv = admin.kv_client();
    let name = unique_name("compacted");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    // Before the held watch opens (100 ms after the grant), compact past the key's creation.
    // Two writes: a compaction at revision R keeps R, and the watch starts at create + 1.
    kv.put(format!("compaction-filler/{name}"), "x", None)
        .await
        .expect("put");
    let put = kv
        .put(format!("compaction-filler/{name}"), "y", None)
        .await
        .expect("put");
    let revision = put.header().expect("header").revision();
    kv.compact(revision, None).await.expect("compact");
    // The watch opens, is cancelled as compacted, the key is read and watched again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(guard.is_held(), "the lock was lost by the compaction alone");
    kv.delete(guard.lease().holder_id.clone(), None)
        .await
        .expect("delete the key");
    let reason = within(Duration::from_secs(5), "lost() after the key was deleted", guard.lost()).await;
    assert!(matches!(reason, LostReason::LeaseGone(_)), "{reason:?}");
    kv.delete(format!("compaction-filler/{name}"), None)
        .await
        .expect("clean up");
}
