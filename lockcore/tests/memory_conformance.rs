//! The memory backend against the whole conformance suite.

use std::time::Duration;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, LockName};
use locksmith_core::{Family, Locker, MemoryBackend};

struct MemHarness {
    store: MemoryBackend,
}

fn harness() -> MemHarness {
    MemHarness {
        store: MemoryBackend::new(),
    }
}

#[async_trait]
impl Harness for MemHarness {
    async fn locker(&self) -> Locker {
        Locker::new(self.store.clone())
    }

    async fn delete_behind_back(&self, name: &LockName) {
        assert!(self.store.force_remove(name), "no holder to remove");
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        assert!(self.store.force_remove_in(family, name), "no holder to remove");
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        self.store.entries(Family::Mutex, name)
    }

    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        self.store.entries(family, name)
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(300)
    }
}

locksmith_core::conformance_tests!(harness());
locksmith_core::primitive_tests!(harness());
locksmith_core::guarded_tests!(harness());
locksmith_core::composite_tests!(harness(), rounds = 1000);

/// Bug: every change of a lock woke every waiter of it, and each looked at the whole queue under
/// the store's one lock: draining N waiters cost O(N²) turns (398 for 50 here). A release now wakes
/// the waiters it lets in and the first one still waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_few_waiters_not_the_whole_queue() {
    const WAITERS: u64 = 50;
    let store = MemoryBackend::new();
    let locker = Locker::new(store.clone());
    let held = locker.lock("herd").acquire().await.expect("acquire");
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let locker = locker.clone();
        tasks.push(tokio::spawn(async move {
            let guard = locker.lock("herd").acquire().await.expect("acquire");
            guard.release().await.expect("release");
        }));
    }
    let queued = usize::try_from(WAITERS).expect("a small count");
    locksmith_core::conformance::until_waiters(&locker, "herd", queued, Duration::from_secs(10)).await;
    let before = store.turns_taken();
    held.release().await.expect("release");
    for task in tasks {
        task.await.expect("a waiter");
    }
    let turns = store.turns_taken() - before;
    assert!(turns <= 3 * WAITERS, "{turns} turns for {WAITERS} hand-overs");
}
