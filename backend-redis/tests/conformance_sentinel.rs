//! The whole locksmith-core conformance suite on Redis Sentinel (`LOCKSMITH_TEST_REDIS_SENTINEL`: the
//! master its sentinels name, found and followed through them), with the semaphore,
//! read-write lock and election suites.

mod common;

locksmith_core::conformance_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
locksmith_core::guarded_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
locksmith_core::primitive_tests!(common::RedisHarness::on(&common::sentinel_url()).await);
