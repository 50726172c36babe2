//! The clean-up edge: an entry that an `acquire` or `try_acquire` put in a queue, or may have put
//! there, is taken out when the call ends without returning it as a lease (a timeout, an error,
//! the future dropped); and `release` runs to its end whether or not its caller waits.
//!
//! Every step of a locker runs on its one steps' connection, one at a time, and a step dropped
//! part-way is rolled back (or committed) on that connection before the next step starts. So the
//! removal, a step of its own spawned with [`cleanup::spawn`], always runs after any step still in
//! flight: a call given up on never acquires later behind its caller's back.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use locksmith_core::driver::{cleanup, Lease};
use locksmith_core::{LockError, Result};

use crate::conn::{Conn, Outcome};
use crate::layout::segment;
use crate::protocol::queue::{alone_applies, entry_id, Op};

/// What a layout frees before a lease's entry goes (`layout=advisory`: its advisory lock),
/// answering whether the lease still held it.
pub(crate) type FreeFirst = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// `release`: runs `first` (a layout's own part, see [`FreeFirst`]), then removes the lease's
/// entry (a step that passes the lock on); `NotHeld` if either was gone. In a clean-up task of its own ([`cleanup::spawn`]) that runs to
/// its end whether or not the returned future is polled again.
pub(crate) async fn release(conn: &Arc<Conn>, first: Option<FreeFirst>, lease: &Lease) -> Result<()> {
    let conn = conn.clone();
    let seg = segment(lease.kind.family(), &lease.name);
    let id = entry_id(&lease.holder_id).to_owned();
    let kind = lease.kind.clone();
    let (tx, rx) = oneshot::channel();
    let spawned = cleanup::spawn(locksmith_core::metrics::counting_for_caller(async move {
        let first_held = match first {
            Some(first) => first.await,
            None => true,
        };
        // A mutex's (or writers') hand-over in one round trip; otherwise the full step.
        let alone = match alone_applies(&kind) {
            true => conn.leave_exclusive(&seg, &id).await.unwrap_or_else(|e| {
                tracing::debug!(error = %e, "postgres: the one-statement release failed; taking the full step");
                false
            }),
            false => false,
        };
        let left = match alone {
            true => Ok(Outcome::Left(true)),
            false => conn.step(&seg, Op::Leave(id), Duration::ZERO).await,
        };
        // A lease whose layout's part was gone was lost, whatever its entry in the tables says.
        let _ = tx.send(left.map(|out| match out {
            Outcome::Left(held) => Outcome::Left(held && first_held),
            other => other,
        }));
    }));
    if !spawned {
        return Err(LockError::unavailable(
            "postgres: no runtime to release on",
            "no runtime",
        ));
    }
    match rx.await {
        Ok(Ok(Outcome::Left(true))) => Ok(()),
        Ok(Ok(_)) => Err(LockError::not_held(lease.name.as_str())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(LockError::unavailable(
            "postgres: the release did not finish",
            "task ended",
        )),
    }
}

/// An entry of this call's in a queue: removed when dropped, unless [`Pending::keep`] says the
/// caller now owns it (as a lease) or it was never added.
pub(crate) struct Pending {
    conn: Arc<Conn>,
    segment: String,
    id: String,
    armed: bool,
}

impl Pending {
    /// The entry `id` of lock `segment`.
    pub fn new(conn: &Arc<Conn>, segment: &str, id: &str) -> Pending {
        Pending {
            conn: conn.clone(),
            segment: segment.to_owned(),
            id: id.to_owned(),
            armed: true,
        }
    }

    /// The entry is the caller's now (or was never added): nothing to clean up.
    pub fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (conn, segment, id) = (self.conn.clone(), self.segment.clone(), self.id.clone());
        let spawned = cleanup::spawn(async move {
            let left = conn.step(&segment, Op::Leave(id), Duration::ZERO).await;
            if let Err(e) = left {
                tracing::warn!(lock = %segment, error = %e,
                    "postgres: could not remove a queue entry; it goes when its locker stops beating");
            }
        });
        if !spawned {
            tracing::warn!(lock = %self.segment,
                "postgres: no runtime to remove a queue entry; it goes when its locker stops beating");
        }
    }
}
