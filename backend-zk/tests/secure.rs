//! ZooKeeper over TLS with digest credentials (`LOCKSMITH_TEST_ZK_SECURE`, started by
//! `scripts/backends`): the whole conformance suite, the ACL that keeps other identities from
//! breaking a lock, and clear failures that never show the password.
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockError};
use zookeeper_client as zk;

mod conformance {
    locksmith_core::conformance_tests!(crate::common::ZkHarness::secure().await);
    locksmith_core::primitive_tests!(crate::common::ZkHarness::secure().await);
}

fn secure() -> String {
    common::env_url("LOCKSMITH_TEST_ZK_SECURE")
}

fn tls_dir() -> String {
    common::env_url("LOCKSMITH_TEST_TLS_DIR")
}

/// A client of another identity (or of none) cannot delete a locksmith holder's node: the ACL
/// gives all permissions to locksmith's identity only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_identities_cannot_delete_a_lock_node() {
    let url = common::with_namespace(&secure(), "session_timeout=5s");
    let locker = locksmith_zk::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .expect("connect");
    let name = unique_name("acl");
    let guard = locker.lock(&name).acquire().await.expect("acquire");
    let plain = common::env_url("LOCKSMITH_TEST_ZK_SECURE_PLAIN");
    for auth in [Some("intruder:not-the-password"), None] {
        let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(10));
        if let Some(auth) = auth {
            connector = connector.with_auth("digest", auth.as_bytes());
        }
        let other = within(
            Duration::from_secs(20),
            "an intruder's session",
            connector.connect(&plain),
        )
        .await
        .expect("connect");
        let refused = other.delete(&guard.lease().holder_id, None).await;
        assert!(matches!(refused, Err(zk::Error::NoAuth)), "{auth:?}: {refused:?}");
        let lock_node = common::lock_path(&LockName::new(&name).unwrap());
        let child = other
            .create(
                &format!("{lock_node}/x"),
                b"",
                &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
            )
            .await;
        assert!(
            matches!(child, Err(zk::Error::NoAuth)),
            "{auth:?} created a node in the lock: {child:?}"
        );
    }
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// The nodes of semaphores, read-write locks and elections get the ACL of a mutex's: the holders'
/// and their parents (`.rw`, `.elect`, `.sem` and its `locks` and `leases`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_gets_the_mutex_acl() {
    let url = common::with_namespace(&secure(), "session_timeout=5s");
    let locker = locksmith_zk::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .expect("connect");
    let admin = common::ZkHarness::secure_admin().await;
    let name = unique_name("acl_kinds");
    let key = LockName::new(&name).unwrap();
    let mutex = locker.lock(&name).acquire().await.expect("mutex");
    let (expected, _) = admin
        .get_acl(&mutex.lease().holder_id)
        .await
        .expect("the mutex node's ACL");
    assert!(
        !expected.iter().any(|acl| acl.scheme() == "world"),
        "the mutex node is open: {expected:?}"
    );
    let read = locker.rwlock(&name).read().acquire().await.expect("read");
    let permit = locker.semaphore(&name, 1).acquire().await.expect("permit");
    // A second contender holds the internal lock while it waits: its node is there to look at.
    let waiter = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move {
            locker
                .semaphore(&name, 1)
                .timeout(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let lead = locker.election(&name).campaign("a").acquire().await.expect("lead");
    let semaphore = common::family_path(Family::Semaphore, &key);
    let mut nodes = vec![
        common::family_path(Family::Mutex, &key),
        read.lease().holder_id.clone(),
        common::family_path(Family::RwLock, &key),
        permit.lease().holder_id.clone(),
        format!("{semaphore}/leases"),
        format!("{semaphore}/locks"),
        semaphore.clone(),
        lead.guard().lease().holder_id.clone(),
        common::family_path(Family::Election, &key),
    ];
    let lock_node = within(Duration::from_secs(20), "the waiter's internal-lock node", async {
        loop {
            if let Some(node) = common::children_of(&admin, &format!("{semaphore}/locks")).await.pop() {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    nodes.push(lock_node);
    for node in nodes {
        let (acl, _) = admin.get_acl(&node).await.unwrap_or_else(|e| panic!("{node}: {e}"));
        assert_eq!(acl, expected, "{node}");
    }
    waiter.abort();
    for guard in [mutex, read, permit] {
        guard.release().await.expect("release");
    }
    lead.resign().await.expect("resign");
}

/// A plaintext client at the TLS port, an untrusted certificate, a client certificate of an
/// unknown CA, zks:// without a CA, and zks:// at plain servers all fail clearly, in bounded time,
/// without the password in any message. TLS that cannot be established is `Denied` (exit 5) well
/// within the connect timeout: the client keeps the why to itself and tries again until the
/// timeout, so it was `Unavailable` ("no server established a session") after all of it, retried
/// for ever by `locksmith run`. A plaintext client at the TLS port stays `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_fails_clearly_and_keeps_the_password() {
    let base = secure();
    let dir = tls_dir();
    let password = "lock-pass-123";
    let plaintext = base.replacen("zks://", "zk://", 1);
    let plaintext = plaintext.split('?').next().unwrap().to_owned() + "?connect_timeout=3s";
    let untrusted = base.replace(&format!("{dir}/ca.pem"), &format!("{dir}/other-ca.pem"));
    let stranger = base
        .replace(&format!("{dir}/client.pem"), &format!("{dir}/untrusted.pem"))
        .replace(&format!("{dir}/client.key"), &format!("{dir}/untrusted.key"));
    let no_ca = base.replace(&format!("ca={dir}/ca.pem&"), "");
    let plain_host = common::env_url("LOCKSMITH_TEST_ZK")
        .trim_start_matches("zk://")
        .trim_end_matches('/')
        .to_owned();
    let no_tls = format!("zks://{plain_host}?ca={dir}/ca.pem");
    let secure_plain = common::env_url("LOCKSMITH_TEST_ZK_SECURE_PLAIN");
    let no_tls_twice = format!("zks://{plain_host},{secure_plain}?ca={dir}/ca.pem");
    for (what, url, denied, says) in [
        ("plaintext client at the TLS port", plaintext, false, ""),
        ("untrusted server certificate", untrusted, true, "is not trusted by ca="),
        (
            "client certificate of an unknown CA",
            stranger,
            true,
            "refused our client certificate",
        ),
        ("no ca", no_ca, false, ""),
        ("zks:// at a plain server", no_tls, true, "does not speak TLS"),
        ("zks:// at two plain servers", no_tls_twice, true, "does not speak TLS"),
    ] {
        let url = common::with_namespace(&url, "connect_timeout=3s");
        let start = std::time::Instant::now();
        let result = match BackendUrl::parse(&url) {
            Ok(parsed) => within(Duration::from_secs(30), what, locksmith_zk::connect(&parsed))
                .await
                .map(drop),
            Err(e) => Err(e),
        };
        let e = result.expect_err(what);
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(password), "{what}: the password shows: {shown}");
        if denied {
            assert!(matches!(e, LockError::Denied(_)), "{what}: {e:?}");
            assert!(e.to_string().contains(says), "{what}: {e}");
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "{what}: took {:?}, more than the connect timeout",
                start.elapsed()
            );
        } else {
            assert!(
                matches!(e, LockError::Unavailable { .. } | LockError::InvalidUrl { .. }),
                "{what}: {e:?}"
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: took {:?}",
            start.elapsed()
        );
    }
}
