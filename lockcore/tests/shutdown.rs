//! `Locker::shutdown`'s time: the backend's end of its session gets a request timeout of its own,
//! not what the wait for the releases left of one.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{async_trait, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{LockInfo, Locker, MemoryBackend, Result};

/// A memory backend whose releases take most of its request timeout, and whose end of session a
/// fifth of it: a server that answers, slowly.
#[derive(Debug)]
struct Slow(MemoryBackend);

const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

#[async_trait]
impl LockBackend for Slow {
    fn kind(&self) -> &'static str {
        "mem"
    }
    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        self.0.try_acquire(req).await
    }
    async fn acquire(&self, req: &LockRequest, deadline: Option<tokio::time::Instant>) -> Result<Lease> {
        self.0.acquire(req, deadline).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        tokio::time::sleep(REQUEST_TIMEOUT * 9 / 10).await;
        self.0.release(lease).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        self.0.renew_many(leases).await
    }
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.0.inspect(name).await
    }
    async fn shutdown(&self) -> Result<()> {
        tokio::time::sleep(REQUEST_TIMEOUT / 5).await;
        Ok(())
    }
    fn request_timeout(&self) -> Duration {
        REQUEST_TIMEOUT
    }
}

/// A guard held at shutdown is released (0.45 s), then the session ends (0.1 s): both answer
/// within their request timeout, so shutdown succeeds. Before, the session's end got only the
/// 0.05 s left of one shared timeout, was cut off, and shutdown answered `Unavailable` (on etcd
/// the revoke, on PostgreSQL the statement that frees every entry, were then never sent).
#[tokio::test]
async fn the_session_s_end_has_a_request_timeout_of_its_own() {
    let locker = Locker::from_arc(Arc::new(Slow(MemoryBackend::new())));
    let _held = locker.lock("slow").acquire().await.unwrap();
    let ended = locker.shutdown().await;
    assert!(ended.is_ok(), "shutdown: {ended:?}");
}
