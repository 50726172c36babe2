//! Bad URLs, a server that is down or silent, a wrong password, a missing database, names too
//! long for the lock table: the errors a user sees first, never a panic.

#[allow(dead_code)] // bad_input uses only the server URL and a harness
mod common;

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    locksmith_mysql::connect(&BackendUrl::parse(url)?).await
}

#[tokio::test]
async fn bad_urls_are_invalid_url() {
    for bad in [
        "mysql://",
        "mysql://u@127.0.0.1",
        "mysql://127.0.0.1/db",
        "mysql://u@127.0.0.1/db?nope=1",
        "mysql://u@127.0.0.1/a.b",
        "mysql://u@h1,h2/db?replication=maybe",
        "mysql://u@127.0.0.1/db?ttl=0s",
        "mysql://u@127.0.0.1/db?request_timeout=0",
        "mysql://u@127.0.0.1/db?heartbeat=1ms",
        "mysql://u@127.0.0.1/db?ssl_mode=sometimes",
        "mariadb://u@127.0.0.1/db?schema=x",
    ] {
        match connect(bad).await {
            Err(LockError::InvalidUrl { .. }) => {}
            other => panic!("{bad}: expected InvalidUrl, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_server_that_is_down_is_unavailable_within_the_timeout() {
    // A loopback port nothing listens on (refused at once), then an address that drops packets
    // (TEST-NET-1: the connect timeout applies).
    for url in [
        "mysql://u:p@127.0.0.1:1/db?connect_timeout=1s",
        "mysql://u:p@192.0.2.1:3306/db?connect_timeout=1s",
    ] {
        let started = tokio::time::Instant::now();
        match connect(url).await {
            Err(LockError::Unavailable { .. }) => {}
            other => panic!("{url}: expected Unavailable, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{url}: took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_wrong_password_is_denied_and_not_printed() {
    let url = common::server_url();
    let (head, rest) = url.split_once('@').expect("credentials");
    let user = head.rsplit_once(':').map_or(head, |(u, _)| u);
    let bad = format!("{user}:wrong-pw-7f3a@{rest}");
    match connect(&bad).await {
        Err(e @ LockError::Denied(_)) => {
            let text = format!("{e} {e:?}");
            assert!(!text.contains("wrong-pw-7f3a"), "the password is in the error: {text}");
        }
        other => panic!("expected Denied, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_database_is_denied() {
    let url = common::server_url();
    let (server, _) = url.rsplit_once('/').expect("a database");
    let missing = format!("{server}/locksmith_no_such_db_{:08x}", rand::random::<u32>());
    match connect(&missing).await {
        Err(LockError::Denied(message)) => assert!(message.contains("1049") || message.contains("1044"), "{message}"),
        other => panic!("expected Denied, got {other:?}"),
    }
}

/// A server that accepts and never answers: the error names the connect timeout it ran out of.
#[tokio::test]
async fn a_silent_server_is_reported_with_its_connect_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket); // kept open, never answered
        }
    });
    let url = format!("mysql://u:p@{addr}/db?connect_timeout=700ms");
    match connect(&url).await {
        Err(LockError::Unavailable { message, .. }) => assert!(message.contains("700ms"), "{message}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    accepting.abort();
}

/// Several hosts share the connect timeout: a first host that accepts and never answers is given
/// its share of it, and the next host, a server that answers, still has time to connect. With
/// none answering, the whole takes the connect timeout, and the error names every host.
#[tokio::test]
async fn a_silent_first_host_leaves_time_for_the_next() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap().to_string();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket); // kept open, never answered
        }
    });
    let harness = common::MyHarness::plain().await;
    let real = BackendUrl::parse(&harness.url).unwrap().hosts[0].to_addr(3306);
    // The single test server has no replica: replication=async.
    let url = harness
        .url_with("connect_timeout=2s&replication=async")
        .replacen(&real, &format!("{silent},{real}"), 1);
    let started = tokio::time::Instant::now();
    let locker = connect(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    locker
        .lock("silent-first")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    locker.shutdown().await.unwrap();

    let url = format!("mysql://u:p@{silent},127.0.0.1:1/db?connect_timeout=1s");
    let started = tokio::time::Instant::now();
    match connect(&url).await {
        Err(LockError::Unavailable { message, .. }) => {
            assert!(
                message.contains(&silent) && message.contains("127.0.0.1:1"),
                "{message}"
            )
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    accepting.abort();
}

/// The longest name locksmith takes, of characters its encoding escapes (three bytes each), as a
/// semaphore (whose segment adds `.sem`): longer than the lock table's key, refused with
/// `InvalidName`. The same name as a mutex (exactly 3,072 bytes) fits.
#[tokio::test]
async fn a_name_too_long_for_the_lock_table_is_invalid() {
    let harness = common::MyHarness::plain().await;
    let locker = locksmith_core::conformance::Harness::locker(&harness).await;
    let name = "%".repeat(locksmith_core::MAX_NAME_LEN);
    match locker.semaphore(&name, 2).try_acquire().await {
        Err(LockError::InvalidName(message)) => assert!(message.contains("3072"), "{message}"),
        other => panic!("expected InvalidName, got {:?}", other.map(|g| g.is_some())),
    }
    match locker.semaphore(&name, 2).acquire().await {
        Err(LockError::InvalidName(_)) => {}
        other => panic!("expected InvalidName, got {:?}", other.map(|_| ())),
    }
    locker.lock(&name).acquire().await.unwrap().release().await.unwrap();
    locker.shutdown().await.unwrap();
}
