//! The whole locksmith-core conformance suite on Redis Cluster (`LOCKSMITH_TEST_REDIS_CLUSTER`: three
//! masters, each with a replica): every lock's keys in one slot, locks spread over the masters. With
//! the semaphore, read-write lock and election suites.

mod common;

locksmith_core::conformance_tests!(common::RedisHarness::on(&common::cluster_url()).await);
locksmith_core::guarded_tests!(common::RedisHarness::on(&common::cluster_url()).await);
locksmith_core::primitive_tests!(common::RedisHarness::on(&common::cluster_url()).await);
