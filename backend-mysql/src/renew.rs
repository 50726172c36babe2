//! `renew_many`: three statements for every lease due, whatever their number: two `UPDATE`s
//! extend the leases still live by the server's clock (the holders kept in their locks' rows,
//! then the queues'), one `SELECT` says which are held.

use std::sync::Arc;

use sqlx::Row;

use locksmith_core::driver::Lease;
use locksmith_core::{LockError, Result};

use crate::conn::{Conn, StepError};
use crate::layout::sql;
use crate::protocol::queue::entry_id;

/// One result per lease, in order: `Ok` renewed, `NotHeld` gone.
pub(crate) async fn renew_many(conn: &Arc<Conn>, leases: &[Lease]) -> Vec<Result<()>> {
    let ids: Vec<Result<u64>> = leases.iter().map(|l| entry_id(&l.holder_id)).collect();
    let known: Vec<u64> = ids.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    let renewed = if known.is_empty() {
        Ok(Vec::new())
    } else {
        let (asked, owner) = (known.clone(), conn.owner);
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
                    .collect::<std::result::Result<Vec<u64>, _>>()
                    .map_err(|e| crate::error::decode("renewing", e).into())
            })
        })
        .await
    };
    leases
        .iter()
        .zip(ids)
        .map(|(lease, id)| {
            let id = id?;
            match &renewed {
                Ok(held) if held.contains(&id) => Ok(()),
                Ok(_) => Err(LockError::not_held(lease.name.as_str())),
                Err(e) => Err(clone_error(e)),
            }
        })
        .collect()
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
