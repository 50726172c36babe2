//! [`Descriptor`]: what a backend crate tells the facade, the CLI and lockbench about itself —
//! its URL schemes, its Cargo feature, the URL options it accepts, where its TTL lives, and how to
//! connect. Each backend crate exports one (`DESCRIPTOR`); the facade's registry lists them, so a
//! new backend is one crate and one line there (like sqlx's `AnyDriver`).

use std::future::Future;
use std::pin::Pin;

use crate::driver::url::BackendUrl;
use crate::error::Result;
use crate::locker::Locker;

/// The future [`Descriptor::connect`] returns.
pub type Connecting<'a> = Pin<Box<dyn Future<Output = Result<Locker>> + Send + 'a>>;

/// Where a backend keeps the TTL that the server enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlScope {
    /// Each lock has its own (the builder's `.ttl(..)`; by default the URL's `ttl=`, see
    /// [`crate::backend::LockBackend::default_ttl`]): mem, Redis.
    PerLock,
    /// One per connection, set by this URL option: the session lease of etcd, the session of
    /// ZooKeeper. A program that holds one lock per connection (the CLI) sets it to the lock's TTL.
    PerSession {
        /// The URL option (`ttl`).
        option: &'static str,
    },
}

/// One backend, as the facade knows it.
#[derive(Clone, Copy)]
pub struct Descriptor {
    /// A short name: `mem`, `etcd`, `zk`, `redis` (what [`crate::backend::LockBackend::kind`] reports).
    pub name: &'static str,
    /// The URL schemes it serves.
    pub schemes: &'static [&'static str],
    /// The Cargo feature of the `locksmith` facade that compiles it in (`None`: always there).
    pub feature: Option<&'static str>,
    /// The URL options it accepts (others are [`crate::LockError::InvalidUrl`]).
    pub options: &'static [&'static str],
    /// Where its TTL lives.
    pub ttl: TtlScope,
    /// Connects to the URL (whose scheme is one of [`Descriptor::schemes`]).
    pub connect: for<'a> fn(&'a BackendUrl) -> Connecting<'a>,
}

impl Descriptor {
    /// Whether it takes the URL option `name`.
    pub fn accepts(&self, option: &str) -> bool {
        self.options.contains(&option)
    }
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .field("feature", &self.feature)
            .field("options", &self.options)
            .field("ttl", &self.ttl)
            .finish()
    }
}
