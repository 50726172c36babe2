//! etcd with mutual TLS and authentication (`LOCKSMITH_TEST_ETCD_SECURE`, started by
//! `scripts/backends`): the whole conformance suite, and clear failures — a wrong password, an
//! untrusted certificate, a plaintext client at the TLS port — that never show the password.
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use locksmith_core::conformance::within;
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

mod conformance {
    locksmith_core::conformance_tests!(crate::common::EtcdHarness::secure().await);
}

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    let parsed = BackendUrl::parse(url)?;
    within(Duration::from_secs(30), url, locksmith_etcd::connect(&parsed)).await
}

/// What no retry changes is `Denied` (exit 5), within the connect timeout: the credentials, and
/// TLS that cannot be established (an untrusted certificate, `etcds://` at a plain etcd, also when the URL names several); they were `Unavailable`,
/// retried for ever by `locksmith run`; a client certificate the server refuses or does not get
/// too (etcd's client hides the alert among the causes of a "transport error"). A plaintext
/// client at the TLS port stays `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_tls_fail_clearly_and_keep_the_password() {
    let base = common::env_url("LOCKSMITH_TEST_ETCD_SECURE");
    let dir = common::env_url("LOCKSMITH_TEST_TLS_DIR");
    let password = "lock-pass-123";
    let wrong = base.replacen(password, "not-the-password", 1);
    let untrusted = base.replace(&format!("{dir}/ca.pem"), &format!("{dir}/other-ca.pem"));
    let stranger = base
        .replace(&format!("{dir}/client.pem"), &format!("{dir}/untrusted.pem"))
        .replace(&format!("{dir}/client.key"), &format!("{dir}/untrusted.key"));
    let no_cert = base.replace(&format!("&cert={dir}/client.pem&key={dir}/client.key"), "");
    assert_ne!(no_cert, base, "the secure URL names cert= and key= in this order");
    let plaintext = base.replacen("etcds://", "etcd://", 1);
    let plaintext = plaintext.split('?').next().unwrap().to_owned();
    let plain_host = common::env_url("LOCKSMITH_TEST_ETCD")
        .trim_start_matches("etcd://")
        .trim_end_matches('/')
        .to_owned();
    let no_tls = format!("etcds://{plain_host}?ca={dir}/ca.pem");
    // The plain etcd named twice (by name and by address): every endpoint without TLS.
    let port = plain_host.rsplit(':').next().unwrap();
    let no_tls_twice = format!("etcds://{plain_host},localhost:{port}?ca={dir}/ca.pem");
    let cases = [
        ("wrong password", with_timeout(&wrong), true, ""),
        (
            "untrusted server certificate",
            with_timeout(&untrusted),
            true,
            "is not trusted by ca=",
        ),
        // etcd's client reports the server's alert among the causes of a "transport error", or,
        // when the connection's close wins a race in it, as "connection closed" alone, as for a
        // connection lost in an outage: then a TLS connection of the backend's own asks the
        // server (conn/cert_check.rs). It was Unavailable.
        (
            "client certificate of an unknown CA",
            with_timeout(&stranger),
            true,
            "refused our client certificate",
        ),
        // The server asks for a certificate and gets none: the same (it was Unavailable, 30 s in
        // `locksmith run --timeout 30s`).
        (
            "no client certificate",
            with_timeout(&no_cert),
            true,
            "refused our client certificate",
        ),
        ("plaintext client at the TLS port", with_timeout(&plaintext), false, ""),
        (
            "etcds:// at a plain server",
            with_timeout(&no_tls),
            true,
            "does not speak TLS",
        ),
        (
            "etcds:// at two plain endpoints",
            with_timeout(&no_tls_twice),
            true,
            "does not speak TLS",
        ),
    ];
    for (what, url, denied, says) in cases {
        let start = std::time::Instant::now();
        let e = connect(&url).await.expect_err(what);
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains(password) && !shown.contains("not-the-password"),
            "{what}: a password shows: {shown}"
        );
        if denied {
            assert!(matches!(e, LockError::Denied(_)), "{what}: {e:?}");
            assert!(e.to_string().contains(says), "{what}: {e}");
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "{what}: took {:?}, more than the connect timeout",
                start.elapsed()
            );
        } else {
            assert!(matches!(e, LockError::Unavailable { .. }), "{what}: {e:?}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: took {:?}",
            start.elapsed()
        );
    }
    // The right credentials work.
    let locker = connect(&with_timeout(&base)).await.expect("connect");
    let g = locker
        .lock(locksmith_core::conformance::unique_name("secure"))
        .try_acquire()
        .await
        .expect("try");
    g.expect("free").release().await.expect("release");
}

fn with_timeout(url: &str) -> String {
    common::with_query(url, "connect_timeout=3s")
}
