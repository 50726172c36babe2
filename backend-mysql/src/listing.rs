//! `list` and `inspect`: reads of the live entries (by the server's clock), without locking.

use sqlx::Row;

use locksmith_core::driver::LockName;
use locksmith_core::{Family, HolderInfo, ListedLock, LockInfo, Result};

use crate::conn::{Conn, StepError};
use crate::layout::{segment, sql};
use crate::protocol::queue::{entries, holder_id, Entry};

/// The live entries of `seg`, in queue order.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn read_queue(conn: &Conn, seg: String) -> Result<Vec<Entry>> {
    conn.step("reading a queue", false, move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let rows = sqlx::query(sql::QUEUE_LIVE)
                .bind(seg)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| StepError::unsent("reading a queue", e))?;
            entries(rows)
        })
    })
    .await
}

/// Who holds `name` (a mutex) and how many wait.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn inspect(conn: &Conn, name: &LockName) -> Result<LockInfo> {
    let queue = read_queue(conn, segment(Family::Mutex, name)?).await?;
    let holder = queue.iter().find(|e| e.held).map(|e| HolderInfo {
        holder_id: holder_id(e.owner, e.id),
        fencing_token: Some(e.token),
        ttl_remaining: Some(e.left()),
    });
    Ok(LockInfo {
        holder,
        waiters: queue.iter().filter(|e| !e.held).count(),
    })
}

/// The locks with live entries whose names start with `prefix`.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn list(conn: &Conn, prefix: &str) -> Result<Vec<ListedLock>> {
    let rows = conn
        .step("listing", false, move |c| {
            Box::pin(async move {
                locksmith_core::metrics::round_trip();
                let rows = sqlx::query(sql::LIST)
                    .fetch_all(&mut *c)
                    .await
                    .map_err(|e| StepError::sql("listing", e))?;
                rows.iter()
                    .map(|r| {
                        let seg: Vec<u8> = r.try_get(0)?;
                        let n: i64 = r.try_get(1)?;
                        Ok((
                            String::from_utf8_lossy(&seg).into_owned(),
                            usize::try_from(n).unwrap_or(0),
                        ))
                    })
                    .collect::<std::result::Result<Vec<(String, usize)>, sqlx::Error>>()
                    .map_err(|e| crate::error::decode("listing", e).into())
            })
        })
        .await?;
    Ok(ListedLock::from_segments(
        prefix,
        rows.iter().map(|(s, n)| (s.as_str(), *n)),
    ))
}

/// Deletes the holders of `name` in `family` behind their backs (the tests' harness): how many.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn delete_holders(conn: &Conn, family: Family, name: &LockName) -> Result<u64> {
    let seg = segment(family, name)?;
    conn.step("deleting holders", false, move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            Ok(sqlx::query(sql::DELETE_HOLDERS)
                .bind(seg)
                .execute(&mut *c)
                .await
                .map_err(|e| StepError::sql("deleting holders", e))?
                .rows_affected())
        })
    })
    .await
}

/// The ids of every entry of `name` in `family`, live or not (the tests' residue).
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn entry_ids(conn: &Conn, family: Family, name: &LockName) -> Result<Vec<String>> {
    let seg = segment(family, name)?;
    conn.step("reading entries", false, move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let rows = sqlx::query(sql::ENTRIES)
                .bind(seg)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| StepError::sql("reading entries", e))?;
            rows.iter()
                .map(|r| r.try_get::<String, _>(0))
                .collect::<std::result::Result<Vec<String>, _>>()
                .map_err(|e| crate::error::decode("reading entries", e).into())
        })
    })
    .await
}

/// The entries this locker still has (segment and id), at shutdown, once new steps are refused.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn own_entries(conn: &Conn) -> Result<Vec<(String, u64)>> {
    let owner = conn.owner;
    conn.step("reading the locker's entries", true, move |c| {
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let rows = sqlx::query(sql::OWN_ENTRIES)
                .bind(owner)
                .fetch_all(&mut *c)
                .await
                .map_err(|e| StepError::sql("reading the locker's entries", e))?;
            rows.iter()
                .map(|r| {
                    Ok((
                        String::from_utf8_lossy(&r.try_get::<Vec<u8>, _>(0)?).into_owned(),
                        r.try_get(1)?,
                    ))
                })
                .collect::<std::result::Result<Vec<(String, u64)>, sqlx::Error>>()
                .map_err(|e| crate::error::decode("reading the locker's entries", e).into())
        })
    })
    .await
}
