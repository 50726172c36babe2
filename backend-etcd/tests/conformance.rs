//! The whole locksmith-core conformance suite against a real etcd (`LOCKSMITH_TEST_ETCD`), default
//! layout: the mutex suite, the semaphore, read-write lock and election suites, and the
//! guarded-write suite. Every locker
//! is its own `connect()`: its own client and session lease. And the election suite's observer
//! behind a proxy that cuts its connection.

mod common;

use std::time::Duration;

use locksmith_core::conformance::election;
use locksmith_core::driver::BackendUrl;

locksmith_core::conformance_tests!(common::EtcdHarness::plain().await);
locksmith_core::primitive_tests!(common::EtcdHarness::plain().await);
locksmith_core::guarded_tests!(common::EtcdHarness::plain().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_rides_out_outages() {
    let harness = common::EtcdHarness::plain().await;
    let upstream = common::endpoints(&common::env_url("LOCKSMITH_TEST_ETCD")).remove(0);
    election::election_observer_rides_out_outages(&harness, &upstream, Duration::from_secs(2), |addr| async move {
        let url = format!("etcd://{addr}?ttl=2s&request_timeout=1s&connect_timeout=1s");
        locksmith_etcd::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to etcd through the proxy")
    })
    .await;
}
