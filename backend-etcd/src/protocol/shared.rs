//! The queue protocol of the kinds that share a lock — a semaphore's permits, a read-write lock's
//! readers — whose standing depends on what the entries ahead of them are
//! ([`locksmith_core::driver::queue::standing`]), so they read the queue ahead with its values
//! ([`crate::protocol::line`]).
//!
//! - **acquire**: one transaction creates the key (value: the permit count, or `read`) and reads
//!   the queue. Holds → done. Otherwise the entry waits for one event, on a synced watch of the
//!   session's hub that is confirmed by reading the queue again after the server created it (as
//!   the mutex does): a reader for the deletion of the nearest writer ahead; a semaphore's first
//!   waiter for the deletion of any holder ahead (a watch of the prefix, filtered to the keys
//!   ahead); a later semaphore waiter for the deletion of the entry just ahead or a put to it.
//!   On the event it reads the queue again (one round trip) and so on. A semaphore waiter that
//!   waited and then holds *touches* its key (puts its value again) if anyone queued behind it,
//!   so that the waiter behind it, which watches it, reads the queue again.
//! - **try_acquire**: never writes when it fails. A reader: one transaction that creates the key
//!   if every key of the queue is a reader's, or the queue is empty. A permit: one transaction
//!   that creates the key if the queue is empty, else reads it; if a permit is free, a second
//!   transaction creates the key unless a key was created or changed since that read.
//! - A permit count that disagrees with an entry ahead: the key is deleted and the caller gets
//!   [`locksmith_core::LockError::InvalidOption`].

use locksmith_core::driver::queue::holds_at_tail;
use locksmith_core::driver::{Lease, LockRequest, Outage, Role};
use locksmith_core::{Family, LockError, Result};
use tokio::time::Instant;

use crate::backend::EtcdBackend;
use crate::cleanup::{Created, PendingKey};
use crate::conn::session::{LeaseRef, Waiting};
use crate::error::is_lease_not_found;
use crate::protocol::attempt::Outcome;
use crate::protocol::exclusive::took;
use crate::protocol::kinds::value_of;
use crate::protocol::line::{self, Found, Line, Target};
use crate::wake::watch::Wakeup;

/// How many times a permit's `try_acquire` reads the queue again when it changed between its
/// read and its write, before it gives up (`None`).
const TRY_ROUNDS: usize = 4;

/// One queued entry of a shared kind: what its requests need.
struct Spot<'a> {
    prefix: &'a str,
    key: &'a str,
    rev: i64,
    lease: LeaseRef,
    value: &'a str,
    family: Family,
    role: Role,
}

impl EtcdBackend {
    /// `try_acquire` of a reader or a permit (see the module docs).
    pub(crate) async fn try_shared(&self, req: &LockRequest) -> Result<Option<Lease>> {
        let session = self.session();
        let prefix = self.layout().prefix(req.kind.family(), &req.name);
        let value = value_of(&req.kind);
        let slot = self.slot(&prefix).await;
        let (prefix, value) = (&prefix, &value);
        self.try_with_session_lease(req, slot, |mut pending, key, lease| async move {
            let taken = match req.kind.role() {
                Role::Permit(_) => self.try_permit(req, &mut pending, prefix, &key, lease, value).await,
                _ => {
                    let request = {
                        let (conn, prefix, key, value) =
                            (session.conn.clone(), prefix.clone(), key.clone(), value.clone());
                        async move { line::read_if_no_writer(&conn, &prefix, &key, lease.id, &value).await }
                    };
                    pending.create(request, took).await
                }
            };
            (pending, taken)
        })
        .await
    }

    /// A permit's try: take the semaphore if it is unused; otherwise read it, and take a free
    /// permit unless the queue changed since the read (then read again, a few times).
    async fn try_permit(
        &self,
        req: &LockRequest,
        pending: &mut PendingKey,
        prefix: &str,
        key: &str,
        lease: LeaseRef,
        value: &str,
    ) -> Result<Option<i64>> {
        let conn = &self.session().conn;
        for _ in 0..TRY_ROUNDS {
            let request = {
                let (conn, prefix, key, value) = (conn.clone(), prefix.to_owned(), key.to_owned(), value.to_owned());
                async move { line::take_or_read(&conn, &prefix, &key, lease.id, &value).await }
            };
            let (roles, read_rev) = match pending.create(request, found).await? {
                Found::Took(rev) => return Ok(Some(rev)),
                Found::Queue { roles, revision } => (roles, revision),
            };
            if !holds_at_tail(&roles, req.kind.role())? {
                return Ok(None);
            }
            let request = {
                let (conn, prefix, key, value) = (conn.clone(), prefix.to_owned(), key.to_owned(), value.to_owned());
                async move { line::take_if_unchanged(&conn, &prefix, &key, lease.id, &value, read_rev).await }
            };
            if let Some(rev) = pending.create(request, took).await? {
                return Ok(Some(rev));
            }
            tracing::debug!(
                key,
                "the semaphore changed between the read and the write; reading again"
            );
        }
        Ok(None)
    }

    /// `acquire` of a reader or a permit: join, then wait in the line until the key holds.
    pub(crate) async fn acquire_shared(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let session = self.session();
        let family = req.kind.family();
        let (prefix, value, role) = (
            self.layout().prefix(family, &req.name),
            value_of(&req.kind),
            req.kind.role(),
        );
        let mut waiting = None;
        let mut retry = Outage::new(deadline, self.retry_budget());
        let mut lease_refusals = 0;
        loop {
            let slot = self.slot(&prefix).await;
            let enter = |mut pending: PendingKey, key: String, lease: LeaseRef| {
                let request = {
                    let (conn, prefix, value) = (session.conn.clone(), prefix.clone(), value.clone());
                    async move { line::enter(&conn, &prefix, &key, lease.id, &value, family, role).await }
                };
                async move {
                    let answer = pending.create(request, entered).await;
                    (pending, answer)
                }
            };
            let Some((entry, line)) = self
                .join_queue(req, slot, &mut retry, &mut lease_refusals, enter)
                .await?
            else {
                continue;
            };
            let spot = Spot {
                prefix: &prefix,
                key: &entry.key,
                rev: entry.rev,
                lease: entry.lease,
                value: &value,
                family,
                role,
            };
            let outcome = match self.wait_in_line(&spot, line, &mut retry, &mut waiting).await {
                Ok(Outcome::Granted) => self.fresh_grant(&mut retry, entry.lease).await?,
                Ok(requeue) => requeue,
                Err(e @ LockError::InvalidOption(_)) => {
                    self.withdraw(entry.pending, &entry.key, entry.rev).await;
                    return Err(e);
                }
                Err(e) => return Err(e), // `entry.pending` deletes the key in the background
            };
            if let Some(lease) = self.grant_or_requeue(req, entry, outcome, waiting.is_some()) {
                return Ok(lease);
            }
        }
    }

    /// Waits until the entry holds, its key vanishes, or the deadline passes. `line` is the
    /// queue as the join read it.
    async fn wait_in_line(
        &self,
        spot: &Spot<'_>,
        mut line: Line,
        retry: &mut Outage,
        waiting: &mut Option<Waiting>,
    ) -> Result<Outcome> {
        let mut waited = false;
        loop {
            let target = line.target()?;
            if target == Target::None {
                if waited && line.behind > 0 && matches!(spot.role, Role::Permit(_)) {
                    return self.touch(spot, retry).await;
                }
                return Ok(Outcome::Granted);
            }
            waited = true;
            if retry.deadline().is_some_and(|d| Instant::now() >= d) {
                return Err(retry.at_deadline());
            }
            if waiting.is_none() {
                *waiting = Some(self.session().waiting());
            }
            // Watch first (synced), then confirm that the standing is the same: an event after
            // the confirmation is certain to reach the watch.
            let mut wakeup = match self.watch_for(spot.prefix, &target).await {
                Ok(w) => w,
                Err(e) => {
                    retry.failed(e).await?;
                    continue;
                }
            };
            match self.look(spot, retry).await? {
                None => return Ok(Outcome::Requeue("the queue key vanished while waiting")),
                Some(now) => {
                    let same = now.target()? == target;
                    line = now;
                    if !same {
                        continue;
                    }
                }
            }
            tracing::trace!(key = spot.key, ?target, "waiting in the line");
            tokio::select! {
                r = wakeup.fired() => {
                    if let Err(why) = r {
                        tracing::debug!(key = spot.key, why, "queue watch ended; looking again");
                    }
                }
                _ = self.session().lease_lost(spot.lease.generation) => {
                    return Ok(Outcome::Requeue("the session lease was lost while waiting"));
                }
                e = self.deadline_verdict(retry, spot.key) => return Err(e),
            }
            drop(wakeup);
            match self.look(spot, retry).await? {
                None => return Ok(Outcome::Requeue("the queue key vanished while waiting")),
                Some(now) => line = now,
            }
        }
    }

    /// The watch for `target`'s event.
    async fn watch_for(&self, prefix: &str, target: &Target) -> Result<Wakeup> {
        let hub = &self.session().hub;
        match target {
            Target::Key { key, touch: false } => hub.watch_delete(&key.key).await,
            Target::Key { key, touch: true } => hub.watch_touch(&key.key).await,
            Target::AnyOf(keys) => hub.watch_any_deleted(prefix, keys.clone()).await,
            Target::None => Err(LockError::Protocol("nothing to watch for".into())),
        }
    }

    /// Reads the queue again, riding out an outage (`None`: the key is gone).
    async fn look(&self, spot: &Spot<'_>, retry: &mut Outage) -> Result<Option<Line>> {
        loop {
            let conn = &self.session().conn;
            match line::look(conn, spot.prefix, spot.key, spot.rev, spot.family, spot.role).await {
                Ok(line) => {
                    retry.succeeded();
                    return Ok(line);
                }
                Err(e) => retry.failed(e).await?,
            }
        }
    }

    /// A semaphore waiter became a holder: touch its key, so that the waiter behind it (which
    /// watches it) reads the queue again.
    async fn touch(&self, spot: &Spot<'_>, retry: &mut Outage) -> Result<Outcome> {
        loop {
            let conn = &self.session().conn;
            match line::touch(conn, spot.key, spot.rev, spot.value, spot.lease.id).await {
                Ok(true) => {
                    retry.succeeded();
                    return Ok(Outcome::Granted);
                }
                Ok(false) => return Ok(Outcome::Requeue("the queue key vanished before the grant")),
                Err(e) => retry.failed(e).await?,
            }
        }
    }
}

/// What [`line::enter`] did to the key.
fn entered(result: &Result<(i64, Line)>) -> Created {
    match result {
        Ok((rev, _)) => Created::At(*rev),
        Err(e) if is_lease_not_found(e) => Created::Nothing,
        Err(_) => Created::Unknown,
    }
}

/// What [`line::take_or_read`] did to the key.
fn found(result: &Result<Found>) -> Created {
    match result {
        Ok(Found::Took(rev)) => Created::At(*rev),
        Ok(Found::Queue { .. }) => Created::Nothing,
        Err(e) if is_lease_not_found(e) => Created::Nothing,
        Err(_) => Created::Unknown,
    }
}
