//! The clean-up edge: an entry that an `acquire` or `try_acquire` put in a queue, or may have put
//! there, is taken out when the call ends without returning it as a lease (a timeout, an error,
//! the future dropped); and `release` runs to its end whether or not its caller waits (in the
//! caller's task, finished by a clean-up task only if the caller drops it part-way).
//!
//! Every step of a locker runs on its one steps' connection, one at a time, and a step dropped
//! part-way is rolled back (or committed) on that connection before the next step starts. So the
//! removal, a step of its own spawned with [`cleanup::spawn`], always runs after any step still in
//! flight: a call given up on never acquires later behind its caller's back.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::armed::{Armed, CleanUp, CleanupTask};
use locksmith_core::driver::retry::{retry, Backoff, RetryError};
use locksmith_core::driver::{cleanup, Lease};
use locksmith_core::{LockError, LockKind, Result};

use crate::conn::{Conn, Outcome};
use crate::layout::segment;
use crate::protocol::queue::{alone_applies, entry_id, Op};

/// What a layout frees before a lease's entry goes (`layout=advisory`: its advisory lock),
/// answering whether the lease still held it.
pub(crate) type FreeFirst = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// `release`: runs `first` (a layout's own part, see [`FreeFirst`]), then removes the lease's
/// entry (a step that passes the lock on); `NotHeld` if either was gone. It runs in the caller's
/// task (no task spawned, no thread woken per release); if its future is dropped before it ends
/// (a timeout around it), [`Releasing`] runs the rest in a clean-up task ([`cleanup::spawn`]).
pub(crate) async fn release(conn: &Arc<Conn>, first: Option<FreeFirst>, lease: &Lease) -> Result<()> {
    // Valid when the release began: nobody but this release can remove its entry from then on.
    let surely_valid = !lease.lost.is_lost() && !lease.lost.ran_out();
    let mut releasing = Armed::new(Releasing {
        conn: conn.clone(),
        segment: segment(lease.kind.family(), &lease.name),
        id: entry_id(&lease.holder_id).to_owned(),
        kind: lease.kind.clone(),
        first,
    });
    let first_held = match releasing.first.as_mut() {
        Some(first) => {
            let held = first.await;
            releasing.first = None;
            held
        }
        None => true,
    };
    let left = leave(&releasing.conn, &releasing.segment, &releasing.id, &releasing.kind).await;
    releasing.disarm();
    // A lease whose layout's part was gone was lost, whatever its entry in the tables says.
    match left {
        Ok((Outcome::Left(true), _)) if first_held => Ok(()),
        // The one-statement release got no answer and the full step then found the entry gone:
        // that release ran (its answer was late), as nobody else removes a valid lease's entry.
        Ok((Outcome::Left(false), true)) if first_held && surely_valid => Ok(()),
        Ok(_) => Err(LockError::not_held(lease.name.as_str())),
        Err(e) => Err(e),
    }
}

/// Removes entry `id` from lock `segment`: a mutex's (or writers') hand-over in one round trip
/// (`alone.sql`'s `leave_exclusive`); otherwise, or if that fails, the full step. Also answers
/// whether the one-statement release failed first (it may have run all the same: a timeout).
async fn leave(conn: &Arc<Conn>, segment: &str, id: &str, kind: &LockKind) -> Result<(Outcome, bool)> {
    let (alone, failed) = match alone_applies(kind) {
        true => match conn.leave_exclusive(segment, id).await {
            Ok(alone) => (alone, false),
            Err(e) => {
                tracing::debug!(error = %e, "postgres: the one-statement release failed; taking the full step");
                (false, true)
            }
        },
        false => (false, false),
    };
    match alone {
        true => Ok((Outcome::Left(true), false)),
        false => Ok((
            conn.step(segment, Op::Leave(id.to_owned()), Duration::ZERO).await?,
            failed,
        )),
    }
}

/// A release in flight: dropped before it finished (armed in [`release`] until then), it
/// finishes in a clean-up task (the layout's part if it was cut off, then the entry's removal). A
/// removal cut off part-way was rolled back or committed on the steps' connection before the
/// clean-up's step runs there, and taking it again finds the entry gone: harmless.
struct Releasing {
    conn: Arc<Conn>,
    segment: String,
    id: String,
    kind: LockKind,
    /// The layout's part, until it finished.
    first: Option<FreeFirst>,
}

impl CleanUp for Releasing {
    fn task(&mut self) -> Option<CleanupTask> {
        let (conn, segment, id, kind) = (
            self.conn.clone(),
            self.segment.clone(),
            self.id.clone(),
            self.kind.clone(),
        );
        let first = self.first.take();
        Some(Box::pin(async move {
            if let Some(first) = first {
                first.await;
            }
            match leave(&conn, &segment, &id, &kind).await {
                Ok(_) => {
                    tracing::debug!(lock = %segment, "postgres: released in the background after a cancelled release")
                }
                Err(e) => tracing::warn!(lock = %segment, error = %e,
                    "postgres: a cancelled release could not finish; the lock expires after its TTL"),
            }
        }))
    }

    fn unspawned(&mut self) {
        tracing::warn!(lock = %self.segment,
            "postgres: no runtime to finish a cancelled release; the lock expires after its TTL");
    }
}

/// An entry of this call's in a queue: removed when dropped, unless [`Pending::keep`] says the
/// caller now owns it (as a lease) or it was never added.
pub(crate) struct Pending(Armed<Entry>);

impl Pending {
    /// The entry `id` of lock `segment`.
    pub fn new(conn: &Arc<Conn>, segment: &str, id: &str) -> Pending {
        Pending(Armed::new(Entry {
            conn: conn.clone(),
            segment: segment.to_owned(),
            id: id.to_owned(),
        }))
    }

    /// The entry is the caller's now (or was never added): nothing to clean up.
    pub fn keep(mut self) {
        self.0.disarm();
    }
}

/// What a [`Pending`] removes: entry `id` of lock `segment`.
struct Entry {
    conn: Arc<Conn>,
    segment: String,
    id: String,
}

impl CleanUp for Entry {
    fn task(&mut self) -> Option<CleanupTask> {
        let (conn, segment, id) = (self.conn.clone(), self.segment.clone(), self.id.clone());
        // One try, which the dropped call waits for (within a bound); the tries again run in a
        // task of their own, which only `Locker::shutdown` waits for.
        Some(Box::pin(async move {
            let left = conn.step(&segment, Op::Leave(id.clone()), Duration::ZERO).await;
            if let Err(e) = left {
                tracing::debug!(lock = %segment, error = %e, "postgres: could not remove a queue entry; trying again");
                cleanup::spawn(async move {
                    let removed = retry(
                        REMOVAL_RETRIES,
                        |_| conn.step(&segment, Op::Leave(id.clone()), Duration::ZERO),
                        |e| {
                            let heals = !matches!(e, LockError::Closed);
                            if heals {
                                tracing::debug!(lock = %segment, error = %e, "postgres: removing a queue entry failed again");
                            }
                            heals
                        },
                    )
                    .await;
                    match removed {
                        Ok(_) => {
                            tracing::debug!(lock = %segment, "postgres: removed a cancelled acquire's entry, tried again")
                        }
                        Err(RetryError::GaveUp { tries, .. }) => tracing::warn!(lock = %segment, tries,
                            "postgres: could not remove a queue entry; it goes when its locker stops beating"),
                        Err(RetryError::Permanent { .. }) => {}
                    }
                });
            }
        }))
    }

    fn unspawned(&mut self) {
        tracing::warn!(lock = %self.segment,
            "postgres: no runtime to remove a queue entry; it goes when its locker stops beating");
    }
}

/// How a cancelled acquire's removal is tried again when its first try failed: from 50 ms,
/// doubling to 1 s, until a step answers, for 120 s at most (past it, what is left goes when its
/// locker stops beating: its shutdown removes it, or its owner row expires), and not after the
/// locker's shutdown (`Closed`), whose own statement removes every entry of the locker. Tried
/// once, a removal cut off by an outage left the entry queued while its locker went on beating:
/// the lock was granted to it later and held by nobody for its whole TTL.
const REMOVAL_RETRIES: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1))
    .give_up_after(Duration::from_secs(120))
    .pause_first();
