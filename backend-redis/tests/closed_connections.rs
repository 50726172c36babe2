//! Connections the server closed while the client was not using them: an operator's `CLIENT
//! KILL`, a sentinel reconfiguring a server (it kills that server's clients), an idle `timeout`,
//! a server restarted between two requests. The client only finds out with its next request on
//! that connection, which fails at once ("broken pipe") without reaching the server.
//!
//! A release is often that next request: a lock held for a while under replica confirmation
//! renews over another connection, so the one a release goes over can sit idle for as long as
//! the lock is held. Such a release must still release, sent again on the reconnected
//! connection, not fail with `Unavailable` and leave the lock held until its TTL. (Found in a
//! full test run: the Sentinel failover test's release failed once this way.) So must a guarded
//! write.
//!
//! The tests connect as a user of their own, so that `CLIENT KILL USER` closes their
//! connections only, on the shared test server.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::Locker;

/// A locker logged in as a user of its own (every right), so that `CLIENT KILL USER` closes its
/// connections only.
struct OwnUser {
    user: String,
    holder: Locker,
}

impl OwnUser {
    async fn new(tag: &str) -> OwnUser {
        let user = format!("locksmith-{}", unique_name(tag).replace('/', "-"));
        let holder = common::locker(&common::url_as_user(&user, "closed-pass", &[], "").await).await;
        OwnUser { user, holder }
    }

    /// Closes every connection of the user (commands and pub/sub), as `CLIENT KILL` does, and
    /// waits long enough for the client to read the close: its next request meets a dead
    /// connection.
    async fn close_connections(&self) {
        let mut admin = common::admin(&common::redis_url()).await;
        let closed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&self.user)
            .query_async(&mut admin)
            .await
            .expect("CLIENT KILL USER");
        assert!(closed >= 1, "the holder had no connection to close");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    async fn delete(self) {
        let mut admin = common::admin(&common::redis_url()).await;
        let _: redis::RedisResult<i64> = redis::cmd("ACL")
            .arg("DELUSER")
            .arg(&self.user)
            .query_async(&mut admin)
            .await;
    }
}

/// Long enough that no renewal goes out (and meets the closed connection first) before the
/// release; at most the test server's `restart_delay`.
const TTL: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_connection_the_server_closed_releases() {
    common::init_logs();
    let own = OwnUser::new("closed").await;
    let observer = common::locker(&common::redis_url()).await;
    let (mutex, semaphore) = (unique_name("closed-mutex"), unique_name("closed-semaphore"));
    let held = own.holder.lock(&mutex).ttl(TTL).acquire().await.expect("acquire");
    let permit = own
        .holder
        .semaphore(&semaphore, 2)
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire a permit");

    // A guarded compare-and-set, whose second run would answer differently if the first ran.
    own.close_connections().await;
    let key = format!("/guarded/{}", unique_name("closed-key"));
    let set = held.guarded().compare_and_set(&key, None, "written once").await;
    assert!(set.expect("a guarded write on a connection the server closed"));
    assert_eq!(
        held.guarded().get(&key).await.expect("read"),
        Some(b"written once".to_vec())
    );

    own.close_connections().await;
    held.release()
        .await
        .expect("a release on a connection the server closed");
    permit
        .release()
        .await
        .expect("a permit's release on a connection the server closed");

    let info = observer.inspect(&mutex).await.expect("inspect");
    assert!(info.holder.is_none(), "the lock is still held: {info:?}");
    // Both permits are free: a leaked one would leave the observer one.
    let mut permits = Vec::new();
    for _ in 0..2 {
        let permit = observer
            .semaphore(&semaphore, 2)
            .try_acquire()
            .await
            .expect("try a permit");
        permits.push(permit.expect("a permit is still held by the closed connection's holder"));
    }
    own.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_on_a_connection_the_server_closed_releases() {
    common::init_logs();
    let own = OwnUser::new("closed-drop").await;
    let observer = common::locker(&common::redis_url()).await;
    let name = unique_name("closed-drop");
    let held = own.holder.lock(&name).ttl(TTL).acquire().await.expect("acquire");

    own.close_connections().await;
    // The guard's drop releases in the background: the lock is free well before its TTL.
    drop(held);
    within(Duration::from_secs(10), "the dropped guard's release", async {
        while observer.inspect(&name).await.expect("inspect").holder.is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    own.delete().await;
}

/// Every connection of a locker (commands, replica confirmation, pub/sub) closes with a reset
/// (`SO_LINGER` 0): what it has not delivered when it is closed is dropped, not sent on later. A
/// connection is closed when a request on it got no answer in time; a waiter's queue step still
/// in the network then (a partition) would otherwise reach the server when the network heals,
/// after the `LEAVE` that the waiter, giving up, sent over a new connection, and queue it again,
/// to be granted a lock nobody uses. Checked on the sockets themselves: this process's sockets
/// whose local ports the server lists for the locker's own user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_closes_with_a_reset() {
    let own = OwnUser::new("linger").await;
    let other = common::locker(&common::redis_url()).await;
    let name = unique_name("linger");
    let held = other.lock(&name).acquire().await.expect("acquire");
    let waited = own
        .holder
        .lock(&name)
        .timeout(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(waited.is_err(), "the lock was held");
    let mine = own
        .holder
        .lock(unique_name("linger-own"))
        .acquire()
        .await
        .expect("acquire");
    let mut admin = common::admin(&common::redis_url()).await;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .expect("CLIENT LIST");
    let ports: Vec<u16> = clients
        .lines()
        .filter(|line| line.split(' ').any(|field| field == format!("user={}", own.user)))
        .filter_map(|line| {
            let addr = line.split(' ').find_map(|field| field.strip_prefix("addr="))?;
            addr.rsplit(':').next()?.parse().ok()
        })
        .collect();
    assert!(
        ports.len() >= 2,
        "the locker's connections (commands and pub/sub): {ports:?}"
    );
    let lingers = locksmith_core::conformance::sockets::lingers_of_local_ports(&ports);
    assert_eq!(
        lingers.len(),
        ports.len(),
        "sockets of the ports {ports:?}: {lingers:?}"
    );
    locksmith_core::conformance::sockets::assert_each_closes_with_a_reset(&lingers);
    mine.release().await.expect("release");
    held.release().await.expect("release");
    own.delete().await;
}
