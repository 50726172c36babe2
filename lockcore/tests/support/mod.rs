//! Backends for lockcore's tests: the memory backend with a fault or a delay of its own.

#![allow(dead_code)] // each test binary uses a part

use locksmith_core::driver::{async_trait, LockBackend, LockName};
use locksmith_core::{LockError, MemoryBackend};

/// A memory backend whose next release answers `Unavailable` without releasing (a server that
/// did not answer).
#[derive(Debug)]
pub struct FirstReleaseUnanswered {
    /// The store it works on.
    pub inner: MemoryBackend,
    /// Whether the next release answers `Unavailable`.
    pub fail_next: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl LockBackend for FirstReleaseUnanswered {
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

/// A memory backend whose releases take `release_ms` before they reach the store (a server a
/// round trip away): a release can be cut off mid-flight.
#[derive(Debug)]
pub struct SlowRelease {
    /// The store it works on.
    pub inner: MemoryBackend,
    /// How long each release waits before it releases.
    pub release_ms: u64,
}

#[async_trait]
impl LockBackend for SlowRelease {
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
        tokio::time::sleep(std::time::Duration::from_millis(self.release_ms)).await;
        self.inner.release(lease).await
    }
    async fn renew_many(&self, leases: &[locksmith_core::driver::Lease]) -> Vec<locksmith_core::Result<()>> {
        self.inner.renew_many(leases).await
    }
    async fn inspect(&self, name: &LockName) -> locksmith_core::Result<locksmith_core::LockInfo> {
        self.inner.inspect(name).await
    }
}
