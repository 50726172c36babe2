//! The queue protocol of the exclusive kinds — a mutex, a read-write lock's writer, an
//! election's candidate — whose entry holds when it is first: the mutex's protocol (see the
//! crate docs, *Algorithm and round trips*), with the kind's value in the key.
//!
//! An exclusive entry's standing depends only on its position ([`locksmith_core::driver::queue::standing`]:
//! first, or after the entry just ahead of it, whatever that entry is), so it never reads the
//! values of the queue: it joins with one transaction that reads the holder and its predecessor,
//! and waits for its predecessor's deletion with a synced watch.

use locksmith_core::driver::{sleep_until_deadline, Lease, LockRequest, Outage};
use locksmith_core::Result;
use tokio::time::Instant;

use crate::backend::EtcdBackend;
use crate::cleanup::{Created, PendingKey};
use crate::conn::session::LeaseRef;
use crate::error::is_lease_not_found;
use crate::protocol::attempt::Outcome;
use crate::protocol::kinds::value_of;
use crate::protocol::requests::{self, Place};
use crate::wake::watch::Wakeup;

impl EtcdBackend {
    /// `try_acquire` of an exclusive kind: one transaction that creates the key if the queue is
    /// empty, and writes nothing otherwise.
    pub(crate) async fn try_exclusive(&self, req: &LockRequest) -> Result<Option<Lease>> {
        let session = self.session();
        let prefix = self.layout().prefix(req.kind.family(), &req.name);
        let value = value_of(&req.kind);
        let slot = if self.layout().one_key_per_session() {
            match session.slots.try_take(&prefix) {
                Some(slot) => slot,
                None => return Ok(None), // this session holds or waits for it already
            }
        } else {
            session.slots.number(&prefix)
        };
        self.try_with_session_lease(req, slot, |mut pending, key, lease| {
            let request = {
                let (conn, prefix, value) = (session.conn.clone(), prefix.clone(), value.clone());
                async move { requests::take_if_free(&conn, &prefix, &key, lease.id, &value).await }
            };
            async move {
                let taken = pending.create(request, took).await;
                (pending, taken)
            }
        })
        .await
    }

    /// `acquire` of an exclusive kind: join the queue, then wait for the predecessor's deletion
    /// until the key is first.
    pub(crate) async fn acquire_exclusive(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let session = self.session();
        let prefix = self.layout().prefix(req.kind.family(), &req.name);
        let value = value_of(&req.kind);
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
                _ = sleep_until_deadline(deadline) => return Err(retry.at_deadline()),
            };
            let prefix = &prefix;
            let join = |mut pending: PendingKey, key: String, lease: LeaseRef| {
                let request = {
                    let (conn, prefix, key, value) = (session.conn.clone(), prefix.clone(), key.clone(), value.clone());
                    async move { requests::join(&conn, &prefix, &key, lease.id, &value).await }
                };
                async move {
                    let answer = match pending.create(request, joined).await {
                        Ok((rev, Some(place))) => Ok((rev, place)),
                        Ok((rev, None)) => requests::place(&session.conn, prefix, &key, rev)
                            .await
                            .map(|place| (rev, place)),
                        Err(e) => Err(e),
                    };
                    (pending, answer)
                }
            };
            let Some((entry, place)) = self
                .join_queue(req, slot, &mut retry, &mut lease_refusals, join)
                .await?
            else {
                continue;
            };
            if !matches!(place, Place::First) && waiting.is_none() {
                waiting = Some(session.waiting());
            }
            let outcome = match self
                .wait_in_queue(prefix, &entry.key, entry.rev, entry.lease, place, &mut retry)
                .await?
            {
                Outcome::Granted => self.fresh_grant(&mut retry, entry.lease).await?,
                requeue => requeue,
            };
            if let Some(lease) = self.grant_or_requeue(req, entry, outcome, waiting.is_some()) {
                return Ok(lease);
            }
        }
    }

    /// Waits in the queue until `key` is first, it vanishes, or the deadline passes.
    ///
    /// A waiter right behind the holder is granted on its predecessor's deletion without looking
    /// again, so it watches its own key too (from its first wait right behind the holder on), and
    /// its watch is looked at first when the task wakes: a key deleted behind our back (an
    /// operator, a tool) while we wait is not granted when its predecessor goes, while a
    /// contender that queued after that deletion, behind the same predecessor, is granted too.
    /// The server sends a stream's events in revision order, and the hub applies every event it
    /// has received before the waiter runs (the deletions of one transaction, `del --prefix`, come
    /// as separate events of one revision), so that deletion, when it came first, is seen first.
    /// A waiter further back looks at the queue after each wake-up, which shows its key gone.
    async fn wait_in_queue(
        &self,
        prefix: &str,
        key: &str,
        rev: i64,
        lease: LeaseRef,
        mut place: Place,
        retry: &mut Outage,
    ) -> Result<Outcome> {
        let mut own: Option<Wakeup> = None;
        loop {
            let right_behind = matches!(place, Place::Next(_));
            let pred = match place {
                Place::First => return Ok(Outcome::Granted),
                Place::Gone => return Ok(Outcome::Requeue("the queue key vanished while waiting")),
                Place::Behind(pred) | Place::Next(pred) => pred,
            };
            // Watch first (synced: no start revision), then confirm the predecessor and our key
            // are still there: a delete after the confirmation is certain to reach the watch.
            let hub = &self.session().hub;
            let (watch, own_watch) = tokio::join!(hub.watch_delete(&pred.key), async {
                match own.take() {
                    None if right_behind => hub.watch_delete(key.as_bytes()).await.map(Some),
                    kept => Ok(kept),
                }
            });
            let (mut watch, own_watch) = match (watch, own_watch) {
                (Ok(watch), Ok(own_watch)) => (watch, own_watch),
                (Err(e), _) | (_, Err(e)) => {
                    retry.failed(e).await?;
                    place = Place::Behind(pred);
                    continue;
                }
            };
            own = own_watch;
            // Whether the key holds once the predecessor is deleted (it is the oldest), as the
            // confirmation finds it.
            let next = match requests::place(&self.session().conn, prefix, key, rev).await {
                Ok(now) if now.ahead() == Some(&pred) => {
                    retry.succeeded();
                    matches!(now, Place::Next(_))
                }
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
            };
            tracing::trace!(key, predecessor = pred.key_str(), next, "waiting for the predecessor");
            tokio::select! {
                biased;
                r = fired(&mut own) => match r {
                    Ok(()) => return Ok(Outcome::Requeue("the queue key was deleted while waiting")),
                    Err(why) => {
                        tracing::debug!(key, why, "our key's watch ended; looking again");
                        own = None;
                    }
                },
                r = watch.fired() => match r {
                    // The holder is gone and nobody was between: held, without looking again (the
                    // caller checks that the session lease still lives; the watch on our key that
                    // it did not go).
                    Ok(()) if next && own.is_some() => return Ok(Outcome::Granted),
                    Ok(()) => {}
                    Err(why) => tracing::debug!(key, why, "predecessor watch ended; looking again"),
                },
                _ = self.session().lease_lost(lease.generation) => {
                    return Ok(Outcome::Requeue("the session lease was lost while waiting"));
                }
                e = self.deadline_verdict(retry, key) => return Err(e),
            }
            drop(watch);
            // The handover: one round trip after the delete notification.
            place = match requests::place(&self.session().conn, prefix, key, rev).await {
                Ok(p) => p,
                Err(e) => {
                    retry.failed(e).await?;
                    Place::Behind(pred)
                }
            };
        }
    }
}

/// What `watch` reports ([`Wakeup::fired`]), or never without one.
async fn fired(watch: &mut Option<Wakeup>) -> std::result::Result<(), String> {
    match watch {
        Some(watch) => watch.fired().await,
        None => std::future::pending().await,
    }
}

/// What a request that creates the key only when it holds ([`requests::take_if_free`], and the
/// `try_acquire` requests of [`crate::protocol::line`]) did to the key.
pub(crate) fn took(result: &Result<Option<i64>>) -> Created {
    match result {
        Ok(Some(rev)) => Created::At(*rev),
        Ok(None) => Created::Nothing,
        Err(e) if is_lease_not_found(e) => Created::Nothing,
        Err(_) => Created::Unknown,
    }
}

/// What [`requests::join`] did to the key.
fn joined(result: &Result<(i64, Option<Place>)>) -> Created {
    match result {
        Ok((rev, _)) => Created::At(*rev),
        Err(e) if is_lease_not_found(e) => Created::Nothing,
        Err(_) => Created::Unknown,
    }
}
