//! The whole locksmith-core conformance suite against one Redis server, default key layout, and the
//! semaphore, read-write lock and election suites; and the election suite's observer behind a
//! proxy that cuts its connections (its pub/sub connection among them).

mod common;

use std::time::Duration;

use locksmith_core::conformance::election;
use locksmith_core::driver::BackendUrl;

locksmith_core::conformance_tests!(common::RedisHarness::new("").await);
locksmith_core::guarded_tests!(common::RedisHarness::new("").await);
locksmith_core::primitive_tests!(common::RedisHarness::new("").await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_observer_rides_out_outages() {
    common::init_logs();
    let harness = common::RedisHarness::new("").await;
    let url = BackendUrl::parse(&harness.url).unwrap();
    let upstream = url.hosts[0].to_addr(6379);
    let db = match url.path.as_str() {
        "" => String::new(),
        path => format!("/{path}"),
    };
    election::election_observer_rides_out_outages(&harness, &upstream, Duration::from_secs(2), |addr| async move {
        common::locker(&format!(
            "redis://{addr}{db}?ttl=2s&connect_timeout=1s&response_timeout=1s"
        ))
        .await
    })
    .await;
}
