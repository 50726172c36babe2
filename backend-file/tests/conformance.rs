//! The file backend against the shared conformance suites.

mod common;

lockcore::conformance_tests!(common::FileHarness::new());
lockcore::primitive_tests!(common::FileHarness::new());
