//! The whole lockcore conformance suite on Redis Sentinel (`LOCKSMITH_TEST_REDIS_SENTINEL`: the
//! master its sentinels name, found and followed through them), with the semaphore,
//! read-write lock and election suites.

mod common;

lockcore::conformance_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
lockcore::guarded_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
lockcore::primitive_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
