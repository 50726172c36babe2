//! Lockers whose database user has only the grants of `locksmith init --sql --grant` (the grant
//! list of the crate docs): the shared suites pass on them, and without the set-up they fail at
//! connect with a clear `Denied` that says what to do.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use common::{app_url, run_as_owner, server_url};
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;
use locksmith_postgres::setup_sql;

locksmith_core::conformance_tests!(@tests common::PgHarness::least_privilege().await;
    mutex::mutual_exclusion, mutex::waiters_are_fifo, mutex::fencing_tokens_increase,
    mutex::crashed_holder_expires, mutex::lost_fires_when_removed_behind_back,
    mutex::cancellation_storm_leaves_nothing, mutex::inspect_reports_holder_and_waiters,
    lifecycle::shutdown_releases_everything);
locksmith_core::primitive_tests!(@tests common::PgHarness::least_privilege().await;
    semaphore::semaphore_never_over_grants, rwlock::rwlock_never_mixes_readers_and_writers,
    election::election_one_leader_at_a_time_in_order);
locksmith_core::conformance_tests!(@tests common::PgHarness::least_privilege().await;
    guarded::guarded_writes_apply_while_held, guarded::guarded_write_of_a_lost_lock_never_lands);

async fn connect_app(schema: &str) -> locksmith_core::Result<locksmith_core::Locker> {
    locksmith_postgres::connect(&BackendUrl::parse(&format!("{}?schema={schema}", app_url()))?).await
}

fn assert_denied_with_hint(result: locksmith_core::Result<locksmith_core::Locker>, what: &str) {
    match result {
        Err(LockError::Denied(message)) => {
            assert!(message.contains("permission denied"), "{what}: {message}");
            assert!(
                !message.contains("locksmith-app-pw"),
                "{what}: the password shows: {message}"
            );
        }
        Err(other) => panic!("{what}: expected Denied, got {other:?}"),
        Ok(_) => panic!("{what}: a user without rights connected"),
    }
}

#[tokio::test]
async fn without_the_set_up_a_user_without_rights_is_told_what_to_do() {
    // No tables yet: the locker would have to create them, and may not.
    let fresh = format!("lp_{:016x}", rand::random::<u64>());
    let result = connect_app(&fresh).await;
    if let Err(LockError::Denied(message)) = &result {
        assert!(message.contains("locksmith init"), "no hint: {message}");
    }
    assert_denied_with_hint(result, "no tables");

    // Tables made by the owner, but no grants: refused as well, at connect.
    let bare = format!("lp_{:016x}", rand::random::<u64>());
    let owner = BackendUrl::parse(&format!("{}?schema={bare}", server_url())).unwrap();
    run_as_owner(&setup_sql(&owner, None).unwrap()).await;
    assert_denied_with_hint(connect_app(&bare).await, "no grants");

    // The grants of the docs: it connects, locks and shuts down.
    run_as_owner(&setup_sql(&owner, Some("locksmith_app")).unwrap()).await;
    let locker = connect_app(&bare).await.expect("connecting with the grants");
    let guard = locker
        .lock("job")
        .try_acquire()
        .await
        .expect("locking with the grants")
        .expect("free");
    assert!(guard.fencing_token() > 0);
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

#[test]
fn the_set_up_sql_is_one_transaction_and_quotes_the_role() {
    let url = BackendUrl::parse("postgres://admin@db/app?schema=s1").unwrap();
    let sql = setup_sql(&url, Some("odd\"role")).unwrap();
    assert!(sql.trim_start().starts_with("--") && sql.contains("BEGIN;") && sql.contains("COMMIT;"));
    assert!(sql.contains("TO \"odd\"\"role\";"), "{sql}");
    assert!(!setup_sql(&url, None).unwrap().contains("GRANT"));
    assert!(matches!(
        setup_sql(&BackendUrl::parse("postgres://h/db?schema=Bad").unwrap(), None),
        Err(LockError::InvalidUrl { .. })
    ));
}

/// A locker whose user has only the grants of `init --sql --grant` prunes: idle lock rows go
/// (`DELETE` on `locks` is among the grants), and a name used again goes on above its token.
#[tokio::test]
async fn a_user_with_the_grants_prunes() {
    use locksmith_core::conformance::Harness;
    let h = common::PgHarness::least_privilege().await;
    let locker = h.locker().await;
    let guard = locker.lock("lp-prune").acquire().await.unwrap();
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let report = locker
        .prune(std::time::Duration::ZERO, false)
        .await
        .expect("pruning as the app user");
    assert!(report.locks >= 1, "{report:?}");
    let again = locker.lock("lp-prune").acquire().await.unwrap();
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A user granted what an earlier release printed (no `DELETE` on `locks`) locks as before, and
/// its prune is refused with what to grant, not taken for an outage.
#[tokio::test]
async fn a_user_with_the_older_grants_is_told_what_pruning_needs() {
    use locksmith_core::conformance::Harness;
    let h = common::PgHarness::least_privilege().await;
    run_as_owner(&format!("REVOKE DELETE ON \"{}\".locks FROM locksmith_app", h.schema)).await;
    let locker = h.locker().await;
    locker.lock("lp-old").acquire().await.unwrap().release().await.unwrap();
    match locker.prune(std::time::Duration::ZERO, false).await {
        Err(LockError::Denied(message)) => {
            assert!(message.contains("DELETE") && message.contains("--grant"), "{message}")
        }
        other => panic!("expected Denied, got {other:?}"),
    }
    locker.shutdown().await.unwrap();
}
