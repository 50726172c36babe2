//! PostgreSQL restarted while a lock is held and another waits (the server keeps its data, as
//! in production): the holder keeps its lock (its renewals ride out the short outage) or is told
//! it lost it before anyone else is granted; the waiter rides out the restart (its LISTEN
//! connection comes back) and gets the lock once it is released; fencing tokens keep growing.
//!
//! The server closes a holder's connections (an operator's `pg_terminate_backend`, an idle
//! session timeout, a pooler): its release, or its dropped guard, still releases, on a new
//! connection.
//!
//! A test binary of its own: the restart and the closed connections would disturb other tests.
//! Its tests take [`SERIAL`].

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
    let harness = common::PgHarness::plain().await;
    let url = format!("{}&ttl=4s&request_timeout=1s&connect_timeout=1s", harness.url);
    let connect = || async {
        locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
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
            let guard = b.lock(&name).timeout(Duration::from_secs(30)).acquire().await.unwrap();
            (guard.fencing_token(), released.load(Ordering::SeqCst))
        }
    });
    locksmith_core::conformance::until_waiters(&a, &name, 1, Duration::from_secs(10)).await;

    {
        let _start_again = OnDrop::start("postgres");
        backends(&["stop", "postgres"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    } // started again here
      // Past the outage, the holder still holds: its renewals went through again within its TTL.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(held.lost_reason(), None, "the holder lost its lock to a short restart");
    assert!(!waiter.is_finished(), "the waiter was granted while the holder held");

    released.store(true, Ordering::SeqCst);
    held.release().await.expect("released after the restart");
    let (token, after_release) = within(Duration::from_secs(20), "the waiter's grant", waiter)
        .await
        .unwrap();
    assert!(after_release, "the waiter was granted before the holder released");
    assert!(
        token > first,
        "token {token} after {first}: tokens must survive the restart"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_server_closed_the_connections_releases() {
    let _serial = SERIAL.lock().await;
    let harness = common::PgHarness::plain().await;
    // A TTL long enough that no renewal goes out (and opens a new connection) before the release.
    let url = format!("{}&ttl=15s", harness.url);
    let holder = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let (released, dropped) = (unique_name("closed-release"), unique_name("closed-drop"));
    let held = holder.lock(&released).acquire().await.unwrap();
    let kept = holder.lock(&dropped).acquire().await.unwrap();

    let closed = common::query_as_owner(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'locksmith' AND pid <> pg_backend_pid()",
    )
    .await;
    assert!(!closed.is_empty(), "the holder had no connection to close");
    // Long enough for the client to read the close.
    tokio::time::sleep(Duration::from_millis(300)).await;

    held.release()
        .await
        .expect("a release after the server closed the connections");
    drop(kept); // released in the background
    let observer = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    within(Duration::from_secs(10), "both locks free (the TTL is 15 s)", async {
        for name in [&released, &dropped] {
            while observer.inspect(name).await.unwrap().holder.is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
    .await;
    holder.shutdown().await.unwrap();
    observer.shutdown().await.unwrap();
}
