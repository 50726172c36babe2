//! The steps on a lock's queue. Their common cases are one call of a stored procedure each
//! (`call.rs`), tried first; otherwise, and without the procedures, each is one transaction:
//! lock the lock's row (`sql/lock_row.sql`, creating it at first use), prune the entries whose
//! lease or heartbeat ran out by the server's clock, read the queue in arrival order, step,
//! grant the waiters whose turn came and write their wake-ups and the lock's observers', commit,
//! then interrupt the woken lockers' waits (`wake.rs`).
//!
//! Fencing tokens come from the lock's row: `GREATEST(token + 1, <server's clock in µs>)`
//! (`sql/next_token.sql`). The counter makes them grow with every grant and survive a restart
//! (InnoDB keeps the row); the clock floor keeps them growing after a failover to a replica
//! that missed the last commits, or after the row was lost, as long as the new server's clock
//! is not behind the old one's by more than the time between the two grants.

use std::time::Duration;

use sqlx::{Connection, MySqlConnection, Row};

use locksmith_core::driver::queue::{holds_at_tail, standing, Standing};
use locksmith_core::driver::{LockRequest, Role};
use locksmith_core::{LockError, Result};

use crate::conn::{Body, Conn, StepError};
use crate::kill::kill_waits;
use crate::layout::sql;
use crate::protocol::call::{self, Called};

/// One entry of a queue, as read in a step.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub id: u64,
    pub owner: u64,
    pub role: Role,
    pub held: bool,
    pub token: u64,
    /// Time left on its lease or heartbeat, by the server's clock (negative: ran out).
    pub left_us: i64,
    pub value: String,
}

impl Entry {
    /// Time left, never negative.
    pub fn left(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.left_us).unwrap_or(0))
    }
}

/// The column `role` of a role, and its permits.
fn role_columns(role: Role) -> (&'static str, u32) {
    match role {
        Role::Exclusive => ("x", 0),
        Role::Shared => ("s", 0),
        Role::Permit(n) => ("p", n),
    }
}

fn role_of(code: &str, permits: u32) -> std::result::Result<Role, StepError> {
    match code {
        "x" => Ok(Role::Exclusive),
        "s" => Ok(Role::Shared),
        "p" => Ok(Role::Permit(permits)),
        other => Err(LockError::Protocol(format!("mysql: unknown entry role {other:?}")).into()),
    }
}

/// Reads the rows of a queue statement (`sql/queue.sql`, `sql/queue_live.sql`).
pub(crate) fn entries(rows: Vec<sqlx::mysql::MySqlRow>) -> std::result::Result<Vec<Entry>, StepError> {
    let col = |e: sqlx::Error| StepError::from(crate::error::decode("reading a queue", e));
    rows.into_iter()
        .map(|r| {
            let code: String = r.try_get(2).map_err(col)?;
            let permits: u32 = r.try_get(3).map_err(col)?;
            let held: i8 = r.try_get(4).map_err(col)?;
            let value: Vec<u8> = r.try_get(7).map_err(col)?;
            Ok(Entry {
                id: r.try_get(0).map_err(col)?,
                owner: r.try_get(1).map_err(col)?,
                role: role_of(&code, permits)?,
                held: held != 0,
                token: r.try_get(5).map_err(col)?,
                left_us: r.try_get::<Option<i64>, _>(6).map_err(col)?.unwrap_or(0),
                value: String::from_utf8_lossy(&value).into_owned(),
            })
        })
        .collect()
}

/// The holder id of entry `id` of locker `owner` (what [`entry_id`] reads back).
pub(crate) fn holder_id(owner: u64, id: u64) -> String {
    format!("{owner:016x}.{id:016x}")
}

/// The entry id of a holder id of [`holder_id`].
///
/// # Errors
///
/// [`LockError::Protocol`] for a holder id this backend did not make.
pub(crate) fn entry_id(holder: &str) -> Result<u64> {
    holder
        .rsplit('.')
        .next()
        .and_then(|id| u64::from_str_radix(id, 16).ok())
        .ok_or_else(|| LockError::Protocol(format!("mysql: {holder:?} is not a holder id of this backend")))
}

/// A new entry id: random, chosen before the entry is created, so that a clean-up can find the
/// entry whose creation was never answered.
pub(crate) fn new_entry_id() -> u64 {
    rand::random::<u64>() >> 1
}

/// What [`enter`] found.
#[derive(Debug)]
pub(crate) enum Entered {
    /// The entry holds, with this token.
    Granted(u64),
    /// It waits; check again when woken or after this long (the lease of the holder it waits
    /// for runs out).
    Waiting(Option<Duration>),
}

/// The start of a step: the lock's row locked, expired entries pruned, the queue read.
struct Opened {
    lock_id: u64,
    pruned: u64,
    queue: Vec<Entry>,
}

async fn open_row(c: &mut MySqlConnection, seg: &str) -> std::result::Result<Opened, StepError> {
    let lock_id = lock_row(c, seg).await?;
    read_pruned(c, lock_id).await
}

/// Locks the lock's row (made at its first use), moves a holder kept in it into the queue, and
/// returns its id.
async fn lock_row(c: &mut MySqlConnection, seg: &str) -> std::result::Result<u64, StepError> {
    let e = |what: &'static str| move |err| StepError::sql(what, err);
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::LOCK_ROW)
        .bind(seg)
        .execute(&mut *c)
        .await
        .map_err(e("locking the lock's row"))?;
    locksmith_core::metrics::round_trip();
    let row = sqlx::query(sql::LOCK_ID)
        .bind(seg)
        .fetch_one(&mut *c)
        .await
        .map_err(e("reading the lock's row"))?;
    let decode = |err| StepError::from(crate::error::decode("the lock's row", err));
    let lock_id: u64 = row.try_get(0).map_err(decode)?;
    let held_in_row: bool = row.try_get(2).map_err(decode)?;
    if held_in_row {
        // The holder granted in the row (`sql/proc_enter.sql`) joins the queue first, so that the
        // step reads one queue.
        locksmith_core::metrics::round_trip();
        sqlx::query(sql::MOVE_HOLDER)
            .bind(lock_id)
            .execute(&mut *c)
            .await
            .map_err(e("moving the holder into the queue"))?;
        locksmith_core::metrics::round_trip();
        sqlx::query(sql::FREE_ROW)
            .bind(lock_id)
            .execute(&mut *c)
            .await
            .map_err(e("moving the holder into the queue"))?;
    }
    Ok(lock_id)
}

/// With the lock's row locked: its expired entries pruned, its queue read.
async fn read_pruned(c: &mut MySqlConnection, lock_id: u64) -> std::result::Result<Opened, StepError> {
    let e = |what: &'static str| move |err| StepError::sql(what, err);
    locksmith_core::metrics::round_trip();
    let pruned = sqlx::query(sql::PRUNE)
        .bind(lock_id)
        .execute(&mut *c)
        .await
        .map_err(e("pruning expired entries"))?
        .rows_affected();
    locksmith_core::metrics::round_trip();
    let rows = sqlx::query(sql::QUEUE)
        .bind(lock_id)
        .fetch_all(&mut *c)
        .await
        .map_err(e("reading the queue"))?;
    Ok(Opened {
        lock_id,
        pruned,
        queue: entries(rows)?,
    })
}

/// Grants the waiters that hold now by the queue rule and writes their wake-ups, after a change
/// of `queue` (when `waiters`; other than `me`), writes the observers' when `observers`, and
/// returns the wait connections to interrupt after the commit (each its locker's owner id and
/// the connection id it registered: `kill.rs`).
///
/// A waiter's standing depends on the roles ahead of it only, never on who took a grant: a step
/// that only joined or took its own grant changes no other waiter's turn, and wakes none
/// ([`others_turn_may_have_come`]). Waking them anyway made every reader or permit holder
/// that took its grant wake all the others again (O(N²) wake-ups per hand-over to N readers).
async fn wake(
    c: &mut MySqlConnection,
    lock_id: u64,
    queue: &[Entry],
    me: Option<u64>,
    waiters: bool,
    observers: bool,
) -> std::result::Result<Vec<(u64, u64)>, StepError> {
    let e = |what: &'static str| move |err| StepError::sql(what, err);
    let roles: Vec<Role> = queue.iter().map(|x| x.role).collect();
    let mut owners = Vec::new();
    for (i, entry) in queue.iter().enumerate() {
        if !waiters || entry.held || Some(entry.id) == me || !matches!(standing(&roles, i), Ok(Standing::Holds)) {
            continue;
        }
        // Its turn came with this step, which grants it (a token, its lease from now): its
        // locker's mailbox read brings the grant, and it holds without a step of its own
        // (`protocol/wait.rs`).
        grant(c, lock_id, entry.id, "granting a waiter").await?;
        locksmith_core::metrics::round_trip();
        sqlx::query(sql::WAKE)
            .bind(entry.owner)
            .bind(entry.id)
            .bind(lock_id)
            .execute(&mut *c)
            .await
            .map_err(e("waking a waiter"))?;
        if !owners.contains(&entry.owner) {
            owners.push(entry.owner);
        }
    }
    let mut conns = Vec::new();
    for owner in owners {
        if let Some(row) = sqlx::query(sql::OWNER_CONN)
            .bind(owner)
            .fetch_optional(&mut *c)
            .await
            .map_err(e("waking a waiter"))?
        {
            let conn = row
                .try_get::<u64, _>(0)
                .map_err(|err| StepError::from(crate::error::decode("an owner", err)))?;
            conns.push((owner, conn));
        }
    }
    if observers {
        locksmith_core::metrics::round_trip();
        sqlx::query(sql::WAKE_WATCHERS)
            .bind(lock_id)
            .execute(&mut *c)
            .await
            .map_err(e("waking the observers"))?;
        for row in sqlx::query(sql::WATCHER_CONNS)
            .bind(lock_id)
            .fetch_all(&mut *c)
            .await
            .map_err(e("waking the observers"))?
        {
            let decode = |err| StepError::from(crate::error::decode("an observer", err));
            let wait: (u64, u64) = (row.try_get(0).map_err(decode)?, row.try_get(1).map_err(decode)?);
            if !conns.contains(&wait) {
                conns.push(wait);
            }
        }
    }
    Ok(conns)
}

/// Whether a step that joined the queue or took its own grant, after pruning `pruned` expired
/// entries, may have let other waiters' turns come: only if it removed entries ahead of them.
fn others_turn_may_have_come(pruned: u64) -> bool {
    pruned > 0
}

/// A new token from the lock's row (counter and clock floor).
async fn next_token(c: &mut MySqlConnection, lock_id: u64) -> std::result::Result<u64, StepError> {
    let e = |err| StepError::sql("taking a fencing token", err);
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::NEXT_TOKEN)
        .bind(lock_id)
        .execute(&mut *c)
        .await
        .map_err(e)?;
    locksmith_core::metrics::round_trip();
    let row = sqlx::query(sql::READ_TOKEN)
        .bind(lock_id)
        .fetch_one(&mut *c)
        .await
        .map_err(e)?;
    row.try_get(0)
        .map_err(|err| crate::error::decode("the fencing token", err).into())
}

/// Starts the lease of held entry `id` again from now: a step run again after its answer was lost
/// with its connection found the first run's grant, and the caller counts the lease from this
/// run's sending, later than that grant.
async fn restart_lease(c: &mut MySqlConnection, id: u64) -> std::result::Result<(), StepError> {
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::RESTART_LEASE)
        .bind(id)
        .execute(&mut *c)
        .await
        .map_err(|err| StepError::sql("taking the grant", err))?;
    Ok(())
}

/// Grants entry `id` of lock `lock_id`: a new token, and its lease from now; answers the token.
async fn grant(
    c: &mut MySqlConnection,
    lock_id: u64,
    id: u64,
    what: &'static str,
) -> std::result::Result<u64, StepError> {
    let token = next_token(c, lock_id).await?;
    locksmith_core::metrics::round_trip();
    sqlx::query(sql::GRANT)
        .bind(token)
        .bind(id)
        .execute(&mut *c)
        .await
        .map_err(|err| StepError::sql(what, err))?;
    Ok(token)
}

/// How often a transaction that InnoDB chose as a deadlock's victim (or whose lock wait timed
/// out) is run again before its error is returned.
pub(crate) const DEADLOCK_TRIES: u32 = 5;

/// Runs a transaction of `body` on the steps' connection (again, from its start, when InnoDB
/// broke a deadlock by rolling it back), then interrupts the waits it asks for.
async fn transaction<T, F>(conn: &Conn, what: &'static str, body: F) -> Result<T>
where
    T: Send + 'static,
    F: for<'c> Fn(&'c mut MySqlConnection) -> Body<'c, (T, Vec<(u64, u64)>)> + Send + Sync + 'static,
{
    let after_close = matches!(what, "sweeping" | "leaving at shutdown");
    let body = std::sync::Arc::new(body);
    conn.step(what, after_close, move |c| {
        let body = body.clone();
        Box::pin(async move {
            let mut tries = 1;
            loop {
                locksmith_core::metrics::round_trip(); // BEGIN
                let mut tx = c
                    .begin()
                    .await
                    .map_err(|err| StepError::unsent("beginning a transaction", err))?;
                match body(&mut tx).await {
                    Ok((value, conns)) => {
                        locksmith_core::metrics::round_trip(); // COMMIT
                        tx.commit().await.map_err(|err| StepError::sql("committing", err))?;
                        kill_waits(c, conns).await;
                        return Ok(value);
                    }
                    Err(e) if e.keep && tries < DEADLOCK_TRIES && crate::error::is_deadlock(&e.error) => {
                        tx.rollback().await.map_err(|err| StepError::sql("rolling back", err))?;
                        tries += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    })
    .await
}

/// The waiting step: enter the queue of `seg` with entry `id` if it is not there yet, and take
/// the grant if its turn has come.
///
/// # Errors
///
/// `InvalidOption` for a semaphore whose permit count disagrees with the queue's; the
/// connection's errors.
pub(crate) async fn enter(conn: &Conn, req: &LockRequest, seg: String, id: u64) -> Result<Entered> {
    if call::applies(conn, req) {
        match call::enter(conn, req, &seg, id, false).await? {
            Some(Called::Granted(token)) => return Ok(Entered::Granted(token)),
            Some(Called::Waiting(left)) => return Ok(Entered::Waiting(left)),
            _ => {}
        }
    }
    let (owner, role, value) = (
        conn.owner,
        req.kind.role(),
        req.kind.campaign_value().as_bytes().to_vec(),
    );
    let ttl_us = u64::try_from(req.ttl.as_micros()).unwrap_or(u64::MAX);
    let life_us = u64::try_from(conn.config.waiter_life().as_micros()).unwrap_or(u64::MAX);
    transaction(conn, "a waiting step", move |c| {
        let (seg, value) = (seg.clone(), value.clone());
        Box::pin(async move {
            let e = |what: &'static str| move |err| StepError::sql(what, err);
            let Opened {
                lock_id,
                pruned,
                mut queue,
            } = open_row(c, &seg).await?;
            let mut changed = pruned > 0;
            let me = match queue.iter().position(|x| x.id == id) {
                Some(i) => i,
                None => {
                    let roles: Vec<Role> = queue.iter().map(|x| x.role).collect();
                    holds_at_tail(&roles, role)?;
                    let (code, permits) = role_columns(role);
                    locksmith_core::metrics::round_trip();
                    sqlx::query(sql::INSERT)
                        .bind(id)
                        .bind(lock_id)
                        .bind(owner)
                        .bind(code)
                        .bind(permits)
                        .bind(value.clone())
                        .bind(ttl_us)
                        .bind(0i8)
                        .bind(0u64)
                        .bind(life_us)
                        .execute(&mut *c)
                        .await
                        .map_err(e("joining the queue"))?;
                    queue.push(Entry {
                        id,
                        owner,
                        role,
                        held: false,
                        token: 0,
                        left_us: 0,
                        value: String::new(),
                    });
                    queue.len() - 1
                }
            };
            let roles: Vec<Role> = queue.iter().map(|x| x.role).collect();
            let outcome = match standing(&roles, me)? {
                Standing::Holds if queue[me].held => {
                    restart_lease(c, id).await?;
                    Entered::Granted(queue[me].token)
                }
                Standing::Holds => {
                    let token = grant(c, lock_id, id, "taking the grant").await?;
                    queue[me].held = true;
                    changed = true;
                    Entered::Granted(token)
                }
                Standing::After(i) => Entered::Waiting(queue[i].held.then(|| queue[i].left())),
                Standing::AfterAny => Entered::Waiting(queue[..me].iter().filter(|x| x.held).map(Entry::left).min()),
            };
            let conns = if changed {
                wake(c, lock_id, &queue, Some(id), others_turn_may_have_come(pruned), true).await?
            } else {
                Vec::new()
            };
            Ok((outcome, conns))
        })
    })
    .await
}

/// One try: the grant if an entry added now would hold at once, else nothing is added.
///
/// # Errors
///
/// As [`enter`].
pub(crate) async fn try_take(conn: &Conn, req: &LockRequest, seg: String, id: u64) -> Result<Option<u64>> {
    if call::applies(conn, req) {
        match call::enter(conn, req, &seg, id, true).await? {
            Some(Called::Granted(token)) => return Ok(Some(token)),
            Some(Called::Busy) => return Ok(None),
            _ => {}
        }
    }
    let (owner, role, value) = (
        conn.owner,
        req.kind.role(),
        req.kind.campaign_value().as_bytes().to_vec(),
    );
    let ttl_us = u64::try_from(req.ttl.as_micros()).unwrap_or(u64::MAX);
    transaction(conn, "a try", move |c| {
        let (seg, value) = (seg.clone(), value.clone());
        Box::pin(async move {
            let Opened { lock_id, pruned, queue } = open_row(c, &seg).await?;
            let roles: Vec<Role> = queue.iter().map(|x| x.role).collect();
            // `Some(token)` held; `true` if by this run (a try run again finds its first run's).
            let (granted, new_grant) = if let Some(mine) = queue.iter().find(|x| x.id == id && x.held) {
                restart_lease(c, id).await?;
                (Some(mine.token), false)
            } else if holds_at_tail(&roles, role)? {
                let token = next_token(c, lock_id).await?;
                let (code, permits) = role_columns(role);
                locksmith_core::metrics::round_trip();
                sqlx::query(sql::INSERT)
                    .bind(id)
                    .bind(lock_id)
                    .bind(owner)
                    .bind(code)
                    .bind(permits)
                    .bind(value)
                    .bind(ttl_us)
                    .bind(1i8)
                    .bind(token)
                    .bind(ttl_us)
                    .execute(&mut *c)
                    .await
                    .map_err(|err| StepError::sql("taking the lock", err))?;
                (Some(token), true)
            } else {
                (None, false)
            };
            let conns = if pruned > 0 || new_grant {
                wake(c, lock_id, &queue, Some(id), others_turn_may_have_come(pruned), true).await?
            } else {
                Vec::new()
            };
            Ok((granted, conns))
        })
    })
    .await
}

/// Removes entry `id` (held or not) from the queue of `seg`: a waiter that gives up, or the
/// clean-up of an entry whose creation was never answered. Safe to run again.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn leave(conn: &Conn, seg: String, id: u64) -> Result<()> {
    remove_entry(conn, "leaving the queue", seg, id, None).await.map(|_| ())
}

/// [`leave`] at shutdown, once new steps are refused: what the locker still had in a queue (a
/// release that got no answer) goes, and the waiters behind it are woken.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn leave_at_close(conn: &Conn, seg: String, id: u64) -> Result<()> {
    remove_entry(conn, "leaving at shutdown", seg, id, None)
        .await
        .map(|_| ())
}

/// Deletes the entry `id` of lock `seg` (only if it holds with `token`, when given) and wakes
/// whoever it or the expired entries pruned by the same step kept waiting: how many rows went (0 or
/// 1). `what` names the step in errors.
async fn remove_entry(conn: &Conn, what: &'static str, seg: String, id: u64, token: Option<u64>) -> Result<u64> {
    transaction(conn, what, move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            let Opened {
                lock_id,
                pruned,
                mut queue,
            } = open_row(c, &seg).await?;
            locksmith_core::metrics::round_trip();
            let delete = match token {
                Some(token) => sqlx::query(sql::RELEASE).bind(id).bind(token),
                None => sqlx::query(sql::LEAVE).bind(id),
            };
            let n = delete
                .execute(&mut *c)
                .await
                .map_err(|err| StepError::sql(what, err))?
                .rows_affected();
            queue.retain(|x| x.id != id);
            let conns = if pruned + n > 0 {
                wake(c, lock_id, &queue, None, true, true).await?
            } else {
                Vec::new()
            };
            Ok((n, conns))
        })
    })
    .await
}

/// Releases the held entry `id` with `token` (`in_row`: a mutex's lease, which may be held in the
/// lock's row): `NotHeld` when it is gone (expired, deleted, or already released). Safe to run
/// again.
///
/// # Errors
///
/// `NotHeld` as above; the connection's errors.
pub(crate) async fn release(conn: &Conn, seg: String, id: u64, token: u64, name: String, in_row: bool) -> Result<()> {
    if conn.procedures {
        match call::release(conn, &seg, id, token, in_row).await? {
            Some(Called::Released(true)) => return Ok(()),
            Some(Called::Released(false)) => return Err(LockError::not_held(name)),
            _ => {}
        }
    }
    remove_entry(conn, "releasing", seg, id, Some(token))
        .await
        .and_then(|n| if n > 0 { Ok(()) } else { Err(LockError::not_held(name)) })
}

/// The sweep's step on a lock with expired entries: prune them and wake whoever holds now. With
/// `unless_busy` (the heartbeats' sweeps, which every locker runs), a lock whose row another
/// transaction holds is skipped (`SKIP LOCKED`): that step prunes and wakes itself, and the
/// lockers' sweeps neither wait for it nor for each other.
///
/// # Errors
///
/// The connection's errors.
pub(crate) async fn settle(conn: &Conn, seg: String, unless_busy: bool) -> Result<()> {
    transaction(conn, "sweeping", move |c| {
        let seg = seg.clone();
        Box::pin(async move {
            let lock_id = if unless_busy {
                locksmith_core::metrics::round_trip();
                let row = sqlx::query(sql::LOCK_ROW_UNLESS_BUSY)
                    .bind(&seg)
                    .fetch_optional(&mut *c)
                    .await
                    .map_err(|err| StepError::sql("locking the lock's row", err))?;
                match row {
                    Some(row) => row
                        .try_get(0)
                        .map_err(|err| StepError::from(crate::error::decode("the lock's row", err)))?,
                    None => return Ok(((), Vec::new())),
                }
            } else {
                lock_row(c, &seg).await?
            };
            let Opened { lock_id, pruned, queue } = read_pruned(c, lock_id).await?;
            let conns = if pruned > 0 {
                wake(c, lock_id, &queue, None, true, true).await?
            } else {
                Vec::new()
            };
            Ok(((), conns))
        })
    })
    .await
}
