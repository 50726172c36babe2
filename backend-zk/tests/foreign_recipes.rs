//! Lock nodes that other ZooKeeper lock recipes create in the same lock node are contenders like
//! locksmith's own, ordered by their sequence number whatever their name: a kazoo holder (nodes
//! named `<uuid hex>__lock__<seq>`) or waiter is never overtaken. Before, locksmith ordered
//! children by the text after `lock-`, so a kazoo node sorted after every locksmith node: while
//! kazoo held the lock `try_acquire` succeeded, and in a mixed queue two holders were in at once.
//! (A plain client creates what kazoo creates: no Python is involved.)

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use locksmith_core::LockError;
use zookeeper_client as zk;

/// kazoo's `Lock` node prefix: a uuid4 in hex, then `__lock__`. A uuid starting with `f` sorted
/// after every locksmith node under the old order.
const KAZOO: &str = "f3c1b2a4d5e6f708192a3b4c5d6e7f80__lock__";

/// Creates the lock node (a container, as locksmith does) and a kazoo-style contender in it.
async fn kazoo_contender(admin: &zk::Client, lock_path: &str) -> String {
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    for path in [common::NAMESPACE, lock_path] {
        match admin.create(path, &[], &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => panic!("creating {path}: {e}"),
        }
    }
    let ephemeral_sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{lock_path}/{KAZOO}");
    let (_, seq) = admin
        .create(&prefix, b"kazoo", &ephemeral_sequential)
        .await
        .expect("kazoo node");
    format!("{prefix}{seq}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_holder_is_never_overtaken() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let admin = common::admin(&base).await;
    let locker = common::locker(&base, "session_timeout=5s").await;
    let name = unique_name("kazoo_holder");
    let lock_path = common::lock_path(&LockName::new(&name).unwrap());

    let kazoo = kazoo_contender(&admin, &lock_path).await;
    assert!(
        locker.lock(&name).try_acquire().await.expect("try").is_none(),
        "locksmith took a lock that a kazoo client holds"
    );
    let waited = locker.lock(&name).timeout(Duration::from_millis(500)).acquire().await;
    assert!(matches!(waited, Err(LockError::Timeout(_))), "{waited:?}");
    admin.delete(&kazoo, None).await.expect("kazoo releases");
    let guard = locker.lock(&name).try_acquire().await.expect("try").expect("free now");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_waiter_keeps_its_place_in_a_mixed_queue() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let admin = common::admin(&base).await;
    let (first, second) = (
        common::locker(&base, "session_timeout=5s").await,
        common::locker(&base, "session_timeout=5s").await,
    );
    let name = unique_name("kazoo_queue");
    let lock_name = LockName::new(&name).unwrap();
    let lock_path = common::lock_path(&lock_name);

    // locksmith holds, kazoo queues, then another locksmith client queues behind kazoo.
    let holder = first.lock(&name).acquire().await.expect("acquire");
    let kazoo = kazoo_contender(&admin, &lock_path).await;
    let waiter = tokio::spawn({
        let name = name.clone();
        async move { second.lock(&name).acquire().await }
    });
    within(Duration::from_secs(30), "the locksmith waiter queueing", async {
        while common::contenders(&admin, &lock_name).await.len() != 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    holder.release().await.expect("release");
    // kazoo is first in line now: the locksmith waiter behind it must keep waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "a locksmith waiter overtook the kazoo contender before it: two holders at once"
    );
    admin.delete(&kazoo, None).await.expect("kazoo releases");
    let next = within(Duration::from_secs(30), "the waiter after kazoo", waiter)
        .await
        .expect("task")
        .expect("acquire");
    next.release().await.expect("release");
}
