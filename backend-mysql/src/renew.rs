//! `renew_many`: three statements for every lease due, whatever their number (up to ten thousand
//! leases a statement; a locker that holds more sends three per ten thousand): two `UPDATE`s
//! extend the leases still live by the server's clock (the holders kept in their locks' rows,
//! then the queues'), one `SELECT` says which are held.

use std::collections::HashSet;
use std::sync::Arc;

use sqlx::Row;

use locksmith_core::driver::Lease;
use locksmith_core::{LockError, Result};

use crate::conn::{Conn, StepError};
use crate::layout::sql;
use crate::protocol::queue::entry_id;

/// At most this many leases per statement: `RENEWED` binds each id twice, and a prepared
/// statement takes at most 65,535 placeholders. A batch larger than this (a locker holding that
/// many locks) is renewed in chunks, three statements each.
const RENEW_CHUNK: usize = 10_000;

/// One result per lease, in order: `Ok` renewed, `NotHeld` gone.
pub(crate) async fn renew_many(conn: &Arc<Conn>, leases: &[Lease]) -> Vec<Result<()>> {
    let ids: Vec<Result<u64>> = leases.iter().map(|l| entry_id(&l.holder_id)).collect();
    let known: Vec<u64> = ids.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    // Per chunk of `known`, in order: the ids held now, or the chunk's error.
    let mut chunks: Vec<Result<HashSet<u64>>> = Vec::new();
    for asked in known.chunks(RENEW_CHUNK) {
        chunks.push(renew_chunk(conn, asked.to_vec()).await);
    }
    let mut nth_known = 0;
    leases
        .iter()
        .zip(ids)
        .map(|(lease, id)| {
            let id = id?;
            let chunk = &chunks[nth_known / RENEW_CHUNK];
            nth_known += 1;
            match chunk {
                Ok(held) if held.contains(&id) => Ok(()),
                Ok(_) => Err(LockError::not_held(lease.name.as_str())),
                Err(e) => Err(clone_error(e)),
            }
        })
        .collect()
}

/// Renews the leases of `asked` (at most [`RENEW_CHUNK`]) still live; which are held now.
async fn renew_chunk(conn: &Arc<Conn>, asked: Vec<u64>) -> Result<HashSet<u64>> {
    let owner = conn.owner;
    conn.step_first("renewing", move |c| {
        let asked = asked.clone();
        Box::pin(async move {
            // The holders kept in their locks' rows first, then the queues' (`sql/renew_rows.sql`).
            let rows = sql::with_ids(sql::RENEW_ROWS, asked.len());
            let mut q = sqlx::query(&rows).bind(owner);
            for id in &asked {
                q = q.bind(*id);
            }
            locksmith_core::metrics::round_trip();
            q.execute(&mut *c).await.map_err(|e| StepError::unsent("renewing", e))?;
            let update = sql::with_ids(sql::RENEW, asked.len());
            let mut q = sqlx::query(&update);
            for id in &asked {
                q = q.bind(*id);
            }
            // Renewing twice is harmless: sent again on a new connection if this one was lost.
            locksmith_core::metrics::round_trip();
            q.execute(&mut *c).await.map_err(|e| StepError::unsent("renewing", e))?;
            let select = sql::with_ids(sql::RENEWED, asked.len());
            let mut q = sqlx::query(&select).bind(owner);
            for id in asked.iter().chain(&asked) {
                q = q.bind(*id);
            }
            locksmith_core::metrics::round_trip();
            let rows = q.fetch_all(&mut *c).await.map_err(|e| StepError::sql("renewing", e))?;
            rows.iter()
                .map(|r| r.try_get::<u64, _>(0))
                .collect::<std::result::Result<HashSet<u64>, _>>()
                .map_err(|e| crate::error::decode("renewing", e).into())
        })
    })
    .await
}

fn clone_error(e: &LockError) -> LockError {
    match e {
        LockError::Closed => LockError::Closed,
        LockError::Denied(m) => LockError::Denied(m.clone()),
        other => LockError::Unavailable {
            message: other.to_string(),
            source: None,
        },
    }
}
