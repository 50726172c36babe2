//! The whole lockcore conformance suite — the mutex, and the semaphore, read-write lock and
//! election suites — against a real ZooKeeper (`LOCKSMITH_TEST_ZK`); every locker has its own
//! session.

mod common;

lockcore::conformance_tests!(common::ZkHarness::plain().await);
lockcore::primitive_tests!(common::ZkHarness::plain().await);
