//! `try_acquire` and `acquire`: one wait loop for every kind.
//!
//! A waiter joins the queue in one transaction, then sleeps until the kernel says the lock's state
//! file changed (or a locker of the directory ended), or until the earliest expiry of an entry
//! ahead of it.
//! Woken, it looks at the state without the lock (one read per change for all the waiters of this
//! process, see `look.rs`). The step that freed the lock has granted it to the next in line
//! already (`queue::hand_over`), so a waiter that finds its grant returns without a step of its
//! own; one whose turn has come without a grant (no step ran since a holder died or expired)
//! takes its turn in a transaction. A change costs each process with waiters one read. While it waits it
//! writes its locker's heartbeat every third of its TTL, so that its entry lives while it waits
//! (and dies with a paused or stuck process). An entry dropped meanwhile (the process was paused
//! past its TTL), whether a look finds it gone or its turn does, joins again at the tail.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use locksmith_core::driver::{Lease, LockRequest};
use locksmith_core::{LockError, LockKind, Result};

use super::queue::{self, Place, Turn};
use super::state::{Entry, Now, Text};
use crate::cleanup::{reap, Pending};
use crate::conn::Dir;
use crate::layout::LockFile;
use crate::look::SharedRead;

/// One attempt: the lease if the lock is free for this request now.
pub(crate) async fn try_acquire(dir: &Arc<Dir>, req: &LockRequest) -> Result<Option<Lease>> {
    dir.check_open()?;
    let file = Arc::new(LockFile::of(req.kind.family(), &req.name));
    let entry = new_entry(dir, &req.kind, req.ttl);
    let (id, holder_id) = (entry.id.clone(), entry.holder_id());
    let mut pending = Pending::new(dir, &file, &id);
    let sent = Instant::now();
    // Never behind another process's `flock` on the lock file for longer than a step takes:
    // a lock file that stays locked is a lock that is not free now.
    let taken = pending
        .try_run(move |state, now| Ok(queue::try_take(state, entry, now)?.map(|token| (token, now.boot_ns))))
        .await?
        .flatten();
    pending.keep();
    Ok(taken.map(|(token, since_ns)| {
        dir.hold(&id, &file, req.ttl, since_ns, sent);
        req.lease(token, holder_id, sent)
    }))
}

/// Waits in line until the lock is held, or `deadline`.
pub(crate) async fn acquire(dir: &Arc<Dir>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    dir.check_open()?;
    let file = Arc::new(LockFile::of(req.kind.family(), &req.name));
    let entry = new_entry(dir, &req.kind, req.ttl);
    let (id, holder_id) = (entry.id.clone(), entry.holder_id());
    let mut pending = Pending::new(dir, &file, &id);
    // The lock's wake-ups and shared reads, from its first wait on: a request that holds at its
    // join (an uncontended one) needs neither.
    let mut watch: Option<(Arc<Notify>, Arc<SharedRead>)> = None;
    let mut watching = false;
    let mut joining = true;
    // Whether a look found the lock taken: a later grant is a hand-over (`Lease::waited`).
    let mut waited = false;
    let mut beat_at = Instant::now() + req.ttl / 3;
    loop {
        dir.check_open()?;
        if watching && watch.is_none() {
            watch = Some((dir.hub.lock(&file.stem), SharedRead::of(dir, &file)));
        }
        let woken = watch.as_ref().map(|(wake, _)| wake.notified());
        tokio::pin!(woken);
        if let Some(woken) = woken.as_mut().as_pin_mut() {
            woken.enable();
        }
        let sent = Instant::now();
        let turn = if joining {
            joining = false;
            let entry = entry.clone();
            pending.run(move |state, now| queue::join(state, entry, now)).await?
        } else if let Some(g) = dir.hub.take_grant(&id).filter(|g| fresh(g.since_ns, req.ttl)) {
            // Handed over by a step of this process (`Hub::granted`): the grant it wrote, as
            // fresh as a read of the file, unless this task ran long after it (a paused
            // process, whose entry others may have dropped since: then the file says).
            Turn::Granted(g.token, g.since_ns)
        } else if dir.hub.handing_over(&file.stem) {
            // A step of this process is writing a hand-over of the lock (the kernel's event of
            // its write may have woken this task first): its wake-up comes once its grants are
            // kept, and this task, registered, waits for it rather than read the file.
            Turn::Wait(None)
        } else {
            let Some((_, shared_read)) = &watch else {
                // Never: a look comes after a wait, which made the watch.
                joining = true;
                continue;
            };
            // Bounded by the deadline: under churn a look may wait for other waiters' reads.
            let look = match deadline {
                Some(d) => tokio::time::timeout_at(d, shared_read.look(dir, &file))
                    .await
                    .map_err(|_| LockError::Timeout(Duration::ZERO))??,
                None => shared_read.look(dir, &file).await?,
            };
            match look.place(&id) {
                // Dropped while this process could not beat (paused): in line again, at the tail.
                None => {
                    joining = true;
                    continue;
                }
                // Granted by the step that freed the lock (`queue::hand_over`): nothing to write.
                Some(Place {
                    granted: Some((token, since_ns)),
                    ..
                }) => Turn::Granted(token, since_ns),
                Some(place) if place.would_hold => {
                    let id = id.clone();
                    pending.run(move |state, now| queue::turn(state, &id, now)).await?
                }
                Some(place) => Turn::Wait(place.expiry_ahead),
            }
        };
        let expiry = match turn {
            Turn::Granted(token, since_ns) => {
                pending.keep();
                // Granted by another's step maybe, before this task learnt it: the lease counts
                // from the grant.
                let sent = granted_at(sent, since_ns);
                dir.hold(&id, &file, req.ttl, since_ns, sent);
                return Ok(Lease {
                    waited,
                    ..req.lease(token, holder_id, sent)
                });
            }
            // This request's first wait: it registers for the lock's wake-ups, and looks at
            // the lock again under them before it sleeps (a change since its join would
            // otherwise wake nobody).
            Turn::Wait(_) if !watching => {
                watching = true;
                waited = true;
                continue;
            }
            // The first time this process waits on the directory: wake-ups start, and the
            // lock is looked at again under them before anything sleeps.
            Turn::Wait(_) if !dir.hub.started() => {
                dir.hub.start()?;
                waited = true;
                continue;
            }
            Turn::Wait(expiry) => expiry,
            // Dropped between the look and the turn (paused for about its TTL): in line again.
            Turn::Gone => {
                tracing::debug!(lock = %file.segment, "file backend: a waiter's entry was dropped before its turn; joining again");
                joining = true;
                continue;
            }
        };
        waited = true;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(LockError::Timeout(Duration::ZERO));
        }
        if Instant::now() >= beat_at {
            reap(dir, dir.beat()?);
            beat_at = Instant::now() + req.ttl / 3;
        }
        // An entry's expiry is on CLOCK_BOOTTIME; a millisecond more makes sure it has passed.
        let expiry = expiry.map(|ns| Instant::now() + Now::read().until(ns) + Duration::from_millis(1));
        let wake_at = [expiry, deadline, Some(beat_at)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(beat_at);
        let Some(woken) = woken.as_mut().as_pin_mut() else {
            continue; // never: a wait made the watch, and this pass registered under it
        };
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
    }
}

/// Whether a grant made at `since_ns` (`CLOCK_BOOTTIME`) to a lease of `ttl` is recent enough to
/// be taken from memory: within a tenth of the TTL.
fn fresh(since_ns: u64, ttl: Duration) -> bool {
    let age = Duration::from_nanos(Now::read().boot_ns.saturating_sub(since_ns));
    age < ttl / 10
}

/// When a lease granted at `since_ns` (`CLOCK_BOOTTIME`) started on tokio's clock, if before
/// `sent` (the request that found it): a lease handed over by a release (`queue::hand_over`) runs
/// from its grant, and a holder must never count on it for longer than the other processes do,
/// however late it woke (a process paused between the grant and its look).
fn granted_at(sent: Instant, since_ns: u64) -> Instant {
    let ago = Duration::from_nanos(Now::read().boot_ns.saturating_sub(since_ns));
    let now = Instant::now();
    // `None` only past the range of the clock's seconds: never, in practice.
    sent.min(now.checked_sub(ago).unwrap_or(now))
}

/// A new entry of this locker for a request of `kind` with a lease of `ttl`.
pub(crate) fn new_entry(dir: &Dir, kind: &LockKind, ttl: Duration) -> Entry {
    Entry {
        id: dir.entry_ids.next_hex().into(),
        owner: dir.owner_id.clone(),
        pid: dir.pid,
        host: dir.host.clone(),
        role: Entry::role_text(kind.role()),
        value: match kind.campaign_value() {
            "" => Text::default(),
            value => value.into(),
        },
        since_ns: 0,
        ttl_ns: u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX),
        grant: None,
        expires_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease handed over by a release counts from its grant, not from when its waiter woke
    /// and found it (a process paused in between would otherwise count on the lease for longer
    /// than every other process does).
    #[test]
    fn a_lease_handed_over_counts_from_its_grant() {
        let sent = Instant::now();
        let granted_ns = Now::read().boot_ns.saturating_sub(5_000_000_000);
        let at = granted_at(sent, granted_ns);
        let ago = sent - at;
        assert!(
            ago >= Duration::from_millis(4_900) && ago <= Duration::from_millis(5_100),
            "{ago:?}"
        );
        // A grant after the request (this task's own turn) leaves the request's instant.
        assert_eq!(granted_at(sent, Now::read().boot_ns + 1_000_000_000), sent);
    }
}
