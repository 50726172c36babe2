//! Pruning: the lock rows of locks nobody holds or waits for and that have been idle for a while,
//! and the owner rows of lockers long dead, are removed (`sql/idle_locks.sql`,
//! `sql/idle_queued.sql`, `sql/idle_owners.sql`), by the lockers of a schema about every 10
//! minutes, whichever looks first once a pass is due ([`keep_pruning`]), and on demand
//! ([`prune`], `Locker::prune`, `locksmith prune`). Each pass is a few statements of at most
//! [`BATCH`] rows each on the steps' connection, skipping the rows a step holds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use locksmith_core::{LockError, PruneReport, Result};

use crate::conn::Conn;
use crate::protocol::queue::Op;

/// How long a lock must have been idle (no token handed out, no holder's lease running) before a
/// locker's own passes remove its row, and a dead locker's owner row.
pub(crate) const IDLE: Duration = Duration::from_secs(3600);

/// About how often a schema is pruned by its lockers' own passes: the first locker to look once
/// the last such pass began this long ago runs the next ([`keep_pruning`]).
pub(crate) const EVERY: Duration = Duration::from_secs(600);

/// The most rows one statement of a pass removes.
pub(crate) const BATCH: i64 = 100;

/// The most locks a pass takes a step on to drop their dead entries (`sql/idle_queued.sql`).
const SWEEPS: i64 = 20;

/// What one pass did.
#[derive(Clone, Copy, Debug, Default)]
struct Pass {
    report: PruneReport,
    /// Whether a statement removed as many rows as it may: more may be left.
    full: bool,
}

/// `Locker::prune`: passes until one leaves nothing more to remove (or, with `dry_run`, the
/// counts of what a prune would remove now).
pub(crate) async fn prune(conn: &Arc<Conn>, idle: Duration, dry_run: bool) -> Result<PruneReport> {
    let idle_ms = millis(idle);
    if dry_run {
        let rows = (conn.read(
            "a count of idle locks",
            "counting idle locks",
            |sql| &sql.idle_count,
            (idle_ms,),
        ))
        .await?;
        let row = rows
            .first()
            .ok_or_else(|| LockError::Protocol("a count answered no row".into()))?;
        let count = |i| {
            row.try_get::<_, i64>(i)
                .map_err(|e| crate::error::pg_error("counting idle locks", e))
        };
        return Ok(PruneReport::new(to_u64(count(0)?), to_u64(count(1)?), true));
    }
    add_mark(conn).await?;
    let mut report = PruneReport::empty(false);
    loop {
        let pass = pass(conn, idle_ms).await?;
        report = report + pass.report;
        if !pass.full || pass.report.locks + pass.report.owners == 0 {
            return Ok(report);
        }
    }
}

/// Starts this locker's own passes, until the locker is shut down or dropped: it looks at once,
/// then every quarter to half of `every`, whether the schema's last automatic pass began `every` ago
/// or more (`sql/idle_claim.sql`, the time kept in the high-water mark's row), and if so runs
/// the next, removing what has been idle for `idle`. So a schema is pruned about every `every`
/// however many lockers use it, and a `locksmith run` that connects when a pass is due runs it.
/// (Each locker ran its own passes before, the first 5 to 10 minutes after it connected: rows of
/// names used only by short-lived processes stayed until someone ran `locksmith prune`.) A
/// pass that fails is logged and tried again later; one refused for want of rights (a user
/// granted what an earlier release needed: no `DELETE` on `locks`) is logged once, and the
/// passes stop.
pub(crate) fn keep_pruning(conn: &Arc<Conn>, every: Duration, idle: Duration) {
    let conn: Weak<Conn> = Arc::downgrade(conn);
    tokio::spawn(async move {
        let (idle_ms, every_ms) = (millis(idle), millis(every));
        let mut wait = Duration::ZERO;
        // Whether this locker's last pass stopped at a batch's end: it goes on without a claim.
        let mut more_left = false;
        loop {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let Some(conn) = conn.upgrade() else { return };
            wait = every / 4 + every.mul_f64(rand::random::<f64>() / 4.0);
            let pass = match std::mem::take(&mut more_left) {
                true => pass(&conn, idle_ms).await.map(Some),
                false => claimed_pass(&conn, every_ms, idle_ms).await,
            };
            match pass {
                Ok(None) => {}
                Ok(Some(pass)) => {
                    if pass.report.locks + pass.report.owners > 0 {
                        tracing::debug!(
                            locks = pass.report.locks,
                            owners = pass.report.owners,
                            "postgres: pruned idle rows"
                        );
                    }
                    if pass.full {
                        more_left = true;
                        wait = Duration::from_secs(1); // more left: the next batch soon
                    }
                }
                Err(LockError::Closed) => return,
                Err(e @ LockError::Denied(_)) => {
                    tracing::warn!(error = %e, "postgres: this locker cannot prune idle lock rows; its passes stop");
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "postgres: a pass of pruning failed; trying again later"),
            }
        }
    });
}

/// A pass, if the schema's last automatic pass began `every_ms` ago or more and this locker
/// claims the next (`None` otherwise).
async fn claimed_pass(conn: &Arc<Conn>, every_ms: i64, idle_ms: i64) -> Result<Option<Pass>> {
    add_mark(conn).await?;
    let claim = conn
        .one_statement(|sql| &sql.idle_claim, (every_ms,))
        .await
        .map_err(denied_hint)?;
    match claim {
        Some(_) => pass(conn, idle_ms).await.map(Some),
        None => Ok(None),
    }
}

/// Adds the high-water mark's row where it is missing (tables made before it, by this release's
/// `init` or an earlier one): until then a lock's first row takes the full step.
async fn add_mark(conn: &Arc<Conn>) -> Result<()> {
    conn.one_statement(|sql| &sql.add_pruned, ())
        .await
        .map_err(denied_hint)?;
    Ok(())
}

/// One pass: a step on a few idle locks with only dead entries left (which clears their
/// `queued`), then at most [`BATCH`] idle lock rows and [`BATCH`] dead owner rows removed.
async fn pass(conn: &Arc<Conn>, idle_ms: i64) -> Result<Pass> {
    let queued = (conn.read(
        "a look for idle locks",
        "looking for idle locks",
        |sql| &sql.idle_queued,
        (idle_ms, SWEEPS),
    ))
    .await?;
    let swept = i64::try_from(queued.len()).unwrap_or(i64::MAX);
    for row in queued {
        let segment: String = row
            .try_get(0)
            .map_err(|e| crate::error::pg_error("looking for idle locks", e))?;
        conn.step(&segment, Op::Sweep, Duration::ZERO).await?;
    }
    let removed = |row: Option<tokio_postgres::Row>| -> Result<i64> {
        row.map_or(Ok(0), |row| row.try_get::<_, i64>(0))
            .map_err(|e| crate::error::pg_error("pruning", e))
    };
    let locks = removed(
        conn.one_statement(|sql| &sql.idle_locks, (idle_ms, BATCH))
            .await
            .map_err(denied_hint)?,
    )?;
    let owners = removed(
        conn.one_statement(|sql| &sql.idle_owners, (idle_ms, BATCH))
            .await
            .map_err(denied_hint)?,
    )?;
    Ok(Pass {
        report: PruneReport::new(to_u64(locks), to_u64(owners), false),
        full: locks >= BATCH || owners >= BATCH || swept >= SWEEPS,
    })
}

/// A refusal with what the user lacks: tables whose grants were made for an earlier release,
/// which never deleted lock rows.
fn denied_hint(e: LockError) -> LockError {
    match e {
        LockError::Denied(message) => LockError::Denied(format!(
            "{message}: pruning needs DELETE on the locks and owners tables (`locksmith init --sql --grant ROLE` \
             prints the grants of this release)"
        )),
        e => e,
    }
}

/// `d` in whole milliseconds, as the statements take it: at most 100 years (the statements
/// multiply it into microseconds).
fn millis(d: Duration) -> i64 {
    const MAX_MS: u128 = 100 * 366 * 86_400_000;
    i64::try_from(d.as_millis().min(MAX_MS)).unwrap_or(i64::MAX)
}

/// A count from the server.
fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
