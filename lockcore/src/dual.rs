//! [`Dual`]: one lock held in two backends at once, for migrating between them.
//!
//! During a migration, old processes lock in the old backend and new processes must exclude them
//! *and* each other. A new process therefore takes the lock in the old backend first, then in the
//! new one, and keeps both: old processes see it in the old backend, migrated ones in the new.
//! Once every process runs the dual lock, switch to the new backend alone.
//!
//! `Dual` is itself a [`LockBackend`], so the guard, the watchdog, `lost()` and `max_hold` work
//! unchanged:
//! - acquire: old first, then new, both with the caller's deadline; the first is renewed while
//!   the second is awaited; if the second fails or times out, the first is released (also when
//!   the acquire future is dropped);
//! - renew: both, in one watchdog batch each; if either is gone, the dual lease is gone;
//! - lost: fires when either backend reports its lease lost (never once a release began); a
//!   first lock lost while the second is awaited fails the acquire;
//! - release: both (the error of either is returned); a half that got no answer is tried again
//!   in the background, as any backend's release is;
//! - fencing token: the new backend's (the old one's tokens are a different sequence);
//! - every lock kind the same way (a semaphore permit, a read-write lock side, leadership held in
//!   both); an election's `leader()` and `observe()` are the new backend's (a leader of this
//!   `Dual` shown by its dual id, as its guard's lease has it; an observer that saw the new
//!   backend grant it before this `Dual` handed out its guard shows the new backend's id).
//!   Unlike a backend's own observer, a dual observer may report nobody between two leaders
//!   for an instant: the next dual candidate waits in the old backend, and queues in the new
//!   one only once the leader has released the old one;
//! - TTL: the smaller of the two effective TTLs; a lock whose builder sets none gets the smaller
//!   of the two URLs' `ttl=` where they have one (Redis, `mem://`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::backend::{bounded, LockBackend, LockInfo};
use crate::error::{LockError, Result};
use crate::lease::{Lease, LockKind, LockRequest, LostSignal};
use crate::locker::Locker;
use crate::name::LockName;

/// A backend that holds every lock in an old and a new backend at once.
///
/// Build it with [`Dual::new`] or [`Dual::locker`]; the rules are in the module docs of `locksmith_core::dual`,
/// repeated here: old first, then new; both renewed; lost if either is lost; the new backend's token.
pub struct Dual {
    old: Arc<dyn LockBackend>,
    new: Arc<dyn LockBackend>,
    held: Arc<Mutex<HashMap<PairKey, Pair>>>,
}

/// What a pair is kept under: the dual lease's id and fencing token. The two inner ids are unique
/// among live leases only: a backend may give a lock's next lease the id of one released before
/// (etcd's key names), whose pair may still be kept for its tries again.
type PairKey = (String, u64);

/// The key of the pair of `lease`.
fn key_of(lease: &Lease) -> PairKey {
    (lease.holder_id.clone(), lease.fencing_token)
}

/// The two inner leases of one dual lease.
struct Pair {
    old: Lease,
    new: Lease,
    /// Taken (dropped) when a release begins: ends the task that forwards the inner lost
    /// signals, so that `lost()` never fires after a release.
    stop_forwarding: Option<oneshot::Sender<()>>,
    /// Set when a release begins, under the lock that the forwarding task fires under: a loss
    /// the task saw is fired before the release began, or not at all (see [`forward_lost`]).
    released: Arc<Mutex<bool>>,
    /// When its first release began: kept for the tries again of a release that got no answer
    /// (or was cut off), and forgotten a TTL and a request timeout later (the tries have ended by
    /// then, and the leases with them: see `release_again`).
    releasing_since: Option<Instant>,
}

impl Dual {
    /// A dual backend over the backends of two lockers: `old` is locked first.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::{Dual, Locker, MemoryBackend};
    /// let (old, new) = (Locker::new(MemoryBackend::new()), Locker::new(MemoryBackend::new()));
    /// let dual = Locker::new(Dual::new(&old, &new));
    /// let guard = dual.lock("job").acquire().await?;
    /// assert!(old.lock("job").try_acquire().await?.is_none()); // held in both
    /// assert!(new.lock("job").try_acquire().await?.is_none());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(old: &Locker, new: &Locker) -> Self {
        Dual {
            old: old.backend().clone(),
            new: new.backend().clone(),
            held: Arc::default(),
        }
    }

    /// Shorthand for `Locker::new(Dual::new(old, new))`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::{Dual, Locker, MemoryBackend};
    /// let (old, new) = (Locker::new(MemoryBackend::new()), Locker::new(MemoryBackend::new()));
    /// let _held = old.lock("job").acquire().await?; // an old process holds it
    /// let dual = Dual::locker(&old, &new);
    /// assert!(dual.lock("job").try_acquire().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn locker(old: &Locker, new: &Locker) -> Locker {
        Locker::new(Dual::new(old, new))
    }

    fn held(&self) -> MutexGuard<'_, HashMap<PairKey, Pair>> {
        lock_pairs(&self.held)
    }

    /// Combines two inner leases into the dual lease handed to the guard.
    fn combine(&self, old: Lease, new: Lease) -> Lease {
        let lost = LostSignal::new();
        // A half lost already is told at once: the guard must not start out held.
        if let Some(reason) = old.lost.reason().or_else(|| new.lost.reason()) {
            lost.fire(reason);
        }
        let (stop, stopped) = oneshot::channel();
        let released = Arc::new(Mutex::new(false));
        tokio::spawn(forward_lost(
            old.lost.clone(),
            new.lost.clone(),
            lost.clone(),
            stopped,
            released.clone(),
        ));
        let lease = Lease {
            name: new.name.clone(),
            kind: new.kind.clone(),
            fencing_token: new.fencing_token,
            ttl: old.ttl.min(new.ttl),
            holder_id: format!("{}+{}", old.holder_id, new.holder_id),
            acquired_at: old.acquired_at.min(new.acquired_at),
            waited: old.waited || new.waited,
            lost,
        };
        let mut held = self.held();
        let now = Instant::now();
        let tries_for = self.request_timeout();
        held.retain(|_, p| {
            p.releasing_since
                .is_none_or(|t| now < t + p.old.ttl.max(p.new.ttl).saturating_add(tries_for))
        });
        held.insert(
            key_of(&lease),
            Pair {
                old,
                new,
                stop_forwarding: Some(stop),
                released,
                releasing_since: None,
            },
        );
        drop(held);
        lease
    }

    /// Runs `acquire` (the new backend's) while renewing `first`, the old backend's lease, at
    /// its renewal interval (each renewal within the old backend's request timeout, the acquire
    /// polled meanwhile): a wait longer than the TTL let the first lock expire, and another
    /// process take it, before the dual lease was handed out. Its output, and when the first
    /// lease was last renewed (its TTL counts from then). An error if the first lease ended
    /// meanwhile (taken away, or not renewed within its TTL), after which `acquire`'s attempt is
    /// dropped; or if it had only its safety margin left when the second lock came.
    async fn old_renewed_while(
        &self,
        first: Lease,
        acquire: impl std::future::Future<Output = Result<Lease>>,
    ) -> Result<(Instant, Lease)> {
        let since = Mutex::new(first.acquired_at);
        let renewed_at = || *since.lock().unwrap_or_else(|e| e.into_inner());
        let valid_until = |from: Instant| from + first.ttl - crate::watchdog::margin(first.ttl);
        let keep_first = async {
            let every = self.old.renew_interval(first.ttl);
            let limit = self.old.request_timeout();
            loop {
                tokio::time::sleep(every).await;
                let began = Instant::now();
                let what = "renewing the old backend's lock while waiting for the new one";
                match bounded(self.old.as_ref(), what, limit, self.old.renew(&first)).await {
                    Ok(()) => *since.lock().unwrap_or_else(|e| e.into_inner()) = began,
                    Err(e) if e.is_not_held() || Instant::now() >= valid_until(renewed_at()) => return e,
                    Err(e) => tracing::warn!(lock = %first.name, error = %e, "{what}"),
                }
            }
        };
        let ended = |why: String| LockError::Unavailable {
            message: format!(
                "the old backend's lock {} ended while waiting for the new backend's: {why}",
                first.name
            ),
            source: None,
        };
        let first_lost = first.lost.clone();
        let new = tokio::select! {
            new = acquire => new?,
            e = keep_first => return Err(ended(e.to_string())),
            reason = first_lost.wait() => return Err(ended(format!("it was lost ({reason})"))),
        };
        let from = renewed_at();
        let lost = first.lost.reason();
        if lost.is_some() || Instant::now() >= valid_until(from) {
            if let Err(e) = release_within(&self.new, &new).await {
                tracing::warn!(lock = %new.name, error = %e, "releasing the new backend's lock of a dual acquire whose old one ended");
            }
            return Err(ended(match lost {
                Some(reason) => format!("it was lost ({reason})"),
                None => "it was not renewed in time".into(),
            }));
        }
        Ok((from, new))
    }

    /// The two inner leases of the dual lease `lease`.
    fn pair(&self, lease: &Lease) -> Result<(Lease, Lease)> {
        self.with_pair(lease, |p| (p.old.clone(), p.new.clone()))
    }

    /// Runs `f` on the pair of the dual lease `lease`: NotHeld if none is kept for it.
    fn with_pair<T>(&self, lease: &Lease, f: impl FnOnce(&mut Pair) -> T) -> Result<T> {
        self.held()
            .get_mut(&key_of(lease))
            .map(f)
            .ok_or_else(|| LockError::not_held(lease.name.as_str()))
    }
}

/// The dual id of the lease of kind `kind` (as `is_kind` says) on `name` that the new backend
/// knows as `holder_id` (with the fencing token `token`, where known), if it is one of `held`'s.
fn dual_id(
    held: &Mutex<HashMap<PairKey, Pair>>,
    name: &LockName,
    holder_id: &str,
    token: Option<u64>,
    is_kind: impl Fn(&LockKind) -> bool,
) -> Option<String> {
    let held = lock_pairs(held);
    let ((id, _), _) = held.iter().find(|(_, p)| {
        p.new.name == *name
            && is_kind(&p.new.kind)
            && p.new.holder_id == holder_id
            && token.is_none_or(|t| t == p.new.fencing_token)
            && p.releasing_since.is_none()
    })?;
    Some(id.clone())
}

/// `leader`, its holder id the dual one if it is a lease of `held`'s.
fn leader_by_dual_id(
    held: &Mutex<HashMap<PairKey, Pair>>,
    name: &LockName,
    mut leader: crate::Leader,
) -> crate::Leader {
    let is_leadership = |k: &LockKind| matches!(k, LockKind::Leader { .. });
    if let Some(id) = dual_id(held, name, &leader.holder_id, Some(leader.term), is_leadership) {
        leader.holder_id = id;
    }
    leader
}

/// The held pairs, whatever a panic left.
fn lock_pairs(held: &Mutex<HashMap<PairKey, Pair>>) -> MutexGuard<'_, HashMap<PairKey, Pair>> {
    held.lock().unwrap_or_else(|e| e.into_inner())
}

/// Releases one half within its backend's request timeout: the dual call is bounded by the sum
/// of both, so an unbounded half could use up the other's time.
async fn release_within(backend: &Arc<dyn LockBackend>, lease: &Lease) -> Result<()> {
    bounded(
        backend.as_ref(),
        "releasing",
        backend.request_timeout(),
        backend.release(lease),
    )
    .await
}

/// Fires `dual` when either inner signal fires, until `stopped` (the lease was released). It
/// fires under `released`'s lock, which a release takes to set it, so that a loss is told
/// before the release began or not at all. (It fired after a release now and then: a half lost
/// after the release, with the task not yet polled, found both branches ready, and `select!`
/// picks one at random; `lost_never_fires_after_a_release_without_an_answer` failed 1 run in 3.)
async fn forward_lost(
    old: LostSignal,
    new: LostSignal,
    dual: LostSignal,
    stopped: oneshot::Receiver<()>,
    released: Arc<Mutex<bool>>,
) {
    let reason = tokio::select! {
        biased;
        _ = stopped => return,
        r = old.wait() => r,
        r = new.wait() => r,
    };
    let released = released.lock().unwrap_or_else(|e| e.into_inner());
    if !*released {
        dual.fire(reason);
    }
}

/// Releases a lease from `Drop` unless disarmed: keeps a dropped dual acquire from leaving the
/// first lock held.
struct ReleaseOnDrop {
    backend: Arc<dyn LockBackend>,
    lease: Option<Lease>,
}

impl ReleaseOnDrop {
    fn new(backend: &Arc<dyn LockBackend>, lease: Lease) -> Self {
        ReleaseOnDrop {
            backend: backend.clone(),
            lease: Some(lease),
        }
    }

    /// Keeps the lease: it is not released.
    fn keep(mut self) -> Option<Lease> {
        self.lease.take()
    }

    /// Releases the lease now and waits for it (if this future is dropped meanwhile, `Drop`
    /// releases it again, which is harmless).
    async fn roll_back(mut self) {
        if let Some(lease) = &self.lease {
            if let Err(e) = release_within(&self.backend, lease).await {
                tracing::warn!(lock = %lease.name, error = %e, "rolling back the first lock of a dual acquire failed");
            }
        }
        self.lease = None;
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else { return };
        let backend = self.backend.clone();
        crate::driver::cleanup::spawn(async move {
            if let Err(e) = release_within(&backend, &lease).await {
                tracing::warn!(lock = %lease.name, error = %e, "rolling back the first lock of a dual acquire failed");
            }
        });
    }
}

/// One result for both halves: not-held wins (the dual lease is gone if either half is), then any
/// other error.
fn both(old: Result<()>, new: Result<()>) -> Result<()> {
    match (old, new) {
        (Err(e), _) if e.is_not_held() => Err(e),
        (_, Err(e)) if e.is_not_held() => Err(e),
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

#[async_trait]
impl LockBackend for Dual {
    fn kind(&self) -> &'static str {
        "dual"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        let Some(old) = self.old.try_acquire(req).await? else {
            return Ok(None);
        };
        let old = ReleaseOnDrop::new(&self.old, old);
        match self.new.try_acquire(req).await {
            Ok(Some(new)) => Ok(old.keep().map(|old| self.combine(old, new))),
            Ok(None) => {
                old.roll_back().await;
                Ok(None)
            }
            Err(e) => {
                old.roll_back().await;
                Err(e)
            }
        }
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let first = self.old.acquire(req, deadline).await?;
        let old = ReleaseOnDrop::new(&self.old, first.clone());
        // Each backend returns at the deadline by itself (the Locker cuts off one that does not).
        // Meanwhile the first lock is renewed here: no watchdog knows it yet.
        let new = self.old_renewed_while(first, self.new.acquire(req, deadline)).await;
        match new {
            Ok((since, new)) => match old.keep() {
                Some(mut old) => {
                    old.acquired_at = since;
                    Ok(self.combine(old, new))
                }
                None => Err(LockError::Protocol("dual acquire lost its first lease".into())),
            },
            Err(e) => {
                old.roll_back().await;
                Err(e)
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        // From its first release on, the lease is told of no loss, and its pair is kept only
        // for the tries again (also when this call is cut off).
        let (old, new) = self.with_pair(lease, |p| {
            *p.released.lock().unwrap_or_else(|e| e.into_inner()) = true;
            p.stop_forwarding = None;
            p.releasing_since.get_or_insert_with(Instant::now);
            (p.old.clone(), p.new.clone())
        })?;
        let (old, new) = tokio::join!(release_within(&self.old, &old), release_within(&self.new, &new));
        // A half that got no answer is released again later (`release_again`), by this method:
        // the pair stays until then (a half released now answers NotHeld next time).
        let unanswered = |half: &Result<()>| matches!(half, Err(LockError::Unavailable { .. }));
        if unanswered(&old) || unanswered(&new) {
            return if unanswered(&old) { old } else { new };
        }
        self.held().remove(&key_of(lease));
        both(old, new)
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        let (old, new) = self.pair(lease)?;
        let (old, new) = tokio::join!(self.old.renew(&old), self.new.renew(&new));
        both(old, new)
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        let mut olds = Vec::new();
        let mut news = Vec::new();
        let mut known = Vec::new();
        for lease in leases {
            match self.pair(lease) {
                Ok((o, n)) => {
                    olds.push(o);
                    news.push(n);
                    known.push(true);
                }
                Err(_) => known.push(false),
            }
        }
        let (old_results, new_results) = tokio::join!(self.old.renew_many(&olds), self.new.renew_many(&news));
        let mut pairs = old_results.into_iter().zip(new_results);
        leases
            .iter()
            .zip(known)
            .map(|(lease, known)| match (known, pairs.next()) {
                (true, Some((o, n))) => both(o, n),
                (true, None) => Err(LockError::Protocol("a backend returned too few renewal results".into())),
                (false, _) => Err(LockError::not_held(lease.name.as_str())),
            })
            .collect()
    }

    /// The new backend's holder (shown by its dual id when it is a lease of this `Dual`), and the
    /// waiters of both backends (dual waiters queue in the old one first).
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let (old, new) = tokio::join!(self.old.inspect(name), self.new.inspect(name));
        let mut info = new?;
        info.waiters += old?.waiters;
        if let Some(holder) = &mut info.holder {
            let token = holder.fencing_token;
            if let Some(dual_id) = dual_id(&self.held, name, &holder.holder_id, token, |k| *k == LockKind::Mutex) {
                holder.holder_id = dual_id;
            }
        }
        Ok(info)
    }

    /// The new backend's locks.
    async fn list(&self, prefix: &str) -> Result<Vec<crate::ListedLock>> {
        self.new.list(prefix).await
    }

    /// Both backends' prunes, the old one's first: their counts added.
    async fn prune(&self, idle: Duration, dry_run: bool) -> Result<crate::PruneReport> {
        let old = self.old.prune(idle, dry_run).await?;
        Ok(old + self.new.prune(idle, dry_run).await?)
    }

    /// The new backend's leader (every dual leader leads in both), shown by its dual id when it
    /// is a lease of this `Dual`.
    async fn leader(&self, name: &LockName) -> Result<Option<crate::Leader>> {
        let leader = self.new.leader(name).await?;
        Ok(leader.map(|l| leader_by_dual_id(&self.held, name, l)))
    }

    /// The new backend's leadership, its leaders shown as [`LockBackend::leader`] shows them.
    async fn observe(&self, name: &LockName) -> Result<crate::LeaderWatch> {
        let mut inner = self.new.observe(name).await?;
        let held = self.held.clone();
        let name = name.clone();
        let shown = move |l: Option<crate::Leader>| l.map(|l| leader_by_dual_id(&held, &name, l));
        let (tx, rx) = watch::channel(shown(inner.leader()));
        let task = tokio::spawn(async move {
            // Ends when the inner observation does (the watch then fails as the inner one did:
            // `Unavailable`; a locker's shutdown ends the outer watch by itself) or is dropped.
            while let Ok(leader) = inner.changed().await {
                if tx.send(shown(leader)).is_err() {
                    return;
                }
            }
        });
        Ok(crate::LeaderWatch::new(rx, task))
    }

    /// Ends both backends' sessions, side by side.
    async fn shutdown(&self) -> Result<()> {
        let (old, new) = tokio::join!(self.old.shutdown(), self.new.shutdown());
        old.and(new)
    }

    /// The smaller of the two backends' URL TTLs (either one's if only one has one).
    fn default_ttl(&self) -> Option<Duration> {
        match (self.old.default_ttl(), self.new.default_ttl()) {
            (Some(old), Some(new)) => Some(old.min(new)),
            (old, new) => old.or(new),
        }
    }

    fn renew_interval(&self, ttl: Duration) -> Duration {
        self.old.renew_interval(ttl).min(self.new.renew_interval(ttl))
    }

    /// `try_acquire` asks the old backend, then the new one.
    fn request_timeout(&self) -> Duration {
        self.old.request_timeout().saturating_add(self.new.request_timeout())
    }
}

impl fmt::Debug for Dual {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dual")
            .field("old", &self.old)
            .field("new", &self.new)
            .finish()
    }
}
