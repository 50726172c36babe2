//! The tables' format version: a locker that finds a previous version (1: no functions; 2: no
//! data table; 3: no `locks.since`; 4: tokens without the clock's floor; 5: grants notified
//! without their tokens; 6: no holder kept in the lock's row, the counter named `last_token`)
//! migrates it, once, when its user may; a user without the
//! owner's rights is told to run `locksmith init`; a newer version is refused.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;

/// Makes the tables of `schema` look like version 6: the holders kept in lock rows moved into
/// the entries (as a full step would), the row's holder columns, `queued` and the functions that
/// read them gone, the counter named `last_token` (version 6's `grant_alone` is not put back: the
/// migration drops it). Every older version starts from it.
fn back_to_version_6(schema: &str) -> String {
    format!(
        "SELECT \"{schema}\".lock_row(segment) FROM \"{schema}\".locks WHERE holder IS NOT NULL; \
         DROP FUNCTION \"{schema}\".lock_row(text); \
         DROP FUNCTION \"{schema}\".renew_leases(text, text[], text[]); \
         ALTER TABLE \"{schema}\".locks DROP COLUMN queued, DROP COLUMN holder, DROP COLUMN holder_owner, \
         DROP COLUMN holder_ttl_ms, DROP COLUMN holder_expires, DROP COLUMN holder_pid, DROP COLUMN holder_host; \
         ALTER TABLE \"{schema}\".locks RENAME COLUMN token TO last_token; \
         UPDATE \"{schema}\".meta SET value = '6' WHERE key = 'version'"
    )
}

/// Makes the tables of `schema` look like version 1 (what the release before last created).
fn back_to_version_1(schema: &str) -> String {
    format!(
        "{}; DROP FUNCTION IF EXISTS \"{schema}\".grant_alone(text, text, text, bigint, integer, text); \
         DROP FUNCTION \"{schema}\".leave_exclusive(text, text, text); \
         DROP TABLE \"{schema}\".data; \
         ALTER TABLE \"{schema}\".locks DROP COLUMN since; \
         UPDATE \"{schema}\".meta SET value = '1' WHERE key = 'version'",
        back_to_version_6(schema)
    )
}

/// Makes the tables of `schema` look like version 2 (what the previous release created).
fn back_to_version_2(schema: &str) -> String {
    format!(
        "{}; DROP TABLE \"{schema}\".data; \
         ALTER TABLE \"{schema}\".locks DROP COLUMN since; \
         UPDATE \"{schema}\".meta SET value = '2' WHERE key = 'version'",
        back_to_version_6(schema)
    )
}

/// Makes the tables of `schema` look like version 3 (no `locks.since`), with the functions of
/// version 3 (which read no `since`): what a release before this one left.
fn back_to_version_3(schema: &str) -> String {
    format!(
        "{}; ALTER TABLE \"{schema}\".locks DROP COLUMN since; \
         UPDATE \"{schema}\".meta SET value = '3' WHERE key = 'version'",
        back_to_version_6(schema)
    )
}

/// Makes the tables of `schema` look like version 4: the functions give the next token without
/// the clock's floor (`last_token + 1`), what a release before this one left.
fn back_to_version_4(schema: &str) -> String {
    format!(
        "{}; CREATE OR REPLACE FUNCTION \"{schema}\".token_after(p_last bigint) RETURNS bigint \
         LANGUAGE sql AS $$ SELECT p_last + 1 $$; \
         UPDATE \"{schema}\".meta SET value = '4' WHERE key = 'version'",
        back_to_version_6(schema)
    )
}

/// Makes the tables of `schema` look like version 5: its `leave_exclusive` notified the new
/// holder without its fencing token (`g<id>`); here it is gone, as the migration must put it
/// back in its new form.
fn back_to_version_5(schema: &str) -> String {
    format!(
        "{}; DROP FUNCTION \"{schema}\".leave_exclusive(text, text, text); \
         UPDATE \"{schema}\".meta SET value = '5' WHERE key = 'version'",
        back_to_version_6(schema)
    )
}

/// The tables' version in `schema`, as the owner reads it.
async fn version_of(schema: &str) -> Vec<String> {
    common::query_as_owner(&format!("SELECT value FROM \"{schema}\".meta WHERE key = 'version'")).await
}

async fn connect(url: &str) -> locksmith_core::Result<locksmith_core::Locker> {
    locksmith_postgres::connect(&BackendUrl::parse(url).unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_migrates_version_1_once_and_locks_work() {
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    let held = connect(&harness.url).await.unwrap();
    let guard = held.lock("kept").acquire().await.unwrap();
    common::run_as_owner(&back_to_version_1(&schema)).await;

    // Two lockers starting together: both connect, the functions are back, the version is 7.
    let (a, b) = tokio::join!(connect(&harness.url), connect(&harness.url));
    let (a, b) = (a.unwrap(), b.unwrap());
    let version = version_of(&schema).await;
    assert_eq!(version, ["7"]);
    // The lock held across the migration is still held, and its token sequence goes on.
    assert!(a.lock("kept").try_acquire().await.unwrap().is_none());
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let next = b.lock("kept").try_acquire().await.unwrap().expect("free");
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    for locker in [held, a, b] {
        locker.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_rights_is_told_to_run_init_and_newer_tables_are_refused() {
    let harness = common::PgHarness::least_privilege().await;
    let schema = harness.schema.clone();
    common::run_as_owner(&back_to_version_1(&schema)).await;
    match connect(&harness.url).await {
        Err(LockError::Denied(message)) => assert!(message.contains("locksmith init"), "{message}"),
        other => panic!("expected Denied, got {:?}", other.map(|_| ())),
    }
    // The owner migrates (what `locksmith init` does), then the user connects.
    let owner_url = format!("{}?schema={schema}", common::server_url());
    connect(&owner_url).await.unwrap().shutdown().await.unwrap();
    connect(&harness.url).await.unwrap().shutdown().await.unwrap();

    common::run_as_owner(&format!(
        "UPDATE \"{schema}\".meta SET value = '8' WHERE key = 'version'"
    ))
    .await;
    match connect(&owner_url).await {
        Err(LockError::Protocol(message)) => assert!(message.contains("version 8"), "{message}"),
        other => panic!("expected a version error, got {:?}", other.map(|_| ())),
    }
}

/// Version 2 (no data table) is migrated by its owner, a lock held across it stays held, and its
/// guarded writes work after; a user without the owner's rights is told to run `locksmith init`
/// before, and after the migration is told which grants its guarded writes lack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_gets_the_data_table_and_users_are_told_about_grants() {
    let harness = common::PgHarness::least_privilege().await;
    let schema = harness.schema.clone();
    let owner_url = format!("{}?schema={schema}", common::server_url());
    let owner = connect(&owner_url).await.unwrap();
    let guard = owner.lock("kept").acquire().await.unwrap();
    common::run_as_owner(&back_to_version_2(&schema)).await;
    match connect(&harness.url).await {
        Err(LockError::Denied(message)) => assert!(message.contains("locksmith init"), "{message}"),
        other => panic!("expected Denied, got {:?}", other.map(|_| ())),
    }
    connect(&owner_url).await.unwrap().shutdown().await.unwrap();
    let version = version_of(&schema).await;
    assert_eq!(version, ["7"]);
    guard
        .guarded()
        .put("after-migration", "owner")
        .await
        .expect("the owner's guarded write");

    let user = connect(&harness.url).await.unwrap();
    let user_guard = user.lock("user's").acquire().await.unwrap();
    match user_guard.guarded().put("k", "v").await {
        Err(LockError::Denied(message)) => assert!(message.contains("init --sql --grant"), "{message}"),
        other => panic!("expected Denied, got {other:?}"),
    }
    // `locksmith init --sql --grant`'s text, run by the owner: the grants again, with the new one.
    let setup = locksmith_postgres::setup_sql(&BackendUrl::parse(&owner_url).unwrap(), Some("locksmith_app")).unwrap();
    common::run_as_owner(&setup).await;
    user_guard
        .guarded()
        .put("k", "v")
        .await
        .expect("the user's guarded write, granted");
    user_guard.release().await.unwrap();
    guard.release().await.unwrap();
    for locker in [owner, user] {
        locker.shutdown().await.unwrap();
    }
}

/// Version 3 (no `locks.since`) is migrated by a locker of its owner while another holds a lock
/// and a third waits for it: the holder keeps it, the waiter is handed it with a larger token,
/// and every queue reads from its lock's start afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_3_gets_the_queue_start_and_a_queue_in_use_goes_on() {
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    let holder = connect(&harness.url).await.unwrap();
    let waiter = connect(&harness.url).await.unwrap();
    // Used before the migration: entries deleted and kept, as a version 3 release left them.
    for _ in 0..20 {
        holder.lock("kept").acquire().await.unwrap().release().await.unwrap();
    }
    let guard = holder.lock("kept").acquire().await.unwrap();
    common::run_as_owner(&back_to_version_3(&schema)).await;
    let queued = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("kept").acquire().await })
    };
    let migrating = connect(&harness.url).await.unwrap();
    let version = version_of(&schema).await;
    assert_eq!(version, ["7"]);
    assert_eq!(
        common::entries_before_their_start(&schema).await,
        ["0"],
        "an entry before its queue's start"
    );
    assert!(
        migrating.lock("kept").try_acquire().await.unwrap().is_none(),
        "held across the migration"
    );
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let handed = queued.await.unwrap().expect("the waiter is handed the lock");
    assert!(handed.fencing_token() > token);
    handed.release().await.unwrap();
    // After a few more cycles every queue starts past what was deleted, and still excludes.
    for _ in 0..5 {
        migrating.lock("kept").acquire().await.unwrap().release().await.unwrap();
    }
    // (The row '~pruned' is no lock's: the high-water mark of pruned tokens.)
    let starts = common::query_as_owner(&format!(
        "SELECT since FROM \"{schema}\".locks WHERE segment <> '~pruned'"
    ))
    .await;
    assert!(starts.iter().all(|s| s != "0"), "{starts:?}");
    assert_eq!(
        common::entries_before_their_start(&schema).await,
        ["0"],
        "an entry before its queue's start"
    );
    let held = migrating.lock("kept").acquire().await.unwrap();
    assert!(
        waiter.lock("kept").try_acquire().await.unwrap().is_none(),
        "granted twice"
    );
    held.release().await.unwrap();
    for locker in [holder, waiter, migrating] {
        locker.shutdown().await.unwrap();
    }
}

/// Version 4 gave tokens without the clock's floor: after the migration a lock whose counter went
/// back (a server that lost the grants since a backup) still gets a token above the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_4_gets_tokens_above_the_clock() {
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    common::run_as_owner(&back_to_version_4(&schema)).await;
    let locker = connect(&harness.url).await.unwrap();
    let version = version_of(&schema).await;
    assert_eq!(version, ["7"]);
    let first = locker.lock("kept").acquire().await.unwrap();
    let earlier = first.fencing_token();
    first.release().await.unwrap();
    common::run_as_owner(&format!("UPDATE \"{schema}\".locks SET token = 0")).await;
    let next = locker.lock("kept").acquire().await.unwrap();
    assert!(
        next.fencing_token() > earlier,
        "token {} after {earlier}",
        next.fencing_token()
    );
    next.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// Version 5 notified grants without their tokens: after the migration `leave_exclusive` names
/// the new holder with its token (`h<id>:<token>`), and a hand-over works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_5_notifies_grants_with_their_tokens() {
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    common::run_as_owner(&back_to_version_5(&schema)).await;
    let locker = connect(&harness.url).await.unwrap();
    let version = version_of(&schema).await;
    assert_eq!(version, ["7"]);
    let source = common::query_as_owner(&format!(
        "SELECT prosrc FROM pg_proc WHERE proname = 'leave_exclusive' AND pronamespace = '\"{schema}\"'::regnamespace"
    ))
    .await;
    assert!(source.len() == 1 && source[0].contains("'h' ||"), "{source:?}");
    let first = locker.lock("kept").acquire().await.unwrap();
    let other = connect(&harness.url).await.unwrap();
    let waiting = tokio::spawn(async move { other.lock("kept").acquire().await.map(|g| (other, g)) });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let earlier = first.fencing_token();
    first.release().await.unwrap();
    let (other, next) = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("not handed over")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > earlier);
    next.release().await.unwrap();
    other.shutdown().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// Version 6 kept every holder in the entries and named the counter `last_token`: a holder and a
/// waiter of that time keep their places across the migration (the hand-over works, with a larger
/// token), and a locker of the older release still running stops at its next step, its statement
/// naming `last_token` (were it to go on, it would step on queues without seeing the holders the
/// new release keeps in lock rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_6_keeps_its_queues_and_stops_older_lockers() {
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    let holder = connect(&harness.url).await.unwrap();
    let guard = holder.lock("kept").acquire().await.unwrap();
    common::run_as_owner(&back_to_version_6(&schema)).await;
    // An older locker's step, prepared before the migration as its connection would have it.
    let (old, connection) = tokio_postgres::connect(&common::server_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let old_step = old
        .prepare(&format!(
            "INSERT INTO \"{schema}\".locks (segment) VALUES ($1) ON CONFLICT (segment) \
             DO UPDATE SET last_token = \"{schema}\".locks.last_token RETURNING last_token"
        ))
        .await
        .unwrap();
    let waiter = connect(&harness.url).await.unwrap();
    assert_eq!(version_of(&schema).await, ["7"]);
    let err = old
        .query_one(&old_step, &[&"mutex/kept"])
        .await
        .expect_err("an older locker's step ran on the migrated tables");
    let message = err.as_db_error().map(|e| e.message().to_owned()).unwrap_or_default();
    assert!(message.contains("last_token"), "{err:?}");
    assert!(
        waiter.lock("kept").try_acquire().await.unwrap().is_none(),
        "held across the migration"
    );
    let queued = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("kept").acquire().await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let handed = tokio::time::timeout(std::time::Duration::from_secs(10), queued)
        .await
        .expect("not handed over")
        .unwrap()
        .unwrap();
    assert!(handed.fencing_token() > token);
    handed.release().await.unwrap();
    for locker in [holder, waiter] {
        locker.shutdown().await.unwrap();
    }
}
