//! The node layout on a real ZooKeeper (`LOCKSMITH_TEST_ZK`) is Curator's `InterProcessMutex`
//! layout, and a contender that follows it — here a plain client creating what Curator creates —
//! excludes locksmith and is excluded by it.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use zookeeper_client as zk;

/// `_c_<36-char uuid>-lock-<10 digits>`, as Curator's protected EPHEMERAL_SEQUENTIAL `lock-` nodes.
fn is_curator_lock_node(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, tail) = rest.split_at(36.min(rest.len()));
    uuid.len() == 36
        && uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        && tail
            .strip_prefix("-lock-")
            .is_some_and(|seq| seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_curators_layout_and_exclude_a_curator_contender() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let admin = common::admin(&base).await;
    let locker = common::locker(&base, "session_timeout=5s").await;
    let name = unique_name("curator") + "/a b";
    let lock_name = LockName::new(&name).unwrap();
    let lock_path = common::lock_path(&lock_name);

    // locksmith holds: one ephemeral node of the Curator form, its czxid is the fencing token.
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let holder = guard.lease().holder_id.clone();
    let (parent, node) = holder.rsplit_once('/').expect("a path");
    assert_eq!(parent, lock_path);
    assert!(is_curator_lock_node(node), "{node}");
    let (_, stat) = admin.get_data(&holder).await.expect("holder node");
    assert_eq!(stat.czxid as u64, guard.fencing_token());
    assert_ne!(stat.ephemeral_owner, 0, "the holder node is ephemeral");
    let info = locker.backend().inspect(&lock_name).await.expect("inspect");
    assert_eq!(info.holder.expect("holder").fencing_token, Some(guard.fencing_token()));

    // A Curator contender (what InterProcessMutex creates) queues behind it...
    let curator_prefix = format!("{lock_path}/_c_{}-lock-", "0f0f0f0f-1111-4222-8333-444444444444");
    let ephemeral_sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, seq) = admin
        .create(&curator_prefix, b"10.0.0.1", &ephemeral_sequential)
        .await
        .expect("curator node");
    let curator_node = format!("{curator_prefix}{seq}");
    assert_eq!(
        common::contenders(&admin, &lock_name).await,
        vec![holder.clone(), curator_node.clone()]
    );
    guard.release().await.expect("release");

    // ... and, first in line now, holds the lock: locksmith waits for it.
    assert!(
        locker.lock(&name).try_acquire().await.expect("try").is_none(),
        "locksmith jumped a Curator holder"
    );
    let waiter = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.lock(&name).acquire().await }
    });
    within(
        Duration::from_secs(30),
        "locksmith queueing behind the Curator holder",
        async {
            while common::contenders(&admin, &lock_name).await.len() != 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "locksmith took a lock a Curator contender holds");
    let (_, curator_stat) = admin.get_data(&curator_node).await.expect("curator node");
    admin
        .delete(&curator_node, None)
        .await
        .expect("the Curator holder releases");
    let next = within(Duration::from_secs(30), "locksmith after the Curator holder", waiter)
        .await
        .expect("task")
        .expect("acquire");
    assert!(next.fencing_token() > curator_stat.czxid as u64);
    next.release().await.expect("release");
    assert!(common::contenders(&admin, &lock_name).await.is_empty());
}
