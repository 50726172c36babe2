//! The MySQL backend (on the MariaDB of `scripts/backends`) against the shared conformance
//! suites, and the election suite's observer behind a proxy that cuts its connections.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::election;
use locksmith_core::driver::BackendUrl;

locksmith_core::conformance_tests!(common::MyHarness::plain().await);
locksmith_core::primitive_tests!(common::MyHarness::plain().await);
locksmith_core::guarded_tests!(common::MyHarness::plain().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_rides_out_outages() {
    let harness = common::MyHarness::plain().await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let upstream = url.hosts[0].to_addr(3306);
    let through = harness.url.replacen(&upstream, "{addr}", 1);
    election::election_observer_rides_out_outages(&harness, &upstream, Duration::from_secs(2), |addr| async move {
        let sep = if through.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{sep}ttl=2s&request_timeout=1s&connect_timeout=1s",
            through.replace("{addr}", &addr)
        );
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to mysql through the proxy")
    })
    .await;
}
