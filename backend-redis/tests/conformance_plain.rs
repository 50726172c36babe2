//! The whole locksmith-core conformance suite against one Redis server, plain layout (the lock key is
//! the raw lock name, as redis-py / redsync use it).

mod common;

locksmith_core::conformance_tests!(common::RedisHarness::new("layout=plain").await);
locksmith_core::guarded_tests!(mutex_only: common::RedisHarness::new("layout=plain").await);
