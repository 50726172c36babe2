//! Bad URLs, a server that is down, a wrong password: the errors a user sees first.

#[allow(dead_code)] // bad_input uses only the server URL
mod common;

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    locksmith_postgres::connect(&BackendUrl::parse(url)?).await
}

#[tokio::test]
async fn bad_urls_are_invalid_url() {
    for bad in [
        "postgres://",
        "postgres://127.0.0.1/db?nope=1",
        "postgres://127.0.0.1/db?schema=Not-An-Identifier",
        "postgres://127.0.0.1/a/b",
        "postgres://127.0.0.1/db?ttl=0s",
        "postgres://h1,h2/db?replication=sometimes",
        "postgres://127.0.0.1/db?request_timeout=0",
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
    for (url, limit) in [
        (
            "postgres://u:p@127.0.0.1:1/db?connect_timeout=1s",
            Duration::from_secs(3),
        ),
        (
            "postgres://u:p@192.0.2.1:5432/db?connect_timeout=1s",
            Duration::from_secs(3),
        ),
    ] {
        let started = tokio::time::Instant::now();
        match connect(url).await {
            Err(LockError::Unavailable { .. }) => {}
            other => panic!("{url}: expected Unavailable, got {other:?}"),
        }
        assert!(started.elapsed() < limit, "{url}: took {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn a_wrong_password_is_denied_and_not_printed() {
    let mut url = url_parts(&common::server_url());
    url.password = "wrong-pw-7f3a".into();
    let bad = format!("postgres://{}:{}@{}/{}", url.user, url.password, url.host, url.db);
    match connect(&bad).await {
        Err(e @ LockError::Denied(_)) => {
            let text = format!("{e} {e:?}");
            assert!(!text.contains("wrong-pw-7f3a"), "the password is in the error: {text}");
        }
        other => panic!("expected Denied, got {other:?}"),
    }
}

/// A server that asks for a password when the URL gives none: refused for good (exit 5 in the
/// CLI), with the cause in the message. (It was "unavailable: invalid configuration", which
/// `run` retried for ever, the cause only in the debug logs.)
#[tokio::test]
async fn a_missing_password_is_denied_with_its_cause() {
    if std::env::var_os("LOCKSMITH_PASSWORD").is_some() {
        return; // the password would come from there
    }
    let url = url_parts(&common::server_url());
    let bare = format!("postgres://{}@{}/{}", url.user, url.host, url.db);
    match connect(&bare).await {
        Err(LockError::Denied(message)) => assert!(message.contains("password missing"), "{message}"),
        other => panic!("expected Denied, got {other:?}"),
    }
}

/// A server that accepts and never answers: the error names the connect timeout it ran out of.
/// (It said "took longer than 0ns": the time left, read once the timeout had fired.)
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
    let url = format!("postgres://u:p@{addr}/db?connect_timeout=700ms");
    match connect(&url).await {
        // The address's share of the 700 ms, to the millisecond (its look-up took a little).
        Err(LockError::Unavailable { message, .. }) => assert!(
            ["took longer than 700ms", "took longer than 69"]
                .iter()
                .any(|t| message.contains(t)),
            "{message}"
        ),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    accepting.abort();
}

struct Parts {
    user: String,
    password: String,
    host: String,
    db: String,
}

/// `postgres://user:password@host:port/db` of the test server, in parts.
fn url_parts(url: &str) -> Parts {
    let rest = url.split_once("://").expect("scheme").1;
    let (cred, rest) = rest.split_once('@').expect("credentials");
    let (user, password) = cred.split_once(':').unwrap_or((cred, ""));
    let (host, db) = rest.split_once('/').expect("database");
    let db = db.split('?').next().unwrap_or(db);
    Parts {
        user: user.into(),
        password: password.into(),
        host: host.into(),
        db: db.into(),
    }
}
