//! A primary and its standby (`postgres://…@primary,standby/db`): a URL of several hosts insists
//! on a synchronous standby (or says `replication=async`), and when the primary dies and its
//! standby is promoted, the holder keeps its lock, the waiter keeps its place, nobody else gets
//! the lock, and fencing tokens go on growing: every grant was on the standby before anyone was
//! told of it. Against `scripts/backends`' `postgres-ha` pair (`up all`), whose failover kills
//! the primary's processes at once and promotes the standby. A test binary of its own: the
//! failover would disturb other tests.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockError, Locker};

/// The primary and standby pair's URL (`scripts/backends up all` exports it).
fn ha_url() -> String {
    std::env::var("LOCKSMITH_TEST_POSTGRES_HA")
        .expect("LOCKSMITH_TEST_POSTGRES_HA is not set: run `eval \"$(scripts/backends up all)\"` first")
}

/// `url` (a `postgres://` URL without options) with a schema of its own and `options`.
fn with_schema(url: &str, options: &str) -> String {
    format!("{url}?schema=t_{:016x}&{options}", rand::random::<u64>())
}

async fn connect(url: &str) -> locksmith_core::Result<Locker> {
    locksmith_postgres::connect(&BackendUrl::parse(url).unwrap()).await
}

/// The tests that stop, kill or promote a member of the pair take turns.
static PAIR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn several_hosts_need_a_synchronous_standby_unless_told_otherwise() {
    // The single test server has no standby. A second host (nothing listens there) makes the
    // URL one of a primary and its standbys.
    let single = common::server_url();
    let (head, db) = single.rsplit_once('/').unwrap();
    let two = format!("{head},127.0.0.1:1/{db}");
    let url = with_schema(&two, "connect_timeout=2s");
    let err = connect(&url)
        .await
        .expect_err("a primary without a synchronous standby was accepted");
    assert!(matches!(err, LockError::Protocol(_)), "{err:?}");
    assert!(err.to_string().contains("no synchronous standby"), "{err}");

    // Told that a failover may lose grants, it works.
    let url = with_schema(&two, "connect_timeout=2s&replication=async");
    let locker = connect(&url).await.expect("replication=async");
    let guard = locker.lock(unique_name("async")).acquire().await.unwrap();
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A first host that accepts connections and never answers (a primary cut off in silence, or
/// hung) gets its share of the connect timeout, not all of it: the next host is tried in time.
#[tokio::test]
async fn a_silent_first_host_leaves_time_for_the_next() {
    let single = common::server_url();
    let url = BackendUrl::parse(&single).unwrap();
    let silent = Proxy::start(&url.hosts[0].to_addr(5432)).await;
    silent.set(Mode::FREEZE);
    let (head, db) = single.rsplit_once('/').unwrap();
    let (scheme_and_user, host) = head.rsplit_once('@').unwrap();
    let two = format!("{scheme_and_user}@{},{host}/{db}", silent.addr());
    let url = with_schema(&two, "connect_timeout=4s&replication=async");
    let locker = connect(&url)
        .await
        .expect("the second host, after the first one's share of the time");
    let guard = locker.lock(unique_name("second-host")).acquire().await.unwrap();
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_keeps_the_lock_its_queue_and_its_tokens() {
    let _pair = PAIR.lock().await;
    let url = with_schema(&ha_url(), "ttl=8s&request_timeout=2s&connect_timeout=2s");
    let (a, b) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());
    let name = unique_name("failover");

    let held = a.lock(&name).acquire().await.unwrap();
    let first = held.fencing_token();
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            let guard = b.lock(&name).timeout(Duration::from_secs(60)).acquire().await.unwrap();
            let granted_at = tokio::time::Instant::now();
            let token = guard.fencing_token();
            guard.release().await.unwrap();
            (token, granted_at)
        }
    });
    locksmith_core::conformance::until_waiters(&a, &name, 1, Duration::from_secs(10)).await;

    // Killed at once (no shutdown that would flush anything more), the standby promoted.
    let promoted = tokio::task::spawn_blocking(|| backends(&["failover", "postgres-ha"]))
        .await
        .unwrap();
    assert!(promoted.contains("pg-ha"), "failover printed {promoted:?}");

    // The new primary has the grant and the queue: the holder's renewals go through there.
    let c = connect(&url).await.expect("connecting to the promoted standby");
    let other = c
        .lock(&name)
        .try_acquire()
        .await
        .expect("try_acquire after the failover");
    assert!(other.is_none(), "the lock was free on the promoted standby");
    // Longer than the TTL: the lease lives on through renewals on the new primary.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(held.lost_reason(), None, "the holder lost its lock to the failover");
    assert!(!waiter.is_finished(), "the waiter was granted while the holder held");

    let released_at = tokio::time::Instant::now();
    held.release().await.expect("released on the new primary");
    let (token, granted_at) = within(Duration::from_secs(30), "the waiter's grant", waiter)
        .await
        .unwrap();
    // The waiter queued on the old primary has followed the promotion (its LISTEN and steps on
    // the new one): the release wakes it within a request timeout (2 s), not at its next retry.
    let after_release = granted_at.saturating_duration_since(released_at);
    eprintln!("granted {after_release:?} after the release on the promoted standby");
    assert!(
        after_release <= Duration::from_secs(3),
        "the waiter was granted {after_release:?} after the release on the promoted standby"
    );
    assert!(
        token > first,
        "token {token} after {first}: tokens must survive the failover"
    );
    let after = c.lock(&name).acquire().await.unwrap();
    assert!(after.fencing_token() > token, "tokens went back after the failover");
    after.release().await.unwrap();
    for locker in [a, b, c] {
        locker.shutdown().await.unwrap();
    }
}

/// `replication=async` does not wait for the standby (`synchronous_commit = local`), even on a
/// primary that names a synchronous one: with the standby stopped, its grants and renewals go on,
/// while a locker of the default `replication=sync` waits for the standby and times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_async_commits_do_not_wait_for_the_standby() {
    let _pair = PAIR.lock().await;
    let options = "ttl=2s&request_timeout=1s&connect_timeout=2s";
    let sync_url = with_schema(&ha_url(), options);
    // The same schema: the tables are made (with the standby running) by the sync locker.
    let sync = connect(&sync_url).await.unwrap();
    let asynchronous = connect(&format!("{sync_url}&replication=async")).await.unwrap();
    let primary = tokio::task::spawn_blocking(|| backends(&["leader", "postgres-ha"]))
        .await
        .unwrap();
    let standby = if primary == "pg-ha1" { "pg-ha2" } else { "pg-ha1" };
    backends(&["pause", standby]);
    let resume = OnDrop::resume(standby);

    let held = within(
        Duration::from_secs(5),
        "replication=async: a grant with the standby stopped",
        asynchronous.lock(unique_name("async")).acquire(),
    )
    .await
    .expect("replication=async waited for the stopped standby");
    // Longer than the TTL: its renewals do not wait either.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        held.lost_reason(),
        None,
        "replication=async: the renewals waited for the standby"
    );
    let waited = sync.lock(unique_name("sync")).try_acquire().await;
    assert!(
        matches!(waited, Err(LockError::Unavailable { .. }) | Err(LockError::Timeout(_))),
        "replication=sync answered without its standby: {:?}",
        waited.map(|g| g.is_some())
    );

    drop(resume);
    held.release().await.unwrap();
    for locker in [sync, asynchronous] {
        locker.shutdown().await.unwrap();
    }
}
