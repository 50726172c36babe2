//! The one-call steps: the common cases of a waiting step, a try and a release, each one `CALL`
//! of a stored procedure (`sql/proc_enter.sql`, `sql/proc_release.sql`) that runs the whole
//! transaction on the server (lock the row, read the queue, step, take the token, write the
//! wake-up, commit, and `KILL QUERY` the woken locker's wait): one round trip instead of about
//! ten. The procedures decide only the queues whose answer the queue rule gives without
//! locksmith-core's code (no expired entry, no observer, exclusive entries only, or an empty
//! queue); for any other they change nothing and answer so, and the caller runs the full step of
//! `queue.rs`. A deadlock or lock-wait timeout is left to the full step too, which retries. Each
//! call runs in the caller's task (`Conn::step_in_caller`).

use std::time::Duration;

use sqlx::Row;

use locksmith_core::driver::queue::holds_at_tail;
use locksmith_core::driver::{LockRequest, Role};
use locksmith_core::LockKind;
use locksmith_core::Result;

use crate::conn::{Conn, StepError};
use crate::layout::sql;

/// What a one-call step answered.
#[derive(Debug)]
pub(crate) enum Called {
    /// The entry holds, with this token.
    Granted(u64),
    /// It waits; check again when woken or after this long (the lease of the holder ahead).
    Waiting(Option<Duration>),
    /// A try that would wait: nothing was added.
    Busy,
    /// Released (`true`), or the entry was not held (`false`).
    Released(bool),
}

/// Whether a request of `req` may take the one-call steps at all: the procedures are there, and
/// its role is valid on an empty queue (the procedure checks the rest).
pub(crate) fn applies(conn: &Conn, req: &LockRequest) -> bool {
    conn.procedures && matches!(holds_at_tail(&[], req.kind.role()), Ok(true))
}

/// Whether a lease of `kind` may be held in its lock's row (`sql/proc_enter.sql`): a mutex's;
/// every other kind holds in the queue.
pub(crate) fn may_hold_in_row(kind: &LockKind) -> bool {
    matches!(kind, LockKind::Mutex)
}

/// The column `role` of a role, and its permits.
fn role_columns(role: Role) -> (&'static str, u32) {
    match role {
        Role::Exclusive => ("x", 0),
        Role::Shared => ("s", 0),
        Role::Permit(n) => ("p", n),
    }
}

/// The waiting step (`try_only`: a try) of entry `id` on `seg` in one call; `None` when the
/// full step must decide.
///
/// # Errors
///
/// The connection's errors.
///
/// # Cancel safety
///
/// As `Conn::step`: the call runs to its end in its task.
pub(crate) async fn enter(
    conn: &Conn,
    req: &LockRequest,
    seg: &str,
    id: u64,
    try_only: bool,
) -> Result<Option<Called>> {
    let (code, permits) = role_columns(req.kind.role());
    let value = req.kind.campaign_value().as_bytes().to_vec();
    let ttl_us = u64::try_from(req.ttl.as_micros()).unwrap_or(u64::MAX);
    let life_us = u64::try_from(conn.config.waiter_life().as_micros()).unwrap_or(u64::MAX);
    let (owner, seg) = (conn.owner, seg.to_owned());
    let in_row = may_hold_in_row(&req.kind);
    let what = if try_only { "a try" } else { "a waiting step" };
    conn.step_in_caller(what, move |c| {
        let (seg, value) = (seg.clone(), value.clone());
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let rows = sqlx::query(sql::CALL_ENTER)
                .bind(seg)
                .bind(id)
                .bind(owner)
                .bind(code)
                .bind(permits)
                .bind(value)
                .bind(ttl_us)
                .bind(life_us)
                .bind(i8::from(try_only))
                .bind(i8::from(in_row))
                .fetch_all(&mut *c)
                .await;
            let rows = match answered(what, rows)? {
                Some(rows) => rows,
                None => return Ok(None),
            };
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let col = |e| StepError::from(crate::error::decode(what, e));
            let outcome: i64 = row.try_get(0).map_err(col)?;
            Ok(match outcome {
                // 4: held in the lock's row (sql/proc_enter.sql); the same to the caller.
                1 | 4 => Some(Called::Granted(row.try_get(1).map_err(col)?)),
                2 => {
                    let left: Option<i64> = row.try_get(2).map_err(col)?;
                    Some(Called::Waiting(
                        left.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))),
                    ))
                }
                3 => Some(Called::Busy),
                _ => None,
            })
        })
    })
    .await
}

/// The release of held entry `id` (token `token`) on `seg` in one call; `None` when the full
/// step must decide. `in_row`: the lease is a mutex's, which may be held in the lock's row (as
/// [`enter`] passes it): the call frees it there without a transaction when it is.
///
/// # Errors
///
/// The connection's errors.
///
/// # Cancel safety
///
/// As `Conn::step`.
pub(crate) async fn release(conn: &Conn, seg: &str, id: u64, token: u64, in_row: bool) -> Result<Option<Called>> {
    let seg = seg.to_owned();
    conn.step_in_caller("releasing", move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let rows = sqlx::query(sql::CALL_RELEASE)
                .bind(seg)
                .bind(id)
                .bind(token)
                .bind(i8::from(in_row))
                .fetch_all(&mut *c)
                .await;
            let Some(rows) = answered("releasing", rows)? else {
                return Ok(None);
            };
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let col = |e| StepError::from(crate::error::decode("releasing", e));
            let outcome: i64 = row.try_get(0).map_err(col)?;
            let released: i64 = row.try_get(1).map_err(col)?;
            Ok((outcome == 1).then_some(Called::Released(released > 0)))
        })
    })
    .await
}

/// The rows of a call; `None` for a deadlock or lock-wait timeout (the procedure rolled back: the
/// full step runs, and retries). A connection found closed is a step that may be run again on a
/// new one (`Conn::step`): a procedure that committed before the connection went is found done
/// by its second run (the entry is in the queue; a release finds it gone).
fn answered(
    what: &str,
    rows: std::result::Result<Vec<sqlx::mysql::MySqlRow>, sqlx::Error>,
) -> std::result::Result<Option<Vec<sqlx::mysql::MySqlRow>>, StepError> {
    match rows {
        Ok(rows) => Ok(Some(rows)),
        Err(e) => {
            let err = StepError::unsent(what, e);
            if err.keep && crate::error::is_deadlock(&err.error) {
                Ok(None)
            } else {
                Err(err)
            }
        }
    }
}
