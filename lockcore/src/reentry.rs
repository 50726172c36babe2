//! Re-entry detection: which task holds which guard of a [`crate::Locker`], so that a task asking
//! again for a lock it holds, in a way its own guards alone would keep from being granted, gets
//! [`LockError::WouldDeadlock`] at once instead of waiting for its timeout.
//!
//! The holder of a guard is the tokio task that took it ([`tokio::task::try_id`]), or, where no
//! task runs (the future given to a runtime's `block_on`, which `#[tokio::main]` and
//! `locksmith::blocking` use), the thread; within it, the waker the request was polled with, so
//! that the futures of one task that a `FuturesUnordered` (`buffer_unordered`,
//! `for_each_concurrent`) polls, each with a waker of its own, are told apart. It follows the
//! guard where the guard is used: any [`crate::LockGuard`] method called in another task makes
//! that task its holder (any future of it), and [`crate::LockGuard::detach_from_task`] says "no
//! task of mine holds this" before it is handed on. A lost guard holds nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use crate::driver::fast_hash::FastBuildHasher;
use crate::error::{LockError, Result};
use crate::lease::{Family, Lease, LockKind, LostSignal};
use crate::name::LockName;

/// Who holds a guard: a task, or the thread of a `block_on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Owner {
    /// The task (or, outside any task, the thread) running this call.
    pub(crate) fn current() -> Owner {
        match tokio::task::try_id() {
            Some(id) => Owner::Task(id),
            None => Owner::Thread(std::thread::current().id()),
        }
    }
}

/// Who asks for a lock, or holds one: a task or thread, and the waker its request was polled with
/// (`None`: any future of the task, for a guard that was used by a method, not a request).
#[derive(Clone, Debug)]
pub(crate) struct Holder {
    owner: Owner,
    waker: Option<Waker>,
}

impl Holder {
    /// The running task (or thread), and the waker of the future being polled.
    pub(crate) async fn current() -> Holder {
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        Holder {
            owner: Owner::current(),
            waker: Some(waker),
        }
    }

    /// The running task (or thread), any future of it.
    fn anywhere() -> Holder {
        Holder {
            owner: Owner::current(),
            waker: None,
        }
    }

    /// Whether a guard held by `self` is held by the asker `other`.
    fn is(&self, other: &Holder) -> bool {
        self.owner == other.owner
            && match (&self.waker, &other.waker) {
                (Some(mine), Some(theirs)) => mine.will_wake(theirs),
                _ => true,
            }
    }
}

/// The holder of one guard, shared by the guard (which updates it) and the registry.
pub(crate) type OwnerCell = Arc<Mutex<Option<Holder>>>;

struct Entry {
    id: u64,
    kind: LockKind,
    fencing_token: u64,
    owner: OwnerCell,
    lost: LostSignal,
}

/// The guards of one locker, by family and lock name.
#[derive(Default)]
pub(crate) struct Holders {
    map: Mutex<HashMap<(Family, LockName), Vec<Entry>, FastBuildHasher>>,
    next: std::sync::atomic::AtomicU64,
}

/// A guard's place in [`Holders`], kept by the guard.
pub(crate) struct Ticket {
    id: u64,
    key: (Family, LockName),
    owner: OwnerCell,
}

impl Ticket {
    /// Makes the running task (or thread) the holder of the guard (any future of it, unless it
    /// held it already).
    pub(crate) fn touch(&self) {
        let now = Owner::current();
        let mut owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if owner.as_ref().map(|h| h.owner) != Some(now) {
            *owner = Some(Holder::anywhere());
        }
    }

    /// Records the request that took the guard: `holder`, its task and waker.
    pub(crate) fn taken_by(&self, holder: Holder) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(holder);
    }

    /// No task holds the guard until it is next used.
    pub(crate) fn detach(&self) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Holders {
    /// Records `lease`'s guard as held by the running task.
    pub(crate) fn insert(&self, lease: &Lease) -> Ticket {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = (lease.kind.family(), lease.name.clone());
        let owner: OwnerCell = Arc::new(Mutex::new(Some(Holder::anywhere())));
        let entry = Entry {
            id,
            kind: lease.kind.clone(),
            fencing_token: lease.fencing_token,
            owner: owner.clone(),
            lost: lease.lost.clone(),
        };
        self.lock().entry(key.clone()).or_default().push(entry);
        Ticket { id, key, owner }
    }

    /// Forgets a guard (released, dropped, abandoned).
    pub(crate) fn remove(&self, ticket: &Ticket) {
        let mut map = self.lock();
        if let Some(entries) = map.get_mut(&ticket.key) {
            entries.retain(|e| e.id != ticket.id);
            if entries.is_empty() {
                map.remove(&ticket.key);
            }
        }
    }

    /// [`LockError::WouldDeadlock`] if the guards of `name` that `me` holds would by themselves
    /// keep a request for `kind` from being granted.
    pub(crate) fn check(&self, name: &LockName, kind: &LockKind, me: &Holder) -> Result<()> {
        // A token register's own lock: taken and released inside each admission, never held by
        // the caller, so the admissions of one task (a `join!` of two) may wait for each other.
        if name.as_str().starts_with(crate::REGISTER_LOCK_PREFIX) {
            return Ok(());
        }
        let map = self.lock();
        let Some(entries) = map.get(&(kind.family(), name.clone())) else {
            return Ok(());
        };
        let mine: Vec<&Entry> = entries
            .iter()
            .filter(|e| {
                !e.lost.is_lost()
                    && e.owner
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .as_ref()
                        .is_some_and(|h| h.is(me))
            })
            .collect();
        let Some(first) = mine.first() else {
            return Ok(());
        };
        let blocking = match kind {
            // One holder only: any guard of ours is in the way.
            LockKind::Mutex | LockKind::Write | LockKind::Leader { .. } => Some(first),
            // Readers share: only our writer is in the way.
            LockKind::Read => mine.iter().find(|e| e.kind == LockKind::Write),
            // A permit: in the way when every permit is ours.
            LockKind::Permit { permits } => {
                let ours = u32::try_from(mine.len()).unwrap_or(u32::MAX);
                (ours >= *permits).then_some(first)
            }
        };
        match blocking {
            None => Ok(()),
            Some(entry) => Err(LockError::WouldDeadlock {
                name: name.as_str().to_owned(),
                held: describe(&entry.kind, mine.len()),
                fencing_token: entry.fencing_token,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Family, LockName), Vec<Entry>, FastBuildHasher>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a task holds, in [`LockError::WouldDeadlock`]'s message.
fn describe(kind: &LockKind, count: usize) -> String {
    match kind {
        LockKind::Mutex => "the mutex".into(),
        LockKind::Write => "the write lock".into(),
        LockKind::Read => "a read lock".into(),
        LockKind::Leader { .. } => "the leadership".into(),
        LockKind::Permit { permits } => format!("{count} of the {permits} permits"),
        #[allow(unreachable_patterns)]
        _ => "a guard".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{LockError, Locker, MemoryBackend, REGISTER_LOCK_PREFIX};

    /// A token register's lock is not checked for re-entry: its admissions take and release it
    /// inside each call, so two of one task (a `join!` of two) wait for each other's turn
    /// instead of the second being refused. Shown by a task holding the register's lock itself:
    /// its admission waits (here until its short timeout), it is not refused.
    #[tokio::test]
    async fn a_token_registers_lock_is_not_checked_for_reentry() {
        let locker = Locker::new(MemoryBackend::new());
        let held = locker
            .lock(format!("{REGISTER_LOCK_PREFIX}ledger"))
            .acquire()
            .await
            .expect("acquire");
        let register = locker
            .token_register("ledger")
            .expect("register")
            .timeout(Duration::from_millis(100));
        let answer = register.admit(1).await;
        assert!(matches!(answer, Err(LockError::Timeout(_))), "{answer:?}");
        held.release().await.expect("release");
        let (a, b) = tokio::join!(register.admit(1), register.admit(2));
        let _ = (a.expect("admit 1"), b.expect("admit 2"));
        assert_eq!(register.highest().await.expect("highest"), Some(2));
    }
}
