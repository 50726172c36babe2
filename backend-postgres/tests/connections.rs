//! A server out of connections: the role `locksmith_few` (scripts/backends: a member of the test
//! user, `CONNECTION LIMIT 3`) stands for a server at its `max_connections` (PostgreSQL refuses
//! both with SQLSTATE 53300, "too many connections for role …" / "sorry, too many clients
//! already"), without starving the other tests of the shared server. What must hold:
//!
//! - a new locker is refused within its connect timeout with an error that names the connection
//!   limit (not a hang, not a retry for ever);
//! - a locker connected before keeps its lock renewing (one connection per locker, already open)
//!   and can hand it over;
//! - once connections are free again, lockers connect and take the lock, tokens growing.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use common::PgHarness;
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

fn few_url(schema: &str, options: &str) -> String {
    let base = std::env::var("LOCKSMITH_TEST_POSTGRES_FEW")
        .expect("LOCKSMITH_TEST_POSTGRES_FEW is not set: run `eval \"$(scripts/backends up single)\"` first");
    format!("{base}?schema={schema}&{options}")
}

/// Opens plain sessions as `locksmith_few` until the server refuses one; returns those opened.
async fn use_up_connections(url: &str) -> Vec<tokio_postgres::Client> {
    let mut open = Vec::new();
    for _ in 0..10 {
        match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                open.push(client);
            }
            Err(e) => {
                let code = e.as_db_error().map(|d| d.code().code().to_owned());
                assert_eq!(code.as_deref(), Some("53300"), "refused otherwise: {e}");
                return open;
            }
        }
    }
    panic!("10 sessions of a role limited to 3 were all let in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_connection_limit_a_new_locker_is_refused_clearly_and_held_locks_keep_renewing() {
    let harness = PgHarness::plain().await;
    let url = few_url(&harness.schema, "ttl=1s&connect_timeout=2s");
    let holder = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .expect("connect within the limit");
    let name = unique_name("connections");
    let held = holder.lock(&name).acquire().await.expect("acquire");
    let token = held.fencing_token();

    let raw = url.split('?').next().unwrap().to_owned();
    let taken = use_up_connections(&raw).await;

    let started = tokio::time::Instant::now();
    let refused = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap()).await;
    let took = started.elapsed();
    let e = refused.expect_err("a locker connected past the connection limit");
    let text = e.to_string();
    assert!(matches!(e, LockError::Unavailable { .. }), "{e:?}");
    assert!(
        text.contains("connection limit") && text.contains("max_connections"),
        "{text}"
    );
    assert!(took < Duration::from_secs(6), "refused only after {took:?}: {text}");

    // The held lock renews on its open connection through three TTLs.
    tokio::select! {
        reason = held.lost() => panic!("a lock held at the connection limit was lost: {reason:?}"),
        () = tokio::time::sleep(Duration::from_secs(3)) => {}
    }

    // Connections free up: a new locker connects, waits, and gets the lock when it is released.
    drop(taken);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .expect("connect once connections are free");
    let waiter = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.lock(&name).timeout(Duration::from_secs(10)).acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    let next = waiter.await.expect("task").expect("the waiter gets the lock");
    assert!(next.fencing_token() > token, "a token went backwards");
    next.release().await.expect("release");
}
