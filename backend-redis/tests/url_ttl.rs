//! `ttl=` in a Redis URL, on every URL form (one server, a quorum, Sentinel, Cluster, TLS): the
//! TTL of the locks whose builder sets none, as `ttl=` is on etcd and ZooKeeper (there, the
//! session's). A TTL set on the builder wins.

mod common;

use std::time::Duration;

use common::with_options;
use locksmith_core::conformance::{env_url, unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

async fn connect(url: &str) -> Locker {
    let parsed = BackendUrl::parse(url).expect("url");
    within(Duration::from_secs(30), url, locksmith_redis::connect(&parsed))
        .await
        .expect("connect")
}

/// The URLs of every test topology (the TLS one with the `tls` feature).
fn every_form() -> Vec<String> {
    let mut urls = vec![
        env_url("LOCKSMITH_TEST_REDIS"),
        env_url("LOCKSMITH_TEST_REDIS_QUORUM"),
        env_url("LOCKSMITH_TEST_REDIS_SENTINEL"),
        env_url("LOCKSMITH_TEST_REDIS_CLUSTER"),
    ];
    if cfg!(feature = "tls") {
        urls.push(env_url("LOCKSMITH_TEST_REDIS_SECURE"));
    }
    urls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_ttl_is_the_default_lock_ttl() {
    common::init_logs();
    for base in every_form() {
        let url = with_options(&base, "ttl=2s");
        let shown = locksmith_core::driver::url::redact(&url);
        let locker = connect(&url).await;
        let name = unique_name("url_ttl");
        let guard = locker.lock(&name).acquire().await.expect("acquire");
        assert_eq!(guard.ttl(), Duration::from_secs(2), "{shown}: the URL's ttl");
        guard.release().await.expect("release");
        let guard = locker
            .lock(&name)
            .ttl(Duration::from_secs(3))
            .acquire()
            .await
            .expect("acquire");
        assert_eq!(guard.ttl(), Duration::from_secs(3), "{shown}: the builder's ttl wins");
        guard.release().await.expect("release");
        // The other kinds (which a quorum of masters does not serve) take it too.
        if base != env_url("LOCKSMITH_TEST_REDIS_QUORUM") {
            let permit = locker.semaphore(&name, 2).acquire().await.expect("permit");
            assert_eq!(permit.ttl(), Duration::from_secs(2), "{shown}: a semaphore permit");
            permit.release().await.expect("release");
            let lead = locker.election(&name).campaign("a").acquire().await.expect("campaign");
            assert_eq!(lead.guard().ttl(), Duration::from_secs(2), "{shown}: leadership");
            lead.resign().await.expect("resign");
        }
        // Without ttl=, locksmith-core's default.
        let plain = connect(&base).await;
        let guard = plain.lock(&name).acquire().await.expect("acquire");
        assert_eq!(guard.ttl(), locksmith_core::DEFAULT_TTL, "{shown}: no ttl=");
        guard.release().await.expect("release");
    }
}
