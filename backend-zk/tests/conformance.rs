//! The whole lockcore conformance suite against a real ZooKeeper (`LOCKSMITH_TEST_ZK`); every
//! locker has its own session.

mod common;

lockcore::conformance_tests!(common::ZkHarness::plain().await);
