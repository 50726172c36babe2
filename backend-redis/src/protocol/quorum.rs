//! Several independent masters (`redis://h1,h2,h3`): the lock is held when a majority of them hold
//! the key for our token (the Redlock algorithm).
//!
//! - **Acquire:** `TRY_ACQUIRE` on every master at once. Success on a majority within the
//!   validity `ttl − elapsed − drift` (drift = ttl/100 + 2 ms) wins; anything less is undone on
//!   all masters. The fencing token is the **maximum** of the counters of the masters that granted
//!   it; a second round trip (`RAISE_FENCE`) lifts those masters' counters to that maximum, on a
//!   majority, before the lease is returned. Any later holder's majority overlaps this one in at
//!   least one master whose counter is already at the maximum, so its token is larger.
//! - **Release:** on all masters. **Renew:** the watchdog's batch on all masters, each getting
//!   one `RENEW_MANY` call per 500 leases (see [`crate::renew`]); a lease lives
//!   while a majority extended it.
//! - **Dead masters:** every operation returns as soon as the answers decide it (a majority
//!   granted, or can no longer grant), without waiting for the rest; a master that failed is
//!   skipped for a backoff (100 ms doubling to 2 s) and then tried by one operation, off the
//!   critical path of the others (see [`crate::conn::fanout`]).
//! - **Waiting:** not queued and not FIFO. A waiter retries at the holder's remaining TTL or
//!   after a backoff (20 ms doubling to 1 s, with jitter), whichever is first; an attempt that
//!   found no majority answering is retried until the deadline (an outage ridden out).

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{Lease, LockRequest, Outage};
use locksmith_core::{LockError, Result};
use tokio::time::Instant;

use crate::cleanup::Cleanup;
use crate::conn::fanout::fan_out;
use crate::conn::inner::Inner;
use crate::protocol::entry::{Entry, Turn};
use crate::protocol::mutex::MutexEntry;

const MIN_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The outcome of one quorum attempt.
pub(crate) enum Try {
    Acquired(Lease),
    /// Not ours; retry after about this long (the holder's remaining TTL, where known).
    Busy(Option<Duration>),
}

impl Try {
    pub(crate) fn lease(self) -> Option<Lease> {
        match self {
            Try::Acquired(l) => Some(l),
            Try::Busy(_) => None,
        }
    }
}

/// The clock drift allowance of Redlock: 1% of the TTL plus 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// One quorum attempt; undoes partial success.
pub(crate) async fn try_acquire(inner: &Arc<Inner>, req: &LockRequest) -> Result<Try> {
    let entry = MutexEntry::new(inner, &req.name, req.ttl);
    let guard = Cleanup::new(inner.clone(), entry.clone());
    let quorum = inner.config.quorum();
    let total = inner.nodes.len();

    let sent = Instant::now();
    // Done once a majority granted it, or once the missing answers could no longer make one.
    let results = fan_out(
        &inner.nodes,
        |_, n| entry.try_take(n),
        |answers| {
            let granted = answers
                .iter()
                .filter(|a| matches!(a, Some(Ok(Turn::Granted(_)))))
                .count();
            let missing = answers.iter().filter(|a| a.is_none()).count();
            granted >= quorum || granted + missing < quorum
        },
    )
    .await;
    let all_answered = results.iter().all(Option::is_some);
    let (mut granted, mut errors, mut pttl) = (Vec::new(), Vec::new(), None::<Duration>);
    // An error that no retry mends (a denied command, a script error): given as it is.
    let mut lasting = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(Ok(Turn::Granted(fence))) => granted.push((i, fence)),
            Some(Ok(Turn::Waiting { wake_in: Some(p), .. })) => pttl = Some(pttl.map_or(p, |q| q.max(p))),
            Some(Ok(Turn::Waiting { .. } | Turn::Refused(_))) | None => {}
            Some(Err(e)) => {
                errors.push(describe(&e));
                if !matches!(e, LockError::Unavailable { .. }) {
                    lasting.get_or_insert(e);
                }
            }
        }
    }
    let valid = |now: Instant| now.duration_since(sent) + drift(req.ttl) < req.ttl;
    if granted.len() >= quorum && valid(Instant::now()) {
        let fence = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
        let granted_by = |i: usize| granted.iter().any(|(g, _)| *g == i);
        let raised = fan_out(
            &inner.nodes,
            |i, n| {
                let raise = granted_by(i);
                let entry = &entry;
                async move {
                    if raise {
                        entry.raise_fence(n, fence).await
                    } else {
                        Ok(false)
                    }
                }
            },
            |answers| {
                let held = answers.iter().filter(|a| matches!(a, Some(Ok(true)))).count();
                let missing = answers.iter().filter(|a| a.is_none()).count();
                held >= quorum || held + missing < quorum
            },
        )
        .await;
        if raised.iter().filter(|r| matches!(r, Some(Ok(true)))).count() >= quorum && valid(Instant::now()) {
            let mut guard = guard;
            guard.disarm();
            return Ok(Try::Acquired(req.lease(fence, entry.token().to_owned(), sent)));
        }
    }
    // Not a quorum: give back what we got, everywhere (in the background if a server has not
    // answered yet: a late grant must be undone too).
    if !granted.is_empty() {
        guard.run_now().await;
    } else if all_answered {
        let mut guard = guard;
        guard.disarm();
    }
    if errors.len() > total - quorum {
        if let Some(e) = lasting {
            return Err(e);
        }
        return Err(LockError::Unavailable {
            message: format!(
                "only {} of {total} redis masters answered; the lock needs a majority of {quorum} ({})",
                total - errors.len(),
                errors.join("; ")
            ),
            source: None,
        });
    }
    Ok(Try::Busy(pttl))
}

/// Retries quorum attempts until the lock is ours or the deadline passes. An attempt that found
/// no majority answering is retried too (with [`Outage`]'s backoff), as a single server's waiter
/// rides out an outage: until the deadline, or without one for as long as a waiter's entry would
/// live (`waiter_ttl`).
pub(crate) async fn acquire(inner: &Arc<Inner>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    let mut backoff = MIN_BACKOFF;
    let mut outage = Outage::new(deadline, inner.config.waiter_ttl + inner.config.connect_timeout);
    // Whether an attempt found the lock taken: a later grant is a hand-over (`Lease::waited`).
    let mut waited = false;
    loop {
        let retry_in = match try_acquire(inner, req).await {
            Ok(Try::Acquired(lease)) => return Ok(Lease { waited, ..lease }),
            Ok(Try::Busy(pttl)) => pttl.map_or(backoff, |p| p.min(backoff)),
            Err(e) => {
                outage.failed(e).await?;
                continue;
            }
        };
        outage.succeeded();
        waited = true;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        let jitter = Duration::from_millis(rand::random::<u64>() % 20);
        tokio::select! {
            _ = tokio::time::sleep(retry_in + jitter) => {}
            _ = locksmith_core::driver::sleep_until_deadline(deadline) => return Err(outage.at_deadline()),
        }
    }
}

/// An error with its source, for messages that list several servers.
fn describe(e: &LockError) -> String {
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}
