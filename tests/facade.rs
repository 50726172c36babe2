//! The facade: backends chosen by URL, and clear errors for URLs that cannot be used.

use locksmith::{connect, LockError};

fn invalid_url_reason(result: Result<locksmith::Locker, LockError>) -> String {
    match result {
        Err(LockError::InvalidUrl { reason, .. }) => reason,
        other => panic!("expected InvalidUrl, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_urls_are_rejected() {
    for url in [
        "",
        "mem",
        "://x",
        "etcd://h:99999",
        "redis://a,,b",
        "mem://x?y=1",
        "mem://x?ttl=10ms",
        "mem://x?ttl=soon",
        "mem://a/b",
        "mem://a:1",
        "mem://a,b",
    ] {
        let reason = invalid_url_reason(connect(url).await);
        assert!(!reason.is_empty(), "{url}");
    }
}

#[tokio::test]
async fn unknown_schemes_name_the_known_ones() {
    let reason = invalid_url_reason(connect("consul://127.0.0.1:8500").await);
    assert!(
        reason.contains("unknown scheme") && reason.contains("etcd://") && reason.contains("mem://"),
        "{reason}"
    );
}

#[cfg(not(all(feature = "etcd", feature = "zk", feature = "redis")))]
#[tokio::test]
async fn every_disabled_backend_names_its_feature() {
    for (feature, schemes) in locksmith::KNOWN {
        for scheme in *schemes {
            if locksmith::backend_for(scheme).is_none() {
                let reason = invalid_url_reason(connect(&format!("{scheme}://127.0.0.1:1")).await);
                assert!(reason.contains(&format!("`{feature}` feature")), "{reason}");
            }
        }
    }
}

/// The registry's line for each backend and the backend's own descriptor agree.
#[test]
fn the_registry_matches_the_backends() {
    for backend in locksmith::backends() {
        let (feature, schemes) = locksmith::KNOWN
            .iter()
            .find(|(_, schemes)| schemes.contains(&backend.name) || backend.schemes.iter().any(|s| schemes.contains(s)))
            .expect("every compiled-in backend is in KNOWN");
        assert_eq!(backend.feature.unwrap_or(""), *feature, "{}", backend.name);
        assert_eq!(backend.schemes, *schemes, "{}", backend.name);
        for scheme in backend.schemes {
            assert_eq!(locksmith::backend_for(scheme).map(|d| d.name), Some(backend.name));
        }
    }
}

#[tokio::test]
async fn mem_urls_share_a_store_per_name() {
    let a = connect("mem://").await.unwrap();
    let b = connect("mem://").await.unwrap();
    let other_store = connect("mem://facade-test-other").await.unwrap();
    let guard = a.lock("facade/shared").acquire().await.unwrap();
    assert!(
        b.lock("facade/shared").try_acquire().await.unwrap().is_none(),
        "mem:// stores are not shared"
    );
    let elsewhere = other_store.lock("facade/shared").try_acquire().await.unwrap();
    assert!(elsewhere.is_some(), "mem://NAME is not a separate store");
    guard.release().await.unwrap();
    assert!(b.lock("facade/shared").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn scheme_is_case_insensitive() {
    assert!(connect("MEM://").await.is_ok());
}

/// `mem://?ttl=` is the TTL of the locks whose builder sets none, as on Redis (and as `ttl=` is
/// the session TTL on etcd and ZooKeeper): swapping backends by URL keeps it. The builder's wins.
#[tokio::test]
async fn the_mem_url_ttl_is_the_default_lock_ttl() {
    use std::time::Duration;
    let with = connect("mem://facade-ttl?ttl=2s").await.unwrap();
    let without = connect("mem://facade-ttl").await.unwrap();
    let guard = with.lock("facade/ttl").acquire().await.unwrap();
    assert_eq!(guard.ttl(), Duration::from_secs(2));
    assert!(
        without.lock("facade/ttl").try_acquire().await.unwrap().is_none(),
        "ttl= changed the store"
    );
    guard.release().await.unwrap();
    let guard = with
        .lock("facade/ttl")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.ttl(), Duration::from_secs(3));
    guard.release().await.unwrap();
    let guard = without.lock("facade/ttl").acquire().await.unwrap();
    assert_eq!(guard.ttl(), locksmith::DEFAULT_TTL);
    guard.release().await.unwrap();
    let permit = with.semaphore("facade/ttl", 2).acquire().await.unwrap();
    assert_eq!(permit.ttl(), Duration::from_secs(2));
    permit.release().await.unwrap();
}

/// `postgres_setup_sql` is for `postgres://` URLs, as its `# Errors` says. (Before, any URL that
/// parsed gave the SQL: `postgres_setup_sql("redis://h", None)` answered `Ok`.)
#[cfg(feature = "postgres")]
#[test]
fn postgres_setup_sql_refuses_other_schemes() {
    for url in ["redis://h", "etcd://h/app", "mem://"] {
        let result = locksmith::postgres_setup_sql(url, None);
        assert!(matches!(result, Err(LockError::InvalidUrl { .. })), "{url}: {result:?}");
    }
    for url in ["postgres://u@h/db", "POSTGRESQL://u@h/db"] {
        assert!(locksmith::postgres_setup_sql(url, None).is_ok(), "{url}");
    }
}

/// `mysql://` and `mariadb://` both reach the MySQL backend (the test server of
/// `LOCKSMITH_TEST_MYSQL`, a MariaDB), which holds a lock and gives it back.
#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_and_mariadb_urls_reach_the_mysql_backend() {
    let url = std::env::var("LOCKSMITH_TEST_MYSQL")
        .expect("LOCKSMITH_TEST_MYSQL is not set: run `eval \"$(scripts/backends up single)\"` first");
    let mariadb = url.replacen("mysql://", "mariadb://", 1);
    for url in [url, mariadb] {
        let locker = connect(&url).await.unwrap();
        assert_eq!(locker.backend().kind(), "mysql");
        let guard = locker.lock("facade/mysql").acquire().await.unwrap();
        assert!(guard.fencing_token() > 0);
        guard.release().await.unwrap();
        locker.shutdown().await.unwrap();
    }
}
