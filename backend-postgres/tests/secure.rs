//! PostgreSQL over TLS with a password and a client certificate (`LOCKSMITH_TEST_POSTGRES_SECURE`,
//! started by `scripts/backends`: TLS only, scram-sha-256 AND a certificate of the test CA): the
//! shared conformance suites, the password from a file or the environment, and clear failures
//! that never show the password.
#![cfg(feature = "tls")]

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::within;
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

fn secure() -> String {
    std::env::var("LOCKSMITH_TEST_POSTGRES_SECURE")
        .expect("LOCKSMITH_TEST_POSTGRES_SECURE is not set: run `eval \"$(scripts/backends up single)\"` first")
}

mod conformance {
    locksmith_core::conformance_tests!(crate::common::PgHarness::at(crate::secure()).await);
    locksmith_core::primitive_tests!(crate::common::PgHarness::at(crate::secure()).await);
}

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    let parsed = BackendUrl::parse(url)?;
    within(Duration::from_secs(30), url, locksmith_postgres::connect(&parsed)).await
}

async fn locks(url: &str) {
    let locker = connect(url).await.expect("connect");
    let guard = locker.lock("secure").try_acquire().await.expect("try").expect("free");
    guard.release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
}

/// The password from `password_file=` or from `LOCKSMITH_PASSWORD`, instead of the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_from_a_file_or_the_environment() {
    let without = secure().replacen("locksmith:locksmith-test-pw@", "locksmith@", 1);
    let file = std::env::temp_dir().join(format!("locksmith-pg-pw-{}", std::process::id()));
    std::fs::write(&file, "locksmith-test-pw\n").expect("write the password file");
    locks(&format!("{without}&password_file={}", file.display())).await;
    std::fs::remove_file(&file).ok();
    // SAFETY-free: the only test of this binary that reads the variable.
    std::env::set_var("LOCKSMITH_PASSWORD", "locksmith-test-pw");
    locks(&without).await;
    std::env::remove_var("LOCKSMITH_PASSWORD");
}

/// Wrong password, no client certificate, one of an unknown CA, a server certificate we do not
/// trust, plain text, `sslmode=require` at a server without TLS: each fails clearly, in bounded
/// time, without showing a password. None of them heals by waiting: each is `Denied` (exit 5),
/// TLS that cannot be established included (it was `Unavailable`, and `locksmith run` retried it
/// for ever), within the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_tls_fail_clearly_and_keep_the_password() {
    let base = secure();
    let dir = std::env::var("LOCKSMITH_TEST_TLS_DIR").expect("LOCKSMITH_TEST_TLS_DIR");
    let (plain_base, _) = base.split_once('?').unwrap();
    let wrong = base.replacen("locksmith-test-pw", "not-the-password", 1);
    let no_certificate = format!("{plain_base}?sslmode=verify-full&ca={dir}/ca.pem");
    let stranger = base
        .replace(&format!("{dir}/client.pem"), &format!("{dir}/untrusted.pem"))
        .replace(&format!("{dir}/client.key"), &format!("{dir}/untrusted.key"));
    let untrusted_server = base.replace(&format!("{dir}/ca.pem"), &format!("{dir}/other-ca.pem"));
    let plaintext = format!("{plain_base}?sslmode=disable");
    let plain_server = std::env::var("LOCKSMITH_TEST_POSTGRES").expect("LOCKSMITH_TEST_POSTGRES");
    let no_tls = format!("{plain_server}?sslmode=require");
    // The same server named twice (by name and by address): no host of the list has TLS.
    let (user, rest) = plain_server.split_once('@').unwrap();
    let (host, database) = rest.split_once('/').unwrap();
    let port = host.rsplit(':').next().unwrap();
    let no_tls_twice = format!("{user}@localhost:{port},{host}/{database}?sslmode=require");
    for (what, url, says) in [
        ("wrong password", wrong, ""),
        ("no client certificate", no_certificate, ""),
        ("client certificate of an unknown CA", stranger, ""),
        (
            "untrusted server certificate",
            untrusted_server,
            "is not trusted by ca=",
        ),
        ("plain text to a TLS-only server", plaintext, ""),
        ("sslmode=require at a server without TLS", no_tls, "does not speak TLS"),
        (
            "sslmode=require at two hosts without TLS",
            no_tls_twice,
            "does not speak TLS",
        ),
    ] {
        let url = format!("{url}&connect_timeout=2s&request_timeout=2s");
        let start = std::time::Instant::now();
        let e = connect(&url).await.expect_err(what);
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains("locksmith-test-pw") && !shown.contains("not-the-password"),
            "{what}: a password shows: {shown}"
        );
        assert!(matches!(e, LockError::Denied(_)), "{what}: {e:?}");
        assert!(e.to_string().contains(says), "{what}: {e}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{what}: took {:?}, more than the connect timeout",
            start.elapsed()
        );
    }
}
