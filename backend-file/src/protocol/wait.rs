//! `try_acquire` and `acquire`: one wait loop for every kind.
//!
//! A waiter joins the queue in one transaction, then sleeps until the kernel says the lock's state
//! file changed (or a locker of the directory ended), or until the earliest expiry of a holder.
//! Woken, it reads the state without the lock and takes the lock only when its turn has come, so
//! a change costs each other waiter one read, and only the next holder writes.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use lockcore::driver::{Lease, LockRequest, LostSignal};
use lockcore::{LockError, LockKind, Result};

use super::queue::{self, Turn};
use super::state::{Entry, Now};
use crate::cleanup::Pending;
use crate::conn::Dir;
use crate::layout::LockFile;

/// One attempt: the lease if the lock is free for this request now.
pub(crate) async fn try_acquire(dir: &Arc<Dir>, req: &LockRequest) -> Result<Option<Lease>> {
    dir.check_open()?;
    let file = LockFile::of(req.kind.family(), &req.name);
    let entry = new_entry(dir, &req.kind);
    let (holder_id, ttl) = (entry.holder_id(), req.ttl);
    let mut pending = Pending::new(dir, &file, &entry.id);
    let sent = Instant::now();
    let token = pending
        .run(move |state, now| queue::try_take(state, entry, ttl, now))
        .await?;
    pending.keep();
    Ok(token.map(|token| lease(req, holder_id, token, sent)))
}

/// Waits in line until the lock is held, or `deadline`.
pub(crate) async fn acquire(dir: &Arc<Dir>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    dir.check_open()?;
    let file = LockFile::of(req.kind.family(), &req.name);
    let entry = new_entry(dir, &req.kind);
    let (id, holder_id, ttl) = (entry.id.clone(), entry.holder_id(), req.ttl);
    let wake = dir.hub.lock(&file.stem);
    let mut pending = Pending::new(dir, &file, &id);
    let mut joining = Some(entry);
    loop {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let sent = Instant::now();
        let turn = match joining.take() {
            Some(entry) => {
                pending
                    .run(move |state, now| queue::join(state, entry, ttl, now))
                    .await?
            }
            None => {
                let state = dir.read(&file)?;
                if queue::would_hold(&state, &id)? {
                    let id = id.clone();
                    pending.run(move |state, now| queue::turn(state, &id, ttl, now)).await?
                } else {
                    Turn::Wait(state.next_expiry())
                }
            }
        };
        let expiry = match turn {
            Turn::Granted(token) => {
                pending.keep();
                return Ok(lease(req, holder_id, token, sent));
            }
            Turn::Wait(expiry) => expiry,
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(LockError::Timeout(Duration::ZERO));
        }
        // A holder's expiry is on CLOCK_BOOTTIME; a millisecond more makes sure it has passed.
        let expiry = expiry.map(|ns| Instant::now() + Now::read().until(ns) + Duration::from_millis(1));
        let wake_at = match (expiry, deadline) {
            (Some(e), Some(d)) => Some(e.min(d)),
            (e, d) => e.or(d),
        };
        match wake_at {
            Some(at) => {
                tokio::select! {
                    _ = woken => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            None => woken.await,
        }
    }
}

/// A new entry of this locker for a request of `kind`.
fn new_entry(dir: &Dir, kind: &LockKind) -> Entry {
    Entry {
        id: format!("{:016x}", rand::random::<u64>()),
        owner: dir.owner_id.clone(),
        pid: dir.pid,
        host: dir.host.clone(),
        role: Entry::role_text(kind.role()),
        value: match kind {
            LockKind::Leader { value } => value.clone(),
            _ => String::new(),
        },
        grant: None,
    }
}

fn lease(req: &LockRequest, holder_id: String, token: u64, sent: Instant) -> Lease {
    Lease {
        name: req.name.clone(),
        kind: req.kind.clone(),
        fencing_token: token,
        ttl: req.ttl,
        holder_id,
        acquired_at: sent,
        lost: LostSignal::new(),
    }
}
