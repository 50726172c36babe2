//! `renew_many`: one statement (`src/sql/renew.sql`), on the locker's connection before any
//! waiting step, extends every listed
//! lease that is still live by its own TTL, on the server's clock, wherever it is kept (its lock's
//! row or its entry). A lease it did not extend
//! (expired, removed by an operator, taken over after an expiry) answers `NotHeld`, and the
//! watchdog fires its lost signal.
//!
//! A renewal takes at most the request timeout; one that got no answer by then (or whose future
//! was dropped: the watchdog's own deadline) drops the connection, and the next renewal
//! or heartbeat opens a new one: a connection that went silent without closing (a flow a NAT or
//! firewall dropped) would otherwise hold every later renewal behind the unanswered one, and
//! every lease of the locker would be lost one TTL later, again and again.

use std::collections::HashSet;

use locksmith_core::driver::Lease;
use locksmith_core::{LockError, Result};
use tokio_postgres::types::ToSql;

use crate::conn::Conn;
use crate::error::pg_error;
use crate::layout::segment;
use crate::protocol::queue::entry_id;

/// Renews `leases`; one result per lease, in order.
pub(crate) async fn renew_many(conn: &Conn, leases: &[Lease]) -> Vec<Result<()>> {
    match renew(conn, leases).await {
        Ok(renewed) => leases
            .iter()
            .map(|l| match renewed.contains(entry_id(&l.holder_id)) {
                true => Ok(()),
                false => Err(LockError::not_held(l.name.as_str())),
            })
            .collect(),
        Err(e) => leases
            .iter()
            .map(|_| {
                Err(LockError::Unavailable {
                    message: format!("renewal failed: {e}"),
                    source: None,
                })
            })
            .collect(),
    }
}

/// The ids of the entries renewed.
async fn renew(conn: &Conn, leases: &[Lease]) -> Result<HashSet<String>> {
    conn.check_open()?;
    let ids: Vec<String> = leases.iter().map(|l| entry_id(&l.holder_id).to_owned()).collect();
    let segments: Vec<String> = leases.iter().map(|l| segment(l.kind.family(), &l.name)).collect();
    let params: [&(dyn ToSql + Sync); 3] = [&conn.owner_id, &ids, &segments];
    let rows = (conn.link)
        .query_within(&conn.config, "a renewal", "renewing", &conn.sql.renew, &params)
        .await?;
    rows.iter()
        .map(|r| r.try_get::<_, String>(0).map_err(|e| pg_error("renewing", e)))
        .collect()
}
