//! Identities (`user:password@`, ZooKeeper digest ACLs) on the plain server of
//! `LOCKSMITH_TEST_ZK`: a locker refused by another identity's nodes is told so, and is left with
//! nothing to clean up.

mod common;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockError, Locker};

/// A locker of `user` in namespace `ns` of the test server.
async fn locker_of(user: &str, ns: &str) -> Locker {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let hosts = base.trim_start_matches("zk://").trim_end_matches('/');
    let url = BackendUrl::parse(&format!("zk://{user}:secret-{user}@{hosts}{ns}")).expect("URL");
    locksmith_zk::connect(&url).await.expect("connect")
}

/// Bug: an attempt whose node's create was refused (`NoAuth`: the lock node is another
/// identity's) left its clean-up armed; the clean-up's own look was refused too, so the attempt
/// stayed on the session's list of leftovers, looked at again every tick, and `shutdown`
/// answered `Unavailable` ("could not be deleted") although nothing had been created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_leaves_nothing_to_clean_up() {
    let ns = format!("/lsacl-{}", uuid::Uuid::new_v4().simple());
    let alice = locker_of("alice", &ns).await;
    let mallory = locker_of("mallory", &ns).await;
    let name = unique_name("acl");
    let held = alice.lock(&name).acquire().await.expect("alice acquires");
    match mallory.lock(&name).try_acquire().await {
        Err(LockError::Denied(_)) => {}
        other => panic!("expected Denied, got {other:?}"),
    }
    mallory
        .shutdown()
        .await
        .expect("mallory's shutdown: nothing was left to delete");
    held.release().await.expect("release");
    alice.shutdown().await.expect("alice's shutdown");
}

/// Bug: the parents of a lock node (and of a guarded key) were created from the top, each
/// create answered on its own; ZooKeeper checks CREATE on a node's parent before it looks whether
/// the node exists, so a namespace that an operator made under a node the app may only read
/// (`/apps` readable, `/apps/billing` the app's) failed every first acquire of a lock, and every
/// guarded create, with `Denied`, although every node needed was there or could be made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_under_a_read_only_node_works() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let admin = common::admin(&base).await;
    let top = format!("/lsro-{}", uuid::Uuid::new_v4().simple());
    let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for path in [top.clone(), format!("{top}/ns"), format!("{top}/ns.data")] {
        admin.create(&path, &[], &open).await.expect("the operator's nodes");
    }
    admin
        .set_acl(&top, zookeeper_client::Acls::anyone_read().as_ref(), None)
        .await
        .expect("the top node read-only");
    let hosts = base.trim_start_matches("zk://").trim_end_matches('/');
    let url = BackendUrl::parse(&format!("zk://{hosts}{top}/ns")).expect("URL");
    let locker = locksmith_zk::connect(&url).await.expect("connect");
    let guard = locker
        .lock(unique_name("ro"))
        .acquire()
        .await
        .expect("the first acquire of a lock");
    let key = guard.data_key("state").expect("a data key");
    guard.guarded().put(&key, "v").await.expect("a guarded create");
    guard.release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
}
