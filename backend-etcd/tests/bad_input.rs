//! Bad input: unreachable or silent endpoints, TTLs below the server's minimum, bad options.

mod common;

use std::time::Duration;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

async fn connect(url: &str) -> locksmith_core::Result<locksmith_core::Locker> {
    common::init_tracing();
    locksmith_etcd::connect(&BackendUrl::parse(url)?).await
}

/// Generous: the connect timeout plus room for a loaded machine. Only bounds a hang.
const HANG: Duration = Duration::from_secs(20);

/// A port nothing listens on: connecting fails with Unavailable (not a hang).
#[tokio::test]
async fn refused_endpoints_are_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again
    let url = format!("etcd://127.0.0.1:{port},127.0.0.1:{port}?connect_timeout=1s");
    let result = tokio::time::timeout(HANG, connect(&url)).await.expect("connect hung");
    assert!(matches!(result, Err(LockError::Unavailable { .. })), "{result:?}");
}

/// A server that accepts connections but never answers (a hung or paused process): connect
/// gives up with Unavailable at the connect timeout.
#[tokio::test]
async fn silent_endpoints_are_unavailable_within_the_connect_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            open.push(conn); // keep it open, say nothing
        }
    });
    let url = format!("etcd://127.0.0.1:{port}?connect_timeout=500ms");
    let started = tokio::time::Instant::now();
    let result = tokio::time::timeout(HANG, connect(&url)).await.expect("connect hung");
    assert!(matches!(result, Err(LockError::Unavailable { .. })), "{result:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "gave up before the connect timeout"
    );
    silent.abort();
}

/// Unknown options, bad durations, unknown layouts, missing hosts: InvalidUrl before any
/// network traffic.
#[tokio::test]
async fn bad_options_are_invalid_urls() {
    for url in [
        "etcd://127.0.0.1:1?tll=1s",
        "etcd://127.0.0.1:1?ttl=soon",
        "etcd://127.0.0.1:1?ttl=0",
        "etcd://127.0.0.1:1?ttl=48h",
        "etcd://127.0.0.1:1?connect_timeout=0ms",
        "etcd://127.0.0.1:1?request_timeout=fast",
        "etcd://127.0.0.1:1?layout=go",
        "etcd://user@127.0.0.1:1",
        "etcd://",
    ] {
        let result = connect(url).await;
        assert!(matches!(result, Err(LockError::InvalidUrl { .. })), "{url}: {result:?}");
    }
}

/// The granted TTL of the lease behind a guard, as the server reports it.
async fn granted_ttl(admin: &etcd_client::Client, key: &str) -> Duration {
    let kv = admin.kv_client().get(key, None).await.expect("get");
    let lease = kv.kvs().first().expect("key").lease();
    let ttl = admin.lease_client().time_to_live(lease, None).await.expect("ttl");
    Duration::from_secs(ttl.granted_ttl() as u64)
}

/// A TTL below a second is rounded up to whole seconds, then raised to the server's minimum:
/// the guard reports exactly the TTL the server granted. On the single test server (minimum
/// 1 s) `ttl=300ms` gives 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_second_ttls_become_whole_seconds() {
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let locker = connect(&common::with_query(&base, "ttl=300ms")).await.expect("connect");
    let g = locker
        .lock(unique_name("ttl300"))
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .expect("acquire");
    assert_eq!(g.ttl(), Duration::from_secs(1));
    assert_eq!(
        granted_ttl(&common::admin(&base).await, &g.lease().holder_id).await,
        g.ttl()
    );
    g.release().await.expect("release");
}

/// On the cluster (etcd's default timing: minimum TTL 2 s), `ttl=1s` is raised to 2 s and the
/// guard says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_below_the_server_minimum_are_raised_to_it() {
    let base = common::env_url("LOCKSMITH_TEST_ETCD_CLUSTER");
    let locker = connect(&common::with_query(&base, "ttl=300ms")).await.expect("connect");
    let g = locker.lock(unique_name("ttl_min")).acquire().await.expect("acquire");
    assert_eq!(g.ttl(), Duration::from_secs(2));
    assert_eq!(
        granted_ttl(&common::admin(&base).await, &g.lease().holder_id).await,
        g.ttl()
    );
    g.release().await.expect("release");
}
