//! Waiting for a lock on one server: the FIFO queue with server-pushed wake-ups.
//!
//! 1. One attempt (`TRY_ACQUIRE`): a free lock with nobody queued is taken in one round trip.
//! 2. Otherwise subscribe to this waiter's own channel, then run `WAIT_STEP`, which joins the queue
//!    and takes the lock if it is free and this waiter is the first live one.
//! 3. Sleep until one of: a wake-up on the channel (a release, or the waiter before us left), the
//!    holder's PTTL running out (only the head waiter watches it: an expired holder publishes
//!    nothing), the heartbeat that keeps our queue entry alive (`waiter_ttl / 3`), or the deadline.
//!    Then go back to 2.
//!
//! In the plain layout a holder that is not a locksmith client never wakes anybody, so the head
//! waiter also re-checks with a backoff (50 ms doubling to 1 s) while such a holder has the lock.

use std::sync::Arc;
use std::time::Duration;

use lockcore::{Lease, LockError, LockRequest, Result};
use tokio::time::Instant;

use crate::backend::{lease, new_token, Inner};
use crate::cleanup::Cleanup;
use crate::node::{Attempt, Step};

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Waits in the queue of `req.name` on the one server of `inner` until the lock is ours.
pub(crate) async fn acquire(inner: &Arc<Inner>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    let node = &inner.nodes[0];
    let keys = inner.keys(&req.name);
    let token = new_token();
    let floor = inner.floor();
    let mut guard = Cleanup::new(inner.clone(), keys.clone(), token.clone());

    let sent = Instant::now();
    if let Attempt::Acquired(fence) = node.try_acquire(&keys, &token, req.ttl, &floor).await? {
        guard.disarm();
        return Ok(lease(req, fence, token, sent));
    }
    let channel = keys.channel(&token);
    let mut sub = node.notifier.subscribe(channel.clone()).await?;
    let heartbeat = inner.config.waiter_ttl / 3;
    let mut backoff = MIN_BACKOFF;
    loop {
        let sent = Instant::now();
        let (head, pttl_ms, foreign) = match node
            .wait_step(&keys, &token, req.ttl, &floor, inner.config.waiter_ttl)
            .await?
        {
            Step::Acquired(fence) => {
                guard.disarm();
                return Ok(lease(req, fence, token, sent));
            }
            Step::Waiting { head, pttl_ms, foreign } => (head, pttl_ms, foreign),
        };
        let now = Instant::now();
        let mut wake_at = now + heartbeat;
        if head {
            if pttl_ms >= 0 {
                wake_at = wake_at.min(now + Duration::from_millis(pttl_ms.unsigned_abs() + 1));
            }
            if foreign {
                wake_at = wake_at.min(now + backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            } else {
                backoff = MIN_BACKOFF;
            }
        }
        tracing::trace!(lock = %req.name, head, pttl_ms, foreign, "queued");
        tokio::select! {
            alive = sub.recv() => {
                if !alive {
                    sub = node.notifier.subscribe(channel.clone()).await?;
                }
            }
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = until(deadline) => {
                drop(sub);
                guard.run_now().await;
                return Err(LockError::Timeout(Duration::ZERO));
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
