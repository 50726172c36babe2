//! The `KILL QUERY` that ends a waiting locker's wait statement once a step has written its
//! mailbox row and committed (`wake.rs` says how the wait works).

use std::future::Future;
use std::pin::Pin;

use sqlx::{MySqlConnection, Row};

use crate::error::no_such_thread;
use crate::layout::sql;

/// Interrupts the waits of the wait connections `conn_ids` (after the commit of the step that
/// wrote their mailbox rows). Only a connection running a wait statement right now is sent the
/// `KILL QUERY` (`sql/waiting_conns.sql`): after a server restart, connection ids start again,
/// and an id a locker registered before it may belong to another client's connection until that
/// locker registers its new one. A wait connection found between statements needs no kill: its
/// next wait statement reads the mailbox first. A connection that is gone, or whose user may
/// not be killed by ours, is skipped: its locker finds the row at its next beat.
pub(crate) fn kill_waits(c: &mut MySqlConnection, conn_ids: Vec<u64>) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(async move {
        if conn_ids.is_empty() {
            return;
        }
        let check = sql::with_ids(sql::WAITING_CONNS, conn_ids.len());
        let mut q = sqlx::query(&check);
        for id in &conn_ids {
            q = q.bind(*id);
        }
        locksmith_core::metrics::round_trip();
        let waiting: Vec<u64> = match q.fetch_all(&mut *c).await {
            Ok(rows) => rows.iter().filter_map(|r| r.try_get::<u64, _>(0).ok()).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "mysql: could not find the waiting lockers' connections (they check again at their next beat)");
                return;
            }
        };
        for id in waiting {
            let statement = sql::KILL_QUERY.replace("{conn}", &id.to_string());
            locksmith_core::metrics::round_trip();
            match sqlx::Executor::execute(&mut *c, statement.as_str()).await {
                Ok(_) => {}
                Err(e) if no_such_thread(&e) => {}
                Err(e) => {
                    tracing::warn!(error = %e, conn = id, "mysql: could not wake a waiting locker (it checks again at its next beat)")
                }
            }
        }
    })
}
