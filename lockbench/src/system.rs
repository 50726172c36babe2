//! What a workload runs against: a [`LockSystem`] hands out clients (each with its own connection
//! or session) whose `acquire` waits for a lock and returns a [`Held`] to release. locksmith and the
//! peer libraries implement it; the raw floor implements it with single attempts (it never waits).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use async_trait::async_trait;
use locksmith::{LockGuard, Locker};

/// A lock implementation on one backend.
#[async_trait]
pub trait LockSystem: Send + Sync {
    /// The `system` field of its rows.
    fn system(&self) -> &'static str;
    /// The `backend` field of its rows.
    fn backend(&self) -> &'static str;
    /// A new client with its own connection (or session).
    async fn client(&self) -> Result<Arc<dyn LockClient>>;
}

/// One connection's view of a lock implementation.
#[async_trait]
pub trait LockClient: Send + Sync {
    /// Waits until `name` is held (the floor makes one attempt and fails if the lock is taken).
    async fn acquire(&self, name: &str, ttl: Duration) -> Result<Box<dyn Held>>;
}

/// A held lock.
#[async_trait]
pub trait Held: Send {
    /// Releases it and waits for the server to confirm.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// locksmith itself, connected by URL.
pub struct Locksmith {
    /// `mem`, `file`, `etcd`, `zk` or `redis`.
    pub backend: &'static str,
    /// The URL given to `locksmith::connect`.
    pub url: String,
    /// The `system` of its rows: `locksmith`, or a variant (`locksmith+tls` over a secured server,
    /// `locksmith+sentinel`, `locksmith+cluster+wait`, ...).
    pub system: &'static str,
}

#[async_trait]
impl LockSystem for Locksmith {
    fn system(&self) -> &'static str {
        self.system
    }

    fn backend(&self) -> &'static str {
        self.backend
    }

    async fn client(&self) -> Result<Arc<dyn LockClient>> {
        let locker = connect(&self.url).await?;
        Ok(Arc::new(locker))
    }
}

/// `locksmith::connect` with a bound on the time and the URL in the error.
pub async fn connect(url: &str) -> Result<Locker> {
    tokio::time::timeout(Duration::from_secs(15), locksmith::connect(url))
        .await
        .with_context(|| format!("connecting to {url}: no answer within 15 s"))?
        .with_context(|| format!("connecting to {url}"))
}

#[async_trait]
impl LockClient for Locker {
    async fn acquire(&self, name: &str, ttl: Duration) -> Result<Box<dyn Held>> {
        let guard = self
            .lock(name)
            .ttl(ttl)
            .timeout(Duration::from_secs(60))
            .acquire()
            .await?;
        Ok(Box::new(guard))
    }
}

#[async_trait]
impl Held for LockGuard {
    async fn release(self: Box<Self>) -> Result<()> {
        (*self).release().await?;
        Ok(())
    }
}

/// A lock name unique to this run, so that repeated runs and concurrent users never share one.
pub fn unique_name(workload: &str, system: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("lockbench/{workload}/{system}/{}-{n}", std::process::id())
}

/// Connects with the lease TTL set where the backend takes it from the connection (the session
/// of etcd and ZooKeeper; see `locksmith::driver::TtlScope`); an explicit `ttl=` in the URL wins. Other
/// backends take the TTL per lock.
pub async fn connect_with_ttl(url: &str, ttl: Duration) -> Result<Locker> {
    let options = locksmith::ConnectOptions::new().session_ttl(ttl);
    tokio::time::timeout(Duration::from_secs(15), locksmith::connect_with(url, &options))
        .await
        .with_context(|| format!("connecting to {url}: no answer within 15 s"))?
        .with_context(|| format!("connecting to {url}"))
}
