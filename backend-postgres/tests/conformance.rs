//! The PostgreSQL backend against the shared conformance suites.

mod common;

lockcore::conformance_tests!(common::PgHarness::plain().await);
lockcore::primitive_tests!(common::PgHarness::plain().await);
