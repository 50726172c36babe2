//! The one-call steps (stored procedures, `protocol/call.rs`) and the multi-statement steps
//! (`procedures=off`, or a user without `CREATE ROUTINE`) keep one queue: lockers of both kinds
//! on one lock take it in arrival order, with growing tokens, woken by the server; the
//! procedures are created at connect where missing.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::future::Future;
use std::time::Duration;

use locksmith_core::conformance::within;
use locksmith_core::driver::BackendUrl;
use locksmith_core::LockError;
use sqlx::{Connection, Row};

async fn connect(url: &str) -> locksmith_core::Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_with_and_without_procedures_share_one_fifo_queue() {
    let harness = common::MyHarness::plain().await;
    let with = connect(&harness.url).await;
    let without = connect(&harness.url_with("procedures=off")).await;
    let late = connect(&harness.url).await;
    let name = "procedures/fifo";
    let first = with.lock(name).acquire().await.unwrap();
    // A waiter of the multi-statement steps, then one of the procedures, behind it.
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (who, locker) in [("without", without.clone()), ("late", late.clone())] {
        let tx = tx.clone();
        waiters.push(tokio::spawn(async move {
            let guard = locker.lock(name).acquire().await.unwrap();
            tx.send((who, guard.fencing_token())).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            guard.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let released = first.fencing_token();
    first.release().await.unwrap();
    let mut seen = Vec::new();
    within(
        Duration::from_secs(10),
        "both waiters to take the lock in turn",
        async {
            while seen.len() < 2 {
                seen.push(order.recv().await.unwrap());
            }
        },
    )
    .await;
    assert_eq!(seen.iter().map(|(w, _)| *w).collect::<Vec<_>>(), ["without", "late"]);
    assert!(
        seen[0].1 > released && seen[1].1 > seen[0].1,
        "tokens grow: {released} {seen:?}"
    );
    for w in waiters {
        w.await.unwrap();
    }
    // And back: a holder of the multi-statement steps hands over to a waiter of the procedures.
    let held = without.lock(name).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let with = with.clone();
        async move { with.lock(name).acquire().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = held.fencing_token();
    held.release().await.unwrap();
    let next = within(Duration::from_secs(10), "the waiter to take the lock", waiter)
        .await
        .unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    for l in [with, without, late] {
        l.shutdown().await.unwrap();
    }
}

/// A waiter of the multi-statement steps that gives up leaves the queue (its `leave`), so that
/// nobody is left waiting behind the holder, and the lock goes at once to the next taker when the
/// holder releases; a holder of those steps releases through them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_procedures_that_gives_up_leaves_the_queue() {
    let harness = common::MyHarness::plain().await;
    let with = connect(&harness.url).await;
    let without = connect(&harness.url_with("procedures=off")).await;
    let name = "procedures/leave";
    let first = with.lock(name).acquire().await.unwrap();
    let gave_up = without.lock(name).timeout(Duration::from_millis(300)).acquire().await;
    assert!(matches!(gave_up, Err(LockError::Timeout(_))), "{gave_up:?}");
    assert_eq!(
        with.inspect(name).await.unwrap().waiters,
        0,
        "the waiter left the queue"
    );
    first.release().await.unwrap();
    let held = within(
        Duration::from_secs(5),
        "the lock free again",
        without.lock(name).timeout(Duration::ZERO).acquire(),
    )
    .await
    .unwrap();
    held.release().await.unwrap();
    let again = with.lock(name).timeout(Duration::ZERO).acquire().await.unwrap();
    again.release().await.unwrap();
    for l in [with, without] {
        l.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_procedures_are_created_where_missing() {
    let harness = common::MyHarness::plain().await;
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let count = "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() \
                 AND ROUTINE_NAME IN ('locksmith_enter_v4', 'locksmith_release_v5')";
    let n = |row: sqlx::mysql::MySqlRow| row.get::<i64, _>(0);
    assert_eq!(n(sqlx::query(count).fetch_one(&mut admin).await.unwrap()), 2);
    sqlx::Executor::execute(&mut admin, "DROP PROCEDURE locksmith_release_v5")
        .await
        .unwrap();
    let locker = connect(&harness.url).await;
    assert_eq!(n(sqlx::query(count).fetch_one(&mut admin).await.unwrap()), 2);
    let guard = locker.lock("procedures/made").acquire().await.unwrap();
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// The enter procedure's call for an exclusive entry `id` of locker 77 on `seg`: a waiting step,
/// or (`in_row_try`) a try that may hold in the lock's row.
fn enter(
    seg: &'static str,
    id: u64,
    ttl_us: u64,
    in_row_try: bool,
) -> sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    sqlx::query("CALL locksmith_enter_v4(?, ?, 77, 'x', 0, '', ?, ?, ?, ?)")
        .bind(seg)
        .bind(id)
        .bind(ttl_us)
        .bind(ttl_us)
        .bind(i8::from(in_row_try))
        .bind(i8::from(in_row_try))
}

/// A call's (outcome, token).
fn answer(rows: Vec<sqlx::mysql::MySqlRow>) -> (i64, u64) {
    (rows[0].get::<i64, _>(0), rows[0].get::<u64, _>(1))
}

/// The release call of entry `id` of a mutex (token `token`) on `seg`.
fn release(
    seg: &'static str,
    id: u64,
    token: u64,
) -> sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    sqlx::query("CALL locksmith_release_v5(?, ?, ?, 1)")
        .bind(seg)
        .bind(id)
        .bind(token)
}

/// Entry `id` of locker 77 holds the mutex `seg` in the lock's row, taken by a try on `c`: the
/// try's (outcome, token). A lock's row is made by its first use, whose entry holds in the queue:
/// that one is released, and the try sent again holds in the row.
async fn held_in_row(c: &mut sqlx::MySqlConnection, seg: &'static str, id: u64, ttl_us: u64) -> (i64, u64) {
    let first = answer(enter(seg, id, ttl_us, true).fetch_all(&mut *c).await.unwrap());
    if first.0 == 4 {
        return first;
    }
    release(seg, id, first.1).fetch_all(&mut *c).await.unwrap();
    answer(enter(seg, id, ttl_us, true).fetch_all(&mut *c).await.unwrap())
}

/// A waiting step run again after its answer was lost with its connection (`Conn::step` runs it
/// again on a new one) finds its entry granted by the first run: the lease then starts again at
/// this call, since the caller counts it from when it sent this call. The procedure used to
/// answer the grant and leave the lease as the first run had set it, so the caller counted on a
/// lease that ran out on the server earlier, by as long as the reconnection took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_run_again_restarts_the_lease_it_finds_granted() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await; // the tables and procedures
    let mut c = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let (seg, id, ttl_us) = ("procedures/again", 4242u64, 30_000_000u64);
    let call = || enter(seg, id, ttl_us, false);
    let (outcome, token) = answer(call().fetch_all(&mut c).await.unwrap());
    assert_eq!(outcome, 1, "the first run holds");
    // As if the reconnection took 25 s of the lease's 30.
    sqlx::query("UPDATE locksmith_entries SET expires_at = NOW(6) + INTERVAL 5 SECOND WHERE id = ?")
        .bind(id)
        .execute(&mut c)
        .await
        .unwrap();
    let again = answer(call().fetch_all(&mut c).await.unwrap());
    assert_eq!(again, (1, token), "the second run finds the same grant");
    let left: i64 =
        sqlx::query_scalar("SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) FROM locksmith_entries WHERE id = ?")
            .bind(id)
            .fetch_one(&mut c)
            .await
            .unwrap();
    assert!(
        left > 25_000_000,
        "the lease was not started again: {left} µs left of {ttl_us}, counted by the caller from its second call"
    );
    c.close().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A try whose answer was lost after its grant in the lock's row (the first call committed, the
/// connection broke) is sent again: the second call finds the caller's own holder in the row and
/// answers that grant, its lease started again. It used to move the holder into the queue, answer
/// "another case", and the full step then found the queue taken and said busy: the lock held,
/// the caller told it was not, until the lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_run_again_finds_its_grant_in_the_row() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await; // the tables and procedures
    let mut c = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let (seg, id, ttl_us) = ("procedures/try_again", 4343u64, 30_000_000u64);
    let call = || enter(seg, id, ttl_us, true);
    let (outcome, token) = held_in_row(&mut c, seg, id, ttl_us).await;
    assert_eq!(outcome, 4, "the try holds in the row");
    // As if the reconnection took 25 s of the lease's 30.
    sqlx::query("UPDATE locksmith_locks SET holder_expires = NOW(6) + INTERVAL 5 SECOND WHERE segment = ?")
        .bind(seg)
        .execute(&mut c)
        .await
        .unwrap();
    let again = answer(call().fetch_all(&mut c).await.unwrap());
    assert_eq!(again, (4, token), "the try run again does not find its own grant");
    let (holder, left): (Option<u64>, i64) = sqlx::query_as(
        "SELECT holder, TIMESTAMPDIFF(MICROSECOND, NOW(6), holder_expires) FROM locksmith_locks WHERE segment = ?",
    )
    .bind(seg)
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(holder, Some(id), "the holder left the row");
    assert!(left > 25_000_000, "the lease was not started again: {left} µs left");
    let entries: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM locksmith_entries WHERE id = ?")
        .bind(id)
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(entries, 0, "the holder was moved into the queue");
    c.close().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// The release call of a mutex's lease held in the lock's row frees it with one autocommit
/// `UPDATE`, as it was granted: no transaction, no read of the row first. Version 4 of the
/// procedure locked and read the row in a transaction first (three statements more, about 60 µs
/// of the server's time in an uncontended cycle of some 350).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_from_the_row_runs_no_transaction() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await; // the tables and procedures
    let mut c = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let (seg, id, ttl_us) = ("procedures/release_in_row", 4444u64, 30_000_000u64);
    let (outcome, token) = held_in_row(&mut c, seg, id, ttl_us).await;
    assert_eq!(outcome, 4, "the try holds in the row");
    let counts = |rows: Vec<sqlx::mysql::MySqlRow>| -> Vec<(String, u64)> {
        rows.iter()
            .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1).parse().unwrap()))
            .collect()
    };
    let status = "SHOW SESSION STATUS WHERE Variable_name IN ('Com_begin', 'Com_commit', 'Com_select')";
    let before = counts(sqlx::query(status).fetch_all(&mut c).await.unwrap());
    let rows = release(seg, id, token).fetch_all(&mut c).await.unwrap();
    let after = counts(sqlx::query(status).fetch_all(&mut c).await.unwrap());
    assert_eq!((rows[0].get::<i64, _>(0), rows[0].get::<i64, _>(1)), (1, 1), "released");
    let ran: Vec<(String, u64)> = after
        .iter()
        .zip(&before)
        .map(|((name, a), (_, b))| (name.clone(), a - b))
        .collect();
    let of = |name: &str| ran.iter().find(|(n, _)| n == name).map_or(0, |(_, n)| *n);
    assert_eq!(
        (of("Com_begin"), of("Com_commit")),
        (0, 0),
        "the release from the row ran a transaction: {ran:?}"
    );
    // The answer row, and the status read itself, are the only SELECTs.
    assert!(of("Com_select") <= 2, "the release read the row first: {ran:?}");
    let (left_holder, owner): (Option<u64>, u64) =
        sqlx::query_as("SELECT holder, holder_owner FROM locksmith_locks WHERE segment = ?")
            .bind(seg)
            .fetch_one(&mut c)
            .await
            .unwrap();
    assert_eq!((left_holder, owner), (None, 0), "the row still names a holder");
    // Released again (the answer lost, the call sent again): not held, nothing changed.
    let again = release(seg, id, token).fetch_all(&mut c).await.unwrap();
    assert_eq!(
        (again[0].get::<i64, _>(0), again[0].get::<i64, _>(1)),
        (1, 0),
        "released twice"
    );
    c.close().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A one-call step runs in its caller's task. An acquire polled once (its `CALL` sent) and then
/// left unpolled by its caller must not hold up the locker's other steps: the next step that
/// waits for the connection moves it into a task of its own. Without that, the other lock's try
/// below waited for the whole request timeout and failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_its_caller_stops_polling_holds_up_no_other_step() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url_with("request_timeout=10s")).await;
    // The lock's row exists: the stalled acquire is one `CALL`.
    locker
        .lock("procedures/stalled")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Polled once: its `CALL` sent, its answer not read yet. On a loaded machine the answer may be
    // there before the first poll ends (the acquire then holds): tried again until one is left
    // in flight.
    let mut stalled = None;
    for _ in 0..50 {
        let mut acquire = Box::pin(locker.lock("procedures/stalled").acquire());
        match std::future::poll_fn(|cx| std::task::Poll::Ready(acquire.as_mut().poll(cx))).await {
            std::task::Poll::Pending => {
                stalled = Some(acquire);
                break;
            }
            std::task::Poll::Ready(guard) => guard.unwrap().release().await.unwrap(),
        }
    }
    let stalled = stalled.expect("50 acquires answered within their first poll");
    // Its caller polls it no more; another lock of the same locker:
    let other = within(
        Duration::from_secs(3),
        "a try on another lock of the locker",
        locker.lock("procedures/other").try_acquire(),
    )
    .await
    .unwrap()
    .expect("the other lock is free");
    other.release().await.unwrap();
    // Polled again, the stalled acquire has its lock.
    let guard = within(Duration::from_secs(3), "the stalled acquire", stalled)
        .await
        .unwrap();
    assert!(guard.is_held());
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
}
