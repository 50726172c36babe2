//! Every call ends in time when etcd goes away or stops answering (through a proxy that cuts or
//! freezes the traffic): see `locksmith_core::conformance::deadlines`.

mod common;

use std::time::Duration;

use locksmith_core::conformance::deadlines;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_in_time_when_etcd_goes_away_or_falls_silent() {
    common::init_tracing();
    let upstream = common::endpoints(&common::env_url("LOCKSMITH_TEST_ETCD")).remove(0);
    let request_timeout = Duration::from_secs(2);
    deadlines::calls_end_in_time(&upstream, request_timeout, |addr| async move {
        let url = format!("etcd://{addr}?ttl=2s&request_timeout=2s&connect_timeout=2s");
        locksmith_etcd::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to etcd")
    })
    .await;
}
