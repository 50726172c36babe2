//! The session lease: one per `connect()`, shared by all locks and waiters of that locker.
//! Against `LOCKSMITH_TEST_ETCD` (minimum TTL 1 s).

mod common;

use std::time::Duration;

use etcd_client::Client;
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{LockError, Locker, LostReason};
use locksmith_etcd::{Layout, DEFAULT_NAMESPACE};

const PATIENCE: Duration = Duration::from_secs(30);

fn url(query: &str) -> BackendUrl {
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    BackendUrl::parse(&common::with_query(&base, query)).expect("LOCKSMITH_TEST_ETCD")
}

async fn locker(query: &str) -> Locker {
    common::init_tracing();
    locksmith_etcd::connect(&url(query)).await.expect("connect")
}

async fn admin() -> Client {
    common::admin(&common::env_url("LOCKSMITH_TEST_ETCD")).await
}

fn prefix(name: &str) -> String {
    Layout::Default {
        namespace: DEFAULT_NAMESPACE.into(),
    }
    .lock_prefix(&LockName::new(name).unwrap())
}

/// The lease a key is attached to.
async fn lease_of(admin: &Client, key: &str) -> i64 {
    let resp = admin.kv_client().get(key, None).await.expect("get");
    resp.kvs().first().expect("key exists").lease()
}

/// All locks of a session share its lease; when the lease is revoked behind its back, every
/// guard's `lost()` fires, releasing them reports NotHeld, and the locker keeps working with a
/// new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_session_lease_fires_lost_everywhere_and_the_session_recovers() {
    let a = locker("ttl=5s").await;
    let admin = admin().await;
    let names: Vec<String> = (0..3).map(|_| unique_name("revoked")).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(a.lock(n).acquire().await.expect("acquire"));
    }
    let lease = lease_of(&admin, &guards[0].lease().holder_id).await;
    for g in &guards {
        assert_eq!(
            lease_of(&admin, &g.lease().holder_id).await,
            lease,
            "one lease per session"
        );
    }
    admin.lease_client().revoke(lease).await.expect("revoke");
    for g in &guards {
        let reason = within(PATIENCE, "lost() after the lease was revoked", g.lost()).await;
        assert!(matches!(reason, LostReason::LeaseGone(_)), "{reason:?}");
    }
    // A new lease serves new locks on the same locker.
    let again = within(
        PATIENCE,
        "acquire after the lease was lost",
        a.lock(&names[0]).acquire(),
    )
    .await
    .expect("acquire");
    assert_ne!(lease_of(&admin, &again.lease().holder_id).await, lease);
    for g in guards {
        assert!(matches!(g.release().await, Err(LockError::NotHeld { .. })));
    }
    again.release().await.expect("release");
}

/// A waiter's key is attached to the session lease, which is kept alive while it waits even
/// when its locker holds nothing: it keeps its place for many TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_its_place_for_longer_than_the_ttl() {
    let name = unique_name("long_wait");
    let (a, b) = (locker("ttl=1s").await, locker("ttl=1s").await);
    let admin = admin().await;
    let held = a.lock(&name).acquire().await.expect("acquire");
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    let queued = within(PATIENCE, "the waiter queued", async {
        loop {
            let keys = common::keys_under(&admin, &prefix(&name)).await;
            if keys.len() == 2 {
                return keys;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(held.ttl() * 4).await;
    assert_eq!(
        common::keys_under(&admin, &prefix(&name)).await,
        queued,
        "the queue changed while waiting"
    );
    held.release().await.expect("release");
    let next = within(PATIENCE, "the waiter after release", waiter)
        .await
        .unwrap()
        .expect("acquire");
    assert_eq!(next.lease().holder_id, queued[1]);
    next.release().await.expect("release");
}

/// When a waiter's lease is revoked while it waits, it queues again with a new lease and still
/// gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_is_revoked_queues_again() {
    let name = unique_name("requeue");
    let (a, b) = (locker("ttl=5s").await, locker("ttl=5s").await);
    let admin = admin().await;
    let held = a.lock(&name).acquire().await.expect("acquire");
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    let waiting_key = within(PATIENCE, "the waiter queued", async {
        loop {
            if let Some(k) = common::keys_under(&admin, &prefix(&name)).await.get(1) {
                return k.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let lease = lease_of(&admin, &waiting_key).await;
    admin.lease_client().revoke(lease).await.expect("revoke");
    within(PATIENCE, "the waiter queued again", async {
        loop {
            let keys = common::keys_under(&admin, &prefix(&name)).await;
            if keys.len() == 2 && keys[1] != waiting_key {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    held.release().await.expect("release");
    let next = within(PATIENCE, "the re-queued waiter", waiter)
        .await
        .unwrap()
        .expect("acquire");
    assert_ne!(lease_of(&admin, &next.lease().holder_id).await, lease);
    next.release().await.expect("release");
}

/// The per-lock TTL is ignored: every lock reports the session's effective TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_reports_the_session_ttl() {
    let a = locker("ttl=3s").await;
    for ttl in [
        Duration::from_millis(100),
        Duration::from_secs(3),
        Duration::from_secs(600),
    ] {
        let g = a
            .lock(unique_name("session_ttl"))
            .ttl(ttl)
            .acquire()
            .await
            .expect("acquire");
        assert_eq!(g.ttl(), Duration::from_secs(3), "requested {ttl:?}");
        g.release().await.expect("release");
    }
}

/// A session whose lease is already gone (expired while the process was paused, revoked by an
/// operator) has ended: shutting the locker down then succeeds instead of failing on the revoke
/// ("requested lease not found").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_after_the_lease_is_gone_succeeds() {
    let a = locker("ttl=5s").await;
    let admin = admin().await;
    let guard = a.lock(unique_name("gone")).acquire().await.expect("acquire");
    let lease = lease_of(&admin, &guard.lease().holder_id).await;
    admin.lease_client().revoke(lease).await.expect("revoke");
    drop(guard.abandon());
    a.shutdown().await.expect("shutdown of a locker whose lease is gone");
}
