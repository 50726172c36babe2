//! In-process exclusion per lock for the Go layout.
//!
//! In `layout=go-mutex` a session has exactly one key per lock (`NAME/<lease>`), so two attempts
//! of one `Locker` on one lock would share it and both believe they hold the lock (the Go
//! `Mutex` has this problem when two mutexes share a session). Attempts of one session on one
//! lock therefore take a local, FIFO slot first and keep it until their key is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;

type Map = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// The slots of one session, by lock prefix.
#[derive(Default)]
pub(crate) struct Slots {
    map: Arc<Map>,
}

/// A taken slot; frees it (and forgets it when nobody waits) on drop.
pub(crate) struct Slot {
    guard: Option<OwnedMutexGuard<()>>,
    map: Arc<Map>,
    prefix: String,
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
        }
    }

    /// The slot of `prefix` if it is free now.
    pub fn try_take(&self, prefix: &str) -> Option<Slot> {
        let guard = self.entry(prefix).try_lock_owned().ok();
        let slot = Slot {
            guard,
            map: self.map.clone(),
            prefix: prefix.to_owned(),
        };
        // Dropping a slot without a guard still forgets an unused entry.
        if slot.guard.is_some() {
            Some(slot)
        } else {
            None
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
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
}
