//! Lost detection across a reconnection within the same session (`LOCKSMITH_TEST_ZK`).
//!
//! Renewal does not look at the held nodes (it only confirms the session), so a node deleted behind
//! the holder's back is noticed only through the data watch set on it when the lock was granted.
//! These tests show that this watch survives a lost connection: `zookeeper-client` re-registers
//! its watches when it reconnects within the same session (`SetWatches` with the last zxid seen),
//! and the server reports a deletion that happened while the client was away.
//!
//! The holder reaches the server through a TCP proxy run by the test, which can cut every
//! connection and refuse new ones for a while: a network cut, without touching the shared server.
//! The cut is far shorter than the session timeout, so the session survives it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{LockGuard, LostReason};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The holder's session timeout: long enough that a cut of [`CUT`] loses nothing.
const SESSION_TIMEOUT: Duration = Duration::from_secs(8);
/// How long the proxy refuses connections.
const CUT: Duration = Duration::from_millis(600);
/// How long the client gets to reconnect after the cut (its back-off is at most a few seconds).
const RECONNECT: Duration = Duration::from_secs(3);

/// A TCP proxy in front of the ZooKeeper server that can cut all connections.
struct Proxy {
    port: u16,
    open: Arc<AtomicBool>,
    epoch: watch::Sender<u64>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let open = Arc::new(AtomicBool::new(true));
        let (epoch, _) = watch::channel(0u64);
        let (accepting, cuts) = (open.clone(), epoch.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let upstream = upstream.clone();
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {} // both sockets are dropped: the connection is cut
                    }
                });
            }
        });
        Proxy { port, open, epoch }
    }

    /// Cuts every connection and refuses new ones.
    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Accepts connections again.
    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// The ZooKeeper server behind `LOCKSMITH_TEST_ZK`, a proxy in front of it, and a lock held through
/// the proxy.
async fn hold_through_proxy(test: &str) -> (Proxy, zookeeper_client::Client, locksmith_core::Locker, LockGuard) {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let url = BackendUrl::parse(&base).expect("test URL");
    let upstream = url.hosts.first().expect("a host").to_addr(2181);
    let proxy = Proxy::start(upstream).await;
    let admin = common::admin(&base).await;
    let locker = common::locker(
        &format!("zk://127.0.0.1:{}", proxy.port),
        &format!("session_timeout={}ms", SESSION_TIMEOUT.as_millis()),
    )
    .await;
    let guard = within(
        Duration::from_secs(20),
        "acquire",
        locker.lock(unique_name(test)).acquire(),
    )
    .await
    .expect("acquire");
    (proxy, admin, locker, guard)
}

/// The lost reason must come from the watch (the node was deleted), not from a failed renewal.
fn assert_deleted(reason: &LostReason) {
    match reason {
        LostReason::LeaseGone(why) if why.contains("deleted") => {}
        other => panic!("expected the watch to report the deletion, got {other:?}"),
    }
}

/// The watch set when the lock was granted is still there after a reconnection: a later deletion
/// fires `lost()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_after_a_reconnect_fires_lost() {
    let (proxy, admin, _locker, guard) = hold_through_proxy("reconnect-then-delete").await;
    proxy.cut();
    tokio::time::sleep(CUT).await;
    proxy.restore();
    tokio::time::sleep(RECONNECT).await;
    assert!(guard.is_held(), "lost across a short cut: {:?}", guard.lost_reason());

    admin
        .delete(&guard.lease().holder_id, None)
        .await
        .expect("delete the holder's node");
    let reason = within(Duration::from_secs(10), "lost() after the deletion", guard.lost()).await;
    assert_deleted(&reason);
}

/// A node deleted while the holder was disconnected is reported once it reconnects (the server
/// answers the re-registered watch with the deletion it missed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_while_disconnected_fires_lost_after_the_reconnect() {
    let (proxy, admin, _locker, guard) = hold_through_proxy("delete-while-cut").await;
    proxy.cut();
    tokio::time::sleep(CUT / 3).await; // the proxy has dropped the holder's connection
    admin
        .delete(&guard.lease().holder_id, None)
        .await
        .expect("delete the holder's node");
    tokio::time::sleep(CUT).await;
    assert!(guard.is_held(), "the holder cannot have heard of the deletion yet");
    proxy.restore();
    let reason = within(SESSION_TIMEOUT, "lost() after reconnecting", guard.lost()).await;
    assert_deleted(&reason);
}

/// An acquire cancelled while its create's answer is held up (the server applied it; the answer
/// never reaches the client) must not leave its node behind when the connection is then lost: the
/// listing that looks for the node by its protected prefix fails with the connection, and is done
/// again once the session reconnects. Before, that failure gave up ("it goes with the session"),
/// and the node, owned by a session that lived on, blocked the lock until the process ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_create_whose_answer_was_lost_leaves_no_node() {
    use locksmith_core::conformance::proxy::{Mode, Proxy};

    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let upstream = BackendUrl::parse(&base).expect("test URL").hosts[0].to_addr(2181);
    let proxy = Proxy::start(&upstream).await;
    let admin = common::admin(&base).await;
    // Session 4 s: the client declares its connection lost after 1.6 s without an answer, and the
    // server keeps the session (the client's pings still reach it).
    let a = common::locker(
        &format!("zk://{}", proxy.addr()),
        "session_timeout=4s&request_timeout=1s",
    )
    .await;
    let b = common::locker(&base, "session_timeout=4s").await;
    let name = unique_name("lost_create_answer");
    let key = locksmith_core::driver::LockName::new(&name).expect("name");

    // The lock's node exists (the next attempt sends only its contender's create).
    a.lock(&name)
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    proxy.set(Mode::Freeze {
        to_server: false,
        to_client: true,
    });
    let cancelled = a.lock(&name).timeout(Duration::from_millis(300)).acquire().await;
    assert!(cancelled.is_err(), "{:?}", cancelled.map(|g| g.fencing_token()));
    tokio::time::sleep(Duration::from_millis(2500)).await; // the connection is declared lost
    proxy.set(Mode::Forward); // the session reconnects

    let empty = within(Duration::from_secs(10), "the cancelled node's removal", async {
        loop {
            let left = common::contenders(&admin, &key).await;
            if left.is_empty() {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(empty.is_empty());
    let guard = b
        .lock(&name)
        .try_acquire()
        .await
        .expect("try")
        .expect("the lock is free");
    guard.release().await.expect("release");
    a.shutdown().await.expect("shutdown");
}

/// A `shutdown` whose deletes get no answer (the connection stalls, the session lives on) does not
/// forget the nodes: the session deletes them once it has reconnected, while the locker lives on
/// (a process that carries on after the failed shutdown keeps its session alive). The node is an
/// abandoned lease's: no release of lockcore's races the shutdown's delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_a_stalled_shutdown_could_not_delete_go_after_reconnection() {
    use locksmith_core::conformance::proxy::{Mode, Proxy};

    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let upstream = BackendUrl::parse(&base).expect("test URL").hosts[0].to_addr(2181);
    let proxy = Proxy::start(&upstream).await;
    let a = common::locker(
        &format!("zk://{}", proxy.addr()),
        "session_timeout=4s&request_timeout=500ms",
    )
    .await;
    let b = common::locker(&base, "session_timeout=4s").await;
    let name = unique_name("stalled_shutdown");
    let _abandoned = a.lock(&name).acquire().await.expect("acquire").abandon();
    // The connection in use forwards nothing from here on; a new one works.
    proxy.set(Mode::FreezeExisting);
    let shutdown = a.shutdown().await;
    assert!(
        matches!(shutdown, Err(locksmith_core::LockError::Unavailable { .. })),
        "expected the stalled shutdown to fail, got {shutdown:?}"
    );
    // The client declares the stalled connection lost (after 2/5 of the session timeout) and
    // reconnects through a new one, within the session timeout: the session and its node live.
    let guard = within(
        Duration::from_secs(10),
        "the lock after the stalled shutdown's session reconnected",
        b.lock(&name).acquire(),
    )
    .await
    .expect("acquire");
    guard.release().await.expect("release");
    drop(a);
    b.shutdown().await.expect("shutdown");
}

/// A waiter whose own node and the node ahead of it were both deleted while it was disconnected
/// (an operator cleared the lock) is not handed the lock when it reconnects: a newcomer queued
/// meanwhile holds it. The server reports both deletions at the reconnection (`SetWatches`), in
/// the order the client listed its watches, so the waiter must not take the one of the node
/// ahead as the queue less that node. The wrong order reaches the waiter only when its task runs
/// between the client's two dispatches (a few percent of the time here), so each round clears
/// ten locks at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cleared_while_disconnected_is_not_granted_at_the_reconnect() {
    const LOCKS: usize = 10;
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let url = BackendUrl::parse(&base).expect("test URL");
    let upstream = url.hosts.first().expect("a host").to_addr(2181);
    let proxy = Proxy::start(upstream).await;
    let admin = common::admin(&base).await;
    // A long session: the waiters' watches are younger than a sixth of it at the reconnection,
    // where the hand-over without a listing applies.
    let options = "session_timeout=40s";
    let waiting_side = common::locker(&format!("zk://127.0.0.1:{}", proxy.port), options).await;
    let holding_side = common::locker(&base, options).await;
    for round in 0..6 {
        let names: Vec<String> = (0..LOCKS)
            .map(|i| unique_name(&format!("cleared-while-cut-{round}-{i}")))
            .collect();
        let lock_names: Vec<LockName> = names.iter().map(|n| LockName::new(n).unwrap()).collect();
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        for name in &names {
            holders.push(holding_side.lock(name).acquire().await.expect("acquire"));
            let (locker, name) = (waiting_side.clone(), name.clone());
            waiters.push(tokio::spawn(async move {
                locker.lock(name).timeout(Duration::from_secs(30)).acquire().await
            }));
        }
        let mut queues = Vec::new();
        for lock in &lock_names {
            queues.push(queue_of(&admin, lock, |q| q.len() == 2).await);
        }
        proxy.cut();
        tokio::time::sleep(CUT / 3).await;
        // Every node goes (the holder's and the waiter's), and a newcomer takes each lock.
        for node in queues.iter().flatten() {
            admin.delete(node, None).await.expect("delete");
        }
        let mut newcomers = Vec::new();
        for name in &names {
            let newcomer = holding_side.lock(name).try_acquire().await.unwrap();
            newcomers.push(newcomer.expect("the lock is free"));
        }
        proxy.restore();
        // Each waiter reconnects and queues again behind the newcomer; it must not be granted.
        for (i, lock) in lock_names.iter().enumerate() {
            let waiter = &waiters[i];
            let queued = within(Duration::from_secs(10), "the waiter's reconnection", async {
                loop {
                    if waiter.is_finished() || common::contenders(&admin, lock).await.len() == 2 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
            queued.await;
            assert!(
                !waiter.is_finished(),
                "round {round}, lock {i}: a waiter cleared while disconnected was granted beside the newcomer"
            );
        }
        for newcomer in newcomers {
            newcomer.release().await.unwrap();
        }
        for waiter in waiters {
            let guard = within(Duration::from_secs(10), "the waiter's grant", waiter).await;
            guard.unwrap().expect("acquire").release().await.unwrap();
        }
        drop(holders); // lost with their nodes
    }
}

/// The queue of mutex `lock` once `ready` holds for it.
async fn queue_of(admin: &zookeeper_client::Client, lock: &LockName, ready: impl Fn(&[String]) -> bool) -> Vec<String> {
    for _ in 0..500 {
        let queue = common::contenders(admin, lock).await;
        if ready(&queue) {
            return queue;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the queue of {lock:?} never got ready: {:?}",
        common::contenders(admin, lock).await
    );
}
