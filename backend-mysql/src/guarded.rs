//! Guarded writes: one transaction locks the holder's lock row if it holds there
//! (`sql/guarded_check_row.sql`), else its entry (`sql/guarded_check.sql`): its id, token and a
//! lease live by the server's clock, `FOR UPDATE`; then it writes `locksmith_data`. A release,
//! a prune or a step moving the holder waits for the lock, so the write commits while the lease
//! is held, or not at all.

use sqlx::{Connection, Row};

use locksmith_core::driver::{GuardedWrite, Lease};
use locksmith_core::{LockError, Result};

use crate::conn::{Conn, StepError};
use crate::layout::{segment, sql};
use crate::protocol::queue::entry_id;

/// Applies `write` if `lease` is held: `Ok(false)` when a compare-and-set found another value.
///
/// # Errors
///
/// `NotHeld` when the lease is gone; the connection's errors.
pub(crate) async fn write(conn: &Conn, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
    let id = entry_id(&lease.holder_id)?;
    let (token, name, write) = (lease.fencing_token, lease.name.as_str().to_owned(), write.clone());
    let seg = segment(lease.kind.family(), &lease.name)?;
    conn.step("a guarded write", false, move |c| {
        let (name, write, seg) = (name.clone(), write.clone(), seg.clone());
        Box::pin(async move {
            let e = |err| StepError::sql("a guarded write", err);
            let mut tx = c
                .begin()
                .await
                .map_err(|err| StepError::unsent("a guarded write", err))?;
            // The holder kept in its lock's row first, then the queue (`sql/guarded_check_row.sql`).
            locksmith_core::metrics::round_trip();
            let mut held = sqlx::query(sql::GUARDED_CHECK_ROW)
                .bind(seg)
                .bind(id)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await
                .map_err(e)?;
            if held.is_none() {
                locksmith_core::metrics::round_trip();
                held = sqlx::query(sql::GUARDED_CHECK)
                    .bind(id)
                    .bind(token)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(e)?;
            }
            if held.is_none() {
                // Ended now: its reads locked the rows they looked at (a lock row whose holder
                // left), which a transaction left open would hold until the connection's next use.
                tx.rollback().await.map_err(e)?;
                return Err(LockError::not_held(name).into());
            }
            let applied = match &write {
                GuardedWrite::Put { key, value } => {
                    locksmith_core::metrics::round_trip();
                    sqlx::query(sql::GUARDED_PUT)
                        .bind(key)
                        .bind(value)
                        .execute(&mut *tx)
                        .await
                        .map_err(e)?;
                    true
                }
                GuardedWrite::Delete { key } => {
                    locksmith_core::metrics::round_trip();
                    let gone = sqlx::query(sql::GUARDED_DELETE)
                        .bind(key)
                        .execute(&mut *tx)
                        .await
                        .map_err(e)?;
                    gone.rows_affected() > 0
                }
                GuardedWrite::CompareAndSet { key, expected, value } => {
                    locksmith_core::metrics::round_trip();
                    let current = sqlx::query(sql::GUARDED_CURRENT)
                        .bind(key)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(e)?
                        .map(|r| r.try_get::<Vec<u8>, _>(0))
                        .transpose()
                        .map_err(|err| StepError::from(crate::error::decode("a guarded write", err)))?;
                    if current.as_deref() == expected.as_deref() {
                        locksmith_core::metrics::round_trip();
                        sqlx::query(sql::GUARDED_PUT)
                            .bind(key)
                            .bind(value)
                            .execute(&mut *tx)
                            .await
                            .map_err(e)?;
                        true
                    } else {
                        false
                    }
                }
                other => {
                    tx.rollback().await.map_err(e)?;
                    return Err(LockError::InvalidOption(format!("MySQL cannot apply {other:?}")).into());
                }
            };
            tx.commit().await.map_err(e)?;
            Ok(applied)
        })
    })
    .await
}

/// Reads `key` of `locksmith_data`.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn read(conn: &Conn, key: &str) -> Result<Option<Vec<u8>>> {
    let key = key.to_owned();
    conn.step("reading a guarded key", false, move |c| {
        let key = key.clone();
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let row = sqlx::query(sql::GUARDED_READ)
                .bind(key)
                .fetch_optional(&mut *c)
                .await
                .map_err(|e| StepError::sql("reading a guarded key", e))?;
            row.map(|r| r.try_get::<Vec<u8>, _>(0))
                .transpose()
                .map_err(|e| crate::error::decode("reading a guarded key", e).into())
        })
    })
    .await
}
