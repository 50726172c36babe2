//! The embedded in-process backend (`mem://`): the same semantics as the networked ones — TTL
//! expiry when the holder stops renewing, FIFO waiters, fencing tokens, cancellation safety, every
//! lock kind — with no server. It is what the quickstart runs on and what applications use in
//! their unit tests.
//!
//! Each lock (a name in one [`crate::Family`]) is one queue of entries in arrival order, holders
//! and waiters alike, granted by [`crate::driver::queue::standing`] as on etcd and ZooKeeper. Clones of a
//! [`MemoryBackend`] share one store, like several clients of one server; give each
//! [`crate::Locker`] its own clone to model separate processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{HolderInfo, LockBackend, LockInfo};
use crate::descriptor::{Connecting, Descriptor, TtlScope};
use crate::driver::fast_hash::FastBuildHasher;
use crate::driver::observe::{observe_by_reading, LeaderRead};
use crate::driver::queue::{holds_at_tail, standing, Standing};
use crate::driver::url::BackendUrl;
use crate::election::{Leader, LeaderWatch};
use crate::error::{LockError, Result};
use crate::lease::{Family, Lease, LockKind, LockRequest, LostReason, LostSignal, Role};
use crate::locker::Locker;
use crate::name::LockName;

/// An in-process lock store with the semantics of the networked backends (TTL expiry, FIFO waiters,
/// fencing tokens, cancellation safety, every lock kind). Clones share one store, like several
/// clients of one server: give each [`crate::Locker`] its own clone to model separate processes.
#[derive(Clone, Debug, Default)]
pub struct MemoryBackend {
    store: Arc<Store>,
    /// The TTL of locks whose builder sets none: a `mem://` URL's `ttl=`.
    default_ttl: Option<std::time::Duration>,
}

#[derive(Debug, Default)]
struct Store {
    state: Mutex<State>,
    /// Notified on every change of any lock: what election observers wait on.
    changed: Arc<Notify>,
    /// How many times a waiter looked at its lock ([`MemoryBackend::turns_taken`]).
    turns: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// By [`Family::segment`] of the name.
    locks: HashMap<String, Vec<Entry>, FastBuildHasher>,
    /// One counter for all names: strictly increasing per name, and nothing to keep per name.
    last_token: u64,
    last_entry: u64,
    /// The store of guarded writes ([`crate::Guarded`]).
    data: HashMap<String, Vec<u8>>,
}

/// A holder or waiter, in arrival order.
#[derive(Debug)]
struct Entry {
    id: u64,
    role: Role,
    /// What a candidate campaigns with.
    value: String,
    wake: Arc<Notify>,
    /// Set once it holds.
    grant: Option<Grant>,
}

#[derive(Debug)]
struct Grant {
    holder_id: String,
    token: u64,
    expires_at: Instant,
    lost: LostSignal,
}

/// What a waiter found when it looked at the lock.
enum Turn {
    Granted(Lease),
    /// Not yet: sleep until woken, or until this instant (a holder's expiry) if any.
    Wait(Option<Instant>),
}

impl MemoryBackend {
    /// The `mem://` backend in the registry of `locksmith::connect`.
    pub const DESCRIPTOR: Descriptor = Descriptor {
        name: "mem",
        schemes: &["mem"],
        feature: None,
        options: &["ttl"],
        ttl: TtlScope::PerLock,
        connect: connect_boxed,
    };

    /// A new, empty store.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let backend = locksmith::MemoryBackend::new();
    /// let (a, b) = (locksmith::Locker::new(backend.clone()), locksmith::Locker::new(backend));
    /// let _held = a.lock("job").acquire().await?; // two "processes" over one store
    /// assert!(b.lock("job").try_acquire().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times, in this store, a waiting `acquire` has looked at its lock (its first
    /// look, and each time it was woken or its timer ran out): what a release costs the
    /// waiters, which tests and benchmarks read (a release wakes the waiters it lets in, and
    /// the first one still waiting, not the whole queue).
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// let backend = locksmith::MemoryBackend::new();
    /// let locker = locksmith::Locker::new(backend.clone());
    /// locker.lock("job").acquire().await?.release().await?;
    /// assert_eq!(backend.turns_taken(), 1); // one look: the lock was free
    /// # Ok(()) }
    /// ```
    pub fn turns_taken(&self) -> u64 {
        self.store.turns.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A [`Locker`] over the store a `mem://` or `mem://NAME` URL names (see
    /// [`MemoryBackend::shared`]). Its one option, `ttl=` (e.g. `mem://?ttl=5s`), is the TTL of
    /// the locks whose builder sets none, as on Redis. [`LockError::InvalidUrl`] for anything else
    /// in the URL.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidUrl`] for an option other than `ttl=`, a `ttl=` that is not a duration
    /// within [`crate::MIN_TTL`]..=[`crate::MAX_TTL`], or a port, several hosts, credentials or a
    /// path in the URL.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// use locksmith::{driver::BackendUrl, MemoryBackend};
    ///
    /// let locker = MemoryBackend::connect(&BackendUrl::parse("mem://tests?ttl=5s")?)?;
    /// assert_eq!(locker.backend().default_ttl(), Some(std::time::Duration::from_secs(5)));
    /// assert!(MemoryBackend::connect(&BackendUrl::parse("mem://tests:80")?).is_err());
    /// # Ok::<(), locksmith::LockError>(())
    /// ```
    pub fn connect(url: &BackendUrl) -> Result<Locker> {
        url.expect_only_options(Self::DESCRIPTOR.options)?;
        let plain = url.hosts.len() <= 1 && url.hosts.iter().all(|h| h.port.is_none());
        if !plain || url.credentials.is_some() || !url.path.is_empty() {
            return Err(url.error("mem:// takes at most a store name: mem:// or mem://NAME"));
        }
        let store = url.hosts.first().map_or("", |h| h.host.as_str());
        Ok(Locker::new(MemoryBackend {
            default_ttl: url.lock_ttl_option()?,
            ..MemoryBackend::shared(store)
        }))
    }

    /// The store named `name` in this process (created empty on first use). `mem://` URLs use
    /// the store named by their host part, the empty name for plain `mem://`, so that separate
    /// `connect("mem://")` calls in one process see the same locks. Named stores live as long as
    /// the process.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::{Locker, MemoryBackend};
    /// let a = Locker::new(MemoryBackend::shared("doc-shared"));
    /// let b = Locker::new(MemoryBackend::shared("doc-shared")); // the same store
    /// let _held = a.lock("job").acquire().await?;
    /// assert!(b.lock("job").try_acquire().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn shared(name: &str) -> Self {
        static STORES: OnceLock<Mutex<HashMap<String, MemoryBackend>>> = OnceLock::new();
        let stores = STORES.get_or_init(Default::default);
        let mut stores = stores.lock().unwrap_or_else(|e| e.into_inner());
        stores.entry(name.to_owned()).or_default().clone()
    }

    /// Removes the holders of `name` in `family` behind their back, as an operator deleting their
    /// keys would, and fires their lost signals. Returns whether there was a holder. For tests of
    /// lost-lock handling.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::{driver::LockName, Family, LostReason, MemoryBackend};
    /// let backend = MemoryBackend::new();
    /// let locker = locksmith::Locker::new(backend.clone());
    /// let permit = locker.semaphore("quota", 2).acquire().await?;
    /// assert!(backend.force_remove_in(Family::Semaphore, &LockName::new("quota")?));
    /// assert!(matches!(permit.lost().await, LostReason::LeaseGone(_)));
    /// # Ok(()) }
    /// ```
    pub fn force_remove_in(&self, family: Family, name: &LockName) -> bool {
        let key = family.segment(name);
        let mut state = self.store.lock();
        let Some(entries) = state.locks.get_mut(&key) else {
            return false;
        };
        let before = entries.len();
        entries.retain(|e| match &e.grant {
            Some(g) => {
                g.lost
                    .fire(LostReason::LeaseGone("the lock was removed on the server".into()));
                false
            }
            None => true,
        });
        let removed = entries.len() < before;
        self.store.changed_locked(&mut state, &key);
        removed
    }

    /// [`MemoryBackend::force_remove_in`] for the mutex `name`.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::{driver::LockName, MemoryBackend};
    /// let backend = MemoryBackend::new();
    /// let locker = locksmith::Locker::new(backend.clone());
    /// let guard = locker.lock("job").acquire().await?;
    /// assert!(backend.force_remove(&LockName::new("job")?));
    /// assert!(matches!(guard.lost().await, locksmith::LostReason::LeaseGone(_)));
    /// assert!(guard.release().await.is_err()); // nothing of ours left to release
    /// # Ok(()) }
    /// ```
    pub fn force_remove(&self, name: &LockName) -> bool {
        self.force_remove_in(Family::Mutex, name)
    }

    /// The entries of every lock of `family` named `name`, as `holder:<id>` / `waiter:<n>`: what
    /// the conformance suite's residue check reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), locksmith::LockError> {
    /// # let locker = locksmith::Locker::new(locksmith::MemoryBackend::new());
    /// use locksmith::{driver::LockName, Family, MemoryBackend};
    /// let backend = MemoryBackend::new();
    /// let locker = locksmith::Locker::new(backend.clone());
    /// let guard = locker.lock("job").acquire().await?;
    /// assert_eq!(backend.entries(Family::Mutex, &LockName::new("job")?).len(), 1);
    /// guard.release().await?;
    /// assert!(backend.entries(Family::Mutex, &LockName::new("job")?).is_empty());
    /// # Ok(()) }
    /// ```
    pub fn entries(&self, family: Family, name: &LockName) -> Vec<String> {
        let now = Instant::now();
        let key = family.segment(name);
        let mut state = self.store.lock();
        self.store.expire(&mut state, &key, now);
        state.locks.get(&key).map_or_else(Vec::new, |entries| {
            entries
                .iter()
                .map(|e| match &e.grant {
                    Some(g) => format!("holder:{}", g.holder_id),
                    None => format!("waiter:{}", e.id),
                })
                .collect()
        })
    }

    /// Looks at the lock on behalf of entry `id`: takes it if the entry now holds.
    fn take_turn(&self, req: &LockRequest, key: &str, id: u64) -> Result<Turn> {
        self.store.turns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        let mut state = self.store.lock();
        self.store.expire(&mut state, key, now);
        let entries = state.locks.entry(key.to_owned()).or_default();
        let roles: Vec<Role> = entries.iter().map(|e| e.role).collect();
        let me = entries
            .iter()
            .position(|e| e.id == id)
            .ok_or_else(|| LockError::Protocol("the waiter's entry is gone".into()))?;
        let next_expiry = entries
            .iter()
            .filter_map(|e| e.grant.as_ref().map(|g| g.expires_at))
            .min();
        match standing(&roles, me)? {
            Standing::Holds => {
                let lease = grant(&mut state, key, me, req, now);
                self.store.changed_locked(&mut state, key);
                Ok(Turn::Granted(lease))
            }
            _ => Ok(Turn::Wait(next_expiry)),
        }
    }

    /// Extends one lease by its TTL from now, if it is still ours.
    fn renew_one(&self, lease: &Lease) -> Result<()> {
        let now = Instant::now();
        let mut state = self.store.lock();
        let Some(key) = self.store.key_of(&state, lease) else {
            return Err(LockError::not_held(lease.name.as_str()));
        };
        self.store.expire(&mut state, &key, now);
        let found = state.locks.get_mut(&key).and_then(|entries| {
            entries
                .iter_mut()
                .filter_map(|e| e.grant.as_mut())
                .find(|g| g.holder_id == lease.holder_id)
        });
        match found {
            Some(g) => {
                g.expires_at = now + lease.ttl;
                Ok(())
            }
            None => Err(LockError::not_held(lease.name.as_str())),
        }
    }

    /// The leader of election `name` now.
    fn current_leader(&self, name: &LockName) -> LeaderRead {
        let key = Family::Election.segment(name);
        let now = Instant::now();
        let mut state = self.store.lock();
        self.store.expire(&mut state, &key, now);
        match state.locks.get(&key).and_then(|entries| entries.first()) {
            Some(e) => match &e.grant {
                Some(g) => LeaderRead::Leads(
                    Leader {
                        value: e.value.clone(),
                        term: g.token,
                        holder_id: g.holder_id.clone(),
                    },
                    g.expires_at,
                ),
                // A candidate first in line that does not hold yet has been woken to take over.
                None => LeaderRead::Pending,
            },
            None => LeaderRead::Nobody,
        }
    }
}

/// Grants entry `me` of lock `key`.
fn grant(state: &mut State, key: &str, me: usize, req: &LockRequest, now: Instant) -> Lease {
    state.last_token += 1;
    let token = state.last_token;
    let lease = req.lease(token, format!("mem-{token}"), now);
    if let Some(entry) = state.locks.get_mut(key).and_then(|entries| entries.get_mut(me)) {
        entry.grant = Some(Grant {
            holder_id: lease.holder_id.clone(),
            token,
            expires_at: now + req.ttl,
            lost: lease.lost.clone(),
        });
    }
    lease
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the expired holders of `key` (firing their lost signals).
    fn expire(&self, state: &mut State, key: &str, now: Instant) {
        let Some(entries) = state.locks.get_mut(key) else {
            return;
        };
        let before = entries.len();
        entries.retain(|e| match &e.grant {
            Some(g) if g.expires_at <= now => {
                g.lost.fire(LostReason::LeaseGone("the lease expired".into()));
                false
            }
            _ => true,
        });
        if entries.len() < before {
            self.changed_locked(state, key);
        }
    }

    /// After a change of lock `key`: wakes the waiters whose turn may have come and the
    /// observers, and forgets the lock once it is empty.
    ///
    /// The waiters woken are those that hold now by the queue rule, and the first one that still
    /// waits (it keeps the timer of the holders' expiry). No later waiter can hold before that
    /// one does (arrival order), so it is woken by a later change: a release wakes a few waiters,
    /// not the whole queue (each woken waiter looks at the whole queue under the store's lock).
    fn changed_locked(&self, state: &mut State, key: &str) {
        if let Some(entries) = state.locks.get(key) {
            let roles: Vec<Role> = entries.iter().map(|e| e.role).collect();
            for (i, e) in entries.iter().enumerate().filter(|(_, e)| e.grant.is_none()) {
                e.wake.notify_one();
                if !matches!(standing(&roles, i), Ok(Standing::Holds)) {
                    break;
                }
            }
            if entries.is_empty() {
                state.locks.remove(key);
            }
        }
        self.changed.notify_waiters();
    }

    /// The lock key of a lease, if it still holds there.
    fn key_of(&self, state: &State, lease: &Lease) -> Option<String> {
        let key = lease.kind.family().segment(&lease.name);
        let holds = state.locks.get(&key).is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.grant.as_ref().is_some_and(|g| g.holder_id == lease.holder_id))
        });
        holds.then_some(key)
    }

    /// Removes entry `id` of lock `key` (a waiter that gave up, a holder that released).
    fn remove(&self, key: &str, id: u64) {
        let mut state = self.lock();
        if let Some(entries) = state.locks.get_mut(key) {
            entries.retain(|e| e.id != id);
        }
        self.changed_locked(&mut state, key);
    }
}

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(async move { MemoryBackend::connect(url) })
}

/// Removes a waiter's entry when its `acquire` future ends without the lock (timeout,
/// cancellation, an error): this is what keeps a dropped future from blocking the queue.
struct QueuedWaiter {
    store: Arc<Store>,
    key: String,
    id: u64,
    armed: bool,
}

impl Drop for QueuedWaiter {
    fn drop(&mut self) {
        if self.armed {
            self.store.remove(&self.key, self.id);
        }
    }
}

fn new_entry(state: &mut State, kind: &LockKind) -> Entry {
    state.last_entry += 1;
    Entry {
        id: state.last_entry,
        role: kind.role(),
        value: kind.campaign_value().to_owned(),
        wake: Arc::new(Notify::new()),
        grant: None,
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "mem"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        let key = req.kind.family().segment(&req.name);
        let now = Instant::now();
        let mut state = self.store.lock();
        self.store.expire(&mut state, &key, now);
        let roles: Vec<Role> = state
            .locks
            .get(&key)
            .map_or_else(Vec::new, |e| e.iter().map(|e| e.role).collect());
        if !holds_at_tail(&roles, req.kind.role())? {
            return Ok(None);
        }
        let entry = new_entry(&mut state, &req.kind);
        let entries = state.locks.entry(key.clone()).or_default();
        entries.push(entry);
        let me = entries.len() - 1;
        let lease = grant(&mut state, &key, me, req, now);
        self.store.changed_locked(&mut state, &key);
        Ok(Some(lease))
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let key = req.kind.family().segment(&req.name);
        let (id, wake) = {
            let mut state = self.store.lock();
            let entry = new_entry(&mut state, &req.kind);
            let (id, wake) = (entry.id, entry.wake.clone());
            state.locks.entry(key.clone()).or_default().push(entry);
            (id, wake)
        };
        let mut queued = QueuedWaiter {
            store: self.store.clone(),
            key: key.clone(),
            id,
            armed: true,
        };
        let mut waited = false;
        loop {
            let expiry = match self.take_turn(req, &key, id)? {
                Turn::Granted(lease) => {
                    queued.armed = false;
                    return Ok(Lease { waited, ..lease });
                }
                Turn::Wait(expiry) => expiry,
            };
            waited = true;
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

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let now = Instant::now();
        let key = Family::Mutex.segment(name);
        let mut state = self.store.lock();
        self.store.expire(&mut state, &key, now);
        let Some(entries) = state.locks.get(&key) else {
            return Ok(LockInfo::default());
        };
        let holder = entries.iter().find_map(|e| e.grant.as_ref()).map(|g| HolderInfo {
            holder_id: g.holder_id.clone(),
            fencing_token: Some(g.token),
            ttl_remaining: Some(g.expires_at.saturating_duration_since(now)),
        });
        Ok(LockInfo {
            holder,
            waiters: entries.iter().filter(|e| e.grant.is_none()).count(),
        })
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let now = Instant::now();
        let id = {
            let mut state = self.store.lock();
            let key = self.store.key_of(&state, lease);
            if let Some(key) = &key {
                self.store.expire(&mut state, key, now);
            }
            let found = key.clone().and_then(|k| state.locks.get(&k)).and_then(|entries| {
                entries
                    .iter()
                    .find(|e| e.grant.as_ref().is_some_and(|g| g.holder_id == lease.holder_id))
                    .map(|e| e.id)
            });
            found.zip(key)
        };
        match id {
            Some((id, key)) => {
                self.store.remove(&key, id);
                Ok(())
            }
            None => Err(LockError::not_held(lease.name.as_str())),
        }
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        leases.iter().map(|lease| self.renew_one(lease)).collect()
    }

    async fn write_guarded(&self, lease: &Lease, write: &crate::driver::GuardedWrite) -> Result<bool> {
        let now = Instant::now();
        let mut state = self.store.lock();
        let key = self.store.key_of(&state, lease);
        if let Some(key) = &key {
            self.store.expire(&mut state, key, now);
        }
        if self.store.key_of(&state, lease).is_none() {
            return Err(LockError::not_held(lease.name.as_str()));
        }
        Ok(crate::guarded::apply_to_map(&mut state.data, write))
    }

    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.store.lock().data.get(key).cloned())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<crate::ListedLock>> {
        let now = Instant::now();
        let mut state = self.store.lock();
        let keys: Vec<String> = state.locks.keys().cloned().collect();
        let mut segments = Vec::with_capacity(keys.len());
        for key in keys {
            self.store.expire(&mut state, &key, now);
            let entries = state.locks.get(&key).map_or(0, |e| e.len());
            segments.push((key, entries));
        }
        Ok(crate::ListedLock::from_segments(
            prefix,
            segments.iter().map(|(key, n)| (key.as_str(), *n)),
        ))
    }

    fn default_ttl(&self) -> Option<std::time::Duration> {
        self.default_ttl
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        Ok(self.current_leader(name).leader())
    }

    /// A handover is one change (see [`observe_by_reading`]). The observation holds the store,
    /// not the backend: it ends when its watch is dropped.
    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        let (backend, name) = (self.clone(), name.clone());
        observe_by_reading(self.store.changed.clone(), move || {
            Some(Ok(backend.current_leader(&name)))
        })
    }
}
