//! Taking a semaphore permit, a side of a read-write lock or an election's leadership on one
//! server: the FIFO queue with server-pushed wake-ups, as the mutex's ([`crate::queue`]), with the
//! scripts of [`crate::kind_scripts`].
//!
//! 1. One attempt (`TRY_ACQUIRE`): an entry that would hold at the tail of the queue (a free
//!    semaphore permit with nobody queued, a reader with no writer holding or waiting, a writer or
//!    candidate on a lock nobody holds or waits for) is granted in one round trip.
//! 2. Otherwise subscribe to this waiter's own channel, then run `WAIT_STEP`, which joins the
//!    queue and grants when the rule lets this entry hold.
//! 3. Sleep until one of: a wake-up (a release, a waiter leaving or an expired holder noticed by
//!    a script made this entry able to hold: only such entries are woken), the deadline of the
//!    holder this waiter depends on (the step says which one, or none: an expired holder publishes
//!    nothing, so exactly the waiters it would let in watch it), the heartbeat that keeps the
//!    entry alive (`waiter_ttl / 3`), or the acquire's deadline. Then go back to 2.
//!
//! Outages are ridden out as for the mutex (see [`lockcore::driver::Outage`]): the waiter retries with
//! backoff, subscribes again, and its next step joins the queue again if the server lost it.

use std::sync::Arc;
use std::time::Duration;

use lockcore::driver::{queue::permit_mismatch, Lease, LockRequest, Outage};
use lockcore::{LockError, LockKind, Result};
use tokio::time::Instant;

use crate::cleanup::Cleanup;
use crate::inner::{lease, new_token, Inner};
use crate::keys::entry;
use crate::kind_session::KindStep;
use crate::queue::until;

/// One attempt: the lease if the entry holds at once, `None` if it would have to wait.
pub(crate) async fn try_acquire(inner: &Arc<Inner>, req: &LockRequest) -> Result<Option<Lease>> {
    let keys = inner.kind_keys(req.kind.family(), &req.name);
    let token = new_token();
    let entry = entry(&req.kind, &token);
    let mut guard = Cleanup::for_kind(inner.clone(), keys.clone(), entry.clone());
    let sent = Instant::now();
    let step = inner.nodes[0].try_acquire_kind(&keys, &entry, req).await?;
    guard.disarm();
    match step {
        KindStep::Acquired(fence) => Ok(Some(lease(req, fence, token, sent))),
        KindStep::Waiting(_) => Ok(None),
        KindStep::Mismatch(held) => Err(mismatch(req, held)),
    }
}

/// Waits in the queue of `req`'s lock on the one server of `inner` until the entry holds.
pub(crate) async fn acquire(inner: &Arc<Inner>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    let node = &inner.nodes[0];
    let keys = inner.kind_keys(req.kind.family(), &req.name);
    let token = new_token();
    let entry = entry(&req.kind, &token);
    let mut guard = Cleanup::for_kind(inner.clone(), keys.clone(), entry.clone());
    let mut outage = Outage::new(deadline, inner.config.waiter_ttl + inner.config.connect_timeout);

    let sent = Instant::now();
    match node.try_acquire_kind(&keys, &entry, req).await {
        Ok(KindStep::Acquired(fence)) => {
            guard.disarm();
            return Ok(lease(req, fence, token, sent));
        }
        Ok(KindStep::Waiting(_)) => outage.succeeded(),
        Ok(KindStep::Mismatch(held)) => {
            guard.disarm(); // the attempt queues nothing
            return Err(mismatch(req, held));
        }
        Err(e) => outage.failed(e).await?,
    }
    let channel = keys.channel(&token);
    let mut sub = None;
    let heartbeat = inner.config.waiter_ttl / 3;
    loop {
        let subscription = match sub.as_mut() {
            Some(s) => s,
            None => match node.notifier.subscribe(channel.clone()).await {
                Ok(s) => sub.insert(s),
                Err(e) => {
                    outage.failed(e).await?;
                    continue;
                }
            },
        };
        let sent = Instant::now();
        let wait_ms = match node.wait_step_kind(&keys, &entry, req).await {
            Ok(KindStep::Acquired(fence)) => {
                guard.disarm();
                return Ok(lease(req, fence, token, sent));
            }
            Ok(KindStep::Waiting(wait_ms)) => {
                outage.succeeded();
                wait_ms
            }
            Ok(KindStep::Mismatch(held)) => {
                guard.disarm(); // the step removed the entry
                return Err(mismatch(req, held));
            }
            Err(e) => {
                outage.failed(e).await?;
                continue;
            }
        };
        let now = Instant::now();
        let mut wake_at = now + heartbeat;
        if wait_ms >= 0 {
            wake_at = wake_at.min(now + Duration::from_millis(wait_ms.unsigned_abs() + 1));
        }
        tracing::trace!(lock = %req.name, kind = req.kind.family().name(), wait_ms, "queued");
        tokio::select! {
            alive = subscription.recv() => {
                if !alive {
                    sub = None; // the pub/sub connection broke: subscribe again
                }
            }
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = until(deadline) => {
                // The lock was busy (the last step was answered): leave the queue before saying so.
                drop(sub);
                guard.run_now().await;
                return Err(outage.at_deadline());
            }
        }
    }
}

/// The error for a permit request whose count differs from the semaphore's (`held`).
fn mismatch(req: &LockRequest, held: u32) -> LockError {
    match req.kind {
        LockKind::Permit { permits } => permit_mismatch(held, permits),
        _ => LockError::Protocol(format!(
            "a permit count ({held}) reported for a {}",
            req.kind.family().name()
        )),
    }
}
