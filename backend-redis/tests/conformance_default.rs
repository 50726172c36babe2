//! The whole lockcore conformance suite against one Redis server, default key layout.

mod common;

lockcore::conformance_tests!(common::RedisHarness::new("").await);
