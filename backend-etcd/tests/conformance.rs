//! The whole lockcore conformance suite against a real etcd (`LOCKSMITH_TEST_ETCD`), default
//! layout. Every locker is its own `connect()`: its own client and session lease.

mod common;

lockcore::conformance_tests!(common::EtcdHarness::plain().await);
