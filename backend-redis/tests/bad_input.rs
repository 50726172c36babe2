//! Bad configuration and unreachable servers: clear errors, never a hang.

mod common;

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

async fn connect(url: &str) -> locksmith_core::Result<locksmith_core::Locker> {
    locksmith_redis::connect(&BackendUrl::parse(url)?).await
}

#[tokio::test]
async fn bad_urls_are_invalid_url() {
    for bad in [
        "redis://",
        "redis://127.0.0.1:16379/notadb",
        "redis://127.0.0.1:16379?layout=sideways",
        "redis://127.0.0.1:16379?no_such_option=1",
        "redis://127.0.0.1:16379?connect_timeout=soon",
        "redis://127.0.0.1:16379?prefix=a%7Bb",
        "redis://127.0.0.1:16379?fence_floor=lots",
    ] {
        let result = connect(bad).await;
        assert!(matches!(result, Err(LockError::InvalidUrl { .. })), "{bad}: {result:?}");
    }
}

#[tokio::test]
async fn refused_connection_is_unavailable() {
    // Port 1 on loopback: nothing listens there.
    let start = tokio::time::Instant::now();
    let result = connect("redis://127.0.0.1:1?connect_timeout=2s").await;
    assert!(matches!(result, Err(LockError::Unavailable { .. })), "{result:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn silent_server_is_unavailable_within_the_connect_timeout() {
    // A listener that accepts connections and never answers: a hung server.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let start = tokio::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        connect(&format!("redis://127.0.0.1:{port}?connect_timeout=500ms")),
    )
    .await
    .expect("connect hung");
    assert!(matches!(result, Err(LockError::Unavailable { .. })), "{result:?}");
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    hold.abort();
}

#[tokio::test]
async fn quorum_with_no_master_reachable_is_unavailable() {
    let result = connect("redis://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?connect_timeout=1s").await;
    match result {
        Err(LockError::Unavailable { message, .. }) => assert!(message.contains("quorum"), "{message}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_sentinel_and_cluster_urls_are_invalid_url() {
    for bad in [
        "redis+sentinel://127.0.0.1:26390",
        "redis+sentinel://127.0.0.1:26390/a/b",
        "redis-cluster://127.0.0.1:17001/1",
        "redis://127.0.0.1:16380,127.0.0.1:16381,127.0.0.1:16382?min_replicas=1",
        "redis://127.0.0.1:16379?min_replicas=99",
        "redis://127.0.0.1:16379?min_replicas=1&replica_timeout=10s",
    ] {
        let result = connect(bad).await;
        assert!(matches!(result, Err(LockError::InvalidUrl { .. })), "{bad}: {result:?}");
    }
}

#[tokio::test]
async fn sentinels_and_seeds_that_are_down_are_unavailable() {
    for url in [
        "redis+sentinel://127.0.0.1:1,127.0.0.1:2/locksmith?connect_timeout=1s",
        "redis-cluster://127.0.0.1:1,127.0.0.1:2?connect_timeout=1s",
    ] {
        let start = tokio::time::Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(30), connect(url))
            .await
            .expect("connect hung");
        assert!(
            matches!(result, Err(LockError::Unavailable { .. })),
            "{url}: {result:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{url}: took {:?}",
            start.elapsed()
        );
    }
}

#[tokio::test]
async fn a_master_name_the_sentinels_do_not_know_is_unavailable_and_says_so() {
    let url = common::sentinel_url().replace("/locksmith", "/no-such-master");
    let result = connect(&format!("{url}?connect_timeout=2s")).await;
    match result {
        Err(LockError::Unavailable { message, source }) => {
            let text = format!("{message}: {}", source.map(|s| s.to_string()).unwrap_or_default());
            assert!(
                text.contains("no-such-master") || text.to_lowercase().contains("master"),
                "{text}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Bug: a user whose ACL gives no pub/sub channels (Redis 7's default for new users,
/// `acl-pubsub-default resetchannels`) could take free locks, but an acquire that had to wait
/// was answered `NOPERM` on its `SUBSCRIBE`, which it took for an outage: `Unavailable` at its
/// deadline, and a wait for ever without one. Now it is `Denied` at once, naming the channel right
/// it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_rights_is_denied_when_it_must_wait() {
    let url = common::url_as_user("locksmith-no-channels", "no-channels-pass", &["resetchannels"], "").await;
    let locker = connect(&url).await.expect("connect");
    let holder = connect(&common::redis_url()).await.expect("connect");
    let name = locksmith_core::conformance::unique_name("no_channels");
    let free = locker
        .lock(&name)
        .acquire()
        .await
        .expect("a free lock needs no channel");
    free.release().await.expect("release");
    let held = holder.lock(&name).acquire().await.expect("acquire");
    let start = tokio::time::Instant::now();
    let waited = locker.lock(&name).timeout(Duration::from_secs(10)).acquire().await;
    assert!(matches!(&waited, Err(LockError::Denied(_))), "{waited:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "Denied only after {:?}",
        start.elapsed()
    );
    held.release().await.expect("release");
}
