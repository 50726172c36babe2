//! Connections that go silent without closing (a flow a NAT, firewall or cloud load balancer
//! dropped, while new connections still work): the locker notices a request that got no answer,
//! and opens new connections. A proxy between a locker and the server freezes the connections
//! open at one moment and forwards the new ones (`Mode::FreezeExisting`).

mod common;

use std::time::Duration;

use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::sockets::{self, local_ports_connected_to};
use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::{LockGuard, Locker};
use tokio::task::JoinHandle;

/// The TTL of the locks here.
const TTL: Duration = Duration::from_secs(3);

/// A proxy in front of the test server, and a locker behind it (`response_timeout=500ms`).
async fn proxied() -> (Proxy, Locker) {
    let proxy = Proxy::start(&common::redis_upstream()).await;
    let locker = common::locker(&format!("redis://{}?response_timeout=500ms", proxy.addr())).await;
    (proxy, locker)
}

/// `locker`'s acquire of `name` (lease [`TTL`], waiting at most `timeout`), in a task.
fn spawn_acquire(locker: &Locker, name: &str, timeout: Duration) -> JoinHandle<locksmith_core::Result<LockGuard>> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move { locker.lock(&name).ttl(TTL).timeout(timeout).acquire().await })
}

/// Lock `name` of `locker`, granted after a wait behind `direct`'s holder: the locker's pub/sub
/// connection exists from then on.
async fn granted_after_a_wait(locker: &Locker, direct: &Locker, name: &str) -> LockGuard {
    let held = direct.lock(name).ttl(TTL).acquire().await.expect("acquire");
    let waiter = spawn_acquire(locker, name, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    within(Duration::from_secs(5), "the grant after a wait", waiter)
        .await
        .unwrap()
        .expect("acquire")
}

/// Bug: a request that got no answer left the connection in place (the client reconnects only
/// a connection that failed), so every later request, renewals included, waited on the silent
/// connection for its timeout: every lease of the locker was lost one TTL later, and nothing
/// could be acquired again until the kernel gave the connection up (~15 minutes). Now the
/// connections are replaced, and the lease lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_a_silent_connection() {
    let (proxy, locker) = proxied().await;
    let guard = locker
        .lock(unique_name("silent"))
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    proxy.set(Mode::FreezeExisting);
    tokio::select! {
        reason = guard.lost() => panic!("lost: {reason}"),
        _ = tokio::time::sleep(TTL * 2) => {}
    }
    assert!(guard.is_held(), "held for two TTLs");
    guard.release().await.expect("release");
}

/// The same for a waiter: its subscription and its steps went over connections gone silent. A
/// lock released by another client must still reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_after_its_connections_went_silent() {
    let (proxy, locker) = proxied().await;
    let direct = common::locker(&common::redis_url()).await;
    // One contended acquire first, so that the pub/sub connection exists too.
    let name = unique_name("silent_waiter");
    let first = granted_after_a_wait(&locker, &direct, &name).await;
    first.release().await.expect("release");

    let held = direct.lock(&name).ttl(TTL).acquire().await.expect("acquire");
    proxy.set(Mode::FreezeExisting);
    let waiting = spawn_acquire(&locker, &name, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(12), "the waiter's grant", waiting)
        .await
        .unwrap()
        .expect("the waiter acquires over new connections");
    guard.release().await.expect("release");
}

/// A waiter queued before its connections went silent: its wake-up was published on a pub/sub
/// connection that no longer delivered anything, and nothing looked at that connection (only a
/// new `SUBSCRIBE` would have timed out), so it waited for its heartbeat step (a third of
/// `waiter_ttl`, 10 s here) or the holder's expiry (14 s). Now the pub/sub connection is probed
/// with `PING` while someone listens: the waiter subscribes again on a new connection and takes
/// its step there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_hears_of_the_release_after_its_connections_went_silent() {
    let (proxy, _) = proxied().await;
    let locker = common::locker(&format!(
        "redis://{}?response_timeout=500ms&waiter_ttl=30s",
        proxy.addr()
    ))
    .await;
    let direct = common::locker(&common::redis_url()).await;
    let name = unique_name("queued_silent");
    // A long lease: the waiter's own timer (the holder's expiry) does not step for it.
    let held = direct
        .lock(&name)
        .ttl(Duration::from_secs(14))
        .acquire()
        .await
        .expect("acquire");
    let waiting = spawn_acquire(&locker, &name, Duration::from_secs(20));
    until_waiters(&direct, &name, 1, Duration::from_secs(5)).await;
    proxy.set(Mode::FreezeExisting);
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(8), "the queued waiter's grant", waiting)
        .await
        .unwrap()
        .expect("the waiter acquires over new connections");
    guard.release().await.expect("release");
}

/// A connection replaced because a request on it got no answer is closed at once, its socket
/// with it (and with a reset: `closed_connections.rs`): not left open while a task waits for the
/// answers, with TCP delivering the requests whenever the network lets them through, after the
/// clean-up that went over a new connection. Every connection of a locker behind a proxy goes
/// silent (commands and pub/sub); within a few response timeouts none of its sockets is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_given_up_on_is_closed_at_once() {
    let (proxy, locker) = proxied().await;
    let proxy_port: u16 = proxy.addr().rsplit(':').next().unwrap().parse().unwrap();
    let direct = common::locker(&common::redis_url()).await;
    // A contended acquire, so that the pub/sub connection exists too, and a lock held (renewed).
    let _held = granted_after_a_wait(&locker, &direct, &unique_name("given_up")).await;
    let before = local_ports_connected_to(proxy_port);
    assert!(before.len() >= 2, "the commands' and pub/sub connections: {before:?}");
    proxy.set(Mode::FreezeExisting);
    let _ = locker.lock(unique_name("given_up_2")).try_acquire().await;
    sockets::until_closed(proxy_port, &before, Duration::from_secs(15)).await;
}
