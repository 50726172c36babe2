//! `try_acquire` and `acquire`: one wait loop for every kind.
//!
//! A waiter joins the queue in one transaction, then sleeps until a NOTIFY names it (`crate::wake`):
//! granted by another's step, or first in line (it takes a step when the holders' earliest lease
//! runs out, unless told before).
//!
//! **The hand-over.** A grant's notification carries the new holder's fencing token. The waiter
//! holds at once, without a request, if the step that last found it waiting was sent less than a
//! sixth of the TTL before ([`held_since`]): that step read the queue under the lock's row lock,
//! so the grant came after it, and the lease in the table, counted from the grant, outlasts the
//! one the waiter counts from that step. A waiter that waited longer confirms with one statement
//! (`Conn::confirm_alone`), which restarts the table's lease from then.
//!
//! Nothing else wakes a waiter: a change of the queue costs the other waiters nothing. While it
//! waits its locker beats (one beat per third of a TTL for all its waiters, `Conn::keep_alive`),
//! so that its entry lives while it waits and dies with a paused or killed process. An entry
//! dropped meanwhile (the process was paused past its TTL) joins again at the tail, under a new id
//! ([`Place`]), so that a late notification of the old entry's grant (long expired) is never
//! taken for the new one's.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::{Lease, LockRequest, Outage};
use locksmith_core::{LockError, Result};

use super::queue::{alone_applies, holder_id, NewEntry, Op};
use crate::cleanup::Pending;
use crate::conn::{Conn, Outcome};
use crate::layout::segment;
use crate::wake::Waiter;

/// One attempt: the lease if the lock is free for this request now.
pub(crate) async fn try_acquire(conn: &Arc<Conn>, req: &LockRequest) -> Result<Option<Lease>> {
    conn.check_open()?;
    let seg = segment(req.kind.family(), &req.name);
    let entry = new_entry(req);
    let id = entry.id.clone();
    let pending = Pending::new(conn, &seg, &id);
    if alone_applies(&req.kind) {
        let (token, final_answer, sent) = conn.try_in_row(&seg, &entry).await?;
        if let Some(token) = token {
            pending.keep();
            return Ok(Some(req.lease(token, holder_id(&conn.host, conn.pid, &id), sent)));
        }
        // Held by a holder kept in the lock's row: busy, no need for the full step.
        if final_answer {
            pending.keep();
            return Ok(None);
        }
    }
    let (out, sent) = conn.step_at(&seg, Op::Try(entry), req.ttl).await?;
    pending.keep();
    match out {
        Outcome::Granted(token) => Ok(Some(req.lease(token, holder_id(&conn.host, conn.pid, &id), sent))),
        _ => Ok(None),
    }
}

/// Waits in line until the lock is held, or `deadline`.
pub(crate) async fn acquire(conn: &Arc<Conn>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    conn.check_open()?;
    let seg = segment(req.kind.family(), &req.name);
    // A server that fails is retried until the deadline (or for about as long as the entry lives
    // without beats), then reported as Unavailable, not as a busy lock.
    let mut outage = Outage::new(deadline, req.ttl + conn.config.connect_timeout);
    // Whether an attempt found the lock taken: a later grant is a hand-over (`Lease::waited`).
    let mut waited = false;
    if alone_applies(&req.kind) {
        match held_alone(conn, req, &seg).await {
            Ok(Some(lease)) => return Ok(lease),
            Ok(None) => waited = true,
            Err(e) => outage.failed(e).await?,
        }
    }
    let line = Line {
        conn,
        req,
        deadline,
        place: Place::new(conn, &seg, req),
        seg,
        outage,
        waited,
        joining: true,
        told_step: false,
        told_token: None,
        waiting_since: None,
    };
    line.wait().await
}

/// Nobody there: held in one round trip (`None`: taken; an error: the full join follows). An
/// entry of its own, removed if the answer was lost (it may have been added).
async fn held_alone(conn: &Arc<Conn>, req: &LockRequest, seg: &str) -> Result<Option<Lease>> {
    let first = new_entry(req);
    let tried = Pending::new(conn, seg, &first.id);
    let (token, sent) = conn.grant_in_row(seg, &first).await?;
    tried.keep();
    Ok(token.map(|token| req.lease(token, holder_id(&conn.host, conn.pid, &first.id), sent)))
}

/// An `acquire` in line: its entry, what it was told, and when it last stepped.
struct Line<'a> {
    conn: &'a Arc<Conn>,
    req: &'a LockRequest,
    deadline: Option<Instant>,
    seg: String,
    outage: Outage,
    waited: bool,
    place: Place,
    /// The next step joins the queue (the entry is new), rather than taking a turn.
    joining: bool,
    /// Whether the last wake-up may be a grant by another's step, and its fencing token if the
    /// notification told it.
    told_step: bool,
    told_token: Option<u64>,
    /// When the step that last found the entry waiting was sent.
    waiting_since: Option<Instant>,
}

impl Line<'_> {
    /// Steps, then sleeps until told or due, until the entry holds (or the deadline).
    async fn wait(mut self) -> Result<Lease> {
        loop {
            self.conn.check_open()?;
            let late = self.conn.late_beats();
            if let (Some(token), Some(sent)) = (self.told_token.take(), held_since(self.waiting_since, self.req.ttl)) {
                return Ok(self.held(token, sent));
            }
            if std::mem::take(&mut self.told_step) {
                match self.conn.confirm_alone(&self.place.entry.id).await {
                    Ok((Some(token), sent)) => return Ok(self.held(token, sent)),
                    Ok((None, _)) => {}
                    Err(e) => {
                        self.outage.failed(e).await?;
                        continue;
                    }
                }
            }
            let step_at = match self.step().await? {
                Stepped::Granted(token, sent) => return Ok(self.held(token, sent)),
                Stepped::Again => continue,
                Stepped::Waits(step_at) => step_at,
            };
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(self.outage.at_deadline());
            }
            self.sleep(step_at, late).await?;
        }
    }

    /// One step on the queue: join it or take a turn.
    async fn step(&mut self) -> Result<Stepped> {
        let (conn, req) = (self.conn, self.req);
        let op = match self.joining {
            true => Op::Join(self.place.entry.clone()),
            false => Op::Turn(self.place.entry.id.clone()),
        };
        // A join beats this locker in its own transaction, unless a recent beat keeps the owner
        // row alive long enough (then it does not touch that row, which every join of the locker
        // and its renewals share).
        let beat = match self.joining && conn.needs_beat(req.ttl) {
            true => req.ttl,
            false => Duration::ZERO,
        };
        let (stepped, sent) = match conn.step_at(&self.seg, op, beat).await {
            Ok(stepped) => {
                self.outage.succeeded();
                stepped
            }
            Err(e) => {
                self.outage.failed(e).await?;
                return Ok(Stepped::Again);
            }
        };
        let step_at = match stepped {
            Outcome::Granted(token) => return Ok(Stepped::Granted(token, sent)),
            Outcome::Gone => {
                tracing::debug!(lock = %self.seg, "postgres: a waiter's entry was dropped (its locker did not beat); joining again");
                let gone = std::mem::replace(&mut self.place, Place::new(conn, &self.seg, req));
                gone.pending.keep(); // nothing left to remove
                self.waiting_since = None;
                self.joining = true;
                return Ok(Stepped::Again);
            }
            // A millisecond more makes sure the expiry has passed on the server's clock too.
            Outcome::Wait(expiry) => {
                self.waiting_since = Some(sent);
                self.waited = true;
                expiry.map(|left| Instant::now() + left + Duration::from_millis(1))
            }
            Outcome::Busy | Outcome::Left(_) => return Err(LockError::Protocol("unexpected step outcome".into())),
        };
        if self.joining {
            if !beat.is_zero() {
                conn.beaten(sent, beat);
            }
            self.joining = false;
        }
        Ok(Stepped::Waits(step_at))
    }

    /// Until told to step (granted, or everyone asked to), or `step_at` (the first waiter's
    /// expiry), or the deadline, while this locker's heartbeat keeps the entry alive; back at
    /// once if a heartbeat came late (`late` changed: a pause), since the entry may be gone.
    async fn sleep(&mut self, mut step_at: Option<Instant>, late: u64) -> Result<()> {
        let (conn, req) = (self.conn, self.req);
        loop {
            let told = self.place.mailbox.take();
            if told.step {
                self.told_step = true;
                self.told_token = told.granted;
                return Ok(());
            }
            step_at = [step_at, told.at].into_iter().flatten().min();
            // At the deadline, one last step: the lock may be free, or the server gone (which
            // the caller is told rather than a busy lock).
            let now = Instant::now();
            if [step_at, self.deadline].into_iter().flatten().any(|at| now >= at) {
                return Ok(());
            }
            let limit = conn.config.request_timeout;
            match tokio::time::timeout(limit, conn.keep_alive(req.ttl)).await {
                Ok(Ok(now_late)) if now_late != late => return Ok(()),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return self.outage.failed(e).await,
                Err(_) => return self.outage.failed(crate::error::timeout("a heartbeat", limit)).await,
            }
            let beat_at = Instant::now() + (req.ttl / 3).max(Duration::from_millis(10));
            let wake_at = [step_at, self.deadline, Some(beat_at)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(beat_at);
            tokio::select! {
                _ = self.place.mailbox.told() => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// The entry holds with `token`, its lease counted from `sent`: the caller's now.
    fn held(self, token: u64, sent: Instant) -> Lease {
        self.place.held(self.conn, self.req, token, sent, self.waited)
    }
}

/// What one step of a waiting `acquire` came to.
enum Stepped {
    /// The entry holds, with this fencing token, its lease counted from this instant.
    Granted(u64, Instant),
    /// Step again at once (after an outage's pause, or under a new entry).
    Again,
    /// The entry waits; step again at this instant (a holder's or the first waiter's expiry)
    /// unless told before (`None`: only when told).
    Waits(Option<Instant>),
}

/// The entry of a waiting `acquire`, under an id of its own: its mailbox, registered before its
/// first step (what a later step tells the entry is kept for it), and its removal if the call
/// ends without a lease. An entry that was dropped is replaced by a new one, under a new id.
struct Place {
    entry: NewEntry,
    mailbox: Arc<Waiter>,
    pending: Pending,
}

impl Place {
    /// A new entry for `req` on lock `seg`.
    fn new(conn: &Arc<Conn>, seg: &str, req: &LockRequest) -> Place {
        let entry = new_entry(req);
        Place {
            mailbox: conn.hub.waiter(seg, &entry.id),
            pending: Pending::new(conn, seg, &entry.id),
            entry,
        }
    }

    /// The entry holds with `token`, its lease counted from `sent`, after it `waited` or not: the
    /// caller's now.
    fn held(self, conn: &Conn, req: &LockRequest, token: u64, sent: Instant, waited: bool) -> Lease {
        self.pending.keep();
        Lease {
            waited,
            ..req.lease(token, holder_id(&conn.host, conn.pid, &self.entry.id), sent)
        }
    }
}

/// When a lease told by a grant's notification counts from: when the step that last found the
/// entry waiting was sent (`waiting_since`), if that was less than a sixth of the TTL ago, so that
/// the lease starts with most of its time left and its first renewal is not due at once; `None`:
/// confirm with a statement instead.
fn held_since(waiting_since: Option<Instant>, ttl: Duration) -> Option<Instant> {
    waiting_since.filter(|sent| sent.elapsed() < ttl / 6)
}

/// A new entry for `req`.
fn new_entry(req: &LockRequest) -> NewEntry {
    NewEntry {
        id: format!("{:016x}", rand::random::<u64>()),
        role: req.kind.role(),
        value: req.kind.campaign_value().to_owned(),
        ttl: req.ttl,
    }
}
