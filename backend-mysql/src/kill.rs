//! The `KILL QUERY` that ends a waiting locker's wait statement once a step has written its
//! mailbox row and committed (`wake.rs` says how the wait works).

use std::future::Future;
use std::pin::Pin;

use sqlx::{MySqlConnection, Row};

use crate::error::no_such_thread;
use crate::layout::{mark_prefix, sql};

/// Interrupts the waits of the wait connections `waits` (each its locker's owner id and the
/// connection id it registered), after the commit of the step that wrote their mailbox rows.
/// Only the locker's own wait connection is sent the `KILL QUERY`: after a server restart,
/// connection ids start again, and an id a locker registered before it may belong to another
/// client's connection until that locker registers its new one. A wait connection proves it is
/// one by holding its mark (`layout::mark_prefix`: one named-lock lookup for all of them, in
/// `sql/marked_conns.sql`); one without (a locker of an older release, or one whose mark is not
/// taken yet) is sent it only if the process list shows it running its wait statement
/// (`sql/waiting_conns.sql`, a read that costs the server 0.5–2 ms). A kill that reaches a wait
/// connection between statements interrupts one of those instead: its loop reads the mailbox
/// again. A connection that is gone, or whose user may not be killed by ours, is skipped: its
/// locker finds the row at its next beat.
pub(crate) fn kill_waits(
    c: &mut MySqlConnection,
    waits: Vec<(u64, u64)>,
) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    Box::pin(async move {
        if waits.is_empty() {
            return;
        }
        let Some(marked) = marked(c, &waits).await else {
            return;
        };
        let (mut kill, mut unmarked) = (Vec::new(), Vec::new());
        for (&(_, conn), is_marked) in waits.iter().zip(marked) {
            if is_marked {
                kill.push(conn);
            } else {
                unmarked.push(conn);
            }
        }
        if !unmarked.is_empty() {
            let Some(waiting) = waiting(c, &unmarked).await else {
                return;
            };
            kill.extend(waiting);
        }
        for id in kill {
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

/// For each of `waits`, whether its connection holds its mark; `None` when the read failed.
async fn marked(c: &mut MySqlConnection, waits: &[(u64, u64)]) -> Option<Vec<bool>> {
    let columns = vec!["IS_USED_LOCK(?) <=> ?"; waits.len()].join(", ");
    let statement = sql::MARKED_CONNS.replace("{marks}", &columns);
    let mut q = sqlx::query(&statement);
    for &(owner, conn) in waits {
        q = q.bind(format!("{}{conn}", mark_prefix(owner))).bind(conn);
    }
    locksmith_core::metrics::round_trip();
    match q.fetch_one(&mut *c).await {
        Ok(row) => Some(
            (0..waits.len())
                .map(|i| row.try_get::<i64, _>(i).is_ok_and(|v| v == 1))
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "mysql: could not find the waiting lockers' connections (they check again at their next beat)");
            None
        }
    }
}

/// Which of `conns` the process list shows running a wait statement; `None` when the read failed.
async fn waiting(c: &mut MySqlConnection, conns: &[u64]) -> Option<Vec<u64>> {
    let check = sql::with_ids(sql::WAITING_CONNS, conns.len());
    let mut q = sqlx::query(&check);
    for id in conns {
        q = q.bind(*id);
    }
    locksmith_core::metrics::round_trip();
    match q.fetch_all(&mut *c).await {
        Ok(rows) => Some(rows.iter().filter_map(|r| r.try_get::<u64, _>(0).ok()).collect()),
        Err(e) => {
            tracing::warn!(error = %e, "mysql: could not find the waiting lockers' connections (they check again at their next beat)");
            None
        }
    }
}
