//! Redis with mutual TLS and ACL users (`LOCKSMITH_TEST_REDIS_SECURE`, started by
//! `scripts/backends`): the whole conformance suite, password-only and ACL-user authentication,
//! a user whose ACL forbids writes, and clear failures that never show the password.
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

mod conformance {
    locksmith_core::conformance_tests!(crate::common::RedisHarness::secure().await);
}

fn secure() -> String {
    common::env_url("LOCKSMITH_TEST_REDIS_SECURE")
}

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    let parsed = BackendUrl::parse(url)?;
    within(Duration::from_secs(30), url, locksmith_redis::connect(&parsed)).await
}

/// `default`'s password alone (AUTH password) works too; a user whose ACL allows only reads is
/// refused with `Denied` when it tries to take a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_only_and_a_read_only_user() {
    let base = secure();
    let password_only = base.replacen("locksmith:lock-pass-123@", ":default-pass-123@", 1);
    let locker = connect(&password_only).await.expect("password-only AUTH");
    let g = locker
        .lock(unique_name("secure_default"))
        .try_acquire()
        .await
        .expect("try");
    g.expect("free").release().await.expect("release");

    // Refused at connect (loading the scripts needs more than reads) or at the first lock.
    let read_only = base.replacen("locksmith:lock-pass-123@", "readonly:read-pass-123@", 1);
    let refused = match connect(&read_only).await {
        Ok(locker) => locker
            .lock(unique_name("secure_readonly"))
            .try_acquire()
            .await
            .map(drop),
        Err(e) => Err(e),
    };
    assert!(matches!(refused, Err(LockError::Denied(_))), "{refused:?}");
    let shown = format!("{:?}", refused.unwrap_err());
    assert!(!shown.contains("read-pass-123"), "{shown}");
}

/// The password can come from a file (`password_file=`) instead of the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_from_a_file() {
    let base = secure();
    let file = std::env::temp_dir().join(format!("locksmith-redis-pw-{}", std::process::id()));
    std::fs::write(&file, "lock-pass-123\n").expect("write the password file");
    let without = base.replacen("locksmith:lock-pass-123@", "locksmith@", 1);
    let url = common::with_options(&without, &format!("password_file={}", file.display()));
    let locker = connect(&url).await.expect("connect with password_file");
    let g = locker
        .lock(unique_name("secure_file"))
        .try_acquire()
        .await
        .expect("try");
    g.expect("free").release().await.expect("release");
    std::fs::remove_file(&file).ok();
}

/// Wrong password, untrusted server certificate, a client certificate of an unknown CA, a
/// plaintext client at the TLS port, `rediss://` at a plain server: each fails clearly, in bounded
/// time, and no message shows a password. What no retry changes is `Denied` (exit 5), within the
/// connect timeout: the credentials, and TLS that cannot be established (it was `Unavailable`,
/// retried for ever by `locksmith run`; `rediss://` at a plain Redis, which never answers a TLS
/// greeting, even waited out the whole connect timeout). A plaintext client at the TLS port sees
/// its connection closed, as in an outage: `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_tls_fail_clearly_and_keep_the_password() {
    let base = secure();
    let dir = common::env_url("LOCKSMITH_TEST_TLS_DIR");
    let wrong = base.replacen("lock-pass-123", "not-the-password", 1);
    let untrusted = base.replace(&format!("{dir}/ca.pem"), &format!("{dir}/other-ca.pem"));
    let stranger = base
        .replace(&format!("{dir}/client.pem"), &format!("{dir}/untrusted.pem"))
        .replace(&format!("{dir}/client.key"), &format!("{dir}/untrusted.key"));
    let plaintext = base.replacen("rediss://", "redis://", 1);
    let plaintext = plaintext.split('?').next().unwrap().to_owned();
    let no_tls = format!(
        "{}?ca={dir}/ca.pem",
        common::redis_url().replacen("redis://", "rediss://", 1)
    );
    for (what, url, denied, says) in [
        ("wrong password", wrong, true, ""),
        ("untrusted server certificate", untrusted, true, "is not trusted by ca="),
        (
            "client certificate of an unknown CA",
            stranger,
            true,
            "refused our client certificate",
        ),
        ("plaintext client at the TLS port", plaintext, false, ""),
        ("rediss:// at a plain server", no_tls, true, "does not speak TLS"),
    ] {
        let url = common::with_options(&url, "connect_timeout=2s&response_timeout=2s");
        let start = std::time::Instant::now();
        let e = connect(&url).await.expect_err(what);
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains("lock-pass-123") && !shown.contains("not-the-password"),
            "{what}: a password shows: {shown}"
        );
        if denied {
            assert!(matches!(e, LockError::Denied(_)), "{what}: {e:?}");
            assert!(e.to_string().contains(says), "{what}: {e}");
            assert!(
                start.elapsed() < Duration::from_secs(2),
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
}

/// `rediss://` naming several masters, none of which speaks TLS: `Denied` within the connect
/// timeout, not "only 0 of 2 redis masters answered" (Unavailable, retried for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_at_plain_masters_of_a_quorum_is_denied() {
    let dir = common::env_url("LOCKSMITH_TEST_TLS_DIR");
    let host = |url: String| url.trim_start_matches("redis://").trim_end_matches('/').to_owned();
    let url = format!(
        "rediss://{},{}?ca={dir}/ca.pem&connect_timeout=2s",
        host(common::redis_url()),
        host(common::env_url("LOCKSMITH_TEST_REGISTER")),
    );
    let start = std::time::Instant::now();
    let e = connect(&url).await.expect_err("a quorum without TLS");
    assert!(
        matches!(&e, LockError::Denied(m) if m.contains("does not speak TLS")),
        "{e:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
}
