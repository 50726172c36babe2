//! The whole lockcore conformance suite against one Redis server, default key layout, and the
//! semaphore, read-write lock and election suites.

mod common;

lockcore::conformance_tests!(common::RedisHarness::new("").await);
lockcore::primitive_tests!(common::RedisHarness::new("").await);
