//! The embedded in-process backend (`mem://`): the same semantics as the networked ones — TTL
//! expiry when the holder stops renewing, FIFO waiters, fencing tokens, cancellation safety — with
//! no server. It is what the quickstart runs on and what applications use in their unit tests.
//!
//! Clones of a [`MemoryBackend`] share one store, like several clients of one server; give each
//! [`crate::Locker`] its own clone to model separate processes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{HolderInfo, LockBackend, LockInfo};
use crate::descriptor::{Connecting, Descriptor, TtlScope};
use crate::error::{LockError, Result};
use crate::lease::{Lease, LockRequest, LostReason, LostSignal};
use crate::locker::Locker;
use crate::url::BackendUrl;

/// An in-process lock store with the semantics of the networked backends (TTL expiry, FIFO waiters,
/// fencing tokens, cancellation safety). Clones share one store, like several clients of one server:
/// give each [`crate::Locker`] its own clone to model separate processes.
#[derive(Clone, Debug, Default)]
pub struct MemoryBackend {
    store: Arc<Store>,
}

#[derive(Debug, Default)]
struct Store {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<String, MemLock>,
    /// One counter for all names: strictly increasing per name, and nothing to keep per name.
    last_token: u64,
    last_waiter: u64,
}

#[derive(Debug, Default)]
struct MemLock {
    holder: Option<Holder>,
    waiters: VecDeque<Waiter>,
}

#[derive(Debug)]
struct Holder {
    id: String,
    token: u64,
    expires_at: Instant,
    lost: LostSignal,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

/// What a waiter found when it looked at the lock.
enum Turn {
    Granted(Lease),
    /// Not yet: sleep until woken, or until this instant (the holder's expiry) if any.
    Wait(Option<Instant>),
}

impl MemoryBackend {
    /// The `mem://` backend in the registry of `locksmith::connect`.
    pub const DESCRIPTOR: Descriptor = Descriptor {
        name: "mem",
        schemes: &["mem"],
        feature: None,
        options: &[],
        ttl: TtlScope::PerLock,
        connect: connect_boxed,
    };

    /// A new, empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A [`Locker`] over the store a `mem://` or `mem://NAME` URL names (see
    /// [`MemoryBackend::shared`]); [`LockError::InvalidUrl`] for anything else in the URL.
    pub fn connect(url: &BackendUrl) -> Result<Locker> {
        url.expect_only_options(&[])?;
        let plain = url.hosts.len() <= 1 && url.hosts.iter().all(|h| h.port.is_none());
        if !plain || url.credentials.is_some() || !url.path.is_empty() {
            return Err(url.error("mem:// takes at most a store name: mem:// or mem://NAME"));
        }
        let store = url.hosts.first().map_or("", |h| h.host.as_str());
        Ok(Locker::new(MemoryBackend::shared(store)))
    }

    /// The store named `name` in this process (created empty on first use). `mem://` URLs use
    /// the store named by their host part, the empty name for plain `mem://`, so that separate
    /// `connect("mem://")` calls in one process see the same locks. Named stores live as long as
    /// the process.
    pub fn shared(name: &str) -> Self {
        static STORES: OnceLock<Mutex<HashMap<String, MemoryBackend>>> = OnceLock::new();
        let stores = STORES.get_or_init(Default::default);
        let mut stores = stores.lock().unwrap_or_else(|e| e.into_inner());
        stores.entry(name.to_owned()).or_default().clone()
    }

    /// Removes the holder of `name` behind its back, as an operator deleting the key would, and
    /// fires its lost signal. Returns whether there was a holder. For tests of lost-lock handling.
    pub fn force_remove(&self, name: &crate::LockName) -> bool {
        let mut state = self.store.lock();
        let Some(lock) = state.locks.get_mut(name.encoded()) else {
            return false;
        };
        let Some(holder) = lock.holder.take() else { return false };
        holder
            .lost
            .fire(LostReason::LeaseGone("the lock was removed on the server".into()));
        wake_head(lock);
        state.forget_if_idle(name.encoded());
        true
    }

    fn grant(state: &mut State, key: &str, req: &LockRequest, now: Instant) -> Lease {
        state.last_token += 1;
        let token = state.last_token;
        let lost = LostSignal::new();
        let id = format!("mem-{token}");
        let lock = state.locks.entry(key.to_owned()).or_default();
        lock.holder = Some(Holder {
            id: id.clone(),
            token,
            expires_at: now + req.ttl,
            lost: lost.clone(),
        });
        Lease {
            name: req.name.clone(),
            fencing_token: token,
            ttl: req.ttl,
            holder_id: id,
            acquired_at: now,
            lost,
        }
    }

    /// Looks at the lock on behalf of waiter `waiter_id`: takes it if that waiter is first in line
    /// and the lock is free.
    fn take_turn(&self, req: &LockRequest, waiter_id: u64) -> Turn {
        let key = req.name.encoded();
        let now = Instant::now();
        let mut state = self.store.lock();
        let lock = state.locks.entry(key.to_owned()).or_default();
        expire(lock, now);
        let first = lock.waiters.front().map(|w| w.id) == Some(waiter_id);
        match &lock.holder {
            None if first => {
                lock.waiters.pop_front();
                Turn::Granted(Self::grant(&mut state, key, req, now))
            }
            Some(holder) if first => Turn::Wait(Some(holder.expires_at)),
            _ => Turn::Wait(None),
        }
    }
}

impl MemoryBackend {
    /// Extends one lease by its TTL from now, if it is still ours.
    fn renew_one(&self, lease: &Lease) -> Result<()> {
        let now = Instant::now();
        let mut state = self.store.lock();
        let holder = state.locks.get_mut(lease.name.encoded()).and_then(|lock| {
            expire(lock, now);
            lock.holder.as_mut().filter(|h| h.id == lease.holder_id)
        });
        match holder {
            Some(h) => {
                h.expires_at = now + lease.ttl;
                Ok(())
            }
            None => Err(LockError::not_held(lease.name.as_str())),
        }
    }
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn forget_if_idle(&mut self, key: &str) {
        if self
            .locks
            .get(key)
            .is_some_and(|l| l.holder.is_none() && l.waiters.is_empty())
        {
            self.locks.remove(key);
        }
    }
}

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(async move { MemoryBackend::connect(url) })
}

/// Drops an expired holder (firing its lost signal) and wakes the next waiter.
fn expire(lock: &mut MemLock, now: Instant) {
    if lock.holder.as_ref().is_some_and(|h| h.expires_at <= now) {
        if let Some(h) = lock.holder.take() {
            h.lost.fire(LostReason::LeaseGone("the lease expired".into()));
        }
        wake_head(lock);
    }
}

fn wake_head(lock: &MemLock) {
    if let Some(w) = lock.waiters.front() {
        w.wake.notify_one();
    }
}

/// Removes a waiter from its queue when its `acquire` future ends without the lock (timeout,
/// cancellation): this is what keeps a dropped future from blocking the queue.
struct QueuedWaiter {
    store: Arc<Store>,
    key: String,
    id: u64,
    armed: bool,
}

impl Drop for QueuedWaiter {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.store.lock();
        if let Some(lock) = state.locks.get_mut(&self.key) {
            let was_first = lock.waiters.front().map(|w| w.id) == Some(self.id);
            lock.waiters.retain(|w| w.id != self.id);
            if was_first {
                wake_head(lock);
            }
        }
        state.forget_if_idle(&self.key);
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "mem"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        let key = req.name.encoded();
        let now = Instant::now();
        let mut state = self.store.lock();
        let lock = state.locks.entry(key.to_owned()).or_default();
        expire(lock, now);
        if lock.holder.is_none() && lock.waiters.is_empty() {
            Ok(Some(Self::grant(&mut state, key, req, now)))
        } else {
            state.forget_if_idle(key);
            Ok(None)
        }
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let key = req.name.encoded().to_owned();
        let wake = Arc::new(Notify::new());
        let id = {
            let mut state = self.store.lock();
            state.last_waiter += 1;
            let id = state.last_waiter;
            let lock = state.locks.entry(key.clone()).or_default();
            lock.waiters.push_back(Waiter { id, wake: wake.clone() });
            id
        };
        let mut queued = QueuedWaiter {
            store: self.store.clone(),
            key,
            id,
            armed: true,
        };
        loop {
            let expiry = match self.take_turn(req, id) {
                Turn::Granted(lease) => {
                    queued.armed = false;
                    return Ok(lease);
                }
                Turn::Wait(expiry) => expiry,
            };
            let far = Instant::now() + std::time::Duration::from_secs(86_400);
            let wake_at = match (expiry, deadline) {
                (Some(e), Some(d)) => e.min(d),
                (Some(t), None) | (None, Some(t)) => t,
                (None, None) => far,
            };
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep_until(wake_at) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(LockError::Timeout(std::time::Duration::ZERO));
                    }
                }
            }
        }
    }

    async fn inspect(&self, name: &crate::LockName) -> Result<LockInfo> {
        let now = Instant::now();
        let mut state = self.store.lock();
        let Some(lock) = state.locks.get_mut(name.encoded()) else {
            return Ok(LockInfo::default());
        };
        expire(lock, now);
        let holder = lock.holder.as_ref().map(|h| HolderInfo {
            holder_id: h.id.clone(),
            fencing_token: Some(h.token),
            ttl_remaining: Some(h.expires_at.saturating_duration_since(now)),
        });
        Ok(LockInfo {
            holder,
            waiters: lock.waiters.len(),
        })
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let key = lease.name.encoded();
        let now = Instant::now();
        let mut state = self.store.lock();
        let Some(lock) = state.locks.get_mut(key) else {
            return Err(LockError::not_held(lease.name.as_str()));
        };
        expire(lock, now);
        if lock.holder.as_ref().is_some_and(|h| h.id == lease.holder_id) {
            lock.holder = None;
            wake_head(lock);
            state.forget_if_idle(key);
            Ok(())
        } else {
            Err(LockError::not_held(lease.name.as_str()))
        }
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        leases.iter().map(|lease| self.renew_one(lease)).collect()
    }
}
