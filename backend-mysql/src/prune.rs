//! Pruning: the rows of locks nobody holds, waits for or observes, idle for a while, removed so
//! that they do not pile up (one row per name ever used), by every locker now and then
//! ([`keep_pruning`]: an hour's idleness, about every ten minutes) and on demand ([`prune`],
//! `Locker::prune`, `locksmith prune`); and the owner rows of lockers dead for an hour (which
//! every locker's wait connection also removes when it registers, `sql/forget.sql`).
//!
//! A pass is one transaction: the high-water mark of pruned tokens locked first
//! (`sql/prune_mark.sql`), then up to [`BATCH`] idle rows, skipping those a step holds now
//! (`sql/prune_candidates.sql`), deleted if still idle once locked (`sql/prune_delete.sql`), and
//! the mark raised to their largest token. A lock used again starts its counter at the mark
//! (`sql/lock_row.sql`, the enter procedure), and its tokens are at least
//! the server's clock in µs, which had passed every pruned one by `idle`: tokens never go back.
//! Passes run until one removes fewer than [`BATCH`] rows.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::{Connection, Row};

use locksmith_core::{LockError, PruneReport, Result};

use crate::conn::{Conn, StepError};
use crate::layout::sql;
use crate::protocol::queue::DEADLOCK_TRIES;

/// How long a lock must have been idle (no token handed out for it) before a locker's own passes
/// remove its row.
pub(crate) const IDLE: Duration = Duration::from_secs(3600);

/// About how often a locker runs a pass of its own (each time within a half and one and a half
/// of it, at random, so that lockers started together do not prune together).
pub(crate) const EVERY: Duration = Duration::from_secs(600);

/// The rows one pass removes at most (one transaction's locks).
const BATCH: i64 = 500;

/// How many passes one prune runs at most (a million rows); the next prune goes on.
const MAX_PASSES: u32 = 2000;

/// Removes (or, with `dry_run`, counts) the rows of locks idle for `idle`, and the owner rows of
/// lockers dead for an hour.
///
/// # Errors
///
/// The connection's errors; `Denied` when the user may not delete the rows.
///
/// # Cancel safety
///
/// Each pass runs to its end in a task of its own (`Conn::step`); dropped between passes, what
/// was removed stays removed and the rest waits for the next prune.
pub(crate) async fn prune(conn: &Conn, idle: Duration, dry_run: bool) -> Result<PruneReport> {
    let idle_us = i64::try_from(idle.as_micros()).unwrap_or(i64::MAX);
    if dry_run {
        let (locks, owners) = conn
            .step("counting idle locks", false, move |c| {
                Box::pin(async move {
                    let e = |err| StepError::sql("counting idle locks", err);
                    locksmith_core::metrics::round_trip();
                    let locks: i64 = sqlx::query_scalar(sql::PRUNE_COUNT)
                        .bind(idle_us)
                        .fetch_one(&mut *c)
                        .await
                        .map_err(e)?;
                    locksmith_core::metrics::round_trip();
                    let owners: i64 = sqlx::query_scalar(sql::FORGET_COUNT)
                        .fetch_one(&mut *c)
                        .await
                        .map_err(e)?;
                    Ok((locks, owners))
                })
            })
            .await?;
        return Ok(PruneReport::new(to_u64(locks), to_u64(owners), true));
    }
    let mut locks = 0;
    for _ in 0..MAX_PASSES {
        let (removed, full) = conn
            .step("pruning idle locks", false, move |c| Box::pin(pass_retried(c, idle_us)))
            .await?;
        locks += removed;
        if !full {
            break;
        }
    }
    let owners = conn
        .step("forgetting dead lockers", false, move |c| {
            Box::pin(async move {
                locksmith_core::metrics::round_trip();
                let done = sqlx::query(sql::FORGET)
                    .execute(&mut *c)
                    .await
                    .map_err(|err| StepError::sql("forgetting dead lockers", err))?;
                Ok(done.rows_affected())
            })
        })
        .await?;
    Ok(PruneReport::new(locks, owners, false))
}

/// Starts this locker's own passes, one about every `every`, removing the rows idle for `idle`,
/// until the locker is shut down or dropped. A pass that fails is logged and tried again at the
/// next; one refused for want of rights (no `DELETE` on the tables) is logged once, and the
/// passes stop.
pub(crate) fn keep_pruning(conn: &Arc<Conn>, every: Duration, idle: Duration) {
    let conn: Weak<Conn> = Arc::downgrade(conn);
    let idle_us = i64::try_from(idle.as_micros()).unwrap_or(i64::MAX);
    tokio::spawn(async move {
        let mut wait = every / 2 + every.mul_f64(rand::random::<f64>() / 2.0);
        loop {
            tokio::time::sleep(wait).await;
            let Some(conn) = conn.upgrade() else { return };
            wait = every / 2 + every.mul_f64(rand::random::<f64>());
            let pass = conn
                .step("pruning idle locks", false, move |c| Box::pin(pass_retried(c, idle_us)))
                .await;
            match pass {
                Ok((removed, full)) => {
                    if removed > 0 {
                        tracing::debug!(locks = removed, "mysql: pruned idle lock rows");
                    }
                    if full {
                        wait = Duration::from_secs(1); // more left: the next batch soon
                    }
                }
                Err(LockError::Closed) => return,
                Err(e @ LockError::Denied(_)) => {
                    tracing::warn!(error = %e, "mysql: this locker cannot prune idle lock rows; its passes stop");
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "mysql: a pass of pruning failed; trying again later"),
            }
        }
    });
}

/// [`pass`], run again (from its start) when InnoDB picked it as a deadlock's victim: a step
/// making a pruned name's row again reads the mark and waits for the row's slot, while the pass
/// holds that slot and waits to raise the mark.
async fn pass_retried(c: &mut sqlx::MySqlConnection, idle_us: i64) -> std::result::Result<(u64, bool), StepError> {
    let mut tries = 1;
    loop {
        match pass(c, idle_us).await {
            Err(e) if e.keep && tries < DEADLOCK_TRIES && crate::error::is_deadlock(&e.error) => tries += 1,
            done => return done,
        }
    }
}

/// One pass: the rows it removed, and whether it found a full batch (more may be left).
async fn pass(c: &mut sqlx::MySqlConnection, idle_us: i64) -> std::result::Result<(u64, bool), StepError> {
    let e = |what: &'static str| move |err| StepError::sql(what, err);
    locksmith_core::metrics::round_trip(); // BEGIN
    let mut tx = c
        .begin()
        .await
        .map_err(|err| StepError::unsent("beginning a transaction", err))?;
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::PRUNE_MARK)
        .execute(&mut *tx)
        .await
        .map_err(e("locking the pruned tokens' mark"))?;
    locksmith_core::metrics::round_trip();
    let rows = sqlx::query(sql::PRUNE_CANDIDATES)
        .bind(idle_us)
        .bind(BATCH)
        .fetch_all(&mut *tx)
        .await
        .map_err(e("finding idle locks"))?;
    let full = i64::try_from(rows.len()).unwrap_or(i64::MAX) >= BATCH;
    if rows.is_empty() {
        tx.rollback().await.map_err(e("rolling back"))?;
        return Ok((0, false));
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut highest = 0u64;
    for row in &rows {
        let col = |err| StepError::from(crate::error::decode("an idle lock", err));
        ids.push(row.try_get::<u64, _>(0).map_err(col)?);
        highest = highest.max(row.try_get::<u64, _>(1).map_err(col)?);
    }
    let statement = sql::with_ids(sql::PRUNE_DELETE, ids.len());
    let mut delete = sqlx::query(&statement);
    for id in &ids {
        delete = delete.bind(*id);
    }
    locksmith_core::metrics::round_trip();
    let removed = delete
        .bind(idle_us)
        .execute(&mut *tx)
        .await
        .map_err(e("removing idle locks"))?
        .rows_affected();
    // The largest token of the rows locked, removed or not: a mark above a kept row's token is
    // harmless (a lock's next row starts above it), one below a removed row's would not be.
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::PRUNE_RAISE_MARK)
        .bind(highest)
        .execute(&mut *tx)
        .await
        .map_err(e("raising the pruned tokens' mark"))?;
    locksmith_core::metrics::round_trip(); // COMMIT
    tx.commit().await.map_err(e("committing"))?;
    Ok((removed, full))
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
