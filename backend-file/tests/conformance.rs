//! The file backend against the shared conformance suites.

mod common;

locksmith_core::conformance_tests!(common::FileHarness::new());
locksmith_core::primitive_tests!(common::FileHarness::new());
locksmith_core::guarded_tests!(common::FileHarness::new());
