//! Pruning: the rows of locks nobody holds, waits for or observes, idle for a while, removed so
//! that they do not pile up (one row per name ever used), by the lockers about every ten minutes,
//! whichever looks first once a pass is due ([`keep_pruning`]: an hour's idleness), and on
//! demand ([`prune`], `Locker::prune`, `locksmith prune`); and the owner rows of lockers dead for an hour (which
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

/// About how often the tables are pruned by their lockers' own passes: the first locker to look
/// once the last such pass began this long ago runs the next ([`keep_pruning`]).
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

/// Starts this locker's own passes, until the locker is shut down or dropped: it looks at once,
/// then every quarter to half of `every`, whether the last automatic pass began `every` ago or more
/// (`sql/prune_claim.sql`, the time kept in the row `~pruned-at`), and if so runs the next,
/// removing the rows idle for `idle`. So the tables are pruned about every `every` however many
/// lockers use them, and a `locksmith run` that connects when a pass is due runs it. (Each
/// locker ran its own passes before, the first 5 to 10 minutes after it connected: rows of
/// names used only by short-lived processes stayed until someone ran `locksmith prune`.) A pass
/// that fails is logged and tried again later; one refused for want of rights (no `DELETE` on
/// the tables) is logged once, and the passes stop.
pub(crate) fn keep_pruning(conn: &Arc<Conn>, every: Duration, idle: Duration) {
    let conn: Weak<Conn> = Arc::downgrade(conn);
    let idle_us = i64::try_from(idle.as_micros()).unwrap_or(i64::MAX);
    let every_us = i64::try_from(every.as_micros()).unwrap_or(i64::MAX);
    tokio::spawn(async move {
        let mut wait = Duration::ZERO;
        // Whether this locker's last pass found a full batch: it goes on without a claim.
        let mut more_left = false;
        loop {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let Some(conn) = conn.upgrade() else { return };
            wait = every / 4 + every.mul_f64(rand::random::<f64>() / 4.0);
            let go_on = std::mem::take(&mut more_left);
            let pass = conn
                .step("pruning idle locks", false, move |c| {
                    Box::pin(async move {
                        if !go_on && !claim(c, every_us).await? {
                            return Ok(None);
                        }
                        pass_retried(c, idle_us).await.map(Some)
                    })
                })
                .await;
            match pass {
                Ok(None) => {}
                Ok(Some((removed, full))) => {
                    if removed > 0 {
                        tracing::debug!(locks = removed, "mysql: pruned idle lock rows");
                    }
                    if full {
                        more_left = true;
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

/// Whether this locker claims the next automatic pass: the last began `every_us` ago or more.
async fn claim(c: &mut sqlx::MySqlConnection, every_us: i64) -> std::result::Result<bool, StepError> {
    let e = |what: &'static str| move |err| StepError::sql(what, err);
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::PRUNE_CLAIM_ROW)
        .execute(&mut *c)
        .await
        .map_err(e("making the row of the last pass"))?;
    locksmith_core::metrics::round_trip();
    let claimed = sqlx::query(sql::PRUNE_CLAIM)
        .bind(every_us)
        .execute(&mut *c)
        .await
        .map_err(e("claiming a pass of pruning"))?;
    Ok(claimed.rows_affected() > 0)
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
