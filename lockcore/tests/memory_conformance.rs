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
