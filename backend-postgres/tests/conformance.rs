//! The PostgreSQL backend against the shared conformance suites.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

lockcore::conformance_tests!(common::PgHarness::plain().await);
lockcore::primitive_tests!(common::PgHarness::plain().await);
