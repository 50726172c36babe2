//! The one wait loop of every kind: enter the queue, then, until the entry holds, sleep until
//! the wait connection delivers a wake-up for it (`wake.rs`), the lease of the holder it waits
//! for runs out, or the caller's deadline; riding out outages with `Outage`. A wake-up that
//! brings a grant (the step that let the entry in granted it: `sql/proc_release.sql`,
//! `protocol/queue.rs`) is held at once, without a step ([`held_at_once`]); any other is
//! followed by a step.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::armed::Armed;
use locksmith_core::driver::{sleep_until_deadline, Lease, LockRequest, Outage};
use locksmith_core::{LockError, Result};

use crate::cleanup::Pending;
use crate::conn::Conn;
use crate::hub::Grant;
use crate::layout::segment;
use crate::protocol::queue::{enter, holder_id, leave, new_entry_id, try_take, Entered};

/// How long a wait without a deadline rides out an outage.
const OUTAGE_BUDGET: Duration = Duration::from_secs(30);

/// A millisecond more than a lease's time left: it has surely run out on the server's clock.
const PAST_EXPIRY: Duration = Duration::from_millis(1);

/// Waits until `req` holds, in FIFO order, or until `deadline`.
///
/// # Errors
///
/// `Timeout` at the deadline; `Unavailable` when the server failed past the deadline or budget;
/// `InvalidOption` for a mismatched semaphore; `Closed` after shutdown.
///
/// # Cancel safety
///
/// Dropped at any await, its entry is removed by the `Pending` clean-up.
pub(crate) async fn acquire(conn: &Arc<Conn>, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
    let seg = segment(req.kind.family(), &req.name)?;
    let id = new_entry_id();
    let registration = conn.hub.entry(id);
    let mut pending = Armed::new(Pending {
        conn: conn.clone(),
        seg: seg.clone(),
        id,
    });
    let mut outage = Outage::new(deadline, OUTAGE_BUDGET);
    let mut waited = false;
    loop {
        let sent = Instant::now();
        match enter(conn, req, seg.clone(), id).await {
            Ok(Entered::Granted(token)) => {
                pending.disarm();
                return Ok(Lease {
                    waited,
                    ..req.lease(token, holder_id(conn.owner, id), sent)
                });
            }
            Ok(Entered::Waiting(runs_out)) => {
                outage.succeeded();
                waited = true;
                let expiry = async {
                    match runs_out {
                        Some(left) => tokio::time::sleep(left + PAST_EXPIRY).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = registration.woken().notified() => {
                        if let Some((token, acquired_at)) = registration.take_grant().and_then(|g| held_at_once(req.ttl, g)) {
                            pending.disarm();
                            return Ok(Lease {
                                waited: true,
                                ..req.lease(token, holder_id(conn.owner, id), acquired_at)
                            });
                        }
                    }
                    _ = expiry => {}
                    _ = sleep_until_deadline(deadline) => {
                        // A server that went away while we waited is reported as such, not as a
                        // lock that stayed busy (the wait connection says whether it answers).
                        let silent = !conn.hub.healthy();
                        if !silent && leave(conn, seg.clone(), id).await.is_ok() {
                            pending.disarm();
                        }
                        if silent && !outage.is_failing() {
                            return Err(LockError::Unavailable {
                                message: "mysql: the server stopped answering while the lock was awaited".into(),
                                source: None,
                            });
                        }
                        return Err(outage.at_deadline());
                    }
                }
            }
            Err(LockError::Closed) => return Err(LockError::Closed),
            Err(e) => outage.failed(e).await?,
        }
    }
}

/// The token of `grant`, and the instant its lease counts from, if the waiter may hold on it
/// without a statement of its own: its lease lasts until `grant.until` at least (the server's
/// time left, counted from the mailbox read's sending), so it counts from `until - ttl`, and it
/// must have five sixths of its TTL left, as PostgreSQL's granted waiters (a waiter that woke
/// later confirms with its step, which restarts the lease on the server).
fn held_at_once(ttl: Duration, grant: Grant) -> Option<(u64, Instant)> {
    let left = grant.until.saturating_duration_since(Instant::now());
    if left.saturating_mul(6) < ttl.saturating_mul(5) {
        return None;
    }
    Some((grant.token, grant.until.checked_sub(ttl)?))
}

/// One try.
///
/// # Errors
///
/// As [`acquire`], without `Timeout`.
///
/// # Cancel safety
///
/// Dropped, what it may have created is removed by the `Pending` clean-up.
pub(crate) async fn try_acquire(conn: &Arc<Conn>, req: &LockRequest) -> Result<Option<Lease>> {
    let seg = segment(req.kind.family(), &req.name)?;
    let id = new_entry_id();
    let mut pending = Armed::new(Pending {
        conn: conn.clone(),
        seg: seg.clone(),
        id,
    });
    let sent = Instant::now();
    let granted = try_take(conn, req, seg, id).await?;
    pending.disarm();
    Ok(granted.map(|token| req.lease(token, holder_id(conn.owner, id), sent)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant's lease ends where the server's does at the latest: it counts from `until - ttl`.
    /// One that has lost more than a sixth of its TTL is confirmed by a step instead.
    #[test]
    fn a_grant_is_held_at_once_only_with_five_sixths_of_its_ttl_left() {
        let ttl = Duration::from_secs(6);
        let now = Instant::now();
        let fresh = Grant {
            token: 7,
            until: now + Duration::from_millis(5_990),
        };
        let (token, since) = held_at_once(ttl, fresh).expect("a fresh grant holds at once");
        assert_eq!(token, 7);
        assert_eq!(since + ttl, fresh.until, "the lease ends where the server's does");
        assert!(since <= now, "the lease counts from before the grant was read");
        let late = Grant {
            token: 7,
            until: now + Duration::from_millis(4_900),
        };
        assert_eq!(
            held_at_once(ttl, late),
            None,
            "a grant read late is confirmed by a step"
        );
        let gone = Grant { token: 7, until: now };
        assert_eq!(held_at_once(ttl, gone), None);
    }
}
