//! Behind PgBouncer in **transaction** pooling mode (`LOCKSMITH_TEST_PGBOUNCER_TXN`, started by
//! `scripts/backends up`): a server session per transaction, so nothing of a session (a named
//! prepared statement, a setting, a LISTEN) lasts from one transaction to the next. With
//! `listen=` naming the server itself for the LISTEN connection, every shared conformance suite
//! passes through it; without, connecting is refused at once with the fix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

/// The transaction pooler's URL.
fn pooler_url() -> String {
    std::env::var("LOCKSMITH_TEST_PGBOUNCER_TXN")
        .expect("LOCKSMITH_TEST_PGBOUNCER_TXN is not set: run `eval \"$(scripts/backends up single)\"` first")
}

/// The pooler's URL with `listen=` naming the server behind it.
fn pooled_url() -> String {
    let server = BackendUrl::parse(&common::server_url()).unwrap();
    format!("{}?listen={}", pooler_url(), server.hosts[0].to_addr(5432))
}

locksmith_core::conformance_tests!(common::PgHarness::at(pooled_url()).await);
locksmith_core::primitive_tests!(common::PgHarness::at(pooled_url()).await);

/// Without `listen=`, a LISTEN through the pooler would never hear a release: connecting is
/// refused (exit 2 in the CLI) within the connect timeout, and the error names the fix. (The
/// release before this check connected, and its waiters slept until their timeouts.)
#[tokio::test]
async fn without_listen_connecting_is_refused_with_the_fix() {
    let schema = format!("t_{:016x}", rand::random::<u64>());
    let url = BackendUrl::parse(&format!("{}?schema={schema}&connect_timeout=2s", pooler_url())).unwrap();
    let started = Instant::now();
    let refused = locksmith_postgres::connect(&url).await;
    let waited = started.elapsed();
    match refused {
        Err(LockError::InvalidUrl { reason, .. }) => {
            assert!(reason.contains("listen="), "{reason}");
            assert!(reason.contains("transaction"), "{reason}");
        }
        other => panic!("expected InvalidUrl, got {:?}", other.map(|_| "a locker")),
    }
    assert!(waited < Duration::from_secs(6), "refused after {waited:?}");
}

/// Ten lockers, twenty read-sleep-write critical sections each, on one lock through the pooler:
/// every section alone (no lost update), every step answered (no statement collision on the
/// pooler's shared server sessions), tokens increasing in the order of the sections.
#[tokio::test]
async fn contenders_through_the_pooler_never_overlap() {
    let harness = common::PgHarness::at(pooled_url()).await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let counter = Arc::new(std::sync::Mutex::new((0u64, 0u64))); // (count, last token)
    let mut workers = Vec::new();
    for _ in 0..10 {
        let locker = locksmith_postgres::connect(&url).await.unwrap();
        let counter = counter.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = (locker.lock("counter"))
                    .ttl(Duration::from_secs(10))
                    .timeout(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire through the pooler");
                let token = guard.fencing_token();
                let (count, last) = *counter.lock().unwrap();
                assert!(token > last, "token {token} after {last}");
                tokio::time::sleep(Duration::from_millis(2)).await;
                *counter.lock().unwrap() = (count + 1, token);
                guard.release().await.expect("release through the pooler");
            }
            locker.shutdown().await.unwrap();
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(counter.lock().unwrap().0, 200, "a lost update");
}

/// A lock released through the pooler is free at once for another locker (not after its TTL).
#[tokio::test]
async fn a_release_through_the_pooler_frees_the_lock_at_once() {
    let harness = common::PgHarness::at(pooled_url()).await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let (a, b) = (
        locksmith_postgres::connect(&url).await.unwrap(),
        locksmith_postgres::connect(&url).await.unwrap(),
    );
    for _ in 0..5 {
        let held = a.lock("job").ttl(Duration::from_secs(60)).acquire().await.unwrap();
        held.release().await.unwrap();
        let next = b.lock("job").ttl(Duration::from_secs(60)).try_acquire().await.unwrap();
        let next = next.expect("the lock released through the pooler is still held");
        next.release().await.unwrap();
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
