//! `try_acquire` and `acquire`: one wait loop for every kind.
//!
//! A waiter joins the queue in one transaction, then sleeps until a NOTIFY says the lock's queue
//! changed, or until the earliest expiry in the queue, and then takes its turn (another
//! transaction). While it waits it beats its locker every third of its TTL, so that its entry
//! lives while it waits (and dies with a paused or killed process). An entry dropped meanwhile
//! (the process was paused past its TTL) joins again at the tail.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use lockcore::driver::{Lease, LockRequest, Outage};
use lockcore::{LockError, Result};

use super::queue::{holder_id, NewEntry, Op};
use crate::cleanup::Pending;
use crate::conn::{Conn, Outcome};
use crate::layout::segment;

/// One attempt: the lease if the lock is free for this request now.
pub(crate) async fn try_acquire(conn: &Arc<Conn>, req: &LockRequest) -> Result<Option<Lease>> {
    conn.check_open()?;
    let seg = segment(req.kind.family(), &req.name);
    let entry = new_entry(req);
    let id = entry.id.clone();
    let pending = Pending::new(conn, &seg, &id);
    let sent = Instant::now();
    let out = conn.step(&seg, Op::Try(entry), req.ttl).await?;
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
    let entry = new_entry(req);
    let id = entry.id.clone();
    let wake = conn.hub.lock(&seg);
    let pending = Pending::new(conn, &seg, &id);
    let mut joining = true;
    let beat_every = (req.ttl / 3).max(Duration::from_millis(10));
    let mut beat_at = Instant::now() + beat_every;
    // A server that fails is retried until the deadline (or for about as long as the entry lives
    // without beats), then reported as Unavailable, not as a busy lock.
    let mut outage = Outage::new(deadline, req.ttl + conn.config.connect_timeout);
    loop {
        conn.check_open()?;
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let sent = Instant::now();
        let op = match joining {
            true => Op::Join(entry.clone()),
            false => Op::Turn(id.clone()),
        };
        let stepped = match conn.step(&seg, op, req.ttl).await {
            Ok(out) => {
                outage.succeeded();
                out
            }
            Err(e) => {
                outage.failed(e).await?;
                continue;
            }
        };
        let expiry = match stepped {
            Outcome::Granted(token) => {
                pending.keep();
                return Ok(req.lease(token, holder_id(&conn.host, conn.pid, &id), sent));
            }
            Outcome::Gone => {
                tracing::debug!(lock = %seg, "postgres: a waiter's entry was dropped (its locker did not beat); joining again");
                joining = true;
                continue;
            }
            Outcome::Wait(expiry) => expiry,
            Outcome::Busy | Outcome::Left(_) => return Err(LockError::Protocol("unexpected step outcome".into())),
        };
        joining = false;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(outage.at_deadline());
        }
        if Instant::now() >= beat_at {
            let limit = conn.config.request_timeout;
            match tokio::time::timeout(limit, conn.beat(req.ttl)).await {
                Ok(Ok(())) => beat_at = Instant::now() + beat_every,
                Ok(Err(e)) => {
                    outage.failed(e).await?;
                    continue;
                }
                Err(_) => {
                    outage.failed(crate::error::timeout("a heartbeat", limit)).await?;
                    continue;
                }
            }
        }
        // A millisecond more makes sure the expiry has passed on the server's clock too.
        let expiry = expiry.map(|left| Instant::now() + left + Duration::from_millis(1));
        let wake_at = [expiry, deadline, Some(beat_at)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(beat_at);
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
    }
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
