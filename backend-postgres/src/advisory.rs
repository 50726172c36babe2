//! `layout=advisory`: locks shared with programs that take PostgreSQL's session advisory locks
//! themselves (`pg_advisory_lock(key)`, `pg_try_advisory_lock`, `pg_advisory_lock_shared`) on
//! the same bigint key: the lock name is the key, in decimal (`"42"`, `"-7"`).
//!
//! A locksmith holder holds two things: its grant in the tables (the default layout's queue,
//! unchanged: FIFO among locksmith clients, fencing token, lease on the server's clock) and the
//! advisory lock of its key, taken once the grant is there, on a database session of its own
//! that stays with the lease until it ends. So locksmith waiters wait in the tables (woken by
//! NOTIFY, on the locker's fixed connections), and only the head of a lock's queue waits in
//! `pg_advisory_lock`, in the server's own lock queue beside the other programs' sessions. While
//! it waits there it renews its grant; if the grant is lost meanwhile (a pause), it gives the
//! wait up and joins the queue again.
//!
//! How a lease's advisory lock ends:
//! - released: `pg_advisory_unlock` on its session, which is kept for a later lock;
//! - lost in the tables (its lease expired: a pause): its session is closed, which frees it;
//! - given up while waiting (timeout, dropped future, error): the wait is cancelled and the
//!   session closed, so the server never leaves the lock to a session nobody listens to (and
//!   `client_connection_check_interval` makes a server notice a client that vanished);
//! - its session ended (killed by an operator, a server restart, a broken connection): the server
//!   freed the lock, and the lease's lost signal fires at once; if the close never reached this
//!   client (a flow a NAT or firewall dropped), at the next renewal, which asks `pg_locks` whether
//!   the renewed leases' sessions still hold their locks.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use locksmith_core::driver::{cleanup, Lease, LockName, LockRequest, Role};
use locksmith_core::{Family, LockError, LockKind, LostReason, Result};

use crate::cleanup::Pending;
use crate::config::Config;
use crate::conn::{connect, Conn, Connected};
use crate::error::{pg_error, timeout};
use crate::layout::segment;
use crate::protocol::queue::entry_id;
use crate::protocol::wait;
use crate::renew;

/// Sessions kept open for later locks once their lock was released.
const IDLE_SESSIONS: usize = 4;

/// Of the sessions `$1` (server pids) and the keys `$2` they hold, the positions (from 1) of those
/// that `pg_locks` does not show holding their key: a session advisory lock on a bigint is
/// `classid` = its high 32 bits, `objid` = its low 32 bits, `objsubid` = 1.
const SESSIONS_HOLDING: &str = include_str!("sql/advisory_unheld.sql");

/// The advisory lock a lease holds: its key, and whether in shared mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    /// The bigint key: the lock name.
    pub key: i64,
    /// `pg_advisory_lock_shared` (a read lock) rather than `pg_advisory_lock`.
    pub shared: bool,
}

/// [`LockError::InvalidOption`] for `family` (a semaphore, an election) under `layout=advisory`,
/// which shares pg_advisory_lock's exclusive and shared locks and has no form of it: for its
/// locks, and for reading an election's leader.
pub(crate) fn no_such_kind(family: Family) -> LockError {
    LockError::InvalidOption(format!(
        "layout=advisory shares pg_advisory_lock's exclusive and shared locks: mutexes and \
         read-write locks only; use the default layout (no layout= option) for the {} kind",
        family.name()
    ))
}

impl Key {
    /// The advisory lock of `kind` on `name`. [`LockError::InvalidName`] for a name that is not a
    /// bigint written as PostgreSQL prints it (so that one key is one name, and one queue in the
    /// tables), [`LockError::InvalidOption`] for semaphores and elections, which advisory locks
    /// have no form of.
    pub fn of(name: &LockName, kind: &LockKind) -> Result<Key> {
        let shared = match (kind.family(), kind.role()) {
            (Family::Mutex, _) => false,
            (Family::RwLock, role) => role == Role::Shared,
            (other, _) => return Err(no_such_kind(other)),
        };
        let text = name.as_str();
        match text.parse::<i64>() {
            Ok(key) if key.to_string() == text => Ok(Key { key, shared }),
            _ => Err(LockError::InvalidName(format!(
                "layout=advisory: a lock name is the bigint key of pg_advisory_lock, in decimal (such as 42 or -7); \
                 got {text:?}"
            ))),
        }
    }

    /// The parameter of the statements below: the key.
    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 1] {
        [&self.key]
    }

    fn lock_sql(self) -> &'static str {
        match self.shared {
            true => include_str!("sql/advisory_lock_shared.sql"),
            false => include_str!("sql/advisory_lock.sql"),
        }
    }

    fn try_sql(self) -> &'static str {
        match self.shared {
            true => include_str!("sql/advisory_try_shared.sql"),
            false => include_str!("sql/advisory_try.sql"),
        }
    }

    fn unlock_sql(self) -> &'static str {
        match self.shared {
            true => include_str!("sql/advisory_unlock_shared.sql"),
            false => include_str!("sql/advisory_unlock.sql"),
        }
    }
}

/// One database session of its own.
struct Session {
    /// Its connection (and the server it is on, where a cancel request must go).
    client: Connected,
    /// Its server process (what `pg_locks` shows).
    pid: i32,
}

impl Session {
    async fn open(config: &Config) -> Result<Session> {
        let client = connect(config, None).await?;
        let what = "opening an advisory lock's session";
        let setup = async {
            // A server waiting for a lock on behalf of a client that vanished notices it within a
            // second (PostgreSQL 14 and later; older servers refuse the setting, which is harmless).
            let _ = client.batch_execute(include_str!("sql/advisory_session.sql")).await;
            client
                .query_one(include_str!("sql/backend_pid.sql"), &[])
                .await
                .map_err(|e| pg_error(what, e))
        };
        let row = client.set_up(what, config.request_timeout, setup).await?;
        Ok(Session {
            pid: row.try_get(0).map_err(|e| pg_error(what, e))?,
            client,
        })
    }

    fn is_open(&self) -> bool {
        !self.client.is_closed() && self.client.ended.has_changed().is_ok()
    }
}

/// A session that may be in an advisory lock call: unless [`Waiting::done`] takes it back,
/// dropping it cancels the call and closes the session, which frees whatever it was granted.
struct Waiting {
    session: Option<Session>,
    config: Arc<Config>,
}

impl Waiting {
    fn session(&self) -> &Session {
        self.session.as_ref().expect("taken only by done")
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
        let (token, config) = (session.client.cancel_token(), self.config.clone());
        // Where no runtime runs any more, the session's connection went with its runtime.
        cleanup::spawn(async move {
            let cancel = crate::dial::cancel(&config, &session.client.server, &token);
            if let Ok(Err(e)) = tokio::time::timeout(config.request_timeout, cancel).await {
                tracing::debug!(error = %e, "postgres: could not cancel an advisory lock wait; closing its session");
            }
            // Closed at once, its call unanswered: the server ends the session (a call still
            // waiting notices within `client_connection_check_interval`), which frees it.
            session.client.abandon();
        });
    }
}

/// A held advisory lock.
struct Held {
    session: Session,
    key: Key,
    /// Fires the lease's lost signal if the session ends.
    watcher: JoinHandle<()>,
}

/// Why a wait for the advisory lock ended without it.
enum Gave {
    /// The grant in the tables was lost meanwhile: join the queue again.
    GrantLost,
    /// An error (a timeout at the deadline, a failed session).
    Up(LockError),
}

/// The advisory sessions of one locker: one per held lock, one per lock whose turn it is
/// waiting for in `pg_advisory_lock`, and a few idle ones.
pub(crate) struct Sessions {
    config: Arc<Config>,
    /// By entry id.
    held: Mutex<HashMap<String, Held>>,
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

    /// `try_acquire`: the grant in the tables, then `pg_try_advisory_lock`; if another session
    /// holds the key, the grant is given back and the answer is `None`.
    pub async fn try_acquire(&self, conn: &Arc<Conn>, req: &LockRequest) -> Result<Option<Lease>> {
        let key = Key::of(&req.name, &req.kind)?;
        let Some(lease) = wait::try_acquire(conn, req).await? else {
            return Ok(None);
        };
        let seg = segment(req.kind.family(), &req.name);
        let grant = Pending::new(conn, &seg, entry_id(&lease.holder_id));
        let waiting = self.waiting(self.session().await?);
        let params = key.params();
        let tried = tokio::time::timeout(
            self.config.request_timeout,
            waiting.session().client.query_one(key.try_sql(), &params),
        );
        let got: bool = tried
            .await
            .map_err(|_| timeout("trying the advisory lock", self.config.request_timeout))?
            .and_then(|row| row.try_get(0))
            .map_err(|e| pg_error("trying the advisory lock", e))?;
        let session = waiting.done();
        if !got {
            self.put_back(session);
            let left = conn
                .step(
                    &seg,
                    crate::protocol::queue::Op::Leave(entry_id(&lease.holder_id).to_owned()),
                    Duration::ZERO,
                )
                .await;
            grant.keep();
            left?;
            return Ok(None);
        }
        grant.keep();
        Ok(Some(self.hold(lease, session, key)))
    }

    /// `acquire`: the grant in the tables (waiting in line there), then `pg_advisory_lock`,
    /// renewing the grant while the server makes it wait; until `deadline`.
    pub async fn acquire(&self, conn: &Arc<Conn>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let key = Key::of(&req.name, &req.kind)?;
        let seg = segment(req.kind.family(), &req.name);
        // Whether a grant was lost while the advisory lock was taken: a later one waited.
        let mut again = false;
        loop {
            let mut lease = wait::acquire(conn, req, deadline).await?;
            let grant = Pending::new(conn, &seg, entry_id(&lease.holder_id));
            let waiting = self.waiting(self.session().await?);
            match self.wait(conn, waiting.session(), &mut lease, key, deadline).await {
                Ok(()) => {
                    let session = waiting.done();
                    grant.keep();
                    lease.waited |= again;
                    return Ok(self.hold(lease, session, key));
                }
                // `waiting` cancels the wait and `grant` leaves the queue, as they drop.
                Err(Gave::GrantLost) => {
                    again = true;
                    tracing::debug!(lock = %seg, "postgres: the grant expired while waiting for the advisory lock; joining again");
                }
                Err(Gave::Up(e)) => return Err(e),
            }
        }
    }

    /// Frees the advisory lock of entry `id`: `pg_advisory_unlock`, its session kept for a later
    /// lock; closed instead if the unlock fails (which frees it too). Returns whether the entry
    /// still held it (`false`: its session had ended, or it was lost in the tables before).
    pub async fn release(&self, id: &str) -> bool {
        let Some(held) = lock(&self.held).remove(id) else {
            return false;
        };
        held.watcher.abort();
        let params = held.key.params();
        let unlock = held.session.client.query_one(held.key.unlock_sql(), &params);
        match tokio::time::timeout(self.config.request_timeout, unlock).await {
            Ok(Ok(row)) if row.try_get::<_, bool>(0).unwrap_or(false) => {
                self.put_back(held.session);
                true
            }
            other => {
                tracing::debug!(unlocked = ?other.map(|r| r.map(|_| ())),
                    "postgres: closing an advisory lock's session rather than unlocking it");
                held.session.client.abandon();
                false
            }
        }
    }

    /// [`Sessions::release`] of `lease`, as the clean-up's first part (`cleanup::release`).
    pub fn releasing(self: &Arc<Self>, lease: &Lease) -> crate::cleanup::FreeFirst {
        let (sessions, id) = (self.clone(), entry_id(&lease.holder_id).to_owned());
        Box::pin(async move { sessions.release(&id).await })
    }

    /// `renew_many`, and a lease whose session ended answers `NotHeld`. A lease lost in the
    /// tables has its session closed: its advisory lock is freed with it. The sessions of the
    /// leases renewed are then checked on the server, in a task of its own so that the renewal's
    /// answer does not wait for it ([`Sessions::check_sessions`]).
    pub async fn renew_many(self: &Arc<Self>, conn: &Arc<Conn>, leases: &[Lease]) -> Vec<Result<()>> {
        let mut results = renew::renew_many(conn, leases).await;
        self.check_sessions(conn, leases, &results);
        for (lease, result) in leases.iter().zip(results.iter_mut()) {
            let id = entry_id(&lease.holder_id);
            match result {
                Ok(()) if !self.holds(id) => *result = Err(LockError::not_held(lease.name.as_str())),
                // Told first, then the session closed: nobody can be granted the advisory lock
                // before its holder has been told it lost it.
                Err(e) if e.is_not_held() => {
                    lease.lost.fire(LostReason::LeaseGone(format!(
                        "its grant expired in the tables ({e}); its advisory lock is freed now"
                    )));
                    drop(lock(&self.held).remove(id));
                }
                _ => {}
            }
        }
        results
    }

    /// Checks that the sessions of the `leases` just renewed still hold their advisory locks
    /// (`pg_locks`), and tells the holders of those that do not, although this client saw no end
    /// of their session: the server ended it (`pg_terminate_backend`, its TCP keepalive) while the
    /// connection was cut without a close reaching us (a flow a NAT or firewall dropped), and the
    /// lock is free for any session. One statement per renewal, on the leases connection, in a
    /// task of its own (its answer never delays the renewal's); nothing if it fails (the next
    /// renewal asks again). A lease released or closed meanwhile is left alone.
    fn check_sessions(self: &Arc<Self>, conn: &Arc<Conn>, leases: &[Lease], renewed: &[Result<()>]) {
        let mut checked = Vec::new();
        {
            let held = lock(&self.held);
            for (lease, result) in leases.iter().zip(renewed) {
                let id = entry_id(&lease.holder_id);
                if let (Ok(()), Some(h)) = (result, held.get(id)) {
                    checked.push((id.to_owned(), h.session.pid, h.key.key, lease.lost.clone()));
                }
            }
        }
        if checked.is_empty() {
            return;
        }
        let (sessions, conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            let pids: Vec<i32> = checked.iter().map(|c| c.1).collect();
            let keys: Vec<i64> = checked.iter().map(|c| c.2).collect();
            let what = "a check of the advisory sessions";
            let doing = "checking the advisory sessions";
            let rows = match conn.read(what, doing, |_| SESSIONS_HOLDING, (pids, keys)).await {
                Ok(rows) => rows,
                Err(e) => return tracing::debug!(error = %e, "postgres: the advisory sessions could not be checked"),
            };
            let ended = rows
                .iter()
                .filter_map(|r| r.try_get::<_, i64>(0).ok())
                .filter_map(|n| checked.get(usize::try_from(n).ok()?.checked_sub(1)?));
            for (id, pid, _, lost) in ended {
                // Only the session checked: a lease released meanwhile, or held again on
                // another session, is not this one.
                let gone = match lock(&sessions.held).entry(id.clone()) {
                    Entry::Occupied(held) if held.get().session.pid == *pid => held.remove(),
                    _ => continue,
                };
                lost.fire(LostReason::LeaseGone(format!(
                    "the session (server pid {pid}) that held the advisory lock ended on the server, \
                     unseen by this client (a connection cut without a close)"
                )));
                gone.watcher.abort();
                gone.session.client.abandon();
            }
        });
    }

    /// Closes every session (at shutdown): the server frees their locks.
    pub fn close(&self) {
        for (_, held) in lock(&self.held).drain() {
            held.watcher.abort();
        }
        lock(&self.idle).clear();
    }

    /// Whether entry `id` holds its advisory lock on a live session.
    fn holds(&self, id: &str) -> bool {
        lock(&self.held).get(id).is_some_and(|h| h.session.is_open())
    }

    /// Waits for the advisory lock on `session`, renewing `lease` (the grant in the tables) every
    /// third of its TTL, until `deadline`.
    async fn wait(
        &self,
        conn: &Conn,
        session: &Session,
        lease: &mut Lease,
        key: Key,
        deadline: Option<Instant>,
    ) -> std::result::Result<(), Gave> {
        let params = key.params();
        let locking = session.client.execute(key.lock_sql(), &params);
        tokio::pin!(locking);
        let mut renew_at = lease.acquired_at + lease.ttl / 3;
        loop {
            let wake = deadline.map_or(renew_at, |d| d.min(renew_at));
            tokio::select! {
                locked = &mut locking => {
                    return locked.map(drop).map_err(|e| Gave::Up(pg_error("waiting for the advisory lock", e)));
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Gave::Up(LockError::Timeout(Duration::ZERO)));
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

    /// Keeps `session` as the holder of `lease`'s advisory lock; its end fires the lost signal.
    fn hold(&self, lease: Lease, session: Session, key: Key) -> Lease {
        let (mut ended, lost, pid) = (session.client.ended.clone(), lease.lost.clone(), session.pid);
        let watcher = tokio::spawn(async move {
            let _ = ended.changed().await;
            lost.fire(LostReason::LeaseGone(format!(
                "the session (server pid {pid}) holding the advisory lock ended"
            )));
        });
        let held = Held { session, key, watcher };
        lock(&self.held).insert(entry_id(&lease.holder_id).to_owned(), held);
        lease
    }

    /// An idle session, or a new one.
    async fn session(&self) -> Result<Session> {
        while let Some(session) = lock(&self.idle).pop() {
            if session.is_open() {
                return Ok(session);
            }
        }
        Session::open(&self.config).await
    }

    fn waiting(&self, session: Session) -> Waiting {
        Waiting {
            session: Some(session),
            config: self.config.clone(),
        }
    }

    fn put_back(&self, session: Session) {
        let mut idle = lock(&self.idle);
        if idle.len() < IDLE_SESSIONS && session.is_open() {
            idle.push(session);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, kind: LockKind) -> Result<Key> {
        Key::of(&LockName::new(name).unwrap(), &kind)
    }

    #[test]
    fn names_are_bigint_keys_written_one_way() {
        assert_eq!(key("42", LockKind::Mutex).unwrap(), Key { key: 42, shared: false });
        assert_eq!(key("-7", LockKind::Read).unwrap(), Key { key: -7, shared: true });
        assert_eq!(key("-7", LockKind::Write).unwrap(), Key { key: -7, shared: false });
        assert_eq!(key(&i64::MIN.to_string(), LockKind::Mutex).unwrap().key, i64::MIN);
        for bad in ["abc", "+42", "042", "4 2", "9223372036854775808", "1e3", "-0"] {
            assert!(
                matches!(key(bad, LockKind::Mutex), Err(LockError::InvalidName(_))),
                "{bad}"
            );
        }
        for kind in [LockKind::Permit { permits: 2 }, LockKind::Leader { value: "v".into() }] {
            assert!(matches!(key("1", kind), Err(LockError::InvalidOption(_))));
        }
    }
}
