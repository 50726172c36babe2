//! Cancellation safety: a queue key that no caller will ever hold is deleted, whatever await
//! point the acquire future was dropped at, including while the transaction that creates it was
//! in flight (its outcome is unknown, so the key is deleted anyway).

use std::sync::Arc;
use std::time::Duration;

use crate::queue;
use crate::session::Session;
use crate::slots::Slot;

/// A key this attempt may have created and does not hold yet. Dropping it (armed) deletes the
/// key in the background; [`PendingKey::disarm`] hands it over to the caller.
pub(crate) struct PendingKey {
    session: Arc<Session>,
    key: String,
    lease_id: i64,
    slot: Option<Slot>,
    armed: bool,
}

impl PendingKey {
    /// Arms the guard for `key` (before the request that may create it is sent).
    pub fn new(session: Arc<Session>, key: String, lease_id: i64, slot: Option<Slot>) -> Self {
        PendingKey {
            session,
            key,
            lease_id,
            slot,
            armed: true,
        }
    }

    /// The key is ours to keep: nothing will be deleted. Returns the Go layout's slot.
    pub fn disarm(mut self) -> Option<Slot> {
        self.armed = false;
        self.slot.take()
    }
}

impl Drop for PendingKey {
    fn drop(&mut self) {
        if self.armed {
            delete_in_background(
                self.session.clone(),
                self.key.clone(),
                None,
                self.lease_id,
                self.slot.take(),
            );
        }
    }
}

/// Deletes `key` (if it still has create revision `rev`, when given) in a background task,
/// retrying while etcd is unreachable and the key's lease may still be alive. `slot` is freed
/// only afterwards, so that the Go layout cannot re-create the key before it is gone.
pub(crate) fn delete_in_background(
    session: Arc<Session>,
    key: String,
    rev: Option<i64>,
    lease_id: i64,
    slot: Option<Slot>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            key,
            "no tokio runtime to delete a lock key; it goes when the session lease expires"
        );
        return;
    };
    handle.spawn(async move {
        let mut backoff = Duration::from_millis(50);
        loop {
            match queue::delete(&session.conn, &key, rev).await {
                Ok(deleted) => {
                    tracing::debug!(key, deleted, "lock key cleaned up");
                    break;
                }
                Err(e) if session.lease_may_be_alive(lease_id) => {
                    tracing::warn!(key, error = %e, "deleting a lock key failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(session.ttl());
                }
                // The lease is gone or expires unrenewed, and the key with it. Keep its name
                // out of use anyway: if the lease comes back, the key is still there.
                Err(_) => {
                    if let Some(slot) = slot {
                        slot.keep_number();
                    }
                    return;
                }
            }
        }
        drop(slot);
    });
}
