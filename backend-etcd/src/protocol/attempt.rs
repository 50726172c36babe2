//! What the attempts of every kind share ([`crate::protocol::exclusive`] and
//! [`crate::protocol::shared`]): the slot and key of an attempt, a `try_acquire` under the session
//! lease ([`EtcdBackend::try_with_session_lease`]), an `acquire`'s entry into the queue
//! ([`EtcdBackend::join_queue`]), how a wait in the queue ends ([`Outcome`],
//! [`EtcdBackend::grant_or_requeue`]), the grant that turns a key into a lease, the verdict at a
//! waiter's deadline, and the withdrawal of a key that will not hold.

use std::future::Future;
use std::time::Duration;

use locksmith_core::driver::{Lease, LockRequest, LostSignal, Outage};
use locksmith_core::{LockError, Result};

use crate::backend::EtcdBackend;
use crate::cleanup::PendingKey;
use crate::conn::session::LeaseRef;
use crate::error::is_lease_not_found;
use crate::protocol::requests;
use crate::protocol::slots::Slot;

/// How one attempt in the queue ended.
pub(crate) enum Outcome {
    Granted,
    /// The key vanished (lease lost, or deleted by an operator) while waiting: queue again.
    Requeue(&'static str),
}

/// An `acquire`'s key in the queue, created by [`EtcdBackend::join_queue`].
pub(crate) struct Entry {
    pub key: String,
    /// The key's create revision: the fencing token once it holds.
    pub rev: i64,
    /// The session lease the key lives on.
    pub lease: LeaseRef,
    /// Deletes the key unless it is handed out.
    pub pending: PendingKey,
}

impl EtcdBackend {
    /// The slot of one attempt: the in-process exclusion of the Go layout, or the key number
    /// of the default layout (see [`crate::protocol::slots`]).
    pub(crate) async fn slot(&self, prefix: &str) -> Slot {
        if self.layout().one_key_per_session() {
            self.session().slots.take(prefix).await
        } else {
            self.session().slots.number(prefix)
        }
    }

    /// The key of an attempt for `req` under `lease_id` with `slot`.
    pub(crate) fn key(&self, req: &LockRequest, lease_id: i64, slot: &Slot) -> String {
        let number = slot.key_number().unwrap_or_default();
        self.layout().key_in(req.kind.family(), &req.name, lease_id, number)
    }

    /// `try_acquire` under the session's current lease: `take` creates the key of `slot` if it
    /// holds at once (its create revision) and writes nothing otherwise (`None`), and hands back
    /// the key's clean-up guard with its answer. When etcd refuses the lease (it ended just
    /// before), the session gets a new one and `take` runs again, once.
    pub(crate) async fn try_with_session_lease<F, Fut>(
        &self,
        req: &LockRequest,
        slot: Slot,
        mut take: F,
    ) -> Result<Option<Lease>>
    where
        F: FnMut(PendingKey, String, LeaseRef) -> Fut,
        Fut: Future<Output = (PendingKey, Result<Option<i64>>)>,
    {
        let session = self.session();
        let mut slot = Some(slot);
        for _ in 0..2 {
            let lease = session.current().await?;
            let Some(this_slot) = slot.take() else {
                return Err(LockError::Protocol("a lock slot went missing".into()));
            };
            let key = self.key(req, lease.id, &this_slot);
            let pending = PendingKey::new(session.clone(), key.clone(), lease.id, Some(this_slot));
            let (pending, taken) = take(pending, key.clone(), lease).await;
            match taken {
                Ok(Some(rev)) => {
                    return match self.grant(req, key, rev, lease, pending, false) {
                        Some(lease) => Ok(Some(lease)),
                        None => Err(LockError::Unavailable {
                            message: "etcd: the session lease was lost while granting the lock".into(),
                            source: None,
                        }),
                    };
                }
                Ok(None) => {
                    pending.disarm(); // nothing was written
                    return Ok(None);
                }
                Err(e) if is_lease_not_found(&e) => {
                    slot = pending.disarm();
                    session.lease_gone(lease.id, "a put with it was refused");
                }
                Err(e) => return Err(e),
            }
        }
        Err(LockError::Protocol(
            "etcd refused the session lease twice in a row".into(),
        ))
    }

    /// One try of an `acquire` at entering the queue with `slot`, under the session's current
    /// lease: `join` creates the key and reads where it stands (`T`), and hands back the key's
    /// clean-up guard with its answer. `None`: try again, with a new slot — the session had no
    /// lease or a request failed (`retry` has waited its backoff, or ends the acquire), or etcd
    /// refused the lease (replaced at once, twice per acquire at most: `lease_refusals`; then it
    /// counts as a failure).
    pub(crate) async fn join_queue<T, Fut>(
        &self,
        req: &LockRequest,
        slot: Slot,
        retry: &mut Outage,
        lease_refusals: &mut u32,
        join: impl FnOnce(PendingKey, String, LeaseRef) -> Fut,
    ) -> Result<Option<(Entry, T)>>
    where
        Fut: Future<Output = (PendingKey, Result<(i64, T)>)>,
    {
        let session = self.session();
        let lease = match session.current().await {
            Ok(lease) => lease,
            Err(e) => {
                drop(slot);
                retry.failed(e).await?;
                return Ok(None);
            }
        };
        let key = self.key(req, lease.id, &slot);
        let pending = PendingKey::new(session.clone(), key.clone(), lease.id, Some(slot));
        let (pending, joined) = join(pending, key.clone(), lease).await;
        match joined {
            Ok((rev, place)) => {
                retry.succeeded();
                Ok(Some((
                    Entry {
                        key,
                        rev,
                        lease,
                        pending,
                    },
                    place,
                )))
            }
            Err(e) if is_lease_not_found(&e) && *lease_refusals < 2 => {
                *lease_refusals += 1;
                drop(pending.disarm());
                session.lease_gone(lease.id, "a put with it was refused");
                Ok(None)
            }
            Err(e) => {
                drop(pending); // deletes what the put created, once its outcome is known
                retry.failed(e).await?;
                Ok(None)
            }
        }
    }

    /// The end of an `acquire`'s wait in the queue: the lease of the `entry` key if `outcome` is
    /// a grant (`waited`: whether the key was found behind another at some point, see
    /// `Lease::waited`); otherwise the key is deleted (in the background) and the caller queues
    /// again (`None`).
    pub(crate) fn grant_or_requeue(
        &self,
        req: &LockRequest,
        entry: Entry,
        outcome: Outcome,
        waited: bool,
    ) -> Option<Lease> {
        let Entry {
            key,
            rev,
            lease,
            pending,
        } = entry;
        match outcome {
            Outcome::Granted => {
                let granted = self.grant(req, key, rev, lease, pending, waited);
                if granted.is_none() {
                    tracing::warn!("the session lease was lost while granting; queueing again");
                }
                granted
            }
            Outcome::Requeue(why) => {
                tracing::warn!(key, why, "queueing again at the end of the queue");
                drop(pending);
                None
            }
        }
    }

    /// Hands out the lease of a granted key, which `waited` behind another key or not. If the
    /// session gave its lease up meanwhile (a keep-alive that failed while the grant was read),
    /// nothing is handed out, and the key's clean-up guard, dropped here still armed, deletes the
    /// key in the background.
    pub(crate) fn grant(
        &self,
        req: &LockRequest,
        key: String,
        rev: i64,
        lease: LeaseRef,
        pending: PendingKey,
        waited: bool,
    ) -> Option<Lease> {
        let lost = LostSignal::new();
        let mut pending = Some(pending);
        let registered = self
            .session()
            .register_held(&key, lease, rev, &lost, || pending.take().and_then(PendingKey::disarm));
        let acquired_at = registered?;
        tracing::debug!(key, fencing_token = rev, "etcd lock granted");
        Some(Lease {
            name: req.name.clone(),
            kind: req.kind.clone(),
            fencing_token: u64::try_from(rev).unwrap_or(0),
            ttl: lease.ttl,
            holder_id: key,
            acquired_at,
            waited,
            lost,
        })
    }

    /// A waiter became first: make sure the lease it hands out was refreshed recently (after an
    /// outage it may not have been), so the lock starts with most of its TTL.
    pub(crate) async fn fresh_grant(&self, retry: &mut Outage, lease: LeaseRef) -> Result<Outcome> {
        loop {
            match self.session().refresh_if_stale(lease.id).await {
                Ok(true) => return Ok(Outcome::Granted),
                Ok(false) => return Ok(Outcome::Requeue("the session lease was lost just before the grant")),
                Err(e) => retry.failed(e).await?,
            }
        }
    }

    /// How long an `acquire` without a deadline rides out an outage (see [`Outage`]): beyond
    /// the session TTL plus the request timeout the session lease, and the waiter's key with it,
    /// is probably gone.
    pub(crate) fn retry_budget(&self) -> Duration {
        self.session().ttl() + self.limit()
    }

    /// Resolves at the deadline of `retry` (never without one) with the error a waiter's acquire
    /// ends with there: [`Outage::at_deadline`]'s verdict, unless etcd did not answer a read of
    /// `key` sent [`DEADLINE_PROBE`] before the deadline. A waiter's watch only listens: without
    /// the read, a server that fell silent mid-wait would look like a lock held the whole time
    /// ([`LockError::Timeout`] where the backend did not answer: [`LockError::Unavailable`]).
    ///
    /// Called as the wait starts, just after etcd answered the waiter's read. When that is
    /// already within [`DEADLINE_PROBE`] of the deadline (a timeout of a few round trips), the
    /// probe goes at once and may not be answered before the deadline: that read then stands for
    /// it (etcd answered within the lead), and the verdict is [`Outage::at_deadline`]'s.
    pub(crate) async fn deadline_verdict(&self, retry: &Outage, key: &str) -> LockError {
        let Some(deadline) = retry.deadline() else {
            return std::future::pending().await;
        };
        let lead = DEADLINE_PROBE.min(self.limit());
        let probe_at = deadline.checked_sub(lead).unwrap_or(deadline);
        let answered_within_lead = tokio::time::Instant::now() >= probe_at;
        tokio::time::sleep_until(probe_at).await;
        let answer = tokio::time::timeout_at(deadline, requests::ping(&self.session().conn, key)).await;
        tokio::time::sleep_until(deadline).await;
        match answer {
            Ok(Ok(())) => retry.at_deadline(),
            Ok(Err(e)) => LockError::Unavailable {
                message: format!("no answer at the deadline: {e}"),
                source: None,
            },
            Err(_) if answered_within_lead => retry.at_deadline(),
            Err(_) => LockError::Unavailable {
                message: format!("no answer at the deadline: etcd did not answer a read sent {lead:?} before it"),
                source: None,
            },
        }
    }

    /// Deletes the key of an attempt that will not hold (a semaphore permit count that disagrees
    /// with the queue) before returning, so that the caller's next attempt finds the queue
    /// without it; if that fails, the clean-up deletes it in the background.
    pub(crate) async fn withdraw(&self, pending: PendingKey, key: &str, rev: i64) {
        match requests::delete(&self.session().conn, key, Some(rev)).await {
            Ok(_) => drop(pending.disarm()),
            Err(e) => {
                tracing::debug!(key, error = %e, "withdrawing a queue key failed; deleting it in the background");
                drop(pending);
            }
        }
    }
}

/// How long before a waiter's deadline it asks etcd whether it still answers (at most the
/// request timeout): see [`EtcdBackend::deadline_verdict`].
const DEADLINE_PROBE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use locksmith_core::conformance::env_url;
    use locksmith_core::driver::{BackendUrl, LockName, LockRequest};

    use crate::cleanup::PendingKey;
    use crate::test_support::session_key;

    /// A grant read just as the session gave its lease up (a keep-alive that failed meanwhile,
    /// while etcd still has the lease) hands out nothing and deletes the key: the old grant
    /// returned a lease already lost and left the key, which blocked the lock (and, in an
    /// election, showed a leader that knew it was not leading) until etcd expired the lease.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grant_after_the_lease_was_given_up_deletes_its_key() {
        let url = env_url("LOCKSMITH_TEST_ETCD");
        let upstream = BackendUrl::parse(&url).expect("test URL").hosts[0].to_addr(2379);
        let written = session_key(&url, &upstream, "grant-test").await;
        let (key, lease, mut direct) = (written.key, written.lease, written.direct);
        let session = written.backend.session().clone();
        let pending = PendingKey::releasing(session.clone(), key.clone(), written.rev, lease.id, None);

        session.lease_gone(lease.id, "a test gives the lease up");
        let req = LockRequest::mutex(LockName::new("grant-test").expect("name"), Duration::from_secs(10));
        let granted = written
            .backend
            .grant(&req, key.clone(), written.rev, lease, pending, false);
        assert!(granted.is_none(), "a key of a lease given up was handed out");

        let mut gone = false;
        for _ in 0..40 {
            if direct.get(key.as_str(), None).await.expect("get").kvs().is_empty() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = direct.delete(key.as_str(), None).await;
        let _ = direct.lease_revoke(lease.id).await;
        assert!(gone, "the key of a grant whose lease was given up was left behind");
    }
}
