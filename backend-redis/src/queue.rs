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
//!
//! A server that stops answering (down, restarting) does not end the wait: the waiter retries
//! with backoff (see [`lockcore::driver::Outage`]), subscribes again, and its next step joins the queue
//! again if the server lost it; it gives up at its deadline (saying the server did not answer),
//! or, without one, once the outage lasted longer than `waiter_ttl` plus the connect timeout.

use std::sync::Arc;
use std::time::Duration;

use lockcore::driver::{Lease, LockRequest, Outage};
use lockcore::Result;
use tokio::time::Instant;

use crate::cleanup::Cleanup;
use crate::inner::{lease, new_token, Inner};
use crate::session::{Attempt, Step};

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Waits in the queue of `req.name` on the one server of `inner` until the lock is ours.
pub(crate) async fn acquire(inner: &Arc<Inner>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    let node = &inner.nodes[0];
    let keys = Arc::new(inner.keys(&req.name));
    let token = new_token();
    let mut guard = Cleanup::new(inner.clone(), keys.clone(), token.clone());
    let mut outage = Outage::new(deadline, inner.config.waiter_ttl + inner.config.connect_timeout);

    let sent = Instant::now();
    match node.try_acquire(&keys, &token, req.ttl).await {
        Ok(Attempt::Acquired(fence)) => {
            guard.disarm();
            return Ok(lease(req, fence, token, sent));
        }
        Ok(Attempt::Busy { .. }) => outage.succeeded(),
        Err(e) => outage.failed(e).await?,
    }
    let channel = keys.channel(&token);
    let mut sub = None;
    let heartbeat = inner.config.waiter_ttl / 3;
    let mut backoff = MIN_BACKOFF;
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
        let (head, pttl_ms, foreign) = match node.wait_step(&keys, &token, req.ttl).await {
            Ok(Step::Acquired(fence)) => {
                guard.disarm();
                return Ok(lease(req, fence, token, sent));
            }
            Ok(Step::Waiting { head, pttl_ms, foreign }) => {
                outage.succeeded();
                (head, pttl_ms, foreign)
            }
            Err(e) => {
                outage.failed(e).await?;
                continue;
            }
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

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
