//! Cancellation safety: a queue key that no caller will ever hold is deleted, whatever await
//! point the acquire future was dropped at, including while the transaction that creates it was
//! in flight.
//!
//! The transaction that may create a key runs in a task of its own ([`PendingKey::create`]), so
//! it is never cut off half-way by a dropped caller and its outcome is always learnt: the
//! clean-up waits for that outcome and then deletes exactly the key revision the transaction
//! created. (Deleting at once, while the creating request may still be in flight, loses the race
//! whenever etcd applies the delete first: the key is created afterwards, owned by nobody, and
//! blocks the lock for as long as the session lives.) When the outcome cannot be known (the
//! request failed: timeout, connection lost) the key is deleted by name, and the session's
//! sweeper deletes it again for a while in case the request is applied late (see
//! [`crate::conn::sweep`]); its key number is never reused by this session (the Go layout's one
//! key name is: the sweeper deletes it only under the lock's slot).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::armed::{Armed, CleanUp, CleanupTask};
use locksmith_core::driver::retry::{retry, Backoff};
use locksmith_core::{LockError, Result};
use tokio::sync::oneshot;

use crate::conn::session::Session;
use crate::protocol::requests;
use crate::protocol::slots::Slot;

/// What the request that may create a key did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Created {
    /// It created (or, in the Go layout, found) the key at this create revision.
    At(i64),
    /// It certainly wrote nothing.
    Nothing,
    /// It failed: it may or may not have been applied, now or later.
    Unknown,
}

/// Which key revision a clean-up deletes.
enum Target {
    /// Exactly this create revision.
    Rev(i64),
    /// Whatever is there under the name: the creating request's outcome is unknown.
    Any,
    /// The outcome of a creating request still in flight.
    InFlight(oneshot::Receiver<Created>),
}

/// A key this attempt may have created and does not hold yet. Dropping it (armed) deletes the
/// key in the background; [`PendingKey::disarm`] hands it over to the caller.
pub(crate) struct PendingKey(Armed<Key>);

/// What a [`PendingKey`] deletes, as far as is known now.
struct Key {
    session: Arc<Session>,
    key: String,
    lease_id: i64,
    slot: Option<Slot>,
    /// What the clean-up must delete, as far as is known now.
    created: Created,
    /// The outcome of the creating request while it is in flight.
    in_flight: Option<oneshot::Receiver<Created>>,
}

impl PendingKey {
    /// Arms the guard for `key` (before the request that may create it is sent).
    pub fn new(session: Arc<Session>, key: String, lease_id: i64, slot: Option<Slot>) -> Self {
        PendingKey(Armed::new(Key {
            session,
            key,
            lease_id,
            slot,
            created: Created::Unknown,
            in_flight: None,
        }))
    }

    /// Runs `request`, which may create the key, in a task of its own and waits for it;
    /// `outcome` tells from its result what it did to the key. If this attempt is dropped
    /// meanwhile, the request still runs to its end and the clean-up deletes what it created.
    pub async fn create<T, F>(&mut self, request: F, outcome: fn(&Result<T>) -> Created) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.0.in_flight = Some(rx);
        let request = locksmith_core::metrics::counting_for_caller(request);
        let task = tokio::spawn(async move {
            let result = request.await;
            let _ = tx.send(outcome(&result));
            result
        });
        let result = task
            .await
            .unwrap_or_else(|e| Err(LockError::Protocol(format!("a lock request task failed: {e}"))));
        self.0.in_flight = None;
        self.0.created = outcome(&result);
        result
    }

    /// A held key at create revision `rev` that is being released: dropping it (armed) deletes
    /// that revision in the background, so that a release cut off part-way still releases.
    pub fn releasing(session: Arc<Session>, key: String, rev: i64, lease_id: i64, slot: Option<Slot>) -> Self {
        let mut key = PendingKey::new(session, key, lease_id, slot);
        key.0.created = Created::At(rev);
        key
    }

    /// The key is ours to keep: nothing will be deleted. Returns the Go layout's slot.
    pub fn disarm(self) -> Option<Slot> {
        self.0.into_inner().slot
    }
}

impl CleanUp for Key {
    fn task(&mut self) -> Option<CleanupTask> {
        let target = match (self.in_flight.take(), self.created) {
            (Some(rx), _) => Target::InFlight(rx),
            (None, Created::At(rev)) => Target::Rev(rev),
            (None, Created::Unknown) => Target::Any,
            (None, Created::Nothing) => return None, // the slot goes with the guard
        };
        Some(delete_task(
            self.session.clone(),
            self.key.clone(),
            target,
            self.lease_id,
            self.slot.take(),
        ))
    }

    fn unspawned(&mut self) {
        warn_unspawned(&self.key);
    }
}

/// Deletes `key` if it still has create revision `rev` (see [`delete_task`]), in a background
/// task: a [`locksmith_core::driver::cleanup::spawn`], which the call that dropped the key, and
/// `Locker::shutdown`, wait for.
pub(crate) fn delete_in_background(session: Arc<Session>, key: String, rev: i64, lease_id: i64, slot: Option<Slot>) {
    let what = key.clone();
    if !locksmith_core::driver::cleanup::spawn(delete_task(session, key, Target::Rev(rev), lease_id, slot)) {
        warn_unspawned(&what);
    }
}

fn warn_unspawned(key: &str) {
    tracing::warn!(
        key,
        "no tokio runtime to delete a lock key; it goes when the session lease expires"
    );
}

/// Deletes `target` of `key`, tried again (from 50 ms, doubling to the session's TTL) while etcd
/// is unreachable and the key's lease is still the session's. `slot` is freed only afterwards, so
/// that no later attempt of this session re-creates the key name before it is gone.
fn delete_task(session: Arc<Session>, key: String, target: Target, lease_id: i64, slot: Option<Slot>) -> CleanupTask {
    Box::pin(async move {
        let rev = match target {
            Target::Rev(rev) => Some(rev),
            Target::Any => None,
            Target::InFlight(rx) => match rx.await.unwrap_or(Created::Unknown) {
                Created::At(rev) => Some(rev),
                Created::Unknown => None,
                Created::Nothing => return,
            },
        };
        let deleted = retry(
            Backoff::new(Duration::from_millis(50), session.ttl()),
            |_| requests::delete(&session.conn, &key, rev),
            // While the lease is the session's, a key left behind would live as long as the
            // session: retry. (Giving up once no keep-alive had been answered for a TTL left
            // such keys behind after a leader kill: the lease outlived the outage.)
            |e| {
                let owned = session.owns_lease(lease_id);
                if owned {
                    tracing::warn!(key, error = %e, "deleting a lock key failed; retrying");
                }
                owned
            },
        )
        .await;
        match deleted {
            Ok(deleted) => tracing::debug!(key, deleted, "lock key cleaned up"),
            // The session found the lease gone and no longer renews it: the key goes with
            // it. Keep its name out of use anyway.
            Err(_) => {
                if let Some(slot) = slot {
                    slot.keep_number();
                }
                return;
            }
        }
        if rev.is_none() {
            // The request that may create the key failed, so it may still be applied later:
            // the sweeper deletes the key again for a while, and its name is not reused while it
            // does (the Go layout's: only by an attempt under the slot, see `Suspect`).
            session
                .sweep
                .suspect(&key, lease_id, slot.and_then(Slot::into_suspect_slot));
            return;
        }
        drop(slot);
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use locksmith_core::conformance::env_url;
    use locksmith_core::conformance::proxy::{Mode, Proxy};
    use locksmith_core::driver::BackendUrl;

    use crate::test_support::{session_key, SessionKey};

    /// A release whose delete fails while no keep-alive has been answered for a TTL (an etcd
    /// leader election) must still delete the key once etcd answers again: etcd extends every
    /// lease when a new leader takes over, so the session's lease, and a key left behind with
    /// it, live on. The old clean-up gave up in that case, and the key blocked the lock for as
    /// long as the session lived (seen in the fault suite: etcd/cluster leader-kill).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_delete_is_retried_while_the_session_owns_the_lease() {
        let base = BackendUrl::parse(&env_url("LOCKSMITH_TEST_ETCD")).expect("test URL");
        let upstream = base.hosts.first().expect("a host").to_addr(2379);
        let proxy = Proxy::start(&upstream).await;
        let url = format!("etcd://{}?ttl=5s&request_timeout=300ms", proxy.addr());
        // A key of the session, as a granted lock's, written straight to the server.
        let SessionKey {
            backend,
            mut direct,
            lease,
            key,
            rev,
        } = session_key(&url, &upstream, "cleanup-test").await;
        let session = backend.session().clone();

        proxy.set(Mode::Freeze {
            to_server: true,
            to_client: true,
        });
        session.age_refresh();
        super::delete_in_background(session.clone(), key.clone(), rev, lease.id, None);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        proxy.set(Mode::Forward);

        let mut gone = false;
        for _ in 0..40 {
            // The session keeps its lease alive, as a waiting or holding session does.
            let _ = session.keep_alive(lease.id).await;
            let left = direct.get(key.as_str(), None).await.expect("get").kvs().len();
            if left == 0 {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let _ = direct.delete(key.as_str(), None).await;
        assert!(gone, "the key was left behind while its lease lived on");
    }
}
