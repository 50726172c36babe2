//! The steps on one lock's queue, each inside one transaction (`conn/txn.rs`) on the queue it
//! read: join, take a turn, try once, leave, sweep. Who holds is
//! [`locksmith_core::driver::queue::standing`], the rule of every queue backend, decided here in Rust on
//! the whole queue.
//!
//! A step that changes the queue also grants every waiter that holds by the rule afterwards
//! ([`promote`]): a release hands the lock over in the releaser's own transaction, and the new
//! holder only confirms (one step), so a handover wakes nobody else.

use std::time::Duration;

use locksmith_core::driver::queue::{holds_at_tail, standing, Standing};
use locksmith_core::driver::Role;
use locksmith_core::{LockError, LockKind, Result};

use crate::conn::{Conn, Outcome, Step};
use crate::error::pg_error;

/// An entry to add.
#[derive(Clone, Debug)]
pub(crate) struct NewEntry {
    /// Random, unique.
    pub id: String,
    /// How it shares the lock.
    pub role: Role,
    /// An election candidate's value.
    pub value: String,
    /// Its lease, once granted.
    pub ttl: Duration,
}

/// A step.
#[derive(Debug)]
pub(crate) enum Op {
    /// Add the entry at the tail and take its first turn.
    Join(NewEntry),
    /// The entry with this id takes its turn.
    Turn(String),
    /// Add the entry only if it holds at once.
    Try(NewEntry),
    /// Remove the entry with this id.
    Leave(String),
    /// Nothing of its own: drop the dead entries and pass the lock on (`conn::Conn::sweep`,
    /// `conn::Conn::close`): grant the waiters that hold now and tell the first one, always.
    Sweep,
}

/// One entry as `queue.sql` reads it.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Its id.
    pub id: String,
    /// Its role.
    pub role: Role,
    /// Its fencing token, once it holds.
    pub token: Option<i64>,
    /// An election candidate's value.
    pub value: String,
    /// The process that added it.
    pub pid: i32,
    /// Its host.
    pub host: String,
    /// Milliseconds until it expires unless renewed (`None`: a waiter whose locker is gone).
    pub left_ms: Option<i64>,
}

impl Row {
    /// Reads a row of `queue.sql`.
    pub fn read(row: &tokio_postgres::Row) -> Result<Row> {
        let e = |err| pg_error("reading an entry", err);
        let role: String = row.try_get(1).map_err(e)?;
        Ok(Row {
            id: row.try_get(0).map_err(e)?,
            role: parse_role(&role)
                .ok_or_else(|| LockError::Protocol(format!("unknown role {role:?} in the entries table")))?,
            token: row.try_get(2).map_err(e)?,
            value: row.try_get(3).map_err(e)?,
            pid: row.try_get(4).map_err(e)?,
            host: row.try_get(5).map_err(e)?,
            left_ms: row.try_get(6).map_err(e)?,
        })
    }

    /// Whether it is live (the rule of `prune.sql`, for reads without a transaction).
    pub fn live(&self) -> bool {
        self.left_ms.is_some_and(|ms| ms > 0)
    }

    /// The holder id of its lease: `host:pid:id`.
    pub fn holder_id(&self) -> String {
        holder_id(&self.host, self.pid, &self.id)
    }

    /// Time left before it expires unless renewed.
    pub fn left(&self) -> Duration {
        Duration::from_millis(self.left_ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0))
    }
}

/// Whether a lock of `kind` may take `alone.sql`'s one-statement steps (a grant to an empty
/// queue, a hand-over from its holder): an exclusive kind that nobody observes (elections are
/// watched by their observers, which a full step NOTIFYs).
pub(crate) fn alone_applies(kind: &LockKind) -> bool {
    matches!(kind, LockKind::Mutex | LockKind::Write)
}

/// The holder id of entry `id`: `host:pid:id`.
pub(crate) fn holder_id(host: &str, pid: i32, id: &str) -> String {
    // Made on every grant: one allocation of the right size and the pid's digits by hand, not
    // `format!` (~1.5 k instructions a cycle under callgrind, docs/overhead.md).
    let mut digits = [0u8; 10];
    let mut n = pid.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = std::str::from_utf8(&digits[at..]).expect("ASCII digits");
    let mut out = String::with_capacity(host.len() + digits.len() + id.len() + 3);
    out.push_str(host);
    out.push(':');
    if pid < 0 {
        out.push('-');
    }
    out.push_str(digits);
    out.push(':');
    out.push_str(id);
    out
}

/// The entry id in a holder id made by [`holder_id`].
pub(crate) fn entry_id(holder_id: &str) -> &str {
    holder_id.rsplit(':').next().unwrap_or(holder_id)
}

/// The text of a role in the table.
pub(crate) fn role_text(role: Role) -> String {
    match role {
        Role::Exclusive => "exclusive".into(),
        Role::Shared => "shared".into(),
        Role::Permit(n) => format!("permit:{n}"),
    }
}

fn parse_role(text: &str) -> Option<Role> {
    match text {
        "exclusive" => Some(Role::Exclusive),
        "shared" => Some(Role::Shared),
        other => other.strip_prefix("permit:")?.parse().ok().map(Role::Permit),
    }
}

/// Runs `op` on `rows` (the live queue of `segment`, its row locked) in `tx`; sets `changed` when
/// the queue changed.
pub(crate) async fn apply(
    conn: &Conn,
    tx: &Step<'_>,
    segment: &str,
    rows: &mut Vec<Row>,
    op: Op,
    changed: &mut bool,
) -> Result<Outcome> {
    let roles = |rows: &[Row]| rows.iter().map(|r| r.role).collect::<Vec<_>>();
    match op {
        Op::Join(entry) => {
            // A join sent again after its answer was lost (a timeout, a dropped connection) finds
            // its entry in line when the first one committed: one entry only, its turn.
            if !rows.iter().any(|r| r.id == entry.id) {
                insert(conn, tx, segment, &entry, None).await?;
                *changed = true;
                rows.push(pending_row(conn, &entry));
            }
            turn(conn, tx, segment, rows, &entry.id, changed).await
        }
        Op::Turn(id) => turn(conn, tx, segment, rows, &id, changed).await,
        Op::Try(entry) => {
            if !holds_at_tail(&roles(rows), entry.role)? {
                return Ok(Outcome::Busy);
            }
            let token = next_token(conn, tx, segment).await?;
            insert(conn, tx, segment, &entry, Some(token)).await?;
            *changed = true;
            let mut row = pending_row(conn, &entry);
            row.token = Some(token);
            rows.push(row);
            Ok(Outcome::Granted(to_u64(token)))
        }
        Op::Leave(id) => {
            let row = tx
                .query_opt(&conn.sql.delete, &[&id])
                .await
                .map_err(|e| pg_error("leaving", e))?;
            *changed |= row.is_some();
            rows.retain(|r| r.id != id);
            Ok(Outcome::Left(
                row.is_some_and(|r| r.try_get::<_, bool>(0).unwrap_or(false)),
            ))
        }
        // A sweep follows entries removed outside a step (a locker's shutdown, an operator's
        // delete), which its prune does not see: it passes the lock on whatever it finds.
        Op::Sweep => {
            *changed = true;
            Ok(Outcome::Left(false))
        }
    }
}

/// Grants every entry of `rows` that holds by the queue rule but has no token yet (after a step
/// changed the queue: a holder left or expired, a waiter ahead gave up); returns their ids and
/// fencing tokens.
pub(crate) async fn promote(conn: &Conn, tx: &Step<'_>, segment: &str, rows: &mut [Row]) -> Result<Vec<(String, u64)>> {
    let roles: Vec<Role> = rows.iter().map(|r| r.role).collect();
    let mut granted = Vec::new();
    for (i, row) in rows.iter_mut().enumerate() {
        if row.token.is_some() || !matches!(standing(&roles, i), Ok(Standing::Holds)) {
            continue;
        }
        let token = next_token(conn, tx, segment).await?;
        // An entry removed meanwhile outside the step (its locker's shutdown) is granted nothing.
        let Some(ttl_ms) = grant(conn, tx, &row.id, token).await? else {
            continue;
        };
        row.left_ms = Some(ttl_ms);
        row.token = Some(token);
        granted.push((row.id.clone(), to_u64(token)));
    }
    Ok(granted)
}

/// Grants entry `id` fencing token `token`; returns the milliseconds its lease now has (its
/// TTL): what the waiter after it is told to wait for, in place of the expiry read while it still
/// waited (its locker's owner row's, which a lock with a longer TTL keeps further ahead). `None`
/// if the entry is gone (removed outside the step since it was read).
async fn grant(conn: &Conn, tx: &Step<'_>, id: &str, token: i64) -> Result<Option<i64>> {
    let row = (tx.query_opt(&conn.sql.grant, &[&id, &token]).await).map_err(|e| pg_error("granting", e))?;
    row.map(|row| row.try_get(0).map_err(|e| pg_error("granting", e)))
        .transpose()
}

/// The first entry of `rows` still waiting, and the milliseconds until the earliest lease of the
/// holders ahead of it runs out (`None`: no holder has a lease that runs out).
pub(crate) fn first_waiting(rows: &[Row]) -> Option<(&str, Option<u64>)> {
    let first = rows.iter().position(|r| r.token.is_none())?;
    Some((
        &rows[first].id,
        holders_expiry(&rows[..first]).map(|d| crate::conn::millis(d).max(0) as u64),
    ))
}

/// The earliest expiry of the holders among `ahead`.
fn holders_expiry(ahead: &[Row]) -> Option<Duration> {
    ahead.iter().filter(|r| r.left_ms.is_some()).map(Row::left).min()
}

/// Entry `id` takes its turn: it holds now if the queue rule says so.
async fn turn(
    conn: &Conn,
    tx: &Step<'_>,
    segment: &str,
    rows: &mut Vec<Row>,
    id: &str,
    changed: &mut bool,
) -> Result<Outcome> {
    let Some(me) = rows.iter().position(|r| r.id == id) else {
        return Ok(Outcome::Gone);
    };
    if let Some(token) = rows[me].token {
        // Granted by another's step (`promote`): its lease counts from now, so that the caller's
        // lease, which starts when it sent this step, never outlasts the one in the table.
        tx.execute(&conn.sql.restart_lease, &[&id])
            .await
            .map_err(|e| pg_error("confirming a grant", e))?;
        return Ok(Outcome::Granted(to_u64(token)));
    }
    let roles: Vec<Role> = rows.iter().map(|r| r.role).collect();
    match standing(&roles, me) {
        Ok(Standing::Holds) => {
            let token = next_token(conn, tx, segment).await?;
            let Some(ttl_ms) = grant(conn, tx, id, token).await? else {
                return Ok(Outcome::Gone);
            };
            rows[me].left_ms = Some(ttl_ms);
            *changed = true;
            rows[me].token = Some(token);
            Ok(Outcome::Granted(to_u64(token)))
        }
        // Only the first waiter wakes when a lease runs out; the others are told by the step
        // that makes them first (`conn/txn.rs`).
        Ok(_) => Ok(Outcome::Wait(match rows.iter().position(|r| r.token.is_none()) {
            Some(first) if first == me => holders_expiry(&rows[..me]),
            _ => None,
        })),
        Err(e) => {
            tx.execute(&conn.sql.delete, &[&id])
                .await
                .map_err(|e| pg_error("leaving", e))?;
            *changed = true;
            rows.remove(me);
            Err(e)
        }
    }
}

/// The lock's next fencing token (one more than the last, kept in its row).
async fn next_token(conn: &Conn, tx: &Step<'_>, segment: &str) -> Result<i64> {
    tx.query_one(&conn.sql.next_token, &[&segment])
        .await
        .map_err(|e| pg_error("handing out a token", e))?
        .try_get(0)
        .map_err(|e| pg_error("handing out a token", e))
}

/// Adds `entry` (holding `token` if given).
async fn insert(conn: &Conn, tx: &Step<'_>, segment: &str, entry: &NewEntry, token: Option<i64>) -> Result<()> {
    let ttl_ms = crate::conn::millis(entry.ttl);
    tx.execute(
        &conn.sql.insert,
        &[
            &entry.id,
            &segment,
            &conn.owner_id,
            &role_text(entry.role),
            &entry.value,
            &ttl_ms,
            &token,
            &conn.pid,
            &conn.host,
        ],
    )
    .await
    .map_err(|e| pg_error("joining", e))?;
    Ok(())
}

/// The row of an entry just added (not holding).
fn pending_row(conn: &Conn, entry: &NewEntry) -> Row {
    Row {
        id: entry.id.clone(),
        role: entry.role,
        token: None,
        value: entry.value.clone(),
        pid: conn.pid,
        host: conn.host.clone(),
        left_ms: None,
    }
}

/// A fencing token as the tables keep it (`bigint`), as locksmith-core hands it out.
pub(crate) fn to_u64(token: i64) -> u64 {
    u64::try_from(token).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_holder_ids_read_back() {
        for role in [Role::Exclusive, Role::Shared, Role::Permit(7)] {
            assert_eq!(parse_role(&role_text(role)), Some(role));
        }
        assert_eq!(entry_id(&holder_id("h", 1, "abc")), "abc");
        for pid in [0, 7, 42, 4_194_304, i32::MAX, -1, i32::MIN] {
            assert_eq!(holder_id("host", pid, "id"), format!("host:{pid}:id"));
        }
    }
}
