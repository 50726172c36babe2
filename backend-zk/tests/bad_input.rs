//! Bad input never hangs and never panics: an unreachable ensemble is `Unavailable` within the
//! connect timeout, a malformed URL or option is `InvalidUrl` before anything is sent.

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;
use tokio::time::Instant;

/// How much later than its connect timeout `connect` may return on a busy machine: this checks
/// that it gives up, not how fast.
const SLACK: Duration = Duration::from_secs(15);

async fn connect(url: &str) -> Result<locksmith_core::Locker, LockError> {
    locksmith_zk::connect(&BackendUrl::parse(url)?).await
}

#[tokio::test]
async fn unreachable_ensemble_is_unavailable_within_the_connect_timeout() {
    // Refused ports on loopback, and an address nobody answers (TEST-NET-1: either unroutable,
    // or the SYN is never answered).
    for url in [
        "zk://127.0.0.1:1,127.0.0.1:9?connect_timeout=1s",
        "zk://192.0.2.1:2181?connect_timeout=1s",
    ] {
        let start = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(1) + SLACK, connect(url))
            .await
            .unwrap_or_else(|_| panic!("{url}: connect still running after the connect timeout + {SLACK:?}"));
        match result {
            Err(LockError::Unavailable { message, .. }) => {
                println!("{url}: Unavailable after {:?}: {message}", start.elapsed())
            }
            other => panic!("{url}: expected Unavailable, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn bad_url_options_are_invalid_url() {
    for url in [
        "zk://",                                          // no host
        "zk://127.0.0.1:21810?session_timeot=2s",         // misspelt option
        "zk://127.0.0.1:21810?session_timeout=soon",      // not a duration
        "zk://127.0.0.1:21810?session_timeout=0ms",       // zero
        "zk://127.0.0.1:21810?ttl=2s&session_timeout=3s", // alias and option together
        "zk://127.0.0.1:21810?connect_timeout=0",         // zero
        "zk://127.0.0.1:21810/zookeeper/locks",           // the server's reserved tree
        "zk://127.0.0.1:21810/a/../b",                    // not a canonical path
        "zk://127.0.0.1:notaport",                        // malformed URL
    ] {
        let result = tokio::time::timeout(Duration::from_secs(30), connect(url))
            .await
            .expect("no hang");
        assert!(
            matches!(result, Err(LockError::InvalidUrl { .. })),
            "{url}: expected InvalidUrl, got {result:?}"
        );
    }
}
