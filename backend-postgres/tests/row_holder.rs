//! The holder of a lock that nobody else wanted is kept in the lock's own row (schema version 7,
//! `src/sql/schema.sql`): an uncontended acquire and release update that row and add no entry.
//! What must hold across its move into the entries, which the first full step on the lock makes
//! (a waiter that joins; a busy `try_acquire` answers from the row and moves nothing): the lease
//! keeps being renewed, guarded writes still land, `inspect` and `list` still see it, the release
//! hands the lock over; and a locker's shutdown frees what it left in a row.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::LockName;

/// How many entries were ever added in `schema` (the entries' sequence).
async fn entries_added(schema: &str) -> i64 {
    let sql = format!("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM \"{schema}\".entries_seq_seq");
    common::query_as_owner(&sql).await[0].parse().unwrap()
}

/// Uncontended cycles add no entry: the grant and the release are updates of the lock's row. (On
/// version 6 every cycle added one entry and deleted it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_cycles_add_no_entry() {
    let harness = common::PgHarness::plain().await;
    let locker = harness.locker().await;
    let before = entries_added(&harness.schema).await;
    let mut last = 0;
    for i in 0..20 {
        let guard = match i % 2 {
            0 => locker.lock("quiet").acquire().await.unwrap(),
            _ => locker.lock("quiet").try_acquire().await.unwrap().expect("free"),
        };
        assert!(guard.fencing_token() > last, "tokens go up");
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    assert_eq!(
        entries_added(&harness.schema).await,
        before,
        "an uncontended cycle added an entry"
    );
    locker.shutdown().await.unwrap();
}

/// A holder kept in the row whose lock a waiter then queues for: its lease is renewed in its new
/// place past several TTLs, its guarded writes land, `inspect` names it with its token, and its
/// release hands the lock to the waiter with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_moved_into_the_queue_keeps_its_lease() {
    let harness = common::PgHarness::plain().await;
    let (a, b) = (harness.locker().await, harness.locker().await);
    let ttl = Duration::from_millis(900);
    let held = a.lock("moved").ttl(ttl).acquire().await.unwrap();
    let token = held.fencing_token();
    held.guarded().put("k", b"in the row".to_vec()).await.unwrap();
    let info = a.inspect("moved").await.unwrap();
    let holder = info.holder.expect("inspect sees the holder kept in the row");
    assert_eq!(holder.fencing_token, Some(token));
    assert_eq!(b.list("").await.unwrap().len(), 1, "list sees it");

    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("moved").ttl(ttl).acquire().await })
    };
    // The waiter's join moved the holder into the entries: it is a holder and a waiter there.
    wait_for_entries(&harness, "moved", 2).await;
    let name = LockName::new("moved").unwrap();
    let entries = harness
        .look
        .entries(locksmith_core::Family::Mutex, &name)
        .await
        .unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries[0].starts_with("holder:"), "{entries:?}");
    // Three TTLs: renewed where it is now.
    tokio::time::sleep(ttl * 3).await;
    assert!(held.lost_reason().is_none(), "lost: {:?}", held.lost_reason());
    assert!(!waiting.is_finished(), "the waiter was granted a held lock");
    held.guarded().put("k", b"in the queue".to_vec()).await.unwrap();
    assert_eq!(a.inspect("moved").await.unwrap().waiters, 1);

    held.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("not handed over")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > token);
    assert_eq!(
        next.guarded().get("k").await.unwrap().as_deref(),
        Some(&b"in the queue"[..])
    );
    next.release().await.unwrap();
    // Free again, and nobody queued: the next holder is kept in the row again.
    let again = a.lock("moved").try_acquire().await.unwrap().expect("free");
    again.release().await.unwrap();
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}

/// A lease left in a row without a release (its guard abandoned, as a caller that lost track of
/// it) is freed by its locker's shutdown at once, not after its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_frees_a_lease_left_in_a_row() {
    let harness = common::PgHarness::plain().await;
    let (a, b) = (harness.locker().await, harness.locker().await);
    let _lease = left_held(&a, "left", Duration::from_secs(60)).await;
    assert!(b.lock("left").try_acquire().await.unwrap().is_none(), "held");
    a.shutdown().await.unwrap();
    let next = b
        .lock("left")
        .try_acquire()
        .await
        .unwrap()
        .expect("shutdown left the lock held until its TTL");
    next.release().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A lease of mutex `name` taken by `locker` for `ttl` and left as it is (its guard abandoned:
/// nothing renews or releases it).
async fn left_held(locker: &locksmith_core::Locker, name: &str, ttl: Duration) -> locksmith_core::driver::Lease {
    locker.lock(name).ttl(ttl).acquire().await.unwrap().abandon()
}

/// A locker of `harness`'s schema whose requests time out after 1 s.
async fn impatient_locker(harness: &common::PgHarness) -> locksmith_core::Locker {
    let url = format!("{}&request_timeout=1s", harness.url);
    locksmith_postgres::connect(&locksmith_core::driver::BackendUrl::parse(&url).unwrap())
        .await
        .unwrap()
}

/// Waits (at most 2 s) until mutex `name` has `n` entries in the tables.
async fn wait_for_entries(harness: &common::PgHarness, name: &str, n: usize) {
    let name = LockName::new(name).unwrap();
    for _ in 0..100 {
        let entries = harness.look.entries(locksmith_core::Family::Mutex, &name).await;
        if entries.unwrap().len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lease left in a row whose lock a waiter queues for (its join moved the holder into the
/// entries): the locker's shutdown hands the lock to that waiter at once, not after the lease's
/// TTL. (Before, the shutdown's step that passes the lock on saw no change of its own and granted
/// nobody: the waiter slept until the 60 s lease would have expired.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_a_lease_left_in_a_row_to_its_waiter() {
    let harness = common::PgHarness::plain().await;
    let (a, b) = (harness.locker().await, harness.locker().await);
    let _lease = left_held(&a, "left", Duration::from_secs(60)).await;
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("left").timeout(Duration::from_secs(20)).acquire().await })
    };
    wait_for_entries(&harness, "left", 2).await;
    a.shutdown().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter was not handed the lock at the holder's shutdown")
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A release of a lease kept in a row that got no answer (the server held its statements up past
/// the request timeout, and they never ran) leaves the lease to the locker's shutdown, which
/// frees the row. (Before, the release forgot the row before it sent anything, and the shutdown
/// left the lock held until its TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_frees_a_row_whose_release_got_no_answer() {
    let harness = common::PgHarness::plain().await;
    let a = impatient_locker(&harness).await;
    let b = harness.locker().await;
    let lease = left_held(&a, "unanswered", Duration::from_secs(60)).await;
    let admin = common::hold_row(&harness.schema, "unanswered").await;
    let released = a.backend().release(&lease).await;
    assert!(released.is_err(), "the release was answered: {released:?}");
    // The statements of that release still wait for the row on the server: end their sessions,
    // so that they never run.
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap();
    admin.batch_execute("ROLLBACK").await.unwrap();
    a.shutdown().await.unwrap();
    let next = b
        .lock("unanswered")
        .try_acquire()
        .await
        .unwrap()
        .expect("the shutdown left the lock held until its TTL");
    next.release().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A shutdown that races a step moving its lease out of the row (the step holds the row when the
/// shutdown begins, and commits the holder into the entries while the shutdown waits for the
/// row): the lease is freed wherever the step put it. (Before, the shutdown's one statement
/// looked for the locker's entries in a snapshot taken before the step committed, and for the
/// lease in the row, which the step had emptied: the entry was left until its TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_frees_a_lease_moved_out_of_its_row_meanwhile() {
    let harness = common::PgHarness::plain().await;
    let (a, b) = (harness.locker().await, harness.locker().await);
    let _lease = left_held(&a, "raced", Duration::from_secs(60)).await;
    let admin = common::hold_row(&harness.schema, "raced").await;
    let segment = locksmith_core::Family::Mutex.segment(&LockName::new("raced").unwrap());
    admin
        .execute(&format!("SELECT \"{}\".lock_row($1)", harness.schema), &[&segment])
        .await
        .unwrap();
    let closing = tokio::spawn(async move { a.shutdown().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    admin.batch_execute("COMMIT").await.unwrap();
    closing.await.unwrap().unwrap();
    let next = b
        .lock("raced")
        .try_acquire()
        .await
        .unwrap()
        .expect("the shutdown left the moved lease held until its TTL");
    next.release().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The backend's release, whose statement ran but whose answer came too late (the server held
/// its commit up past the request timeout), reports success: the full step that follows finds the
/// lease gone by that statement's doing. (Before, it answered "not held" for a lease it had just
/// released. locksmith-core bounds `LockGuard::release` by the request timeout, so a guard's
/// caller was told "no answer" rather than that; its retries in the background were told "not
/// held", which ends them as well.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_answered_too_late_is_no_false_not_held() {
    let harness = common::PgHarness::plain().await;
    let a = impatient_locker(&harness).await;
    let lease = left_held(&a, "late", Duration::from_secs(30)).await;
    // Freeing a holder kept in a row now takes 1.5 s: past the request timeout, and within the
    // full step's, which waits for that row meanwhile.
    common::run_as_owner(&format!(
        "CREATE FUNCTION \"{s}\".slow_release() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(1.5); RETURN NEW; END $$; \
         CREATE TRIGGER slow_release BEFORE UPDATE ON \"{s}\".locks FOR EACH ROW \
         WHEN (OLD.holder IS NOT NULL AND NEW.holder IS NULL) EXECUTE FUNCTION \"{s}\".slow_release();",
        s = harness.schema
    ))
    .await;
    let released = a.backend().release(&lease).await;
    assert!(released.is_ok(), "a release answered too late said {released:?}");
    let b = harness.locker().await;
    let next = b.lock("late").try_acquire().await.unwrap().expect("released");
    next.release().await.unwrap();
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}
