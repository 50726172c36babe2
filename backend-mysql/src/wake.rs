//! Wake-ups from the server, never a poll. MySQL has no LISTEN; a locker keeps one **wait
//! connection** that runs `SELECT IF(EXISTS(<a mailbox row for me>), 0, GET_LOCK(<name>, beat))`
//! (`sql/wait.sql`), where the name (`layout::wait_name`) is one the locker's own steps' connection holds
//! for as long as it is open (`conn/mod.rs`), so the `GET_LOCK` waits until the next beat. A step
//! that makes a waiter's turn come (a release, a leave, a prune of expired entries) writes a row
//! into `locksmith_wakes` for that waiter's locker and entry in its own transaction, and after its
//! commit sends `KILL QUERY <wait connection id>` (a user may kill its own threads' queries
//! without any privilege), which ends the wait at once (the `GET_LOCK` answers `NULL`). The
//! mailbox read and the wait are one statement: a wake committed before it started is seen by its
//! read, one committed later finds it running and interrupts it, so none is lost.
//!
//! Why `GET_LOCK` and not `SLEEP`: MariaDB's `SLEEP` waits under one mutex shared by every
//! `SLEEP` of the server, and a `KILL QUERY` of one loops on a `trylock` of that mutex, 50 ms per
//! failed try, for up to 2 s, holding the victim's own mutexes meanwhile; with a few lockers
//! waking each other at once, the killers and their victims stalled each other for 2 s (a
//! semaphore or read-write lock churned by 8 clients: 8 grants per second, releases past their
//! 5 s deadline). A `GET_LOCK` waits under a mutex of its own connection's. When the steps'
//! connection does not hold the name (it is being opened again), the wait statement takes it,
//! gives it back at once and `SLEEP`s instead: wake-ups still come, as before.
//!
//! The wait task then reads the mailbox (`sql/wakes_read.sql`), notifies each named waiter of
//! this locker (or, for rows without an entry, the observers of the lock), and deletes what it
//! read: one waiter per wake, not every waiter of the locker. The read also says whether each
//! named entry holds now, with its token and the time left on its lease: the step that wrote the
//! row granted it (`sql/proc_release.sql`, `protocol/queue.rs`), and the waiter holds without a
//! statement of its own (`protocol/wait.rs`).
//!
//! The same connection carries the locker's heartbeat at each beat (`heartbeat=`, 1 s): it
//! extends its waiting entries (`sql/beat.sql`: a waiter whose locker died is gone after five
//! beats) and sweeps the locks it waits for whose entries' lease or heartbeat ran out
//! (`sql/expired.sql`: only the locks of its own waiters, so that lockers do not all sweep
//! every lock): each such lock gets a step of its own that prunes them and wakes whoever holds
//! now (skipped while another step holds the lock's row, which does it itself). A waiter also
//! checks again when the lease of the holder it waits behind runs out; a holder stopped with
//! SIGSTOP thus loses its lock at its TTL, or a beat later behind a dead waiter.
//!
//! The waiters and observers it notifies are in the locker's hub (`hub.rs`); the `KILL QUERY`
//! the steps send is `kill.rs`'s.
//!
//! A waker checks that the registered connection id is still this locker's wait connection
//! before it sends the `KILL QUERY` (after a server restart the id may be another client's): the
//! connection holds a named lock of its own, its **mark** (`layout::mark_prefix`, taken as it
//! registers and held until it closes), and one `IS_USED_LOCK` says whether the registered id
//! holds it. A kill may thus reach the connection between statements (a beat, a mailbox read):
//! that statement fails as interrupted and the loop goes round, reading the mailbox again.
//!
//! Cost: two connections per locker (this one and the steps'), whatever its number of waiters;
//! per beat, one `UPDATE` of its waiting entries and one indexed `SELECT` of the expired entries
//! of the locks it waits for (nothing to read when it waits for none);
//! per hand-over, one mailbox row and one `KILL QUERY` per locker woken.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::{MySqlConnection, Row};
use tokio::time::Instant;

use locksmith_core::Result;

use crate::conn::{open, Conn};
use crate::error::{decode, interrupted, mysql_error, timeout};
use crate::hub::Grant;
use crate::layout::sql;

/// Starts the wait task of `conn`.
pub(crate) fn start(conn: &Arc<Conn>) {
    let task = tokio::spawn(run(Arc::downgrade(conn)));
    conn.hub.set_task(task);
}

/// The pause before opening the wait connection again after a failure.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);

/// The wait task: until the locker is gone, (re)open the wait connection and serve it.
async fn run(conn: Weak<Conn>) {
    loop {
        let Some(c) = conn.upgrade() else { return };
        let config = c.config.clone();
        drop(c);
        match open(&config).await {
            Ok(mut wait) => {
                if let Err(e) = serve(&conn, &mut wait).await {
                    tracing::debug!(error = %e, "mysql: the wait connection failed; opening it again");
                }
            }
            Err(e) => tracing::debug!(error = %e, "mysql: opening the wait connection failed"),
        }
        let Some(c) = conn.upgrade() else { return };
        c.hub.down();
        drop(c);
        tokio::time::sleep(REOPEN_PAUSE).await;
    }
}

/// One wait connection's life: register it, then beat, sweep, read the mailbox and wait.
fn serve<'a>(
    conn: &'a Weak<Conn>,
    wait: &'a mut MySqlConnection,
) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
    Box::pin(async move {
        let Some(c) = conn.upgrade() else { return Ok(()) };
        let (owner, limit, beat) = (c.owner, c.config.request_timeout, c.config.heartbeat);
        let name = crate::layout::wait_name(owner);
        let life = u64::try_from(c.config.waiter_life().as_micros()).unwrap_or(u64::MAX);
        // (No wake-up is lost while the connection was down: they wait in the mailbox.)
        while bounded(
            limit,
            "registering the wait connection",
            sqlx::query(sql::REGISTER).bind(owner).execute(&mut *wait),
        )
        .await?
        .is_none()
        {}
        // Its mark: wakers that find it held by the registered id send their `KILL QUERY`
        // without reading the process list (`kill.rs`).
        let mark = crate::layout::mark_prefix(owner);
        while bounded(
            limit,
            "taking the wait connection's mark",
            sqlx::query(sql::TAKE_MARK).bind(&mark).execute(&mut *wait),
        )
        .await?
        .is_none()
        {}
        c.hub.expect_answer(limit);
        drop(c);
        // What dead lockers left (an hour unseen: their owner row is touched every minute).
        bounded(
            limit,
            "forgetting dead lockers",
            sqlx::query(sql::FORGET).execute(&mut *wait),
        )
        .await?;
        let mut beats: u64 = 0;
        let mut next_beat = Instant::now();
        loop {
            if let Some(c) = conn.upgrade() {
                c.hub.expect_answer(limit);
            }
            if Instant::now() >= next_beat {
                next_beat = Instant::now() + beat;
                beats += 1;
                if beats.is_multiple_of(TOUCH_EVERY) {
                    let touch = sqlx::query(sql::TOUCH_OWNER).bind(owner).execute(&mut *wait);
                    if bounded(limit, "the owner's heartbeat", touch).await?.is_none() {
                        continue;
                    }
                }
                let beaten = heartbeat(limit, wait, life, owner, conn).await?;
                if beaten.is_none() {
                    next_beat = Instant::now();
                    continue;
                }
                let Some(expired) = bounded(
                    limit,
                    "the sweep",
                    sqlx::query(sql::EXPIRED).bind(owner).fetch_all(&mut *wait),
                )
                .await?
                else {
                    continue;
                };
                let Some(c) = conn.upgrade() else { return Ok(()) };
                for row in expired {
                    let seg: Vec<u8> = row.try_get(0).map_err(|e| decode("the sweep", e))?;
                    let seg = String::from_utf8_lossy(&seg).into_owned();
                    if let Err(e) = crate::protocol::queue::settle(&c, seg, true).await {
                        tracing::debug!(error = %e, "mysql: sweeping a lock failed");
                    }
                }
            }
            let read_sent = Instant::now();
            let Some(rows) = bounded(
                limit,
                "reading the wake-ups",
                sqlx::query(sql::WAKES_READ).bind(owner).fetch_all(&mut *wait),
            )
            .await?
            else {
                continue;
            };
            if let Some(last) = rows.last() {
                let last: u64 = last.try_get(0).map_err(|e| decode("reading the wake-ups", e))?;
                // Delivered before they are deleted, so that the waiters' steps overlap the
                // delete. Interrupted, the rows stay and are delivered again: a spurious wake-up
                // is harmless.
                let Some(c) = conn.upgrade() else { return Ok(()) };
                for row in rows {
                    let (entry, seg, grant) = mailbox_row(&row, read_sent)?;
                    c.hub.deliver(entry, &String::from_utf8_lossy(&seg), grant);
                }
                drop(c);
                bounded(
                    limit,
                    "deleting the wake-ups",
                    sqlx::query(sql::WAKES_DELETE)
                        .bind(owner)
                        .bind(last)
                        .execute(&mut *wait),
                )
                .await?;
                continue;
            }
            let sleep = next_beat.saturating_duration_since(Instant::now());
            let secs = sleep.as_secs_f64().max(0.001);
            if let Some(c) = conn.upgrade() {
                c.hub.expect_answer(sleep);
            }
            let waiting = sqlx::query_scalar::<_, Option<i64>>(sql::WAIT)
                .bind(owner)
                .bind(&name)
                .bind(secs)
                .bind(secs)
                .bind(&name)
                .bind(secs)
                .fetch_one(&mut *wait);
            // A `KILL QUERY` ends the wait (the `GET_LOCK` answers `NULL`; the fallback `SLEEP`
            // fails as interrupted), the beat ends it otherwise: either way the loop reads the
            // mailbox next, whose rows say whom a wake-up is for, with their grants.
            match tokio::time::timeout(limit + beat, waiting).await {
                Err(_) => return Err(timeout("the wait connection's wait", limit + beat)),
                Ok(Ok(_)) => {}
                Ok(Err(e)) if interrupted(&e) => {}
                Ok(Err(e)) => return Err(mysql_error("waiting", e)),
            }
        }
    })
}

/// A mailbox row (`sql/wakes_read.sql`): its entry (none for the observers of the lock), the
/// lock's segment, and the entry's grant if it holds now. The grant's lease is counted from
/// `read_sent`, when the read was sent: the server measured the time left after that, so the
/// lease never outlasts the server's.
fn mailbox_row(row: &sqlx::mysql::MySqlRow, read_sent: Instant) -> Result<(Option<u64>, Vec<u8>, Option<Grant>)> {
    let col = |e| decode("reading the wake-ups", e);
    let entry: Option<u64> = row.try_get(1).map_err(col)?;
    let seg: Vec<u8> = row.try_get(2).map_err(col)?;
    let held: Option<i8> = row.try_get(3).map_err(col)?;
    let token: Option<u64> = row.try_get(4).map_err(col)?;
    let left_us: Option<i64> = row.try_get(5).map_err(col)?;
    let grant = match (held, token, left_us.and_then(|l| u64::try_from(l).ok())) {
        (Some(1), Some(token), Some(left)) if left > 0 => Some(Grant {
            token,
            until: read_sent + Duration::from_micros(left),
        }),
        _ => None,
    };
    Ok((entry, seg, grant))
}

/// Every how many beats the locker's owner row is touched (a minute at the default beat): a
/// locker unseen for an hour is dead, and what it left is removed.
const TOUCH_EVERY: u64 = 60;

/// How many entries one heartbeat statement extends at most.
const BEAT_CHUNK: usize = 500;

/// The heartbeat: extends the entries of this locker's waiters by `life` µs; `None` when a
/// `KILL QUERY` interrupted it.
async fn heartbeat(
    limit: Duration,
    wait: &mut MySqlConnection,
    life: u64,
    owner: u64,
    conn: &Weak<Conn>,
) -> Result<Option<()>> {
    let Some(ids) = conn.upgrade().map(|c| c.hub.waiting_ids()) else {
        return Ok(Some(()));
    };
    for chunk in ids.chunks(BEAT_CHUNK) {
        let statement = sql::with_ids(sql::BEAT, chunk.len());
        let mut q = sqlx::query(&statement).bind(life).bind(owner);
        for id in chunk {
            q = q.bind(*id);
        }
        if bounded(limit, "the heartbeat", q.execute(&mut *wait)).await?.is_none() {
            return Ok(None);
        }
    }
    Ok(Some(()))
}

/// `fut`, a statement, within `limit`; `None` when a `KILL QUERY` meant for the wait
/// interrupted it instead (the loop then goes round again: the mailbox row is there).
async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<Option<T>> {
    match tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| timeout(what, limit))?
    {
        Ok(v) => Ok(Some(v)),
        Err(e) if interrupted(&e) => Ok(None),
        Err(e) => Err(mysql_error(what, e)),
    }
}
