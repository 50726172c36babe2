//! Every call ends in time when ZooKeeper goes away or stops answering (through a proxy that cuts
//! or freezes the traffic), reconnects included: see `locksmith_core::conformance::deadlines`. Without
//! its own bounds a call here waited for the client's reconnect: 30 s, or minutes when every
//! reconnect was accepted and left unanswered.

mod common;

use std::time::Duration;

use locksmith_core::conformance::deadlines;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_in_time_when_zookeeper_goes_away_or_falls_silent() {
    let url = BackendUrl::parse(&common::env_url("LOCKSMITH_TEST_ZK")).unwrap();
    let upstream = url.hosts[0].to_addr(2181);
    let request_timeout = Duration::from_secs(2);
    deadlines::calls_end_in_time(&upstream, request_timeout, |addr| async move {
        let url = format!("zk://{addr}?session_timeout=2s&request_timeout=2s&connect_timeout=2s");
        locksmith_zk::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to ZooKeeper")
    })
    .await;
}

/// `connect_timeout` is how long `connect` tries, even when it is longer than the session
/// timeout: the ZooKeeper client stops trying a first session once its session timeout has
/// passed, and `connect` starts it over until `connect_timeout` has. A server that does not answer
/// within one session timeout (here a frozen proxy, thawed after three) is still connected to;
/// one that never answers gives `Unavailable` once `connect_timeout` has passed. (Before, the first
/// failed with the client's `Timeout` after one session timeout: a connect of the conformance
/// suite, whose session timeout is 3 s, failed so on a busy CI machine.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_tries_until_connect_timeout_not_one_session_timeout() {
    use locksmith_core::conformance::proxy::{Mode, Proxy};
    use locksmith_core::LockError;

    let url = BackendUrl::parse(&common::env_url("LOCKSMITH_TEST_ZK")).unwrap();
    let upstream = url.hosts[0].to_addr(2181);
    let session = Duration::from_secs(1);
    let connect = |addr: String, connect_timeout: &str| {
        let url = format!(
            "zk://{addr}?session_timeout={}ms&connect_timeout={connect_timeout}",
            session.as_millis()
        );
        async move { locksmith_zk::connect(&BackendUrl::parse(&url).unwrap()).await }
    };

    let slow = Proxy::start(&upstream).await;
    slow.set(Mode::FREEZE);
    let thaw = async {
        tokio::time::sleep(session * 3).await;
        slow.set(Mode::Forward);
    };
    let (connected, ()) = tokio::join!(connect(slow.addr(), "20s"), thaw);
    let locker = connected.expect("a server that answers after three session timeouts, within connect_timeout");
    let guard = locker.lock("slow-connect").try_acquire().await.unwrap().expect("free");
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();

    let silent = Proxy::start(&upstream).await;
    silent.set(Mode::FREEZE);
    let answer = locksmith_core::conformance::within(
        Duration::from_secs(30),
        "connect to a silent server",
        connect(silent.addr(), "3s"),
    )
    .await;
    assert!(matches!(answer, Err(LockError::Unavailable { .. })), "{answer:?}");
}
