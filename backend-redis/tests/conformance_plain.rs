//! The whole lockcore conformance suite against one Redis server, plain layout (the lock key is
//! the raw lock name, as redis-py / redsync use it).

mod common;

lockcore::conformance_tests!(common::RedisHarness::new("layout=plain").await);
lockcore::guarded_tests!(mutex_only: common::RedisHarness::new("layout=plain").await);
