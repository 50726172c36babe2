//! A locker's connections, whatever its number of locks and waiters: the steps' connection
//! (every transaction of every lock, the renewals, one at a time) and the wait connection of
//! `wake.rs` (heartbeat, sweep, and the `GET_LOCK` wait its wakers interrupt, on a name the steps'
//! connection holds: [`open_steps`]). Two connections per locker, never one per waiter.
//!
//! A step owns the connection while it runs, and runs to its end, in a task of its own (spawned
//! with `locksmith_core::driver::cleanup::spawn`, so `Locker::shutdown` waits for it), or, for
//! the one-call steps of `protocol/call.rs`, in the caller's task (`locksmith_core::driver::in_caller`), moved into a
//! task of its own when the caller drops it half-way or stops polling it while other steps wait.
//! So a transaction is never left half-sent, the next step finds the connection idle, and no
//! caller holds up the locker's other steps.
//! A step that fails on the connection itself, or outlasts the request timeout, drops it (the
//! server rolls back what it had begun); the next step opens a new one. `dial.rs` opens them
//! all: to which of the URL's hosts, with which session settings.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sqlx::{Connection, MySqlConnection};
use tokio::sync::{Mutex, OwnedMutexGuard};

use locksmith_core::driver::cleanup;
use locksmith_core::{LockError, Result};

use crate::config::Config;
use crate::error::{connection_lost, mysql_error, timeout};
use crate::hub::Hub;
use crate::layout::sql;

mod dial;
mod routines;

use locksmith_core::driver::in_caller::InCaller;

pub(crate) use dial::open;

/// How long (s) the steps' connection waits for its wait connection's name: a wait connection
/// that took it while no steps' connection held it gives it back within the same statement. Short:
/// an earlier steps' connection gone silent may hold it for as long as the server keeps its
/// session, and a renewal that opens a connection must not spend its request timeout here.
const WAIT_NAME_PATIENCE: f64 = 0.05;

/// Opens the steps' connection of locker `owner` ([`open`]) and takes the named lock its wait
/// connection waits on (`wake.rs`). If the name stays taken (an earlier steps' connection whose
/// session the server keeps), the wait connection still waits on it, woken as ever; if it is
/// free later, the waits fall back to `SLEEP` until the next steps' connection (logged).
///
/// # Errors
///
/// As [`open`]; `Unavailable` when taking the name fails or outlasts the request timeout.
async fn open_steps(config: &Config, owner: u64) -> Result<MySqlConnection> {
    let mut c = open(config).await?;
    let what = "holding the wait connection's name";
    let limit = config.request_timeout;
    let held = tokio::time::timeout(
        limit,
        sqlx::query_scalar::<_, Option<i64>>(sql::GET_LOCK)
            .bind(crate::layout::wait_name(owner))
            .bind(WAIT_NAME_PATIENCE)
            .fetch_one(&mut c),
    )
    .await
    .map_err(|_| timeout(what, limit))?
    .map_err(|e| mysql_error(what, e))?;
    if held != Some(1) {
        tracing::warn!(owner, "mysql: the steps' connection could not take its wait connection's name; wake-ups interrupt a SLEEP until it is opened again");
    }
    Ok(c)
}

/// The task of one step (see [`Conn::step`]): `body` on the connection in `slot` (opened first if
/// there is none, and once more if the server closed it while idle), within the request timeout;
/// `gate` is let go at the end.
///
/// Not an `async fn`: as one, the task of a real step was some 10 KB again, copied whole into its
/// box (a task's cell when steps ran in tasks of their own), and an uncontended cycle took 229 k
/// client instructions instead of 111 k (callgrind, `scripts/instructions mysql`).
#[allow(clippy::manual_async_fn)]
fn step_task<T, F>(
    what: &'static str,
    config: Config,
    owner: u64,
    gate: Option<OwnedMutexGuard<()>>,
    mut slot: OwnedMutexGuard<Option<MySqlConnection>>,
    body: F,
) -> impl Future<Output = Result<T>> + Send + 'static
where
    T: Send + 'static,
    F: for<'c> Fn(&'c mut MySqlConnection) -> Body<'c, T> + Send + Sync + 'static,
{
    async move {
        let limit = config.request_timeout;
        let run = async {
            // Opening a connection (TLS, login) is a large future: boxed, so that every step's
            // task does not carry it, copied whole into and out of its task
            // (`a_step_task_is_small`).
            let (mut c, mut reused) = match slot.take() {
                Some(c) => (c, true),
                None => (Box::pin(open_steps(&config, owner)).await?, false),
            };
            loop {
                match body(&mut c).await {
                    Ok(v) => {
                        *slot = Some(c);
                        return Ok(v);
                    }
                    Err(StepError { error, keep: true, .. }) => {
                        *slot = Some(c);
                        return Err(error);
                    }
                    // The server closed the connection while it sat idle (a restart, a `KILL`,
                    // `wait_timeout`): the step, which changed nothing, goes again on a new
                    // connection, once.
                    Err(StepError { unsent: true, .. }) if reused => {
                        tracing::debug!(step = what, "mysql: the steps' connection was closed; opening it again");
                        c = Box::pin(open_steps(&config, owner)).await?;
                        reused = false;
                    }
                    Err(StepError { error, .. }) => return Err(error),
                }
            }
        };
        let result = tokio::time::timeout(limit, run)
            .await
            .unwrap_or_else(|_| Err(timeout(what, limit)));
        drop(gate);
        result
    }
}

/// Where a step runs, and when.
#[derive(Clone, Copy)]
enum Placement {
    /// In a task of its own, after the steps before it.
    OwnTask,
    /// In a task of its own, before the steps queued (not before the one running).
    First,
    /// In the caller's task, after the steps before it.
    Caller,
}

/// What a step got wrong: its error, and whether the connection is still fit for use.
pub(crate) struct StepError {
    pub error: LockError,
    pub keep: bool,
    /// Nothing of the step took effect on the server (a `BEGIN` or a read that met a closed
    /// connection): it may be run again from its start on a new connection.
    pub unsent: bool,
}

impl StepError {
    /// A statement's error: the connection stays unless the error came from the connection.
    pub fn sql(what: &str, err: sqlx::Error) -> StepError {
        StepError {
            keep: !connection_lost(&err),
            error: mysql_error(what, err),
            unsent: false,
        }
    }

    /// The error of a statement that changed nothing on the server (a `BEGIN`, a read, a renewal):
    /// when it met a closed connection, the step is run again on a new one.
    pub fn unsent(what: &str, err: sqlx::Error) -> StepError {
        StepError {
            unsent: connection_lost(&err),
            ..StepError::sql(what, err)
        }
    }
}

impl From<LockError> for StepError {
    fn from(error: LockError) -> StepError {
        StepError {
            error,
            keep: true,
            unsent: false,
        }
    }
}

/// The future of one step's body.
pub(crate) type Body<'c, T> = Pin<Box<dyn Future<Output = std::result::Result<T, StepError>> + Send + 'c>>;

/// A locker's connections and identity.
#[derive(Debug)]
pub(crate) struct Conn {
    pub config: Config,
    /// This locker's id: the `owner` of its entries, its row in `locksmith_owners`.
    pub owner: u64,
    /// Whether the one-call steps' stored procedures are there (`routines.rs`).
    pub procedures: bool,
    steps: Arc<Mutex<Option<MySqlConnection>>>,
    /// Taken before the connection by every step but the renewals: a renewal waits for the one
    /// step running, never for a backlog of steps (1,000 waiters joining at once).
    gate: Arc<Mutex<()>>,
    /// Where the wait connection's wake-ups are delivered.
    pub hub: Hub,
    closed: AtomicBool,
    /// The steps run in their callers' tasks (waiting for the connection, or holding it), to move
    /// into tasks of their own if their callers stopped polling them.
    in_caller: Arc<InCaller>,
}

impl Conn {
    /// Connects the steps' connection and makes the tables where they are missing.
    ///
    /// # Errors
    ///
    /// As [`open`]; `Denied` when the user may not create the tables.
    pub async fn connect(config: Config) -> Result<Conn> {
        let owner = rand::random::<u64>() >> 1;
        let mut c = open_steps(&config, owner).await?;
        for table in sql::TABLES {
            tokio::time::timeout(config.request_timeout, sqlx::Executor::execute(&mut c, table))
                .await
                .map_err(|_| timeout("creating the tables", config.request_timeout))?
                .map_err(|e| mysql_error("creating the tables", e))?;
        }
        tokio::time::timeout(config.request_timeout, add_holder_columns(&mut c))
            .await
            .map_err(|_| {
                timeout(
                    "adding the holder's columns to locksmith_locks (an ALTER TABLE, once, for a \
                     table made by an earlier release: it waits for every transaction open on the \
                     table, such as another session's, to end)",
                    config.request_timeout,
                )
            })??;
        let procedures = config.procedures
            && tokio::time::timeout(config.request_timeout, routines::install(&mut c))
                .await
                .map_err(|_| timeout("creating the stored procedures", config.request_timeout))??;
        Ok(Conn {
            config,
            owner,
            procedures,
            steps: Arc::new(Mutex::new(Some(c))),
            gate: Arc::new(Mutex::new(())),
            hub: Hub::default(),
            closed: AtomicBool::new(false),
            in_caller: Arc::default(),
        })
    }

    /// Whether [`Conn::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Runs `body` on the steps' connection, in a task of its own (see the module docs), within
    /// the request timeout. `what` names it in errors.
    ///
    /// # Errors
    ///
    /// [`LockError::Closed`] after [`Conn::close`] unless `after_close`; the body's error;
    /// `Unavailable` when the connection cannot be opened or the step outlasts the request timeout.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the step still runs to its end in its task (its result is dropped).
    pub async fn step<T, F>(&self, what: &'static str, after_close: bool, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut MySqlConnection) -> Body<'c, T> + Send + Sync + 'static,
    {
        self.run_step(what, after_close, Placement::OwnTask, body).await
    }

    /// [`Conn::step`] run in the caller's task, for a step of one statement (a `CALL` of
    /// `protocol/call.rs`): a task spawned and woken for each cost an uncontended cycle's two
    /// steps some 50-80 µs (docs/overhead.md, twenty-fifth pass). Not for the transactions of
    /// several statements: run so, the multi-statement release (`procedures=off`) made its
    /// hand-over 1.1 ms slower, measured and not explained yet.
    ///
    /// The step goes on only while its caller polls it: one that its caller leaves pending
    /// unpolled (a `select!` whose other branch's body runs long), waiting for the connection or
    /// holding it, is moved into a task of its own by the next step that waits 20 ms for the
    /// connection (`locksmith_core::driver::in_caller`), so that the locker's other steps,
    /// renewals included, never wait on a caller for longer than that.
    ///
    /// # Errors
    ///
    /// As [`Conn::step`].
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for the connection, nothing runs; dropped after, the step runs to
    /// its end in a task of its own.
    pub async fn step_in_caller<T, F>(&self, what: &'static str, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut MySqlConnection) -> Body<'c, T> + Send + Sync + 'static,
    {
        self.run_step(what, false, Placement::Caller, body).await
    }

    /// [`Conn::step`] first in line: it waits for the step running, not for those queued
    /// (the renewals, whose lateness would lose leases).
    ///
    /// # Errors
    ///
    /// As [`Conn::step`].
    ///
    /// # Cancel safety
    ///
    /// As [`Conn::step`].
    pub async fn step_first<T, F>(&self, what: &'static str, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut MySqlConnection) -> Body<'c, T> + Send + Sync + 'static,
    {
        self.run_step(what, false, Placement::First, body).await
    }

    async fn run_step<T, F>(&self, what: &'static str, after_close: bool, placement: Placement, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut MySqlConnection) -> Body<'c, T> + Send + Sync + 'static,
    {
        if self.is_closed() && !after_close {
            return Err(LockError::Closed);
        }
        let (config, owner) = (self.config.clone(), self.owner);
        let limit = config.request_timeout;
        let (gate, steps, requests) = (self.gate.clone(), self.steps.clone(), self.in_caller.clone());
        // The connection is taken here, in the order of the calls (tokio's mutex is fair), and
        // held by the step until it ends, in this task or in the one its drop spawns: a clean-up
        // step that a dropped call spawns after this one runs after it, and finds what it created.
        // The wait, and a one-call step, run in the caller's task
        // (`locksmith_core::driver::in_caller`): handed off into a task of their own if their
        // caller stops polling them while another step waits.
        let connection = async move {
            let waited = async {
                let gate = match placement {
                    Placement::First => None,
                    Placement::OwnTask | Placement::Caller => Some(gate.lock_owned().await),
                };
                (gate, steps.lock_owned().await)
            };
            match tokio::time::timeout(limit, requests.wait(waited)).await {
                Ok(held) => Ok(held),
                Err(_) => Err(timeout(
                    &format!("{what} (waiting for the locker's earlier steps)"),
                    limit,
                )),
            }
        };
        let step = move |(gate, slot)| async move {
            let task = step_task(what, config, owner, gate, slot, body);
            if let Placement::Caller = placement {
                return task.await;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let task = async move {
                let _ = tx.send(task.await);
            };
            if !cleanup::spawn(locksmith_core::metrics::counting_for_caller(task)) {
                return Err(LockError::Closed);
            }
            rx.await.unwrap_or(Err(LockError::Closed))
        };
        self.in_caller.run(connection, step).await
    }

    /// Refuses new steps (but those of the shutdown itself).
    pub fn refuse_new_steps(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Frees this locker's holders kept in their locks' rows, in one statement: at shutdown,
    /// before its entries are read (`listing::own_entries`). Nobody queues behind a holder in the
    /// row (a waiter moves it into the queue as it joins), so none needs waking; a holder moved
    /// before this statement is an entry by then, and is left with its waiters woken. (Read
    /// first, a holder moved between the read and the close would have been deleted with the
    /// close's entries, its waiters left asleep until its lease ran out.)
    ///
    /// # Errors
    ///
    /// The connection's errors.
    pub async fn free_rows(&self) -> Result<()> {
        let owner = self.owner;
        self.step("freeing the locker's holders kept in rows", true, move |c| {
            Box::pin(async move {
                locksmith_core::metrics::round_trip();
                sqlx::query(sql::CLOSE_ROWS)
                    .bind(owner)
                    .execute(&mut *c)
                    .await
                    .map_err(|e| StepError::sql("freeing the locker's holders kept in rows", e))?;
                Ok(())
            })
        })
        .await
    }

    /// Ends the locker: no new grants, its rows deleted, its connection closed.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the server did not answer (the rows then expire).
    pub async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.hub.stop();
        let owner = self.owner;
        let result = self
            .step("closing the locker", true, move |c| {
                Box::pin(async move {
                    for statement in sql::CLOSE {
                        sqlx::query(statement)
                            .bind(owner)
                            .execute(&mut *c)
                            .await
                            .map_err(|e| StepError::sql("closing the locker", e))?;
                    }
                    Ok(())
                })
            })
            .await;
        if let Some(c) = self.steps.lock().await.take() {
            let _ = tokio::time::timeout(self.config.request_timeout, c.close()).await;
        }
        result
    }
}

/// `ER_BAD_FIELD_ERROR`: the table has no such column (made by an earlier release).
const NO_SUCH_COLUMN: u16 = 1054;
/// `ER_DUP_FIELDNAME`, `ER_DUP_KEYNAME`: another locker added the columns meanwhile.
const DUPLICATE_COLUMN: u16 = 1060;
const DUPLICATE_KEY_NAME: u16 = 1061;

/// Adds the columns of a holder kept in the row to a `locksmith_locks` made by an earlier release
/// (`sql/table_locks_holder.sql`; a new table has them). Lockers of that release must be gone
/// first: they do not look in the row (CHANGELOG).
async fn add_holder_columns(c: &mut MySqlConnection) -> Result<()> {
    match sqlx::query(sql::TABLE_LOCKS_COLUMNS).fetch_all(&mut *c).await {
        Ok(_) => return Ok(()),
        Err(e) if crate::error::server_number(&e) == Some(NO_SUCH_COLUMN) => {}
        Err(e) => return Err(mysql_error("reading the tables' columns", e)),
    }
    match sqlx::Executor::execute(&mut *c, sql::TABLE_LOCKS_HOLDER).await {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                crate::error::server_number(&e),
                Some(DUPLICATE_COLUMN | DUPLICATE_KEY_NAME)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(mysql_error(
            "adding the columns of the holder kept in the row to locksmith_locks, a table made by \
             an earlier release (the user needs ALTER on it once, or an administrator runs \
             ALTER TABLE locksmith_locks as backend-mysql/src/sql/table_locks_holder.sql says)",
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_core::driver::BackendUrl;

    /// A step's task stays small, whatever opening a connection takes: every step boxes one
    /// (spawned one, until steps ran in the caller's task), and its whole future is copied into
    /// the box. Here: 688 bytes; 1,816 with the opening inline, and 1,096 as an `async fn` (see
    /// `step_task`). Callgrind counted 180 k instructions of `memcpy` in an uncontended cycle
    /// with the opening inline, 62 % of the client's instructions.
    #[tokio::test]
    async fn a_step_task_is_small() {
        let config = Config::parse(&BackendUrl::parse("mysql://u@db/locks").unwrap()).unwrap();
        let slot = Arc::new(Mutex::new(None)).lock_owned().await;
        fn body(_: &mut MySqlConnection) -> Body<'_, ()> {
            Box::pin(async { Ok(()) })
        }
        let task = step_task("testing", config, 1, None, slot, body);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 1024, "a step's task is {size} bytes");
    }
}
