//! The whole lockcore conformance suite on Redis Sentinel (`LOCKSMITH_TEST_REDIS_SENTINEL`: the
//! master its sentinels name, found and followed through them).

mod common;

lockcore::conformance_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
