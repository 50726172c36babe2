//! In-process exclusion per lock for the Go layout.
//!
//! In `layout=go-mutex` a session has exactly one key per lock (`NAME/<lease>`), so two attempts
//! of one `Locker` on one lock would share it and both believe they hold the lock (the Go
//! `Mutex` has this problem when two mutexes share a session). Attempts of one session on one
//! lock therefore take a local, FIFO slot first and keep it until their key is gone.
//!
//! In the default layout the slot is a key *number* instead (`<lease>-<n>`): the lowest number
//! no attempt of this session on this lock uses, kept, like the Go slot, until the key is gone.
//! Concurrent attempts still never share a key, but a lock taken and released in a loop reuses
//! one key name instead of creating a new key each time. This matters for speed: etcd keeps
//! every deleted key in its index until the next compaction, and the range reads of the
//! protocol visit all of them, so fresh names would make each acquire slower than the last.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;

type Map = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;
type Numbers = Mutex<HashMap<String, BTreeSet<u64>>>;

/// The slots of one session, by lock prefix.
#[derive(Default)]
pub(crate) struct Slots {
    map: Arc<Map>,
    /// The key numbers in use, by prefix (default layout).
    numbers: Arc<Numbers>,
}

/// A taken slot; frees it (and forgets it when nobody waits) on drop.
pub(crate) struct Slot {
    guard: Option<OwnedMutexGuard<()>>,
    map: Arc<Map>,
    prefix: String,
    /// The key number of the default layout, and where to give it back.
    number: Option<(u64, Arc<Numbers>)>,
}

fn lock_numbers(numbers: &Numbers) -> MutexGuard<'_, HashMap<String, BTreeSet<u64>>> {
    numbers.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock(map: &Map) -> MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
    map.lock().unwrap_or_else(|e| e.into_inner())
}

impl Slots {
    fn entry(&self, prefix: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.map).entry(prefix.to_owned()).or_default().clone()
    }

    /// Waits for the slot of `prefix` (cancellation-safe: a dropped wait takes nothing).
    pub async fn take(&self, prefix: &str) -> Slot {
        let guard = self.entry(prefix).lock_owned().await;
        Slot {
            guard: Some(guard),
            map: self.map.clone(),
            prefix: prefix.to_owned(),
            number: None,
        }
    }

    /// The lowest key number of `prefix` that no other slot holds (default layout).
    pub fn number(&self, prefix: &str) -> Slot {
        let n = {
            let mut numbers = lock_numbers(&self.numbers);
            let used = numbers.entry(prefix.to_owned()).or_default();
            let mut n = 0;
            while used.contains(&n) {
                n += 1;
            }
            used.insert(n);
            n
        };
        Slot {
            guard: None,
            map: self.map.clone(),
            prefix: prefix.to_owned(),
            number: Some((n, self.numbers.clone())),
        }
    }

    /// The slot of `prefix` if it is free now.
    pub fn try_take(&self, prefix: &str) -> Option<Slot> {
        let guard = self.entry(prefix).try_lock_owned().ok();
        let slot = Slot {
            guard,
            map: self.map.clone(),
            prefix: prefix.to_owned(),
            number: None,
        };
        // Dropping a slot without a guard still forgets an unused entry.
        if slot.guard.is_some() {
            Some(slot)
        } else {
            None
        }
    }
}

impl Slot {
    /// The key number of a default-layout slot.
    pub fn key_number(&self) -> Option<u64> {
        self.number.as_ref().map(|(n, _)| *n)
    }

    /// Drops the slot without giving its key number back: for a key that may still exist (its
    /// delete failed), so that no later attempt of this session reuses its name while it does.
    /// The number stays taken for the life of the session (the lease id in the key name changes
    /// with a new lease anyway).
    pub fn keep_number(mut self) {
        self.number = None;
    }

    /// Frees the slot of a key that a failed request may still create (see
    /// [`crate::conn::sweep::Sweep::suspect`]): a default-layout number stays taken
    /// ([`Slot::keep_number`]); a Go-layout slot is freed, and its prefix returned, for the
    /// sweeper to take the slot again whenever it deletes the key.
    pub fn into_suspect_slot(self) -> Option<String> {
        if self.number.is_some() {
            self.keep_number();
            return None;
        }
        Some(self.prefix.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((n, numbers)) = self.number.take() {
            let mut numbers = lock_numbers(&numbers);
            if let Some(used) = numbers.get_mut(&self.prefix) {
                used.remove(&n);
                if used.is_empty() {
                    numbers.remove(&self.prefix);
                }
            }
            return;
        }
        drop(self.guard.take());
        let mut map = lock(&self.map);
        // Only the map holds it: nobody holds or waits for this slot.
        if map.get(&self.prefix).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(&self.prefix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_per_prefix_and_forgotten_when_idle() {
        let slots = Slots::default();
        let a = slots.take("x/").await;
        assert!(slots.try_take("x/").is_none());
        assert!(slots.try_take("y/").is_some());
        drop(a);
        assert!(slots.try_take("x/").is_some());
        assert!(lock(&slots.map).is_empty());
    }

    #[test]
    fn lowest_free_number_per_prefix_and_forgotten_when_idle() {
        let slots = Slots::default();
        let a = slots.number("x/");
        let b = slots.number("x/");
        assert_eq!((a.key_number(), b.key_number()), (Some(0), Some(1)));
        assert_eq!(slots.number("y/").key_number(), Some(0));
        drop(a);
        let c = slots.number("x/");
        assert_eq!(c.key_number(), Some(0));
        c.keep_number();
        assert_eq!(slots.number("x/").key_number(), Some(2));
        drop(b);
        assert_eq!(slots.number("x/").key_number(), Some(1));
        slots.number("z/");
        assert!(!lock_numbers(&slots.numbers).contains_key("z/"));
    }
}
