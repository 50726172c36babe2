//! Backends for lockcore's tests: the memory backend with a fault or a delay of its own.

#![allow(dead_code)] // each test binary uses a part

use locksmith_core::driver::{async_trait, LockBackend, LockName};
use locksmith_core::{LockError, MemoryBackend};

/// A memory backend whose releases misbehave as a server's can: each takes `release_ms` before
/// it reaches the store (a server a round trip away: a release can be cut off mid-flight), and
/// the next one answers `Unavailable` without releasing while `fail_next` is set (a server that
/// did not answer).
#[derive(Debug)]
pub struct FaultyRelease {
    /// The store it works on.
    pub inner: MemoryBackend,
    /// Whether the next release answers `Unavailable`.
    pub fail_next: std::sync::atomic::AtomicBool,
    /// How long each release waits before it reaches the store.
    pub release_ms: u64,
}

impl FaultyRelease {
    /// Over `inner`, without a fault until `fail_next` is set.
    pub fn new(inner: MemoryBackend) -> FaultyRelease {
        FaultyRelease {
            inner,
            fail_next: false.into(),
            release_ms: 0,
        }
    }

    /// Over `inner`, its first release unanswered.
    pub fn first_unanswered(inner: MemoryBackend) -> FaultyRelease {
        FaultyRelease {
            fail_next: true.into(),
            ..FaultyRelease::new(inner)
        }
    }

    /// Over `inner`, every release `release_ms` long.
    pub fn slow(inner: MemoryBackend, release_ms: u64) -> FaultyRelease {
        FaultyRelease {
            release_ms,
            ..FaultyRelease::new(inner)
        }
    }
}

#[async_trait]
impl LockBackend for FaultyRelease {
    fn kind(&self) -> &'static str {
        "mem"
    }
    async fn try_acquire(
        &self,
        req: &locksmith_core::driver::LockRequest,
    ) -> locksmith_core::Result<Option<locksmith_core::driver::Lease>> {
        self.inner.try_acquire(req).await
    }
    async fn acquire(
        &self,
        req: &locksmith_core::driver::LockRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> locksmith_core::Result<locksmith_core::driver::Lease> {
        self.inner.acquire(req, deadline).await
    }
    async fn release(&self, lease: &locksmith_core::driver::Lease) -> locksmith_core::Result<()> {
        if self.release_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(self.release_ms)).await;
        }
        if self.fail_next.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(LockError::Unavailable {
                message: "no answer (test)".into(),
                source: None,
            });
        }
        self.inner.release(lease).await
    }
    async fn renew_many(&self, leases: &[locksmith_core::driver::Lease]) -> Vec<locksmith_core::Result<()>> {
        self.inner.renew_many(leases).await
    }
    async fn inspect(&self, name: &LockName) -> locksmith_core::Result<locksmith_core::LockInfo> {
        self.inner.inspect(name).await
    }
}
