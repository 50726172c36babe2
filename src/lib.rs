//! # locksmith
//!
//! One distributed-lock API over etcd, ZooKeeper, Redis and an embedded in-process backend.
//! Pick the backend with a URL; swapping backends is a Cargo feature and a URL, not a code change.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! use std::time::Duration;
//!
//! // "etcd://127.0.0.1:2379", "zk://127.0.0.1:2181", "redis://127.0.0.1:6379" work the same way.
//! let locker = locksmith::connect("mem://").await?;
//! let guard = locker
//!     .lock("orders/42")
//!     .ttl(Duration::from_secs(10))
//!     .timeout(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! println!("holding orders/42 with fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! | URL | backend | Cargo feature |
//! |---|---|---|
//! | `mem://` or `mem://NAME` | in-process store (shared by all `connect` calls with the same NAME) | always on |
//! | `etcd://h1:2379,h2:2379/namespace` | etcd v3 | `etcd` |
//! | `zk://h1:2181,h2:2181/chroot` | ZooKeeper | `zk` |
//! | `redis://h:6379/0` | Redis | `redis` |
//!
//! Everything else — the guard, the watchdog, `lost()`, fencing tokens, errors — is
//! [`lockcore`]'s, re-exported here.

#![warn(missing_docs)]

pub use lockcore::*;

use std::time::Duration;

/// The URL schemes [`connect`] knows, with the Cargo feature each needs (`None`: always on).
pub const SCHEMES: &[(&str, Option<&str>)] = &[
    ("mem", None),
    ("etcd", Some("etcd")),
    ("zk", Some("zk")),
    ("redis", Some("redis")),
];

/// Settings a program gives [`connect_with`] on top of the URL; an option the URL sets itself wins.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// How long connecting may take (`connect_timeout`), on the backends that connect to a server.
    pub connect_timeout: Option<Duration>,
    /// The session TTL (`ttl`) on the backends whose TTL is per connection (etcd, ZooKeeper); the
    /// per-lock TTL of the others is set on each lock.
    pub session_ttl: Option<Duration>,
}

impl ConnectOptions {
    /// No settings: the URL's own options and the backend's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`ConnectOptions::connect_timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sets [`ConnectOptions::session_ttl`].
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = Some(ttl);
        self
    }
}

/// Connects to the backend named by `url` and returns a [`Locker`] over it.
///
/// Errors: [`LockError::InvalidUrl`] for a malformed URL, an unknown scheme, or a backend whose
/// Cargo feature is not enabled (the message names the feature); [`LockError::Unavailable`] when
/// the servers cannot be reached within the connect timeout.
pub async fn connect(url: &str) -> Result<Locker> {
    connect_url(BackendUrl::parse(url)?).await
}

/// [`connect`] with settings on top of the URL (which wins where it sets them too). Messages show
/// the URL as given, without the options added here and without its password.
pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Locker> {
    let mut parsed = BackendUrl::parse(url)?;
    let millis = |d: Duration| format!("{}ms", d.as_millis());
    let remote = parsed.scheme != "mem";
    let session = matches!(parsed.scheme.as_str(), "etcd" | "zk");
    if let Some(t) = options.connect_timeout.filter(|_| remote) {
        parsed.set_default_option("connect_timeout", millis(t));
    }
    if let Some(t) = options.session_ttl.filter(|_| session) {
        if !parsed.query.contains_key("session_timeout") {
            parsed.set_default_option("ttl", millis(t));
        }
    }
    connect_url(parsed).await
}

/// [`connect`] with a URL parsed already.
pub async fn connect_url(parsed: BackendUrl) -> Result<Locker> {
    tracing::debug!(scheme = %parsed.scheme, hosts = parsed.hosts.len(), "connecting");
    match parsed.scheme.as_str() {
        "mem" => connect_memory(&parsed),
        #[cfg(feature = "etcd")]
        "etcd" => backend_etcd::connect(&parsed).await,
        #[cfg(feature = "zk")]
        "zk" => backend_zk::connect(&parsed).await,
        #[cfg(feature = "redis")]
        "redis" => backend_redis::connect(&parsed).await,
        scheme => Err(match SCHEMES.iter().find(|(s, _)| *s == scheme) {
            Some((_, Some(feature))) => parsed.error(format!(
                "the `{feature}` feature of locksmith is not enabled; add `features = [\"{feature}\"]` to the locksmith dependency"
            )),
            _ => parsed.error(format!(
                "unknown scheme {scheme:?}; expected one of {}",
                SCHEMES.iter().map(|(s, _)| format!("{s}://")).collect::<Vec<_>>().join(", ")
            )),
        }),
    }
}

fn connect_memory(url: &BackendUrl) -> Result<Locker> {
    url.expect_only_options(&[])?;
    let plain = url.hosts.len() <= 1 && url.hosts.iter().all(|h| h.port.is_none());
    if !plain || url.credentials.is_some() || !url.path.is_empty() {
        return Err(url.error("mem:// takes at most a store name: mem:// or mem://NAME"));
    }
    let store = url.hosts.first().map_or("", |h| h.host.as_str());
    Ok(Locker::new(MemoryBackend::shared(store)))
}
