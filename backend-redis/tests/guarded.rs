//! Redis's own side of guarded writes (the shared suite runs in every `conformance_*.rs`): keys of
//! locksmith's prefix and the lock's own key refused, a key outside the lock's slot refused on
//! Cluster with the hash tag to use, a quorum refusing them, and a write confirmed by a replica
//! with `min_replicas` on Sentinel.

mod common;

use common::{cluster_url, env_url, locker, sentinel_url, with_options};
use locksmith_core::conformance::guarded::unique_key;
use locksmith_core::conformance::{unique_name, Harness};
use locksmith_core::{Family, LockError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_keys_are_refused() {
    let h = common::RedisHarness::new("").await;
    let locker = h.locker().await;
    let name = unique_name("redis_guarded_keys");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let lock_key = h.keys(&guard.lease().name).lock;
    for key in [lock_key.as_str(), "locksmith:anything"] {
        let result = guard.guarded().put(key, "x").await;
        assert!(matches!(result, Err(LockError::InvalidName(_))), "{key}: {result:?}");
    }
    assert!(guard.is_held(), "a refused write cost the lock");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_outside_the_locks_slot_is_refused_on_cluster() {
    let h = common::RedisHarness::on(&cluster_url()).await;
    let locker = h.locker().await;
    let name = unique_name("cluster_slot");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    // Some key of another slot than the lock's: of two keys in different slots, one differs.
    let (a, b) = ("/guarded/{a}", "/guarded/{b}");
    let lock_key = h.keys(&guard.lease().name).lock;
    let bare = if lock_key.contains("{a}") { b } else { a };
    let result = guard.guarded().put(bare, "x").await;
    match &result {
        Err(LockError::InvalidName(message)) => assert!(message.contains("hash tag"), "{message}"),
        other => panic!("{other:?}"),
    }
    let tagged = h.guarded_key(Family::Mutex, &name, &unique_key("cluster"));
    guard
        .guarded()
        .put(&tagged, "in the slot")
        .await
        .expect("put in the lock's slot");
    assert!(guard.guarded().delete(&tagged).await.expect("delete"));
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_refuses_guarded_writes() {
    let locker = locker(&env_url("LOCKSMITH_TEST_REDIS_QUORUM")).await;
    let guard = locker
        .lock(unique_name("quorum_guarded"))
        .acquire()
        .await
        .expect("acquire");
    let result = guard.guarded().put(&unique_key("quorum"), "x").await;
    assert!(matches!(result, Err(LockError::InvalidOption(_))), "{result:?}");
    guard.release().await.expect("release");
}

/// With `min_replicas=1` on Sentinel, a guarded write that applied is confirmed with `WAIT`: the
/// replica acknowledges it, so the put succeeds (too few acknowledgements would be an error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_confirms_a_guarded_write() {
    let h = common::RedisHarness::on(&with_options(&sentinel_url(), "min_replicas=1")).await;
    let locker = h.locker().await;
    let name = unique_name("replicated_guarded");
    let key = unique_key("replicated");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    guard.guarded().put(&key, "confirmed").await.expect("a confirmed put");
    assert_eq!(
        guard.guarded().get(&key).await.expect("get").as_deref(),
        Some(&b"confirmed"[..])
    );
    assert!(guard.guarded().delete(&key).await.expect("delete"));
    guard.release().await.expect("release");
}

/// Locks of one name that are different locks have different data keys: two applications'
/// prefixes (`prefix=app1:`, `prefix=app2:`) and the plain layout against the default one. Before,
/// the data key was made of the lock's hash tag alone: both applications' holders, each holding
/// its own lock, wrote one "guarded" key. The default layout with the default prefix keeps the
/// keys of earlier releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_of_one_name_in_other_namespaces_have_other_data_keys() {
    let base = common::redis_url();
    let app = unique_name("app");
    let (one, two) = (format!("{app}1:"), format!("{app}2:"));
    let first = locker(&with_options(&base, &format!("prefix={one}"))).await;
    let second = locker(&with_options(&base, &format!("prefix={two}"))).await;
    let plain = locker(&with_options(&base, "layout=plain")).await;
    let default = locker(&base).await;
    let name = unique_name("same_name");
    let mut guards = Vec::new();
    for l in [&first, &second, &plain, &default] {
        guards.push(
            l.lock(&name)
                .try_acquire()
                .await
                .expect("try")
                .expect("its own lock is free"),
        );
    }
    let keys: Vec<String> = guards.iter().map(|g| g.data_key("cursor").expect("data key")).collect();
    for (i, key) in keys.iter().enumerate() {
        assert!(!keys[..i].contains(key), "two locks share the data key {key}: {keys:?}");
    }
    assert_eq!(
        keys[3],
        {
            let encoded = locksmith_core::driver::LockName::new(&name)
                .unwrap()
                .encoded()
                .to_string();
            format!("locksmith-data:{{{encoded}}}:{encoded}:cursor")
        },
        "the default layout's keys are those of earlier releases"
    );
    for (guard, key) in guards.iter().zip(&keys) {
        guard
            .guarded()
            .put(key, guard.fencing_token().to_string())
            .await
            .expect("put");
    }
    for (guard, key) in guards.iter().zip(&keys) {
        let value = guard.guarded().get(key).await.expect("get");
        assert_eq!(value, Some(guard.fencing_token().to_string().into_bytes()), "{key}");
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// Bug: the refusal of locksmith's own keys was a bare string-prefix test on the URL's prefix.
/// A prefix that begins `locksmith-data:` as a string (`prefix=lock`) refused every data key, so
/// `data_key` and token registers failed for every lock; an empty prefix refused nothing, so a
/// holder of one lock could overwrite another lock's holder key (that lock then blocked for
/// good: the key has no expiry). Now data keys are data whatever the prefix, and with an empty
/// prefix a key that begins with a hash tag is locksmith's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_check_fits_any_prefix() {
    let base = common::redis_url();
    let short = locker(&with_options(&base, "prefix=lock")).await;
    let name = unique_name("short_prefix");
    let guard = short.lock(&name).acquire().await.expect("acquire");
    let key = guard.data_key("cursor").expect("a data key under prefix=lock");
    guard
        .guarded()
        .put(&key, "1")
        .await
        .expect("a guarded write of the data key");
    assert!(
        guard.guarded().put("lockers:x", "1").await.is_err(),
        "a key under the prefix is still refused"
    );
    short
        .token_register(&unique_name("register"))
        .expect("a token register under prefix=lock");
    guard.release().await.expect("release");

    let empty = common::RedisHarness::new("prefix=").await;
    let locker = empty.locker().await;
    let (a, b) = (unique_name("empty_prefix_a"), unique_name("empty_prefix_b"));
    let holder = locker.lock(&a).acquire().await.expect("acquire a");
    let other = locker.lock(&b).acquire().await.expect("acquire b");
    let other_key = empty.keys(&other.lease().name).lock;
    let result = holder.guarded().put(&other_key, "x").await;
    assert!(
        matches!(result, Err(LockError::InvalidName(_))),
        "{other_key}: another lock's key was written: {result:?}"
    );
    assert!(other.is_held());
    holder.release().await.expect("release a");
    other.release().await.expect("release b");

    let reserved = locksmith_redis::connect(
        &locksmith_core::driver::BackendUrl::parse(&with_options(&base, "prefix=locksmith-data:x")).unwrap(),
    )
    .await;
    assert!(
        matches!(reserved, Err(LockError::InvalidUrl { .. })),
        "a prefix that begins like the data keys"
    );
}
