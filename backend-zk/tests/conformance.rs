//! The whole locksmith-core conformance suite — the mutex, and the semaphore, read-write lock and
//! election suites — against a real ZooKeeper (`LOCKSMITH_TEST_ZK`); every locker has its own
//! session. And the election suite's observer behind a proxy that cuts its connection, the second
//! time for longer than its session timeout (the session expires).

mod common;

use std::time::Duration;

use locksmith_core::conformance::election;
use locksmith_core::driver::BackendUrl;

locksmith_core::conformance_tests!(common::ZkHarness::plain().await);
locksmith_core::primitive_tests!(common::ZkHarness::plain().await);
locksmith_core::guarded_tests!(common::ZkHarness::plain().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_rides_out_outages() {
    const SESSION: Duration = Duration::from_secs(4);
    let harness = common::ZkHarness::plain().await;
    let upstream = BackendUrl::parse(&common::env_url("LOCKSMITH_TEST_ZK")).unwrap().hosts[0].to_addr(2181);
    election::election_observer_rides_out_outages(&harness, &upstream, SESSION, |addr| async move {
        let url = format!(
            "zk://{addr}{}?session_timeout={}ms&request_timeout=2s&connect_timeout=2s",
            common::NAMESPACE,
            SESSION.as_millis()
        );
        locksmith_zk::connect(&BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect to ZooKeeper through the proxy")
    })
    .await;
}
