//! A hand-over to the waiter right behind the holder costs the waiter no request: the release's
//! delete reaches its watch, and nobody can be between the two (keys are created with ever larger
//! revisions), so the lock is its own at once. A waiter that queued behind other waiters looks at
//! the queue again (one transaction), as it cannot know who left before its predecessor. Counted
//! on the client ([`locksmith_etcd::EtcdBackend::stats`]), so other users of the shared test
//! server cannot disturb the count.

mod common;

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::mutex::granted_one_at_a_time;
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;
use locksmith_etcd::{Config, EtcdBackend};

async fn backend() -> Arc<EtcdBackend> {
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let url = BackendUrl::parse(&common::with_query(&base, "ttl=5s")).expect("url");
    Arc::new(
        EtcdBackend::connect(Config::from_url(&url).expect("config"))
            .await
            .expect("connect"),
    )
}

/// Waits until `locker` sees `n` waiters on `name`, then a little more for the last one's watch
/// and confirmation.
async fn until_waiting(locker: &Locker, name: &str, n: usize) {
    locksmith_core::conformance::until_waiters(locker, name, n, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_right_behind_the_holder_takes_over_without_a_request() {
    common::init_tracing();
    let holder = Locker::from_arc(backend().await);
    let waiting = backend().await;
    let waiter = Locker::from_arc(waiting.clone());
    let name = unique_name("handover");

    let held = holder.lock(&name).acquire().await.unwrap();
    let queued = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.clone());
        async move { waiter.lock(&name).timeout(Duration::from_secs(30)).acquire().await }
    });
    until_waiting(&holder, &name, 1).await;

    let token = held.fencing_token();
    let before = waiting.stats();
    held.release().await.unwrap();
    let guard = within(Duration::from_secs(10), "the hand-over", queued)
        .await
        .unwrap()
        .unwrap();
    let after = waiting.stats();
    assert!(guard.fencing_token() > token, "tokens must grow");
    assert_eq!(
        after.transactions, before.transactions,
        "the waiter sent a transaction after the release (it looked at the queue again)"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_other_waiters_looks_again_and_keeps_its_turn() {
    common::init_tracing();
    let holder = Locker::from_arc(backend().await);
    let (first, second) = (Locker::from_arc(backend().await), Locker::from_arc(backend().await));
    let name = unique_name("handover-queue");

    let held = holder.lock(&name).acquire().await.unwrap();
    let spawn = |locker: Locker| {
        let name = name.clone();
        tokio::spawn(async move {
            let guard = locker
                .lock(&name)
                .timeout(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            let token = guard.fencing_token();
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await.unwrap();
            token
        })
    };
    let a = spawn(first.clone());
    until_waiting(&holder, &name, 1).await;
    let b = spawn(second.clone());
    until_waiting(&holder, &name, 2).await;
    let token = held.fencing_token();
    held.release().await.unwrap();
    let ta = within(Duration::from_secs(10), "the first waiter", a).await.unwrap();
    let tb = within(Duration::from_secs(10), "the second waiter", b).await.unwrap();
    assert!(token < ta && ta < tb, "FIFO and tokens: {token}, {ta}, {tb}");
}

/// Bug: the delete event of the key ahead granted the lock to a waiter whose own key had been
/// deleted meanwhile, while a contender that queued after that deletion, behind the same key,
/// was granted it too: two holders, until the first one's held-key watch (opened 100 ms after a
/// grant) reported its key gone. Now the waiter's own key is watched while it waits: it queues
/// again (and the two hold one at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_was_deleted_is_not_granted() {
    let harness = common::EtcdHarness::plain().await;
    let admin = common::admin(&common::env_url("LOCKSMITH_TEST_ETCD")).await;
    let layout = harness.layout().clone();
    locksmith_core::conformance::mutex::a_waiter_deleted_behind_back_is_not_granted(&harness, |name| async move {
        let prefix = layout.lock_prefix(&name);
        let waiter = common::keys_under(&admin, &prefix).await.remove(1);
        let deleted = admin
            .kv_client()
            .delete(waiter, None)
            .await
            .expect("delete the waiter's key");
        assert_eq!(deleted.deleted(), 1);
    })
    .await;
}

/// An operator clears a lock (`etcdctl del --prefix`): the holder's key and the key of the
/// waiter right behind it go in one transaction, and etcd reports each deletion to its own
/// watch, at one revision, in no set order. The waiter must not take its predecessor's deletion
/// for its turn while its own key's deletion waits behind it in the stream: a newcomer that joins
/// the emptied queue holds too. Five rounds; on the old code some were two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_cleared_at_once_is_not_handed_to_its_waiter() {
    let harness = common::EtcdHarness::plain().await;
    let admin = common::admin(&common::env_url("LOCKSMITH_TEST_ETCD")).await;
    for round in 0..5 {
        let (holder, waiter, newcomer) = (backend().await, backend().await, backend().await);
        let (holder, waiter, newcomer) = (
            Locker::from_arc(holder),
            Locker::from_arc(waiter),
            Locker::from_arc(newcomer),
        );
        let name = unique_name("cleared");
        let held = holder.lock(&name).acquire().await.unwrap();
        let spawn_acquire = |locker: &Locker| {
            let (locker, name) = (locker.clone(), name.clone());
            tokio::spawn(async move { locker.lock(&name).timeout(Duration::from_secs(30)).acquire().await })
        };
        let first = spawn_acquire(&waiter);
        until_waiting(&holder, &name, 1).await;
        let prefix = harness.layout().lock_prefix(&held.lease().name);
        let options = etcd_client::DeleteOptions::new().with_prefix();
        let cleared = admin.kv_client().delete(prefix, Some(options)).await.unwrap();
        assert_eq!(
            cleared.deleted(),
            2,
            "round {round}: the holder's and the waiter's keys"
        );
        let second = spawn_acquire(&newcomer);
        let case = format!("round {round}: the waiter and the newcomer of a lock cleared at once");
        granted_one_at_a_time(Duration::from_secs(10), [first, second], &case).await;
        drop(held);
    }
}
