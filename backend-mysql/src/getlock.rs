//! `layout=get_lock`: locks shared with programs that take the server's named locks themselves
//! (`SELECT GET_LOCK('name', timeout)` … `SELECT RELEASE_LOCK('name')`: PHP, Rails'
//! `with_advisory_lock`, Laravel, Python scripts, the `mysql` client): the lock name is the
//! `GET_LOCK` name, byte for byte.
//!
//! A locksmith holder holds two things: its grant in the tables (the default layout's queue,
//! unchanged: FIFO among locksmith clients, a fencing token from the lock's row, a lease on the
//! server's clock) and the named lock, taken with `GET_LOCK` once the grant is there, on a
//! session (a connection) of its own that stays with the lease until it ends. So locksmith
//! waiters wait in the tables (woken by the wait connection's `KILL QUERY`), and only the head of
//! a lock's queue waits in `GET_LOCK`, in the server's own wait for the name, beside the other
//! programs' sessions: woken by the server when the name is freed, never a poll. While it waits
//! there it renews its grant; if the grant is lost meanwhile (a pause), the wait is given up and
//! it joins the queue again.
//!
//! A held name's session is given `wait_timeout` = the lease's TTL (whole seconds, rounded up)
//! and is pinged at every renewal (`IS_USED_LOCK(name) = CONNECTION_ID()`, which also checks
//! that it still holds the name): a holder that stops (SIGSTOP, a hung process) stops pinging,
//! and the server ends its session after the TTL, which frees the name for everyone, although
//! the TCP connection stays open.
//!
//! How a lease's named lock ends:
//! - released: `RELEASE_LOCK` on its session, which is kept for a later lock;
//! - lost in the tables (its lease expired: a pause): its session is closed, which frees it;
//! - given up while waiting (timeout, dropped future, error): the session is dropped and
//!   `KILL CONNECTION` sent for it on the locker's steps connection, so the server never leaves
//!   the name to a session nobody listens to;
//! - its session ended (`KILL`, `wait_timeout`, a server restart, a broken connection): the
//!   server freed the name; the lease's lost signal fires at the next renewal, whose ping fails.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sqlx::{MySqlConnection, Row};
use tokio::time::Instant;

use locksmith_core::driver::armed::Armed;
use locksmith_core::driver::{cleanup, Lease, LockName, LockRequest};
use locksmith_core::{Family, LockError, LockKind, LostReason, Result};

use crate::cleanup::Pending;
use crate::config::Config;
use crate::conn::{open, Conn, StepError};
use crate::error::{mysql_error, no_such_thread, timeout};
use crate::layout::{segment, sql};
use crate::protocol::queue::{entry_id, leave};
use crate::protocol::wait;
use crate::renew;

const RELEASE_LOCK: &str = include_str!("sql/get_lock_release.sql");
/// 1 while this session holds the name; 0 or NULL when it does not.
const HELD: &str = include_str!("sql/get_lock_held.sql");
const CONNECTION_ID: &str = include_str!("sql/connection_id.sql");
/// `KILL CONNECTION {conn}`: ends a session given up in the middle of its `GET_LOCK`.
const KILL_CONNECTION: &str = include_str!("sql/kill_connection.sql");

/// Sessions kept open for later locks once their lock was released.
const IDLE_SESSIONS: usize = 4;

/// The longest name in characters: MySQL's limit (5.7 and later refuse longer names).
const MAX_CHARS: usize = 64;
/// The longest name in bytes of UTF-8: MariaDB's limit (measured on 10.11: 192 bytes, error 1059
/// beyond; it counts bytes, so 65 to 192 ASCII characters pass on MariaDB and fail on MySQL).
const MAX_BYTES: usize = 192;

/// `GET_LOCK`'s timeout when the caller has no deadline: a year (a negative timeout means
/// "forever" on MySQL but is an error, `NULL`, on MariaDB).
const FOREVER_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// [`LockError::InvalidOption`] for `family` under `layout=get_lock`: `GET_LOCK` has one form,
/// an exclusive lock, and nothing of semaphores, read-write locks or elections.
pub(crate) fn no_such_kind(family: Family) -> LockError {
    LockError::InvalidOption(format!(
        "layout=get_lock shares the server's GET_LOCK named locks, which are exclusive: mutexes only; \
         use the default layout (no layout= option) for the {} kind",
        family.name()
    ))
}

/// The `GET_LOCK` name of a lock: the lock name itself, byte for byte.
///
/// # Errors
///
/// [`LockError::InvalidOption`] for any kind but a mutex; [`LockError::InvalidName`] for a name
/// longer than 64 characters or 192 bytes (the servers' limits: never truncated, which would make
/// two names one lock).
pub(crate) fn name_of(name: &LockName, kind: &LockKind) -> Result<String> {
    if kind.family() != Family::Mutex {
        return Err(no_such_kind(kind.family()));
    }
    let text = name.as_str();
    let chars = text.chars().count();
    if chars > MAX_CHARS || text.len() > MAX_BYTES {
        return Err(LockError::InvalidName(format!(
            "layout=get_lock: a lock name is the GET_LOCK name, at most {MAX_CHARS} characters \
             and {MAX_BYTES} bytes of UTF-8 (the servers' limits); got {chars} characters, {} bytes",
            text.len()
        )));
    }
    Ok(text.to_owned())
}

/// One session of its own.
struct Session {
    conn: MySqlConnection,
    /// Its `CONNECTION_ID()`: what `IS_USED_LOCK` answers and `KILL` takes.
    id: u64,
}

impl Session {
    async fn open(config: &Config) -> Result<Session> {
        let what = "opening a GET_LOCK session";
        let mut conn = open(config).await?;
        let row = tokio::time::timeout(config.request_timeout, sqlx::query(CONNECTION_ID).fetch_one(&mut conn))
            .await
            .map_err(|_| timeout(what, config.request_timeout))?
            .map_err(|e| mysql_error(what, e))?;
        let id = row.try_get::<u64, _>(0).map_err(|e| crate::error::decode(what, e))?;
        Ok(Session { conn, id })
    }

    /// Sets the session's `wait_timeout` to `ttl` in whole seconds, rounded up: a session its
    /// holder stops pinging (a stopped process) ends after that, freeing its names. Also tells a
    /// kept session that the server closed (`Err`).
    async fn set_life(&mut self, ttl: Duration, limit: Duration) -> Result<()> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let what = "setting a GET_LOCK session's wait_timeout";
        tokio::time::timeout(
            limit,
            sqlx::query(sql::WAIT_TIMEOUT).bind(secs.max(1)).execute(&mut self.conn),
        )
        .await
        .map_err(|_| timeout(what, limit))?
        .map_err(|e| mysql_error(what, e))?;
        Ok(())
    }
}

/// A session that may be in a `GET_LOCK` call: unless [`Waiting::done`] takes it back, dropping
/// it closes the session and kills it on the server, which frees whatever it was granted.
struct Waiting {
    session: Option<Session>,
    conn: Arc<Conn>,
}

impl Waiting {
    fn session(&mut self) -> &mut Session {
        self.session.as_mut().expect("taken only by done")
    }

    fn done(mut self) -> Session {
        self.session.take().expect("taken only once")
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let (conn, id) = (self.conn.clone(), session.id);
        // Closed at once, and killed too: the server notices a client gone from under a
        // GET_LOCK wait only about a second later (MariaDB 10.11, measured), and could grant the
        // name meanwhile to a session nobody listens to.
        drop(session);
        let spawned = cleanup::spawn(async move {
            let statement = KILL_CONNECTION.replace("{conn}", &id.to_string());
            let killed = conn
                .step("killing a given-up GET_LOCK session", true, move |c| {
                    let statement = statement.clone();
                    Box::pin(async move {
                        match sqlx::Executor::execute(&mut *c, statement.as_str()).await {
                            Ok(_) => Ok(()),
                            Err(e) if no_such_thread(&e) => Ok(()),
                            Err(e) => Err(StepError::sql("killing a given-up GET_LOCK session", e)),
                        }
                    })
                })
                .await;
            if let Err(e) = killed {
                tracing::warn!(error = %e, session = id, "mysql: a given-up GET_LOCK session could not be killed; it ends when its wait does");
            }
        });
        if !spawned {
            tracing::warn!(
                session = id,
                "mysql: a GET_LOCK session given up where no runtime runs ends when its wait does"
            );
        }
    }
}

/// A held named lock.
struct Held {
    /// Its session, shared with a renewal's ping.
    session: Arc<tokio::sync::Mutex<Session>>,
    /// The `GET_LOCK` name.
    name: String,
}

/// Why a wait for the named lock ended without it.
enum Gave {
    /// The grant in the tables was lost meanwhile: join the queue again.
    GrantLost,
    /// An error (a timeout at the deadline, a failed session).
    Up(LockError),
}

/// The `GET_LOCK` sessions of one locker: one per held lock, one per lock whose turn it is
/// waiting for in `GET_LOCK`, and a few idle ones.
pub(crate) struct Sessions {
    config: Arc<Config>,
    /// By entry id.
    held: Mutex<HashMap<u64, Held>>,
    idle: Mutex<Vec<Session>>,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("held", &lock(&self.held).len())
            .field("idle", &lock(&self.idle).len())
            .finish()
    }
}

impl Sessions {
    /// No session yet: they open as locks are taken.
    pub fn new(config: Config) -> Sessions {
        Sessions {
            config: Arc::new(config),
            held: Mutex::new(HashMap::new()),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// `try_acquire`: the grant in the tables, then `GET_LOCK(name, 0)`; if another session
    /// holds the name, the grant is given back and the answer is `None`.
    ///
    /// # Errors
    ///
    /// `InvalidName`/`InvalidOption` as [`name_of`]; the server's errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the grant leaves the queue (`Pending`) and the session is killed (`Waiting`).
    pub async fn try_acquire(&self, conn: &Arc<Conn>, req: &LockRequest) -> Result<Option<Lease>> {
        let name = name_of(&req.name, &req.kind)?;
        let Some(lease) = wait::try_acquire(conn, req).await? else {
            return Ok(None);
        };
        let seg = segment(req.kind.family(), &req.name)?;
        let id = entry_id(&lease.holder_id)?;
        let mut grant = Armed::new(Pending {
            conn: conn.clone(),
            seg: seg.clone(),
            id,
        });
        let mut waiting = self.waiting(conn, self.session(req.ttl).await?);
        let got = self.get_lock(waiting.session(), &name, 0.0).await?;
        let session = waiting.done();
        if !got {
            self.put_back(session);
            let left = leave(conn, seg, id).await;
            grant.disarm();
            left?;
            return Ok(None);
        }
        grant.disarm();
        Ok(Some(self.hold(lease, session, name)))
    }

    /// `acquire`: the grant in the tables (waiting in line there), then `GET_LOCK`, renewing the
    /// grant while the server makes it wait; until `deadline`.
    ///
    /// # Errors
    ///
    /// `Timeout` at the deadline; as [`Sessions::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Sessions::try_acquire`].
    pub async fn acquire(&self, conn: &Arc<Conn>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let name = name_of(&req.name, &req.kind)?;
        let seg = segment(req.kind.family(), &req.name)?;
        // Whether a grant was lost while the named lock was awaited: a later one waited.
        let mut again = false;
        loop {
            let mut lease = wait::acquire(conn, req, deadline).await?;
            let id = entry_id(&lease.holder_id)?;
            let mut grant = Armed::new(Pending {
                conn: conn.clone(),
                seg: seg.clone(),
                id,
            });
            let mut waiting = self.waiting(conn, self.session(req.ttl).await?);
            match self.wait(conn, waiting.session(), &mut lease, &name, deadline).await {
                Ok(()) => {
                    let session = waiting.done();
                    grant.disarm();
                    lease.waited |= again;
                    return Ok(self.hold(lease, session, name));
                }
                Err(Gave::Up(LockError::Timeout(_))) if deadline.is_some() => {
                    // GET_LOCK answered 0 at the deadline: the session is clean, kept.
                    self.put_back(waiting.done());
                    let left = leave(conn, seg.clone(), id).await;
                    if left.is_ok() {
                        grant.disarm();
                    }
                    return Err(LockError::Timeout(Duration::ZERO));
                }
                // `waiting` kills the session and `grant` leaves the queue, as they drop.
                Err(Gave::GrantLost) => {
                    again = true;
                    tracing::debug!(lock = %seg, "mysql: the grant expired while waiting in GET_LOCK; joining again");
                }
                Err(Gave::Up(e)) => return Err(e),
            }
        }
    }

    /// Frees the named lock of entry `id`: `RELEASE_LOCK`, its session kept for a later lock;
    /// closed instead if that fails (which frees it too). Returns whether the entry still held it.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the session is closed, which frees the name.
    pub async fn release(&self, id: u64) -> bool {
        let Some(held) = lock(&self.held).remove(&id) else {
            return false;
        };
        let mut session = held.session.lock().await;
        let released = tokio::time::timeout(
            self.config.request_timeout,
            sqlx::query(RELEASE_LOCK).bind(&held.name).fetch_one(&mut session.conn),
        )
        .await;
        let freed = matches!(&released, Ok(Ok(row)) if row.try_get::<Option<i64>, _>(0).ok().flatten() == Some(1));
        drop(session);
        if !freed {
            tracing::debug!(name = %held.name, "mysql: closing a GET_LOCK session rather than releasing its lock");
            return false;
        }
        if let Ok(session) = Arc::try_unwrap(held.session) {
            self.put_back(session.into_inner());
        }
        true
    }

    /// `renew_many`: the grants in the tables, then every held name's session pinged at once
    /// (which keeps it within its `wait_timeout` and checks that it still holds the name). A lease
    /// lost in the tables has its session closed, freeing the name; a lease whose session no
    /// longer holds it is told (`lost()`), answers `NotHeld` and leaves the tables.
    pub async fn renew_many(&self, conn: &Arc<Conn>, leases: &[Lease]) -> Vec<Result<()>> {
        let mut results = renew::renew_many(conn, leases).await;
        let mut pings = Vec::new();
        for (n, (lease, result)) in leases.iter().zip(results.iter_mut()).enumerate() {
            let Ok(id) = entry_id(&lease.holder_id) else {
                continue;
            };
            match result {
                Ok(()) => {
                    let held = lock(&self.held).get(&id).map(|h| (h.session.clone(), h.name.clone()));
                    match held {
                        Some((session, name)) => {
                            let limit = self.config.request_timeout;
                            pings.push((n, id, tokio::spawn(ping(session, name, limit))));
                        }
                        None => *result = Err(LockError::not_held(lease.name.as_str())),
                    }
                }
                // Told first, then the session closed: nobody can be granted the name before
                // its holder has been told it lost it.
                Err(e) if e.is_not_held() => {
                    lease.lost.fire(LostReason::LeaseGone(format!(
                        "its grant expired in the tables ({e}); its GET_LOCK session is closed now"
                    )));
                    drop(lock(&self.held).remove(&id));
                }
                _ => {}
            }
        }
        for (n, id, ping) in pings {
            let failure = match ping.await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(e) => format!("the ping's task failed: {e}"),
            };
            let lease = &leases[n];
            // Only the session pinged: a lease released meanwhile is not this one.
            if lock(&self.held).remove(&id).is_none() {
                continue;
            }
            lease.lost.fire(LostReason::LeaseGone(format!(
                "the session that held GET_LOCK({:?}) no longer holds it: {failure}",
                lease.name.as_str()
            )));
            results[n] = Err(LockError::not_held(lease.name.as_str()));
            if let Ok(seg) = segment(lease.kind.family(), &lease.name) {
                let conn = conn.clone();
                cleanup::spawn(async move {
                    if let Err(e) = leave(&conn, seg, id).await {
                        tracing::debug!(error = %e, "mysql: the grant of a lost GET_LOCK expires instead");
                    }
                });
            }
        }
        results
    }

    /// Closes every session (at shutdown): the server frees their names.
    pub fn close(&self) {
        lock(&self.held).clear();
        lock(&self.idle).clear();
    }

    /// `GET_LOCK(name, secs)` on `session`: `true` if taken, `false` at its timeout.
    async fn get_lock(&self, session: &mut Session, name: &str, secs: f64) -> Result<bool> {
        let what = "taking the GET_LOCK lock";
        let limit = self.config.request_timeout + Duration::from_secs_f64(secs);
        let row = tokio::time::timeout(
            limit,
            sqlx::query(sql::GET_LOCK)
                .bind(name)
                .bind(secs)
                .fetch_one(&mut session.conn),
        )
        .await
        .map_err(|_| timeout(what, limit))?
        .map_err(|e| name_error(what, e))?;
        match row
            .try_get::<Option<i64>, _>(0)
            .map_err(|e| crate::error::decode(what, e))?
        {
            Some(1) => Ok(true),
            Some(_) => Ok(false),
            None => Err(LockError::Unavailable {
                message: format!("mysql: GET_LOCK({name:?}) answered NULL (its session was killed?)"),
                source: None,
            }),
        }
    }

    /// Waits for the named lock on `session` (in the server, until `deadline`), renewing `lease`
    /// (the grant in the tables) every third of its TTL meanwhile.
    async fn wait(
        &self,
        conn: &Arc<Conn>,
        session: &mut Session,
        lease: &mut Lease,
        name: &str,
        deadline: Option<Instant>,
    ) -> std::result::Result<(), Gave> {
        // Fractions of a second: MariaDB (10.1.2 and later) honours them; a server that rounds
        // the timeout to whole seconds answers 0 up to half a second off the deadline.
        let secs = deadline.map_or(FOREVER_SECS, |d| {
            d.saturating_duration_since(Instant::now()).as_secs_f64()
        });
        let locking = self.get_lock(session, name, secs);
        tokio::pin!(locking);
        let mut renew_at = lease.acquired_at + lease.ttl / 3;
        loop {
            tokio::select! {
                locked = &mut locking => {
                    return match locked {
                        Ok(true) => Ok(()),
                        Ok(false) => Err(Gave::Up(LockError::Timeout(Duration::ZERO))),
                        Err(e) => Err(Gave::Up(e)),
                    };
                }
                _ = tokio::time::sleep_until(renew_at) => {}
            }
            let sent = Instant::now();
            let renewed = tokio::time::timeout(
                self.config.request_timeout,
                renew::renew_many(conn, std::slice::from_ref(lease)),
            );
            match renewed.await.ok().and_then(|mut r| r.pop()) {
                Some(Ok(())) => {
                    lease.acquired_at = sent;
                    renew_at = sent + lease.ttl / 3;
                }
                Some(Err(e)) if e.is_not_held() => return Err(Gave::GrantLost),
                // Failed: again soon, as long as the grant lasts.
                _ if Instant::now() >= lease.acquired_at + lease.ttl => return Err(Gave::GrantLost),
                _ => renew_at = Instant::now() + (lease.ttl / 10).max(Duration::from_millis(10)),
            }
        }
    }

    /// Keeps `session` as the holder of `lease`'s named lock.
    fn hold(&self, lease: Lease, session: Session, name: String) -> Lease {
        if let Ok(id) = entry_id(&lease.holder_id) {
            let held = Held {
                session: Arc::new(tokio::sync::Mutex::new(session)),
                name,
            };
            lock(&self.held).insert(id, held);
        }
        lease
    }

    /// An idle session (still open) or a new one, its `wait_timeout` set to `ttl`.
    async fn session(&self, ttl: Duration) -> Result<Session> {
        let limit = self.config.request_timeout;
        loop {
            let Some(mut session) = lock(&self.idle).pop() else {
                break;
            };
            if session.set_life(ttl, limit).await.is_ok() {
                return Ok(session);
            }
        }
        let mut session = Session::open(&self.config).await?;
        session.set_life(ttl, limit).await?;
        Ok(session)
    }

    fn waiting(&self, conn: &Arc<Conn>, session: Session) -> Waiting {
        Waiting {
            session: Some(session),
            conn: conn.clone(),
        }
    }

    fn put_back(&self, session: Session) {
        let mut idle = lock(&self.idle);
        if idle.len() < IDLE_SESSIONS {
            idle.push(session);
        }
    }
}

/// Pings a held name's session: `IS_USED_LOCK(name) = CONNECTION_ID()` must be 1.
async fn ping(
    session: Arc<tokio::sync::Mutex<Session>>,
    name: String,
    limit: Duration,
) -> std::result::Result<(), String> {
    let mut session = session.lock().await;
    let asked = tokio::time::timeout(limit, sqlx::query(HELD).bind(&name).fetch_one(&mut session.conn)).await;
    match asked {
        Ok(Ok(row)) => match row.try_get::<Option<i64>, _>(0) {
            Ok(Some(1)) => Ok(()),
            Ok(_) => Err("the server says another session holds it, or none".into()),
            Err(e) => Err(e.to_string()),
        },
        Ok(Err(e)) => Err(format!("its session failed: {e}")),
        Err(_) => Err(format!("its session did not answer within {limit:?}")),
    }
}

/// A `GET_LOCK` error: a name the server refuses (error 1059, too long) is `InvalidName`.
fn name_error(what: &str, err: sqlx::Error) -> LockError {
    const TOO_LONG_IDENT: u16 = 1059;
    if crate::error::server_number(&err) == Some(TOO_LONG_IDENT) {
        return LockError::InvalidName(format!("layout=get_lock: the server refuses the name: {err}"));
    }
    mysql_error(what, err)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str, kind: LockKind) -> Result<String> {
        name_of(&LockName::new(text).unwrap(), &kind)
    }

    #[test]
    fn the_name_is_the_get_lock_name_within_the_servers_limits() {
        assert_eq!(name("orders/42", LockKind::Mutex).unwrap(), "orders/42");
        assert_eq!(name("Mixed Case: é", LockKind::Mutex).unwrap(), "Mixed Case: é");
        let longest = "a".repeat(64);
        assert_eq!(name(&longest, LockKind::Mutex).unwrap(), longest);
        for bad in ["a".repeat(65), "é".repeat(65), "😀".repeat(49)] {
            assert!(
                matches!(name(&bad, LockKind::Mutex), Err(LockError::InvalidName(_))),
                "{bad}"
            );
        }
        for kind in [
            LockKind::Read,
            LockKind::Write,
            LockKind::Permit { permits: 2 },
            LockKind::Leader { value: "v".into() },
        ] {
            assert!(matches!(name("x", kind), Err(LockError::InvalidOption(_))));
        }
    }
}
