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
