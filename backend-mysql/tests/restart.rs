//! MariaDB restarted while a lock is held and another waits (the server keeps its data, as in
//! production): the holder keeps its lock (its renewals ride out the short outage), the waiter
//! rides out the restart (its wait connection comes back) and gets the lock once it is
//! released, and fencing tokens keep growing across the restart.
//!
//! A test binary of its own: the restart would disturb other tests. Its tests take [`SERIAL`].

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;

/// Held by each test: each disturbs every connection to the server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_lock_its_queue_and_its_tokens() {
    let _serial = SERIAL.lock().await;
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("ttl=10s&request_timeout=1s&connect_timeout=1s");
    let connect = || async {
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let name = unique_name("restart");

    let held = a.lock(&name).acquire().await.unwrap();
    let first = held.fencing_token();
    let released = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let (b, name, released) = (b.clone(), name.clone(), released.clone());
        async move {
            let guard = b.lock(&name).timeout(Duration::from_secs(60)).acquire().await.unwrap();
            (guard.fencing_token(), released.load(Ordering::SeqCst))
        }
    });
    locksmith_core::conformance::until_waiters(&a, &name, 1, Duration::from_secs(10)).await;

    {
        let _start_again = OnDrop::start("mysql");
        backends(&["stop", "mysql"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    } // started again here
      // Past the outage, the holder still holds: its renewals went through again within its TTL.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(held.lost_reason(), None, "the holder lost its lock to a short restart");
    assert!(!waiter.is_finished(), "the waiter was granted while the holder held");

    released.store(true, Ordering::SeqCst);
    held.release().await.expect("released after the restart");
    let (token, after_release) = within(Duration::from_secs(30), "the waiter's grant", waiter)
        .await
        .unwrap();
    assert!(after_release, "the waiter was granted before the holder released");
    assert!(
        token > first,
        "token {token} after {first}: tokens must survive the restart"
    );

    // And a grant after the restart, on a new locker, goes on above both.
    let c = connect().await;
    let later = c.lock(&name).acquire().await.unwrap();
    assert!(later.fencing_token() > token);
    later.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Kills every connection to `database` but the caller's own (as an operator's `KILL`, or
/// `wait_timeout`, would end them).
async fn kill_connections_to(database: &str) -> usize {
    use sqlx::{Connection, Row};
    let mut admin = sqlx::MySqlConnection::connect(&common::server_url()).await.unwrap();
    let rows = sqlx::query(
        "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
    )
    .bind(database)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    for row in &rows {
        let id: u64 = row.get(0);
        let _ = sqlx::Executor::execute(&mut admin, format!("KILL CONNECTION {id}").as_str()).await;
    }
    rows.len()
}

/// The server closes a holder's connections while it holds (an operator's `KILL`): its renewal,
/// its release and the waiter behind it carry on over new connections; the release is not lost
/// and says nothing false ("not held").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_server_closed_the_connections_releases() {
    let _serial = SERIAL.lock().await;
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("ttl=10s");
    let connect = || async {
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let name = unique_name("closed");
    let held = a.lock(&name).acquire().await.unwrap();
    let first = held.fencing_token();
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).timeout(Duration::from_secs(30)).acquire().await.unwrap() }
    });
    locksmith_core::conformance::until_waiters(&a, &name, 1, Duration::from_secs(10)).await;

    assert!(
        kill_connections_to(&harness.database).await >= 4,
        "the lockers' connections"
    );
    held.release()
        .await
        .expect("the release after the server closed the connection");
    let next = within(Duration::from_secs(10), "the waiter's grant", waiter)
        .await
        .unwrap();
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
