//! The holder of a lock nobody else wanted lives in the lock's row (`sql/proc_enter.sql`): an
//! uncontended cycle updates that row twice and writes no entry; a waiter that comes moves the
//! holder into the queue first, so FIFO, tokens, hand-overs, renewals, guarded writes, `inspect`,
//! `list`, prunes and shutdowns see one holder wherever it lives; a table made before the holder's
//! columns existed gets them at connect.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockError, Locker};
use sqlx::{Connection, MySqlConnection, Row};

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

fn segment(name: &str) -> String {
    Family::Mutex.segment(&LockName::new(name).unwrap())
}

/// The lock's row: (holder, token, queued), and how many entries its queue has.
async fn row_and_queue(c: &mut MySqlConnection, name: &str) -> (Option<u64>, u64, i8, i64) {
    let row = sqlx::query("SELECT holder, token, queued, lock_id FROM locksmith_locks WHERE segment = ?")
        .bind(segment(name))
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let lock_id: u64 = row.get(3);
    let entries: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM locksmith_entries WHERE lock_id = ?")
        .bind(lock_id)
        .fetch_one(&mut *c)
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), entries)
}

/// `locksmith_locks` as a release before the holder's columns made it (empty).
async fn earlier_lock_table(c: &mut MySqlConnection) {
    sqlx::Executor::execute(&mut *c, "DROP TABLE IF EXISTS locksmith_locks")
        .await
        .unwrap();
    sqlx::Executor::execute(
        &mut *c,
        "CREATE TABLE locksmith_locks (
            lock_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
            segment VARBINARY(3072) NOT NULL,
            token BIGINT UNSIGNED NOT NULL DEFAULT 0,
            UNIQUE KEY segment (segment)
        ) ENGINE = InnoDB",
    )
    .await
    .unwrap();
}

/// Takes `name` uncontended and gives it back `n` times; the tokens.
async fn cycles(locker: &Locker, name: &str, n: usize) -> Vec<u64> {
    let mut tokens = Vec::new();
    for _ in 0..n {
        let guard = locker.lock(name).acquire().await.unwrap();
        tokens.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    tokens
}

/// An uncontended holder is the row's, with the row's token, and no entry is written: the cycle
/// is two updates of one row (it was an entry inserted and deleted, and about ten statements in
/// the procedures). The server's statement counters agree: no insert or delete in ten cycles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_holder_lives_in_the_lock_row() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await;
    let mut c = MySqlConnection::connect(&harness.url).await.unwrap();
    let name = unique_name("in_row");
    // The first use makes the row (and takes the queue's way once).
    cycles(&locker, &name, 1).await;
    let guard = locker.lock(&name).acquire().await.unwrap();
    let (holder, token, queued, entries) = row_and_queue(&mut c, &name).await;
    assert!(holder.is_some(), "no holder in the row");
    assert_eq!(token, guard.fencing_token(), "the row's token is the holder's");
    assert_eq!(
        (queued, entries),
        (0, 0),
        "an entry was written for an uncontended holder"
    );
    let info = locker.inspect(&name).await.unwrap();
    let shown = info.holder.expect("inspect shows no holder");
    assert_eq!(shown.fencing_token, Some(guard.fencing_token()));
    assert_eq!(info.waiters, 0);
    let listed = locker.list(&name).await.unwrap();
    assert!(
        listed.iter().any(|l| l.name == name),
        "list leaves out a lock held in its row: {listed:?}"
    );
    guard.release().await.unwrap();
    assert_eq!(
        row_and_queue(&mut c, &name).await.0,
        None,
        "the release left the holder"
    );
    assert!(locker.inspect(&name).await.unwrap().holder.is_none());

    // Ten more cycles leave the entries table untouched (its sequence does not move).
    let before: i64 = sqlx::query_scalar("SELECT CAST(COALESCE(MAX(seq), 0) AS SIGNED) FROM locksmith_entries")
        .fetch_one(&mut c)
        .await
        .unwrap();
    let tokens = cycles(&locker, &name, 10).await;
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens went back: {tokens:?}");
    let after: i64 = sqlx::query_scalar("SELECT CAST(COALESCE(MAX(seq), 0) AS SIGNED) FROM locksmith_entries")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(after, before, "uncontended cycles inserted entries");
    c.close().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A waiter behind a holder in the row moves it into the queue (with its id, token and lease)
/// and waits for it; the release hands over in arrival order with a greater token; once the
/// queue is empty again the next holder lives in the row again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_moves_the_holder_into_the_queue_and_fifo_holds() {
    let harness = common::MyHarness::plain().await;
    let (a, b, d) = (
        connect(&harness.url).await,
        connect(&harness.url).await,
        connect(&harness.url).await,
    );
    let mut c = MySqlConnection::connect(&harness.url).await.unwrap();
    let name = unique_name("moved");
    cycles(&a, &name, 1).await;
    let held = a.lock(&name).acquire().await.unwrap();
    assert!(row_and_queue(&mut c, &name).await.0.is_some());
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (who, locker) in [("b", b.clone()), ("d", d.clone())] {
        let (tx, waited) = (tx.clone(), name.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locker.lock(&waited).acquire().await.unwrap();
            tx.send((who, guard.fencing_token())).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.release().await.unwrap();
        }));
        until_waiters(&a, &name, waiters.len(), Duration::from_secs(10)).await;
    }
    let (holder, _, queued, entries) = row_and_queue(&mut c, &name).await;
    assert_eq!(
        (holder, queued, entries),
        (None, 1, 3),
        "the holder was not moved into the queue"
    );
    let info = a.inspect(&name).await.unwrap();
    assert_eq!(info.holder.unwrap().fencing_token, Some(held.fencing_token()));
    assert_eq!(info.waiters, 2);
    // The moved holder is still held: a guarded write lands, a try of another fails.
    let key = format!("in_row/{name}");
    held.guarded().put(&key, "moved").await.unwrap();
    assert!(
        b.lock(&name).try_acquire().await.unwrap().is_none(),
        "a try took a held lock"
    );
    let first = held.fencing_token();
    held.release().await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(
            within(Duration::from_secs(10), "a hand-over", order.recv())
                .await
                .unwrap(),
        );
    }
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ["b", "d"], "not FIFO");
    assert!(first < got[0].1 && got[0].1 < got[1].1, "tokens: {first} then {got:?}");
    // Empty again: the next holder is the row's.
    let again = a.lock(&name).acquire().await.unwrap();
    let (holder, token, queued, entries) = row_and_queue(&mut c, &name).await;
    assert!(
        holder.is_some() && token == again.fencing_token(),
        "not held in the row again"
    );
    assert_eq!((queued, entries), (0, 0));
    assert!(again.fencing_token() > got[1].1);
    again.release().await.unwrap();
    c.close().await.unwrap();
    for l in [a, b, d] {
        l.shutdown().await.unwrap();
    }
}

/// A holder in the row is renewed by the watchdog past several TTLs, stays the row's, and a
/// prune of no idleness leaves its row; its guarded writes land; once it is paused past its TTL
/// (its lease not renewed), another takes the lock with a greater token and the old holder's
/// guarded write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_in_the_row_is_renewed_kept_by_prunes_and_fenced_once_expired() {
    let harness = common::MyHarness::plain().await;
    let (a, b) = (connect(&harness.url).await, connect(&harness.url).await);
    let mut c = MySqlConnection::connect(&harness.url).await.unwrap();
    let name = unique_name("renewed");
    cycles(&a, &name, 1).await;
    let ttl = Duration::from_secs(2);
    let guard = a.lock(&name).ttl(ttl).acquire().await.unwrap();
    tokio::time::sleep(ttl * 3).await;
    assert!(
        guard.lost_reason().is_none(),
        "the watchdog lost a holder kept in the row"
    );
    let left: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), holder_expires) FROM locksmith_locks WHERE segment = ?",
    )
    .bind(segment(&name))
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert!(left > 0, "the row's lease ran out {}µs ago", -left);
    a.prune(Duration::ZERO, false).await.unwrap();
    let (holder, token, _, _) = row_and_queue(&mut c, &name).await;
    assert!(
        holder.is_some() && token == guard.fencing_token(),
        "a prune removed a held row"
    );
    let key = format!("in_row/{name}");
    guard.guarded().put(&key, "a").await.unwrap();
    assert!(
        b.lock(&name).try_acquire().await.unwrap().is_none(),
        "a try took a held lock"
    );
    // Paused: its lease is left to run out.
    let stale = guard.abandon();
    let next = within(Duration::from_secs(15), "the expired lock", b.lock(&name).acquire())
        .await
        .unwrap();
    assert!(next.fencing_token() > stale.fencing_token);
    let write = locksmith_core::driver::GuardedWrite::Put {
        key: key.clone(),
        value: b"stale".to_vec(),
    };
    let refused = a.backend().write_guarded(&stale, &write).await;
    assert!(matches!(refused, Err(LockError::NotHeld { .. })), "{refused:?}");
    next.release().await.unwrap();
    c.close().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A renewal touches the rows of the locks held now and no other: a transaction of another
/// client that holds, for longer than a TTL (a stalled step, a paused process), the row of a lock
/// this locker held in its row earlier must not hold up the renewal of the locks still held, nor
/// lose them. (The row used to keep naming its last holder, and the renewal, which finds its
/// rows by that name, waited for it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_waits_for_no_row_of_a_lock_given_back() {
    let harness = common::MyHarness::plain().await;
    let a = connect(&harness.url).await;
    let (earlier, held) = (unique_name("given_back"), unique_name("still_held"));
    // `earlier` held in its row and given back.
    cycles(&a, &earlier, 2).await;
    cycles(&a, &held, 1).await;
    let ttl = Duration::from_secs(1);
    let guard = a.lock(&held).ttl(ttl).acquire().await.unwrap();
    let mut stalled = MySqlConnection::connect(&harness.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut stalled).await.unwrap();
    sqlx::query("SELECT token FROM locksmith_locks WHERE segment = ? FOR UPDATE")
        .bind(segment(&earlier))
        .fetch_one(&mut stalled)
        .await
        .unwrap();
    tokio::time::sleep(ttl * 4).await;
    let lost = guard.lost_reason();
    sqlx::query("ROLLBACK").execute(&mut stalled).await.unwrap();
    assert!(
        lost.is_none(),
        "a row lock on a lock given back held up the renewal of one still held: {lost:?}"
    );
    guard.release().await.unwrap();
    stalled.close().await.unwrap();
    a.shutdown().await.unwrap();
}

/// A locker shut down with a lock held in the row frees it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_frees_the_locks_held_in_rows() {
    let harness = common::MyHarness::plain().await;
    let (a, b) = (connect(&harness.url).await, connect(&harness.url).await);
    let name = unique_name("shutdown");
    cycles(&a, &name, 1).await;
    let guard = a.lock(&name).ttl(Duration::from_secs(60)).acquire().await.unwrap();
    let _kept = guard.abandon();
    a.shutdown().await.unwrap();
    let taken = b.lock(&name).try_acquire().await.unwrap();
    assert!(taken.is_some(), "the lock stayed held after its locker's shutdown");
    taken.unwrap().release().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A `locksmith_locks` made by an earlier release (no holder columns) gets them when a locker
/// connects, and the lock rows it had keep their tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_lock_table_gets_the_holder_columns() {
    let harness = common::MyHarness::plain().await;
    let mut c = MySqlConnection::connect(&harness.url).await.unwrap();
    earlier_lock_table(&mut c).await;
    let name = unique_name("earlier");
    let ahead = 9_000_000_000_000_000u64;
    sqlx::query("INSERT INTO locksmith_locks (segment, token) VALUES (?, ?)")
        .bind(segment(&name))
        .bind(ahead)
        .execute(&mut c)
        .await
        .unwrap();
    let (a, b) = (connect(&harness.url).await, connect(&harness.url).await);
    let first = a.lock(&name).acquire().await.unwrap();
    let first_token = first.fencing_token();
    assert!(first_token > ahead, "the token went back");
    first.release().await.unwrap();
    let tokens = cycles(&b, &name, 3).await;
    assert!(tokens[0] > first_token);
    let (holder, _, queued, _) = row_and_queue(&mut c, &name).await;
    assert_eq!((holder, queued), (None, 0));
    c.close().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The upgrade's `ALTER` of an earlier table behind a transaction left open on it (an operator's
/// session, a stalled client): the connect fails within its request timeout with an error that
/// names the `ALTER`, and leaves nothing waiting on the server behind which every later statement
/// on the table would queue (MariaDB ends a metadata-lock wait once its client has gone; its
/// default wait is a day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_blocked_by_an_open_transaction_leaves_nothing_waiting() {
    let harness = common::MyHarness::plain().await;
    let mut c = MySqlConnection::connect(&harness.url).await.unwrap();
    earlier_lock_table(&mut c).await;
    // An open transaction that read the table holds its metadata lock until it ends.
    sqlx::query("BEGIN").execute(&mut c).await.unwrap();
    sqlx::query("SELECT COUNT(*) FROM locksmith_locks")
        .fetch_one(&mut c)
        .await
        .unwrap();
    let url = format!(
        "{}{}request_timeout=2s",
        harness.url,
        if harness.url.contains('?') { '&' } else { '?' }
    );
    let refused = within(
        Duration::from_secs(15),
        "the connect",
        locksmith_mysql::connect(&BackendUrl::parse(&url).unwrap()),
    )
    .await;
    let refused = refused
        .map(|_| ())
        .expect_err("the ALTER went through an open transaction");
    assert!(
        refused.to_string().contains("ALTER TABLE"),
        "the error does not say what waited: {refused}"
    );
    // Another client reads the table while the transaction is still open: nothing queued ahead.
    let mut other = MySqlConnection::connect(&harness.url).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        sqlx::query("SELECT COUNT(*) FROM locksmith_locks").fetch_one(&mut other),
    )
    .await;
    sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
    assert!(
        matches!(read, Ok(Ok(_))),
        "a read of the table waited behind an ALTER left waiting on the server: {read:?}"
    );
    // Once the transaction ended, the next connect upgrades the table.
    let a = connect(&harness.url).await;
    let name = unique_name("after_upgrade");
    cycles(&a, &name, 1).await;
    other.close().await.unwrap();
    c.close().await.unwrap();
    a.shutdown().await.unwrap();
}
