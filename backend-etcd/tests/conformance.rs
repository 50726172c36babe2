//! The whole lockcore conformance suite against a real etcd (`LOCKSMITH_TEST_ETCD`), default
//! layout: the mutex suite and the semaphore, read-write lock and election suites. Every locker
//! is its own `connect()`: its own client and session lease.

mod common;

lockcore::conformance_tests!(common::EtcdHarness::plain().await);
lockcore::primitive_tests!(common::EtcdHarness::plain().await);
