//! The one wait loop of every kind: enter the queue, then, until the entry holds, sleep until
//! the wait connection delivers a wake-up for it (`wake.rs`), the lease of the holder it waits
//! for runs out, or the caller's deadline; riding out outages with `Outage`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::driver::armed::Armed;
use locksmith_core::driver::{sleep_until_deadline, Lease, LockRequest, Outage};
use locksmith_core::{LockError, Result};

use crate::cleanup::Pending;
use crate::conn::Conn;
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
                    _ = registration.woken.notified() => {}
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
