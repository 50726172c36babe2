//! Every call ends in time when Redis goes away or stops answering (through a proxy that cuts or
//! freezes the traffic): see `locksmith_core::conformance::deadlines`.

mod common;

use std::time::Duration;

use locksmith_core::conformance::deadlines;
use locksmith_core::driver::BackendUrl;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_in_time_when_redis_goes_away_or_falls_silent() {
    common::init_logs();
    let url = BackendUrl::parse(&common::redis_url()).unwrap();
    let upstream = url.hosts[0].to_addr(6379);
    // A request may take connect_timeout + response_timeout.
    let request_timeout = Duration::from_secs(2);
    deadlines::calls_end_in_time(&upstream, request_timeout, |addr| async move {
        common::locker(&format!("redis://{addr}?connect_timeout=1s&response_timeout=1s")).await
    })
    .await;
}
