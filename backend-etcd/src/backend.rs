//! [`EtcdBackend`]: the [`LockBackend`] over one etcd session.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lockcore::{
    async_trait, HolderInfo, Lease, LockBackend, LockError, LockInfo, LockName, LockRequest, LostSignal, Outage, Result,
};
use tokio::time::Instant;

use crate::cleanup::{delete_in_background, Created, PendingKey};
use crate::config::Config;
use crate::error::{is_lease_not_found, request};
use crate::layout::Layout;
use crate::queue::{self, Place};
use crate::session::{LeaseRef, Session};
use crate::slots::Slot;
use crate::sweeper;

/// The etcd lock backend: one client and one session lease, shared by every lock of the
/// [`lockcore::Locker`] built on it. See the [crate docs](crate) for the algorithm.
pub struct EtcdBackend {
    session: Arc<Session>,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.session.cfg.endpoints)
            .field("layout", &self.session.cfg.layout)
            .field("lease", &self.session.lease_id().map(|id| format!("{id:x}")))
            .finish()
    }
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        self.session.close();
    }
}

/// Counters of the requests an [`EtcdBackend`] has sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EtcdStats {
    /// KV transactions (every read and write of the lock protocol is one), retries included.
    pub transactions: u64,
    /// Keep-alives of the session lease.
    pub keep_alives: u64,
    /// Watch create and cancel requests on the shared watch stream.
    pub watch_requests: u64,
}

/// How one attempt in the queue ended.
enum Outcome {
    Granted,
    /// The key vanished (lease lost, or deleted by an operator) while waiting: queue again.
    Requeue(&'static str),
}

impl EtcdBackend {
    /// Connects as configured: creates the client and grants the session lease, failing with
    /// [`LockError::Unavailable`] when the cluster does not answer within the connect timeout.
    pub async fn connect(cfg: Config) -> Result<Self> {
        let session = Session::start(cfg).await?;
        sweeper::start(&session);
        Ok(EtcdBackend { session })
    }

    /// The key layout in use.
    pub fn layout(&self) -> &Layout {
        &self.session.cfg.layout
    }

    /// The effective session TTL (what every lease of this backend reports as its TTL).
    pub fn session_ttl(&self) -> Duration {
        self.session.ttl()
    }

    /// The current session lease id, if one is alive.
    pub fn session_lease_id(&self) -> Option<i64> {
        self.session.lease_id()
    }

    /// How many requests this backend has sent so far (for tests and monitoring).
    pub fn stats(&self) -> EtcdStats {
        let s = &self.session.conn.stats;
        EtcdStats {
            transactions: s.txns.load(Ordering::Relaxed),
            keep_alives: s.keep_alives.load(Ordering::Relaxed),
            watch_requests: s.watch_requests.load(Ordering::Relaxed),
        }
    }

    fn limit(&self) -> Duration {
        self.session.cfg.request_timeout
    }

    /// The slot of one attempt: the in-process exclusion of the Go layout, or the key number
    /// of the default layout (see [`crate::slots`]).
    async fn slot(&self, prefix: &str) -> Slot {
        if self.layout().one_key_per_session() {
            self.session.slots.take(prefix).await
        } else {
            self.session.slots.number(prefix)
        }
    }

    /// The key of an attempt under `lease_id` with `slot`.
    fn key(&self, name: &LockName, lease_id: i64, slot: &Slot) -> String {
        let number = slot.key_number().unwrap_or_default();
        self.layout().key(name, lease_id, number)
    }

    /// Hands out the lease of a granted key.
    fn grant(&self, req: &LockRequest, key: String, rev: i64, lease: LeaseRef, pending: PendingKey) -> Lease {
        let slot = pending.disarm();
        let lost = LostSignal::new();
        let acquired_at = self.session.register_held(&key, lease, rev, &lost, slot);
        tracing::debug!(key, fencing_token = rev, "etcd lock granted");
        Lease {
            name: req.name.clone(),
            kind: req.kind.clone(),
            fencing_token: u64::try_from(rev).unwrap_or(0),
            ttl: lease.ttl,
            holder_id: key,
            acquired_at,
            lost,
        }
    }

    /// A waiter became first: make sure the lease it hands out was refreshed recently (after an
    /// outage it may not have been), so the lock starts with most of its TTL.
    async fn fresh_grant(&self, retry: &mut Outage, lease: LeaseRef) -> Result<Outcome> {
        loop {
            match self.session.refresh_if_stale(lease.id).await {
                Ok(true) => return Ok(Outcome::Granted),
                Ok(false) => return Ok(Outcome::Requeue("the session lease was lost just before the grant")),
                Err(e) => retry.failed(e).await?,
            }
        }
    }

    /// How long an `acquire` without a deadline rides out an outage (see [`Outage`]): beyond
    /// the session TTL plus the request timeout the session lease, and the waiter's key with it,
    /// is probably gone.
    fn retry_budget(&self) -> Duration {
        self.session.ttl() + self.limit()
    }

    /// Waits in the queue until `key` is first, it vanishes, or the deadline passes.
    async fn wait_in_queue(
        &self,
        prefix: &str,
        key: &str,
        rev: i64,
        lease: LeaseRef,
        mut place: Place,
        retry: &mut Outage,
    ) -> Result<Outcome> {
        loop {
            let pred = match place {
                Place::First => return Ok(Outcome::Granted),
                Place::Gone => return Ok(Outcome::Requeue("the queue key vanished while waiting")),
                Place::Behind(pred) => pred,
            };
            // Watch first (synced: no start revision), then confirm the predecessor is still
            // there: a delete after the confirmation is certain to reach the watch.
            let mut watch = match self.session.hub.watch_delete(&pred.key).await {
                Ok(w) => w,
                Err(e) => {
                    retry.failed(e).await?;
                    place = Place::Behind(pred);
                    continue;
                }
            };
            match queue::place(&self.session.conn, prefix, key, rev).await {
                Ok(Place::Behind(now)) if now == pred => retry.succeeded(),
                Ok(other) => {
                    retry.succeeded();
                    place = other;
                    continue;
                }
                Err(e) => {
                    retry.failed(e).await?;
                    place = Place::Behind(pred);
                    continue;
                }
            }
            tracing::trace!(key, predecessor = pred.key_str(), "waiting for the predecessor");
            tokio::select! {
                r = watch.deleted() => {
                    if let Err(why) = r {
                        tracing::debug!(key, why, "predecessor watch ended; looking again");
                    }
                }
                _ = self.session.lease_lost(lease.generation) => {
                    return Ok(Outcome::Requeue("the session lease was lost while waiting"));
                }
                _ = sleep_until_opt(retry.deadline()) => return Err(retry.at_deadline()),
            }
            drop(watch);
            // The handover: one round trip after the delete notification.
            place = match queue::place(&self.session.conn, prefix, key, rev).await {
                Ok(p) => p,
                Err(e) => {
                    retry.failed(e).await?;
                    Place::Behind(pred)
                }
            };
        }
    }
}

/// What [`queue::take_if_free`] did to the key.
fn took(result: &Result<Option<i64>>) -> Created {
    match result {
        Ok(Some(rev)) => Created::At(*rev),
        Ok(None) => Created::Nothing,
        Err(e) if is_lease_not_found(e) => Created::Nothing,
        Err(_) => Created::Unknown,
    }
}

/// What [`queue::join`] did to the key.
fn joined(result: &Result<(i64, Option<Place>)>) -> Created {
    match result {
        Ok((rev, _)) => Created::At(*rev),
        Err(e) if is_lease_not_found(e) => Created::Nothing,
        Err(_) => Created::Unknown,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        lockcore::unsupported_kind(self.kind(), req)?;
        let prefix = self.layout().lock_prefix(&req.name);
        let mut slot = if self.layout().one_key_per_session() {
            match self.session.slots.try_take(&prefix) {
                Some(slot) => Some(slot),
                None => return Ok(None), // this session holds or waits for it already
            }
        } else {
            Some(self.session.slots.number(&prefix))
        };
        for _ in 0..2 {
            let lease = self.session.current().await?;
            let Some(this_slot) = slot.take() else {
                return Err(LockError::Protocol("a lock slot went missing".into()));
            };
            let key = self.key(&req.name, lease.id, &this_slot);
            let mut pending = PendingKey::new(self.session.clone(), key.clone(), lease.id, Some(this_slot));
            let request = {
                let (conn, prefix, key) = (self.session.conn.clone(), prefix.clone(), key.clone());
                async move { queue::take_if_free(&conn, &prefix, &key, lease.id).await }
            };
            match pending.create(request, took).await {
                Ok(Some(rev)) => return Ok(Some(self.grant(req, key, rev, lease, pending))),
                Ok(None) => {
                    pending.disarm(); // nothing was written
                    return Ok(None);
                }
                Err(e) if is_lease_not_found(&e) => {
                    slot = pending.disarm();
                    self.session.lease_gone(lease.id, "a put with it was refused");
                }
                Err(e) => return Err(e),
            }
        }
        Err(LockError::Protocol(
            "etcd refused the session lease twice in a row".into(),
        ))
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        lockcore::unsupported_kind(self.kind(), req)?;
        let prefix = self.layout().lock_prefix(&req.name);
        // The keeper keeps the session alive only while this acquire waits in a queue: an
        // acquire that finds the lock free does not wake it.
        let mut waiting = None;
        let mut retry = Outage::new(deadline, self.retry_budget());
        let mut lease_refusals = 0;
        loop {
            // The Go layout's slot is taken by another attempt of this session on this lock: that
            // is waiting for the lock too.
            let slot = tokio::select! {
                slot = self.slot(&prefix) => slot,
                _ = sleep_until_opt(deadline) => return Err(retry.at_deadline()),
            };
            let lease = match self.session.current().await {
                Ok(lease) => lease,
                Err(e) => {
                    drop(slot);
                    retry.failed(e).await?;
                    continue;
                }
            };
            let key = self.key(&req.name, lease.id, &slot);
            let mut pending = PendingKey::new(self.session.clone(), key.clone(), lease.id, Some(slot));
            let request = {
                let (conn, prefix, key) = (self.session.conn.clone(), prefix.clone(), key.clone());
                async move { queue::join(&conn, &prefix, &key, lease.id).await }
            };
            let joined = match pending.create(request, joined).await {
                Ok((rev, Some(place))) => Ok((rev, place)),
                Ok((rev, None)) => queue::place(&self.session.conn, &prefix, &key, rev)
                    .await
                    .map(|place| (rev, place)),
                Err(e) => Err(e),
            };
            let (rev, place) = match joined {
                Ok(joined) => joined,
                Err(e) if is_lease_not_found(&e) && lease_refusals < 2 => {
                    lease_refusals += 1;
                    drop(pending.disarm());
                    self.session.lease_gone(lease.id, "a put with it was refused");
                    continue;
                }
                Err(e) => {
                    drop(pending); // deletes what the put created, once its outcome is known
                    retry.failed(e).await?;
                    continue;
                }
            };
            retry.succeeded();
            if !matches!(place, Place::First) && waiting.is_none() {
                waiting = Some(self.session.waiting());
            }
            let outcome = match self.wait_in_queue(&prefix, &key, rev, lease, place, &mut retry).await? {
                Outcome::Granted => self.fresh_grant(&mut retry, lease).await?,
                requeue => requeue,
            };
            match outcome {
                Outcome::Granted => return Ok(self.grant(req, key, rev, lease, pending)),
                Outcome::Requeue(why) => {
                    tracing::warn!(key, why, "queueing again at the end of the queue");
                    drop(pending);
                }
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let rev = i64::try_from(lease.fencing_token).unwrap_or(i64::MAX);
        let held = self.session.held.take(&lease.holder_id, rev);
        if let Some(id) = held.as_ref().and_then(|h| h.watch_id) {
            self.session.hub.cancel(id);
        }
        match queue::delete(&self.session.conn, &lease.holder_id, Some(rev)).await {
            Ok(true) if held.is_some() => Ok(()),
            Ok(_) => Err(LockError::not_held(lease.name.as_str())),
            Err(e) => {
                if let Some(h) = held {
                    // Do not leave a key that the session's keep-alives would keep forever.
                    delete_in_background(self.session.clone(), lease.holder_id.clone(), rev, h.lease_id, h.slot);
                }
                Err(e)
            }
        }
    }

    /// One keep-alive of the session lease renews every lock of this backend on the server; the
    /// locks of this batch are also marked renewed, so that the sweeper does not reap them (a
    /// lock left out of the batches for its TTL was abandoned: see the crate docs).
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        let not_held = |l: &Lease| Err(LockError::not_held(l.name.as_str()));
        let lease_ids: Vec<Option<i64>> = leases
            .iter()
            .map(|l| {
                self.session
                    .held
                    .lease_of(&l.holder_id, i64::try_from(l.fencing_token).unwrap_or(i64::MAX))
            })
            .collect();
        let Some(session_lease) = lease_ids.iter().flatten().next().copied() else {
            return leases.iter().map(not_held).collect();
        };
        let sent = Instant::now();
        let outcome = self.session.keep_alive(session_lease).await;
        tracing::trace!(leases = leases.len(), took = ?sent.elapsed(), ok = ?outcome, "renew_many");
        if matches!(outcome, Ok(true)) {
            // Expiry per lock: what this batch renewed is not reaped (see `sweep`).
            let renewed = leases
                .iter()
                .zip(&lease_ids)
                .filter(|(_, id)| **id == Some(session_lease))
                .map(|(l, _)| (l.holder_id.as_str(), i64::try_from(l.fencing_token).unwrap_or(i64::MAX)));
            self.session.held.renewed(renewed, sent);
        }
        leases
            .iter()
            .zip(&lease_ids)
            .map(|(l, id)| match (&outcome, id) {
                (Ok(true), Some(id)) if *id == session_lease => Ok(()),
                (Err(e), Some(_)) => Err(LockError::Unavailable {
                    message: e.to_string(),
                    source: None,
                }),
                _ => not_held(l),
            })
            .collect()
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let prefix = self.layout().lock_prefix(name);
        let (holder, count) = queue::holder_and_count(&self.session.conn, &prefix).await?;
        let Some(holder) = holder else {
            return Ok(LockInfo::default());
        };
        let ttl_remaining = if holder.lease == 0 {
            None
        } else {
            let resp = request("reading the holder's lease", self.limit(), || {
                let mut lease = self.session.client.lease_client();
                async move { lease.time_to_live(holder.lease, None).await }
            })
            .await?;
            u64::try_from(resp.ttl()).ok().map(Duration::from_secs)
        };
        Ok(LockInfo {
            holder: Some(HolderInfo {
                holder_id: holder.key_str(),
                fencing_token: u64::try_from(holder.create_rev).ok(),
                ttl_remaining,
            }),
            waiters: count.saturating_sub(1),
        })
    }

    /// A third of the TTL, as usual; all locks of the session share one TTL, so they fall due
    /// together and are renewed by one keep-alive.
    fn renew_interval(&self, ttl: Duration) -> Duration {
        ttl / 3
    }

    /// The URL's `request_timeout`.
    fn request_timeout(&self) -> Duration {
        self.limit()
    }
}
