//! Behind PgBouncer in session pooling mode (`LOCKSMITH_TEST_PGBOUNCER`, started by
//! `scripts/backends up`), the mode the crate docs claim: every shared conformance suite passes
//! through it. (Transaction pooling is not claimed: LISTEN needs a session of its own.)

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

/// The pooler's URL.
fn pgbouncer_url() -> String {
    std::env::var("LOCKSMITH_TEST_PGBOUNCER")
        .expect("LOCKSMITH_TEST_PGBOUNCER is not set: run `eval \"$(scripts/backends up single)\"` first")
}

locksmith_core::conformance_tests!(common::PgHarness::at(pgbouncer_url()).await);
locksmith_core::primitive_tests!(common::PgHarness::at(pgbouncer_url()).await);
