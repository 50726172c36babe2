//! The clean-up edges. `Pending`: the entry an acquire or a try created, or may have created
//! (its id is chosen before the request is sent, so an unanswered creation is found by it),
//! removed by a `leave` step if the call is dropped or fails before the lease is the caller's;
//! an `Armed` whose drop hands the removal to `locksmith_core::driver::cleanup::spawn`, tried
//! again with `driver::retry` while the server is down, for as long as the entry could still be
//! granted or held (`REMOVAL_RETRIES`). `Releasing`: a release in flight, an `Armed` whose
//! clean-up runs the release (tried again likewise) if the call is dropped before its step was
//! handed the connection; once handed it, the step runs to its end in a task of its own (see
//! `conn/`), and the clean-up's second release finds nothing (`NotHeld`, harmless).

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::armed::{CleanUp, CleanupTask};
use locksmith_core::driver::retry::{retry, Backoff, RetryError};
use locksmith_core::LockError;

use crate::conn::Conn;
use crate::protocol::queue::{leave, release};

/// How the removal of a pending entry is tried again: from 100 ms doubling to 2 s, for up to a
/// minute (the entry expires by itself after its heartbeat or lease in any case).
pub(crate) const REMOVAL_RETRIES: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(2)).give_up_after(Duration::from_secs(60));

/// An entry that may be on the server and is nobody's lease yet.
pub(crate) struct Pending {
    pub conn: Arc<Conn>,
    pub seg: String,
    pub id: u64,
}

impl CleanUp for Pending {
    fn task(&mut self) -> Option<CleanupTask> {
        let (conn, seg, id) = (self.conn.clone(), self.seg.clone(), self.id);
        Some(Box::pin(async move {
            let removed = retry(
                REMOVAL_RETRIES,
                |_| leave(&conn, seg.clone(), id),
                |e| matches!(e, LockError::Unavailable { .. }),
            )
            .await;
            if let Err(e) = removed {
                tracing::warn!(error = ?e, "mysql: a given-up entry could not be removed; it expires by itself");
            }
        }))
    }

    fn unspawned(&mut self) {
        tracing::warn!("mysql: an entry given up where no runtime runs is left to expire with its locker's heartbeat");
    }
}

/// A release in flight.
pub(crate) struct Releasing {
    pub conn: Arc<Conn>,
    pub seg: String,
    pub id: u64,
    pub token: u64,
    pub name: String,
    /// A mutex's lease, which may be held in the lock's row.
    pub in_row: bool,
}

impl CleanUp for Releasing {
    fn task(&mut self) -> Option<CleanupTask> {
        let (conn, seg, id, token, name, in_row) = (
            self.conn.clone(),
            self.seg.clone(),
            self.id,
            self.token,
            self.name.clone(),
            self.in_row,
        );
        Some(Box::pin(async move {
            let released = retry(
                REMOVAL_RETRIES,
                |_| release(&conn, seg.clone(), id, token, name.clone(), in_row),
                |e| matches!(e, LockError::Unavailable { .. }),
            )
            .await;
            match released {
                Ok(()) => {}
                Err(RetryError::Permanent {
                    error: LockError::NotHeld { .. },
                    ..
                }) => {}
                Err(e) => {
                    tracing::warn!(error = ?e, "mysql: a dropped release could not be finished; the lease expires")
                }
            }
        }))
    }

    fn unspawned(&mut self) {
        tracing::warn!("mysql: a release dropped where no runtime runs is left to expire with its lease");
    }
}
