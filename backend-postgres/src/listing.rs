//! `inspect`, `list` and the reads of `leader`: plain reads without a transaction's row lock,
//! with the entries of the dead left out (the rule of `prune.sql`).

use std::sync::Arc;

use locksmith_core::driver::LockName;
use locksmith_core::{Family, HolderInfo, ListedLock, LockError, LockInfo, Result};

use crate::conn::Conn;
use crate::error::pg_error;
use crate::layout::segment;
use crate::protocol::queue::Row;

/// The live entries of lock `seg`, in arrival order.
pub(crate) async fn read_queue(conn: &Arc<Conn>, seg: &str) -> Result<Vec<Row>> {
    let rows = conn
        .read(
            "a read of a queue",
            "reading a queue",
            |sql| &sql.queue,
            (seg.to_owned(),),
        )
        .await?;
    let rows = rows.iter().map(Row::read).collect::<Result<Vec<_>>>()?;
    Ok(rows.into_iter().filter(Row::live).collect())
}

/// How many pages (shared buffers, hit or read) one read of lock `seg`'s queue touches, as the
/// server's `EXPLAIN (ANALYZE, BUFFERS)` counts them: what a step pays to read it, whatever the
/// machine's speed (tests and operators).
pub(crate) async fn queue_read_pages(conn: &Arc<Conn>, seg: &str) -> Result<u64> {
    conn.check_open()?;
    let guard = conn.client().await?;
    let client = guard.as_deref().ok_or(LockError::Closed)?;
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS) {}", conn.sql.queue);
    let e = |err| pg_error("explaining a read of a queue", err);
    let lines = conn.statements().query(client, &explain, &[&seg]).await.map_err(e)?;
    // The first `Buffers:` line is the top node's: the whole read's (`shared hit=N read=M`).
    for line in &lines {
        let line: String = line.try_get(0).map_err(e)?;
        if let Some(buffers) = line.trim_start().strip_prefix("Buffers: shared ") {
            return Ok(["hit=", "read="].iter().map(|key| number_after(buffers, key)).sum());
        }
    }
    Ok(0)
}

/// The number after `key` in `text` (0 if there is none: a count PostgreSQL leaves out is 0).
fn number_after(text: &str, key: &str) -> u64 {
    text.find(key)
        .map(|at| {
            text[at + key.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(0)
}

/// Who holds the mutex `name`, with the holder's host and pid in its id, and how many wait.
pub(crate) async fn inspect(conn: &Arc<Conn>, name: &LockName) -> Result<LockInfo> {
    let rows = read_queue(conn, &segment(Family::Mutex, name)).await?;
    let holder = rows.iter().find_map(|r| {
        r.token.map(|token| HolderInfo {
            holder_id: r.holder_id(),
            fencing_token: u64::try_from(token).ok(),
            ttl_remaining: Some(r.left()),
        })
    });
    Ok(LockInfo {
        holder,
        waiters: rows.iter().filter(|r| r.token.is_none()).count(),
    })
}

/// The locks of the schema whose names start with `prefix` and that are in use.
pub(crate) async fn list(conn: &Arc<Conn>, prefix: &str) -> Result<Vec<ListedLock>> {
    let rows = conn.read("a listing", "listing", |sql| &sql.list, ()).await?;
    let segments = rows
        .iter()
        .map(|r| {
            let e = |e| pg_error("listing", e);
            let n: i64 = r.try_get(1).map_err(e)?;
            Ok((r.try_get::<_, String>(0).map_err(e)?, usize::try_from(n).unwrap_or(0)))
        })
        .collect::<Result<Vec<(String, usize)>>>()?;
    Ok(ListedLock::from_segments(
        prefix,
        segments.iter().map(|(s, n)| (s.as_str(), *n)),
    ))
}

/// The live entries of lock `seg` as `holder:<holder id>` or `waiter:<holder id>` (tests and
/// operators).
pub(crate) async fn entries(conn: &Arc<Conn>, seg: &str) -> Result<Vec<String>> {
    Ok(read_queue(conn, seg)
        .await?
        .iter()
        .map(|r| match r.token {
            Some(_) => format!("holder:{}", r.holder_id()),
            None => format!("waiter:{}", r.holder_id()),
        })
        .collect())
}
