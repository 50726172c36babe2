//! Connections that go silent without closing (a flow a NAT or firewall dropped, while new
//! connections still work): the locker notices, drops them and opens new ones. A proxy between
//! a locker and the server freezes the connections open at one moment and forwards the new ones
//! (`Mode::FreezeExisting`).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::proxy::{Mode, Proxy};
use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

/// A database of its own, a locker connected to the server directly and a proxy in front of the
/// server, with the URL of a locker behind it (`ttl=3s`, `request_timeout=1s`).
async fn setup() -> (common::MyHarness, Locker, Proxy, String) {
    let harness = common::MyHarness::plain().await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let upstream = url.hosts[0].to_addr(3306);
    let proxy = Proxy::start(&upstream).await;
    let direct = locksmith_mysql::connect(&BackendUrl::parse(&harness.url_with("ttl=3s")).unwrap())
        .await
        .unwrap();
    let proxied = harness
        .url_with("ttl=3s&request_timeout=1s&connect_timeout=1s")
        .replacen(&upstream, &proxy.addr(), 1);
    (harness, direct, proxy, proxied)
}

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

/// Every connection of a holder's locker goes silent: its renewal times out, the connection is
/// dropped, and the next renewal goes over a new one; the lease outlives its TTL twice over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_outlive_a_silent_steps_connection() {
    let (_harness, direct, proxy, url) = setup().await;
    let locker = connect(&url).await;
    let name = unique_name("silent_leases");
    let guard = locker.lock(&name).acquire().await.unwrap();
    proxy.set(Mode::FreezeExisting);
    let until = tokio::time::Instant::now() + Duration::from_secs(7);
    while tokio::time::Instant::now() < until {
        assert!(guard.is_held(), "lost: {:?}", guard.lost_reason());
        assert!(
            direct.lock(&name).try_acquire().await.unwrap().is_none(),
            "the lock was granted to another locker while its holder renewed it"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}

/// A waiter's wait connection (and steps' connection) go silent: the `SLEEP` outlives its bound,
/// the wait connection is opened again, the waiter steps again, and it gets the lock when the
/// holder (connected directly) releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_granted_after_its_wait_connection_went_silent() {
    let (_harness, direct, proxy, url) = setup().await;
    let waiter_locker = connect(&url).await;
    let name = unique_name("silent_wait");
    let held = direct.lock(&name).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let (locker, name) = (waiter_locker.clone(), name.clone());
        async move { locker.lock(&name).timeout(Duration::from_secs(30)).acquire().await }
    });
    until_waiters(&direct, &name, 1, Duration::from_secs(10)).await;
    proxy.set(Mode::FreezeExisting);
    tokio::time::sleep(Duration::from_secs(3)).await;
    held.release().await.unwrap();
    let guard = within(Duration::from_secs(15), "the waiter behind silent connections", waiter)
        .await
        .unwrap()
        .expect("the waiter got the lock");
    guard.release().await.unwrap();
    waiter_locker.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}
