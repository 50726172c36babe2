//! Taking a lock of any kind on one server: one attempt, or the FIFO queue with server-pushed
//! wake-ups. The kind supplies its [`Entry`] (its scripts); the loop is the same for all.
//!
//! 1. One attempt ([`Entry::try_take`]): a lock the entry would hold at once (a free mutex with
//!    nobody queued, a free semaphore permit, a reader with no writer holding or waiting…) is
//!    taken in one round trip.
//! 2. Otherwise subscribe to this waiter's own channel, then run [`Entry::step`], which joins the
//!    queue and takes the lock when the kind's rule lets this entry hold.
//! 3. Sleep until one of: a wake-up on the channel (a release, a waiter leaving, an expired
//!    holder noticed by a script made this entry able to hold: only such entries are woken), a
//!    grant on the channel (a mutex's release handed the lock to this waiter: then it holds, with
//!    no request of its own; see "The hand-over" below), the
//!    deadline of the holder this entry depends on (the step says which, or none: an expired
//!    holder publishes nothing, so exactly the waiters it would let in watch it), the heartbeat
//!    that keeps the queue entry alive (`waiter_ttl / 3`), or the deadline. Then go back to 2.
//!
//! In the plain layout a mutex holder that is not a locksmith client never wakes anybody, so the
//! head waiter also checks again with a backoff (50 ms doubling to 1 s) while such a holder has
//! the lock (the step says so: [`Turn::Waiting::poll`]).
//!
//! A server that stops answering (down, restarting) does not end the wait: the waiter retries
//! with backoff (see [`locksmith_core::driver::Outage`]), subscribes again, and its next step joins the
//! queue again if the server lost it; it gives up at its deadline (saying the server did not
//! answer), or, without one, once the outage lasted longer than `waiter_ttl` plus the connect
//! timeout.
//!
//! **The hand-over.** A mutex's release may grant the lock to the live head of the queue itself
//! (`lua/mutex/release.lua`, on one server without `min_replicas`): it takes the lock for the TTL
//! the head's last step left, and publishes `grant:<fencing token>:<deadline>`, where the
//! deadline is the liveness deadline that step set. The waiter takes it only if that deadline is
//! the one its own last step was answered with: then the grant came after that step reached the
//! server, so counting the lease from when the step was sent under-estimates it, as for a grant
//! in a step's answer. Any other grant message (a step since, a deadline cut by another waiter's
//! step), and every one to a waiter with `min_replicas` (handed over by a releaser without it), is
//! only a wake-up: the next step finds the lock its own, or not.
//!
//! From the first request until the lease is handed back, a [`Cleanup`] guard is armed: dropped
//! (the future cancelled) or left armed by an error, it runs the entry's `leave` on every server.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{sleep_until_deadline, Lease, LockRequest, Outage};
use locksmith_core::Result;
use tokio::time::Instant;

use crate::cleanup::Cleanup;
use crate::conn::inner::Inner;
use crate::protocol::entry::{Entry, Turn};
use crate::wake::Pushed;

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One attempt on the one server of `inner`: the lease if `entry` holds at once, `None` if it
/// would have to wait.
pub(crate) async fn try_acquire<E: Entry>(inner: &Arc<Inner>, req: &LockRequest, entry: E) -> Result<Option<Lease>> {
    let mut guard = Cleanup::new(inner.clone(), entry.clone());
    let sent = Instant::now();
    let turn = entry.try_take(&inner.nodes[0]).await?;
    guard.disarm(); // answered: an attempt queues nothing
    match turn {
        Turn::Granted(fence) => Ok(Some(req.lease(fence, entry.token().to_owned(), sent))),
        Turn::Waiting { .. } => Ok(None),
        Turn::Refused(e) => Err(e),
    }
}

/// Waits in the queue of `req`'s lock on the one server of `inner` until `entry` holds.
pub(crate) async fn acquire<E: Entry>(
    inner: &Arc<Inner>,
    req: &LockRequest,
    entry: E,
    deadline: Option<Instant>,
) -> Result<Lease> {
    let node = &inner.nodes[0];
    let mut guard = Cleanup::new(inner.clone(), entry.clone());
    let mut outage = Outage::new(deadline, inner.config.waiter_ttl + inner.config.connect_timeout);
    let granted = |fence: u64, sent: Instant, waited: bool| Lease {
        waited,
        ..req.lease(fence, entry.token().to_owned(), sent)
    };
    // Whether a step found the lock taken: a later grant is a hand-over (`Lease::waited`).
    let mut waited = false;

    let sent = Instant::now();
    match entry.try_take(node).await {
        Ok(Turn::Granted(fence)) => {
            guard.disarm();
            return Ok(granted(fence, sent, waited));
        }
        Ok(Turn::Waiting { .. }) => {
            outage.succeeded();
            waited = true;
        }
        Ok(Turn::Refused(e)) => {
            guard.disarm(); // the attempt queued nothing
            return Err(e);
        }
        Err(e) => outage.failed(e).await?,
    }
    let channel = entry.channel();
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
        let (wake_in, poll, deadline_set) = match entry.step(node).await {
            Ok(Turn::Granted(fence)) => {
                guard.disarm();
                return Ok(granted(fence, sent, waited));
            }
            Ok(Turn::Waiting {
                wake_in,
                poll,
                deadline: set,
            }) => {
                outage.succeeded();
                waited = true;
                (wake_in, poll, set)
            }
            Ok(Turn::Refused(e)) => {
                guard.disarm(); // the step removed the entry
                return Err(e);
            }
            Err(e) => {
                outage.failed(e).await?;
                continue;
            }
        };
        let now = Instant::now();
        let mut wake_at = now + heartbeat;
        if let Some(wait) = wake_in {
            wake_at = wake_at.min(now + wait + Duration::from_millis(1));
        }
        if poll {
            wake_at = wake_at.min(now + backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        } else {
            backoff = MIN_BACKOFF;
        }
        tracing::trace!(lock = %req.name, kind = req.kind.family().name(), ?wake_in, poll, "queued");
        tokio::select! {
            pushed = subscription.recv() => match pushed {
                // Handed over after the step sent at `sent` (see "The hand-over"). A lease that
                // would start with less than half its TTL left is taken by a step instead (it
                // finds the lock its own and starts the lease again), and so is every grant when
                // this waiter wants replicas to confirm it: a releaser without `min_replicas`
                // (another program's URL) hands over unconfirmed, and the step sends the `WAIT`.
                Some(Pushed::Granted { fence, deadline })
                    if node.min_replicas == 0 && Some(deadline) == deadline_set && sent.elapsed() < req.ttl / 2 =>
                {
                    guard.disarm();
                    return Ok(granted(fence, sent, waited));
                }
                Some(_) => {}
                None => sub = None, // the pub/sub connection broke: subscribe again
            },
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = sleep_until_deadline(deadline) => {
                // The lock was busy (the last step was answered): leave the queue before saying so.
                drop(sub);
                guard.run_now().await;
                return Err(outage.at_deadline());
            }
        }
    }
}
