//! One step = one transaction on the steps' connection: lock the lock's row (inserting it if
//! missing), drop the dead entries, read the queue, run the step (`crate::protocol::queue`), and
//! if the queue changed, grant the waiters that hold now (`queue::promote`), NOTIFY the ones
//! that have something to do (`crate::wake::payload`) and move the lock's `since` (where the
//! reads of its queue start) up to its first entry left.
//!
//! A step runs in its caller's task, and to its end whatever its caller does: a caller that drops
//! it, or stops polling it while another request of the locker waits for the connection, leaves
//! the rest to a task of its own (`Link::in_caller`), which ends it before any later step of this
//! connection, as `crate::cleanup` relies on. (A step's transaction dropped part-way, as by its
//! request timeout, is rolled back: tokio-postgres sends `ROLLBACK`.)

use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::{LockError, Result};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Transaction};

use std::sync::Arc;

use super::link::ClientGuard;
use super::params::{InRow, Leave, Params};
use super::{millis, Conn, Statements};
use crate::error::pg_error;
use crate::layout::Sql;
use crate::protocol::queue::{self, NewEntry, Op, Row};
use crate::wake::{payload, Directive};

/// A step's transaction. Its statements are prepared once per connection and then reused, or
/// sent unnamed behind a transaction pooler ([`Statements`]): given as text, tokio-postgres would
/// prepare each one again, a round trip more per statement. Each request is counted
/// ([`locksmith_core::metrics::round_trip`]).
pub(crate) struct Step<'a> {
    tx: Transaction<'a>,
    statements: &'a Statements,
}

/// The parameters of a statement.
type ParamRefs<'p> = [&'p (dyn ToSql + Sync)];

impl Step<'_> {
    /// Runs `sql`; the number of rows it changed.
    pub async fn execute(&self, sql: &str, params: &ParamRefs<'_>) -> std::result::Result<u64, tokio_postgres::Error> {
        locksmith_core::metrics::round_trip();
        self.statements.execute(&self.tx, sql, params).await
    }

    /// Runs `sql`; its rows.
    pub async fn query(
        &self,
        sql: &str,
        params: &ParamRefs<'_>,
    ) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        locksmith_core::metrics::round_trip();
        self.statements.query(&self.tx, sql, params).await
    }

    /// Runs `sql`, which returns one row.
    pub async fn query_one(
        &self,
        sql: &str,
        params: &ParamRefs<'_>,
    ) -> std::result::Result<tokio_postgres::Row, tokio_postgres::Error> {
        locksmith_core::metrics::round_trip();
        self.statements.query_one(&self.tx, sql, params).await
    }

    /// Runs `sql`, which returns at most one row.
    pub async fn query_opt(
        &self,
        sql: &str,
        params: &ParamRefs<'_>,
    ) -> std::result::Result<Option<tokio_postgres::Row>, tokio_postgres::Error> {
        locksmith_core::metrics::round_trip();
        self.statements.query_opt(&self.tx, sql, params).await
    }
}

/// What a step found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The entry holds: its fencing token.
    Granted(u64),
    /// Not yet: wait until woken, or at most this long (the earliest expiry in the queue).
    Wait(Option<Duration>),
    /// A try found the lock taken.
    Busy,
    /// The entry is not in the queue (dropped while its locker did not beat).
    Gone,
    /// A leave: whether the entry held.
    Left(bool),
}

impl Conn {
    /// Runs `op` on the lock `segment` in one transaction. `owner_ttl`: a join also beats this
    /// locker for that long, in the same transaction (unless zero: its owner row is known to live
    /// long enough).
    ///
    /// Bounded by the request timeout; past it the connection is given up on (a server that
    /// froze: [`super::Connected::abandon`]), and the next step opens a new one. A caller that
    /// drops the future sooner (a bound of its own, a dropped acquire) leaves the step to run to
    /// its end in a task of its own, still holding the connection: the next step waits behind it.
    pub async fn step(self: &Arc<Self>, segment: &str, op: Op, owner_ttl: Duration) -> Result<Outcome> {
        Ok(self.step_at(segment, op, owner_ttl).await?.0)
    }

    /// [`Conn::step`], and when it began: once it had the steps' connection, not when it was
    /// asked for (behind a backlog of this locker's steps, that can be seconds before). A lease
    /// the step grants counts from then.
    ///
    /// Run in the caller's task, handed off into a task of its own if its caller stops polling it
    /// while another request waits for the connection ([`Conn::with_client`]).
    pub async fn step_at(self: &Arc<Self>, segment: &str, op: Op, owner_ttl: Duration) -> Result<(Outcome, Instant)> {
        self.check_open()?;
        let segment = segment.to_owned();
        let step = move |conn: Arc<Conn>, guard| async move { conn.step_holding(guard, &segment, op, owner_ttl).await };
        self.with_client(step).await
    }

    /// [`Conn::step_at`] with the connection in `guard`.
    async fn step_holding(
        &self,
        mut guard: ClientGuard,
        segment: &str,
        op: Op,
        owner_ttl: Duration,
    ) -> Result<(Outcome, Instant)> {
        let began = Instant::now();
        let limit = self.config.request_timeout;
        let client = guard.as_deref_mut().ok_or(LockError::Closed)?;
        let leaving = match &op {
            Op::Leave(id) => Some(id.clone()),
            _ => None,
        };
        match tokio::time::timeout(limit, self.run(client, segment, op, owner_ttl)).await {
            Ok(out) => {
                let out = out?;
                // A leave that committed took a lease kept in the lock's row with it (its
                // `lock_row` moved it into the entries first): nothing is left for `close`.
                if let Some(id) = leaving {
                    self.forget_kept(&id);
                }
                Ok((out, began))
            }
            Err(_) => {
                super::abandon(&mut guard);
                Err(crate::error::timeout("a step", limit))
            }
        }
    }

    /// [`Conn::step`] on `client`.
    async fn run(&self, client: &mut Client, segment: &str, op: Op, owner_ttl: Duration) -> Result<Outcome> {
        let sql = &self.sql;
        let e = |what| move |err| pg_error(what, err);
        locksmith_core::metrics::round_trip(); // BEGIN (and COMMIT below)
        let statements = self.statements();
        let tx = Step {
            tx: statements.begin(client).await.map_err(e("starting a step"))?,
            statements,
        };
        tx.query_one(&sql.lock_row, &[&segment])
            .await
            .map_err(e("locking the lock's row"))?;
        let mut changed = tx.execute(&sql.prune, &[&segment]).await.map_err(e("pruning"))? > 0;
        if matches!(op, Op::Join(_)) && !owner_ttl.is_zero() {
            tx.execute(&sql.beat, &[&self.owner_id, &millis(owner_ttl), &self.pid, &self.host])
                .await
                .map_err(e("beating"))?;
        }
        let rows = tx
            .query(&sql.queue, &[&segment])
            .await
            .map_err(e("reading the queue"))?;
        // One past the last entry read: where the queue starts if the step leaves it empty.
        let seqs = rows.iter().map(|r| r.try_get::<_, i64>(7));
        let seqs = seqs
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(e("reading an entry"))?;
        let past = seqs.into_iter().max().map(|last| last + 1);
        let mut rows = rows.iter().map(Row::read).collect::<Result<Vec<Row>>>()?;
        let out = queue::apply(self, &tx, segment, &mut rows, op, &mut changed).await;
        if matches!(
            out,
            Err(LockError::Unavailable { .. } | LockError::Denied(_) | LockError::Protocol(_))
        ) {
            return out; // a failed statement, or an answer that makes no sense: it rolls back
        }
        if changed {
            let granted = queue::promote(self, &tx, segment, &mut rows).await?;
            let granted = granted.iter().map(|(id, token)| Directive::Granted(id, Some(*token)));
            let mut told: Vec<Directive<'_>> = granted.collect();
            if let Some((id, ms)) = queue::first_waiting(&rows) {
                told.push(Directive::First(id, ms));
            }
            // The next reads of the queue start at its first entry left (schema.sql's `since`).
            let told = payload(segment, &told);
            tx.execute(&sql.advance_and_notify, &[&segment, &past, &sql.channel, &told])
                .await
                .map_err(e("notifying"))?;
        }
        locksmith_core::metrics::round_trip();
        tx.tx.commit().await.map_err(e("committing a step"))?;
        out
    }

    /// Layout.rs's `grant_in_row`: the exclusive `entry` holds `segment` at once, kept in the
    /// lock's row, if nobody holds it and no entry is queued, in one round trip. Its fencing token
    /// (`None`: the case does not apply, take the full step), and when the step began (see
    /// [`Conn::step_at`]).
    pub async fn grant_in_row(self: &Arc<Self>, segment: &str, entry: &NewEntry) -> Result<(Option<u64>, Instant)> {
        let (row, began) = self.alone(|sql| &sql.grant_in_row, in_row(segment, entry)).await?;
        let token: Option<i64> = first_column(row, "reading a grant")?;
        Ok((self.granted_in_row(segment, &entry.id, token), began))
    }

    /// [`Conn::grant_in_row`] for a `try_acquire`: also whether a refusal is final (the lock is
    /// held; `false`: entries may be queued, and only the full step can tell).
    pub async fn try_in_row(self: &Arc<Self>, segment: &str, entry: &NewEntry) -> Result<(Option<u64>, bool, Instant)> {
        let (row, began) = self.alone(|sql| &sql.try_in_row, in_row(segment, entry)).await?;
        let row = row.ok_or_else(|| LockError::Protocol("a try answered no row".into()))?;
        let e = |err| pg_error("reading a grant", err);
        let (token, final_answer): (Option<i64>, bool) = (row.try_get(0).map_err(e)?, row.try_get(1).map_err(e)?);
        Ok((self.granted_in_row(segment, &entry.id, token), final_answer, began))
    }

    /// A grant in `segment`'s row to entry `id`, recorded for [`Conn::close`]: its token.
    fn granted_in_row(&self, segment: &str, id: &str, token: Option<i64>) -> Option<u64> {
        if token.is_some() {
            self.kept_in_row(segment, id);
        }
        token.map(queue::to_u64)
    }

    /// Confirms a grant made by another's step (`queue::promote`) in one statement: entry `id`,
    /// if it holds a live lease, has it restarted from now. Its fencing token (`None`: not
    /// granted, or expired: take the full step), and when the step began.
    pub async fn confirm_alone(self: &Arc<Self>, id: &str) -> Result<(Option<u64>, Instant)> {
        let (row, began) = self.alone(|sql| &sql.confirm, (id.to_owned(),)).await?;
        let token: Option<i64> = first_column(row, "reading a grant")?;
        Ok((token.map(queue::to_u64), began))
    }

    /// Layout.rs's `leave`: `id`, a live holder, leaves `segment` in one round trip: kept in the
    /// lock's row, or as an entry (`alone.sql`'s `leave_exclusive`) and the first waiter holds
    /// now if every other entry is a live exclusive waiter (its NOTIFY names the new holder and
    /// the next waiter, as the full step's would). `false`: the case does not apply, take the
    /// full step.
    ///
    /// A lease kept in a row stays on this locker's list for [`Conn::close`] until the statement
    /// is answered: one that got no answer may not have run, and the shutdown then frees the row.
    pub async fn leave_exclusive(self: &Arc<Self>, segment: &str, id: &str) -> Result<bool> {
        let params = Leave {
            segment: segment.to_owned(),
            id: id.to_owned(),
        };
        let (row, _) = self.alone(|sql| &sql.leave, params).await?;
        // Answered: freed from the row, or not (or no longer) kept there.
        self.forget_kept(id);
        let left: Option<bool> = first_column(row, "reading a release")?;
        Ok(left == Some(true))
    }

    /// Runs one statement of `guarded.rs` (its own transaction) on the steps' connection: its row.
    pub async fn one_statement(
        self: &Arc<Self>,
        sql: fn(&Sql) -> &str,
        params: impl Params,
    ) -> Result<Option<tokio_postgres::Row>> {
        Ok(self.alone(sql, params).await?.0)
    }

    /// Runs one statement (its own transaction) on the steps' connection, as [`Conn::step_at`]
    /// runs a step (one at a time, in the caller's task, bounded by the request timeout): its
    /// row, if any. A statement whose future is dropped before its answer runs to its end in a
    /// task of its own, still holding the connection: the clean-up of a cancelled acquire must
    /// reach the server after it, on the same connection.
    async fn alone(
        self: &Arc<Self>,
        sql: fn(&Sql) -> &str,
        params: impl Params,
    ) -> Result<(Option<tokio_postgres::Row>, Instant)> {
        self.check_open()?;
        let statement = move |conn: Arc<Conn>, guard| async move {
            conn.alone_holding(guard, sql(&conn.sql), &params.refs(&conn)).await
        };
        self.with_client(statement).await
    }

    /// [`Conn::alone`] with the connection in `guard`.
    async fn alone_holding(
        &self,
        mut guard: ClientGuard,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(Option<tokio_postgres::Row>, Instant)> {
        let began = Instant::now();
        let limit = self.config.request_timeout;
        let client = guard.as_deref_mut().ok_or(LockError::Closed)?;
        locksmith_core::metrics::round_trip();
        let run = self.statements().write(client, sql, params, false);
        match tokio::time::timeout(limit, run).await {
            Ok(rows) => {
                let rows = rows.map_err(|e| pg_error("a one-statement step", e))?;
                Ok((rows.into_iter().next(), began))
            }
            Err(_) => {
                super::abandon(&mut guard);
                Err(crate::error::timeout("a step", limit))
            }
        }
    }

    /// A step that only passes lock `segment` on (after this locker's entries were removed).
    pub(super) async fn pass_on(&self, client: &mut Client, segment: &str) -> Result<Outcome> {
        self.run(client, segment, Op::Sweep, Duration::ZERO).await
    }

    /// A step on each lock whose queue holds waiters of lockers that stopped beating
    /// (`sweep.sql`): it drops them and passes the lock on. Only the first waiter of a queue
    /// watches the holders' expiry, so without this a dead first waiter would hold up the rest.
    pub(super) async fn sweep(self: &Arc<Self>) -> Result<()> {
        let rows = (self.read(
            "a look for dead waiters",
            "looking for dead waiters",
            |sql| &sql.sweep,
            (),
        ))
        .await?;
        for row in rows {
            let segment: String = row.try_get(0).map_err(|e| pg_error("looking for dead waiters", e))?;
            tracing::debug!(lock = %segment, "postgres: dropping the waiters of a locker that stopped beating");
            self.step(&segment, Op::Sweep, Duration::ZERO).await?;
        }
        Ok(())
    }
}

/// The parameters of `entry`'s grant in lock `segment`'s row.
fn in_row(segment: &str, entry: &NewEntry) -> InRow {
    InRow {
        segment: segment.to_owned(),
        id: entry.id.clone(),
        ttl_ms: millis(entry.ttl),
    }
}

/// The first column of a one-statement step's row: `None` if there was no row or it is NULL
/// (the step's case did not apply).
fn first_column<T>(row: Option<tokio_postgres::Row>, what: &str) -> Result<Option<T>>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    match row {
        Some(row) => row.try_get::<_, Option<T>>(0).map_err(|e| pg_error(what, e)),
        None => Ok(None),
    }
}
