//! MySQL over TLS with a password and a client certificate (`LOCKSMITH_TEST_MYSQL_SECURE`, the
//! MariaDB `mysql-secure` of `scripts/backends`: TLS only, a password AND a certificate of the
//! test CA): the shared conformance suite, and clear failures (`Denied`, never `Unavailable`)
//! for what no retry changes.
#![cfg(feature = "tls")]

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{env_url, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

fn secure() -> String {
    env_url("LOCKSMITH_TEST_MYSQL_SECURE")
}

fn tls_dir() -> String {
    env_url("LOCKSMITH_TEST_TLS_DIR")
}

mod conformance {
    locksmith_core::conformance_tests!(crate::common::MyHarness::shared(crate::secure()).await);
}

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    let parsed = BackendUrl::parse(url)?;
    within(Duration::from_secs(30), url, locksmith_mysql::connect(&parsed)).await
}

fn denied(what: &str, result: Result<locksmith_core::Locker, LockError>) -> String {
    match result {
        Err(LockError::Denied(message)) => message,
        Err(other) => panic!("{what}: expected Denied, got {other:?}"),
        Ok(_) => panic!("{what}: expected Denied, got a locker"),
    }
}

#[tokio::test]
async fn every_kind_works_over_tls() {
    let locker = connect(&secure()).await.unwrap();
    let name = locksmith_core::conformance::unique_name("secure");
    let guard = locker.lock(&name).acquire().await.unwrap();
    guard.release().await.unwrap();
    let permit = locker.semaphore(&name, 2).acquire().await.unwrap();
    permit.release().await.unwrap();
    let lead = locker.election(&name).campaign("me").acquire().await.unwrap();
    lead.resign().await.unwrap();
    locker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_ca_that_does_not_vouch_for_the_server_is_denied() {
    let url = secure().replace("/ca.pem", "/other-ca.pem");
    let message = denied("another CA", connect(&url).await);
    assert!(!message.contains("locksmith-test-pw"), "{message}");
}

#[tokio::test]
async fn no_client_certificate_is_denied() {
    let url = secure();
    let (head, _) = url.split_once("&cert=").expect("cert= in the secure URL");
    denied("no client certificate", connect(head).await);
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_denied() {
    let dir = tls_dir();
    let url = secure()
        .replace(&format!("{dir}/client.pem"), &format!("{dir}/untrusted.pem"))
        .replace(&format!("{dir}/client.key"), &format!("{dir}/untrusted.key"));
    denied("a client certificate of another CA", connect(&url).await);
}

#[tokio::test]
async fn a_plain_connection_to_a_tls_only_server_is_denied() {
    let url = secure();
    let (head, _) = url.split_once('?').expect("options in the secure URL");
    denied("no TLS", connect(head).await);
}

#[tokio::test]
async fn tls_to_a_server_without_tls_is_denied() {
    let plain = env_url("LOCKSMITH_TEST_MYSQL");
    let url = format!("{plain}?ssl_mode=verify_identity&ca={}/ca.pem", tls_dir());
    denied("a server without TLS", connect(&url).await);
}
