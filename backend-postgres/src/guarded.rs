//! Guarded writes ([`locksmith_core::Guarded`]): one statement (its own transaction) whose CTE finds the
//! holder, with its token and a lease that is live by the server's clock, and locks it `FOR
//! SHARE`, and whose write happens only if it found it (`layout.rs`'s `guarded_*`). The holder is
//! its entry, or the lock's row where an uncontended holder is kept (`sql/schema.sql`). A step
//! that would remove it (a release, a prune of an expired lease, the grant to the next holder)
//! waits for that lock, so the write commits before the lock can change hands, or not at all.
//! The store is the schema's `data` table (`sql/data.sql`): one row per key.
//!
//! A holder found in neither place is looked for once more, in a statement of its own: a step
//! that moved it from the lock's row into the entries while the first statement ran (`lock_row`)
//! left it where that statement's snapshot could not see it, and had committed before the second
//! one began. Nothing was written the first time (the write needs the holder found).

use std::sync::Arc;

use locksmith_core::driver::{GuardedWrite, Lease};
use locksmith_core::{LockError, Result};

use crate::conn::Conn;
use crate::layout::segment;
use crate::protocol::queue::entry_id;

/// Applies `write` if `lease` still holds (see the module docs).
pub(crate) async fn write(conn: &Arc<Conn>, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
    for _ in 0..2 {
        if let Some(applied) = attempt(conn, lease, write).await? {
            return Ok(applied);
        }
    }
    Err(LockError::not_held(lease.name.as_str()))
}

/// One statement: whether `write` applied, or `None` if the holder was not found.
async fn attempt(conn: &Arc<Conn>, lease: &Lease, write: &GuardedWrite) -> Result<Option<bool>> {
    let id = entry_id(&lease.holder_id).to_owned();
    let token = i64::try_from(lease.fencing_token).unwrap_or(i64::MAX);
    let seg = segment(lease.kind.family(), &lease.name);
    let row = match write.clone() {
        GuardedWrite::Put { key, value } => {
            (conn.one_statement(|sql| &sql.guarded_put, (id, token, seg, key, value))).await
        }
        GuardedWrite::Delete { key } => (conn.one_statement(|sql| &sql.guarded_delete, (id, token, seg, key))).await,
        GuardedWrite::CompareAndSet {
            key,
            expected: Some(expected),
            value,
        } => {
            let params = (id, token, seg, key, value, expected);
            conn.one_statement(|sql| &sql.guarded_swap, params).await
        }
        GuardedWrite::CompareAndSet {
            key,
            expected: None,
            value,
        } => (conn.one_statement(|sql| &sql.guarded_insert, (id, token, seg, key, value))).await,
        _ => return Err(LockError::InvalidOption(format!("PostgreSQL cannot apply {write:?}"))),
    };
    let row = row
        .map_err(with_grant_hint)?
        .ok_or_else(|| LockError::Protocol("a guarded write answered no row".into()))?;
    let (held, applied): (bool, bool) = (column(&row, 0)?, column(&row, 1)?);
    Ok(held.then_some(applied))
}

/// Reads `key` (a plain read).
pub(crate) async fn read(conn: &Arc<Conn>, key: &str) -> Result<Option<Vec<u8>>> {
    let row = conn
        .one_statement(|sql| &sql.guarded_read, (key.to_owned(),))
        .await
        .map_err(with_grant_hint)?;
    row.map(|row| column(&row, 0)).transpose()
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a tokio_postgres::Row, i: usize) -> Result<T> {
    row.try_get(i)
        .map_err(|e| LockError::Protocol(format!("reading a guarded write's answer: {e}")))
}

/// A user without rights on the `data` table (tables migrated from version 2 by their owner, the
/// user's grants not given again) is told how to get them.
fn with_grant_hint(e: LockError) -> LockError {
    match e {
        LockError::Denied(message) => LockError::Denied(format!(
            "{message}; guarded writes need rights on the schema's data table: \
             `locksmith init --sql --grant <role>` prints the grants"
        )),
        e => e,
    }
}
