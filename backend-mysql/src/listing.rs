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

/// The live holder kept in the row of `seg` (`sql/row_holder_live.sql`), if any.
async fn row_holder(conn: &Conn, seg: String) -> Result<Option<HolderInfo>> {
    conn.step("reading a lock's row", false, move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            locksmith_core::metrics::round_trip();
            let row = sqlx::query(sql::ROW_HOLDER_LIVE)
                .bind(seg)
                .fetch_optional(&mut *c)
                .await
                .map_err(|e| StepError::unsent("reading a lock's row", e))?;
            let col = |e| StepError::from(crate::error::decode("reading a lock's row", e));
            let Some(row) = row else { return Ok(None) };
            let (id, owner, token): (u64, u64, u64) = (
                row.try_get(0).map_err(col)?,
                row.try_get(1).map_err(col)?,
                row.try_get(2).map_err(col)?,
            );
            let left_us: Option<i64> = row.try_get(3).map_err(col)?;
            Ok(Some(HolderInfo {
                holder_id: holder_id(owner, id),
                fencing_token: Some(token),
                ttl_remaining: Some(std::time::Duration::from_micros(
                    u64::try_from(left_us.unwrap_or(0)).unwrap_or(0),
                )),
            }))
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
    let seg = segment(Family::Mutex, name)?;
    // The row first: a holder a step moves into the queue meanwhile is then found there.
    let in_row = row_holder(conn, seg.clone()).await?;
    let queue = read_queue(conn, seg).await?;
    let holder = in_row.or_else(|| {
        queue.iter().find(|e| e.held).map(|e| HolderInfo {
            holder_id: holder_id(e.owner, e.id),
            fencing_token: Some(e.token),
            ttl_remaining: Some(e.left()),
        })
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
            let mut n = 0;
            for statement in [sql::DELETE_ROW_HOLDER, sql::DELETE_HOLDERS] {
                n += sqlx::query(statement)
                    .bind(seg.clone())
                    .execute(&mut *c)
                    .await
                    .map_err(|e| StepError::sql("deleting holders", e))?
                    .rows_affected();
            }
            Ok(n)
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
                .bind(seg.clone())
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

/// The entries this locker still has (segment and id), at shutdown, once new steps are refused
/// and its holders kept in rows freed (`Conn::free_rows`).
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
