//! # locksmith
//!
//! One distributed-lock API over etcd, ZooKeeper, Redis, PostgreSQL, lock files shared by the
//! processes of one machine (`file://`) and an embedded in-process backend (`mem://`).
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
//! // Before the process exits: releases what an early `?` dropped, ends the session.
//! locker.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! | URL | backend | Cargo feature |
//! |---|---|---|
//! | `mem://` or `mem://NAME` | in-process store (shared by all `connect` calls with the same NAME) | always on |
//! | `etcd://h1:2379,h2:2379/namespace` | etcd v3 | `etcd` |
//! | `zk://h1:2181,h2:2181/chroot` | ZooKeeper | `zk` |
//! | `redis://h:6379/0` | Redis (one server, or `h1,h2,h3` for a quorum of independent masters) | `redis` |
//! | `redis+sentinel://s1:26379,s2:26379/mymaster` | Redis Sentinel: the master the sentinels name, followed across failovers | `redis` |
//! | `redis-cluster://h1:7000,h2:7001` | Redis Cluster (seed nodes; follows `MOVED`/`ASK`, resharding and failover) | `redis` |
//! | `file:///run/lock/myapp` | lock files in a directory: the processes of one machine, no server (Linux) | `file` |
//! | `postgres://user@h:5432/db` or `postgresql://…` | PostgreSQL (`h1,h2` for a primary and its standbys; `sslmode=require` or `verify-full` for TLS) | `postgres` |
//! | `etcds://`, `zks://`, `rediss://`, `rediss+sentinel://`, `rediss-cluster://` | the same over TLS (rustls; `ca=`, `cert=`, `key=` options) | `tls` too |
//!
//! Every backend takes `ttl=` in its URL: on etcd and ZooKeeper the TTL of the connection's
//! session, which all its locks share; on Redis, `file://` and `mem://` the TTL of each lock whose builder
//! sets none ([`LockBuilder::ttl`] wins; without either, [`DEFAULT_TTL`]). Each backend crate's
//! documentation lists its other options.
//!
//! ## Work under a lock: `run`
//!
//! [`LockBuilder::run`] is the pattern every user writes, shipped: it acquires, hands the work a
//! [`Held`] (the fencing token, guarded writes), stops the work and answers [`LockError::Lost`]
//! if the lock is lost before the work ends (never the work's value then: another holder may
//! have had the lock), releases however the work ends (a value, an error, a panic), and returns
//! the work's value:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! # use std::time::Duration;
//! let locker = locksmith::connect("mem://").await?;
//! let shipped = locker
//!     .lock("orders/42")
//!     .ttl(Duration::from_secs(10))
//!     .timeout(Duration::from_secs(5))
//!     .run(|held| async move {
//!         held.guarded().put("/orders/42/state", "shipped").await?; // only while held
//!         Ok::<_, locksmith::LockError>(held.fencing_token()) // pass it to other storage
//!     })
//!     .await??; // outer: not acquired, or lost; inner: the work's own error
//! # assert!(shipped > 0);
//! # Ok(()) }
//! ```
//!
//! ## Several locks at once: `lock_all`
//!
//! [`Locker::lock_all`] takes a set of mutexes in one global order (sorted, duplicates removed),
//! so callers naming them in any order cannot deadlock; one timeout for the set; all guards or
//! none (a failure or cancellation part-way releases what it took at once); one
//! [`MultiGuard::lost`] for the set:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! # let locker = locksmith::connect("mem://").await?;
//! let tokens = locker
//!     .lock_all(["accounts/bob", "accounts/alice"])
//!     .run(|held| async move { held.iter().map(|h| h.fencing_token()).collect::<Vec<_>>() })
//!     .await?;
//! # assert_eq!(tokens.len(), 2);
//! # Ok(()) }
//! ```
//!
//! ## Re-entry
//!
//! Locks are not re-entrant (as DistributedLock's; unlike Redisson's `RLock`, which counts
//! re-entries by thread), and asking for one the same task already holds on the same [`Locker`]
//! is answered at once with [`LockError::WouldDeadlock`], not a wait until the timeout:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), locksmith::LockError> {
//! # let locker = locksmith::connect("mem://").await?;
//! let guard = locker.lock("orders/42").acquire().await?;
//! let again = locker.lock("orders/42").acquire().await;
//! assert!(matches!(again, Err(locksmith::LockError::WouldDeadlock { .. })));
//! # drop(guard); Ok(()) }
//! ```
//!
//! Two tasks that contend are never refused; what counts as "the same task" (and the readers and
//! semaphore permits that are granted) is in `locksmith_core`'s documentation, "Re-entry".
//!
//! ## Synchronous programs: `blocking`
//!
//! With the `blocking` feature, `locksmith::blocking` is the same API for programs without async code or a
//! runtime of their own (each locker runs a small one for its watchdog):
//!
//! ```ignore
//! let locker = locksmith::blocking::connect("redis://127.0.0.1:6379")?;
//! let guard = locker.lock("orders/42").ttl(Duration::from_secs(10)).timeout(Duration::from_secs(5)).acquire()?;
//! write_with_token(guard.fencing_token())?;
//! guard.release()?;
//! ```
//!
//! Everything else — the guard, the watchdog, `lost()`, fencing tokens, errors — is
//! [`locksmith_core`]'s, re-exported here.

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item shows the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The application's API, item by item (the backend author's API stays under `driver`).
/// The backend author's API (see `locksmith_core::driver`): for writing a backend, not for using one.
/// Its items are not at the root:
///
/// ```compile_fail
/// use locksmith::LockRequest; // a backend receives it; an application never builds one
/// ```
///
/// ```
/// use locksmith::driver::{LockBackend, LockRequest};
/// ```
pub use locksmith_core::driver;
pub use locksmith_core::{
    metrics, BoxError, Campaign, Dual, Election, Family, Held, HeldAll, HolderInfo, Leader, LeaderGuard, LeaderWatch,
    ListedLock, LockAll, LockBuilder, LockError, LockGuard, LockInfo, LockKind, Locker, LostReason, MemoryBackend,
    MultiGuard, PruneReport, Result, RwLock, DEFAULT_TTL, MAX_NAME_LEN, MAX_PERMITS, MAX_TTL, MAX_VALUE_LEN, MIN_TTL,
};
pub use locksmith_core::{Admission, TokenRegister, REGISTER_LOCK_PREFIX};
pub use locksmith_core::{Guarded, MAX_GUARDED_KEY_LEN, MAX_GUARDED_VALUE_LEN};

#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;

/// The etcd backend (feature `etcd`): [`etcd::owner_compare`] puts "this guard still holds its
/// lock" into an etcd transaction of your own, with the client re-exported as
/// `etcd::etcd_client` (see `docs/fencing.md`).
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use locksmith_etcd as etcd;

/// The ZooKeeper backend (feature `zk`): [`zk::add_owner_check`] puts "this guard still holds
/// its lock" into a `multi` of your own, with the client re-exported as `zk::zookeeper_client`
/// (see `docs/fencing.md`).
#[cfg(feature = "zk")]
#[cfg_attr(docsrs, doc(cfg(feature = "zk")))]
pub use locksmith_zk as zk;

/// The Redis backend (feature `redis`): [`redis::LockKeys`] and [`redis::KindKeys`] name the keys
/// a lock lives in (for a Redis Cluster slot, or a script of your own beside the lock), and
/// [`redis::RedisBackend`] the backend itself (see the crate docs for its URL options).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use locksmith_redis as redis;

/// The PostgreSQL backend (feature `postgres`): [`postgres::setup_sql`] prints the tables and
/// grants a DBA runs before lockers that may not create them (`locksmith init --sql`), and
/// [`postgres::PgBackend`] is the backend itself (see the crate docs for its URL options).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use locksmith_postgres as postgres;

/// The MySQL and MariaDB backend (feature `mysql`): [`mysql::MysqlBackend`] is the backend
/// itself (see the crate docs for its URL options, tables and wake-ups).
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use locksmith_mysql as mysql;

/// The `file://` backend (feature `file`): [`file::FileBackend`], the backend itself (see the
/// crate docs for the lock directory's layout and what it needs of the file system).
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use locksmith_file as file;

/// Fenced stores outside the lock service (features `fence-postgres`, `fence-object-store`):
/// storage that refuses a write whose fencing token is below the highest it has accepted, in one
/// call (`fence::postgres::Fence`, `fence::objects::FencedObjects`; see `docs/fencing.md`).
#[cfg(any(feature = "fence-postgres", feature = "fence-object-store"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "fence-postgres", feature = "fence-object-store"))))]
pub use locksmith_fence as fence;

use std::time::Duration;

use locksmith_core::driver::{BackendUrl, Descriptor, TtlScope};

/// The registry: every backend the facade knows, with its Cargo feature and URL schemes (checked
/// against the backend's own [`Descriptor`] in the tests). A new backend is one line here.
macro_rules! registry {
    ($($feature:literal => $krate:ident: [$($scheme:literal),+]),* $(,)?) => {
        static BACKENDS: &[&Descriptor] = &[
            &MemoryBackend::DESCRIPTOR,
            $(#[cfg(feature = $feature)] &$krate::DESCRIPTOR,)*
        ];

        /// The backends compiled into this build (their [`Descriptor`]s), `mem://` first.
        ///
        /// # Examples
        ///
        /// ```
        /// let names: Vec<&str> = locksmith::backends().iter().map(|d| d.name).collect();
        /// assert_eq!(names[0], "mem"); // always compiled in
        /// ```
        pub fn backends() -> &'static [&'static Descriptor] {
            BACKENDS
        }

        /// Every backend this facade knows, compiled in or not: its Cargo feature and schemes.
        pub const KNOWN: &[(&str, &[&str])] = &[("", &["mem"]), $(($feature, &[$($scheme),+])),*];
    };
}

registry! {
    "etcd" => locksmith_etcd: ["etcd", "etcds"],
    "zk" => locksmith_zk: ["zk", "zks"],
    "redis" => locksmith_redis: ["redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis-cluster", "rediss-cluster"],
    "file" => locksmith_file: ["file"],
    "postgres" => locksmith_postgres: ["postgres", "postgresql"],
    "mysql" => locksmith_mysql: ["mysql", "mariadb"],
}

/// The `file://` URL of the directory that the processes of one user share when given no other:
/// `/tmp/locksmith-<uid>`, the same in every session of the user (what the `locksmith` command
/// uses without `--url`).
///
/// # Examples
///
/// ```
/// assert!(locksmith::default_file_url().starts_with("file:///"));
/// ```
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub fn default_file_url() -> String {
    locksmith_file::default_url()
}

/// The SQL that prepares a `postgres://` URL's schema for lockers whose user may not create
/// tables: the tables, and the grants `role` needs (see `locksmith_postgres::setup_sql`). What
/// `locksmith init --sql` prints.
///
/// # Errors
///
/// [`LockError::InvalidUrl`] when `url` is not a valid `postgres://` URL;
/// [`LockError::InvalidOption`] when `role` is no role name PostgreSQL can have (empty, longer
/// than 63 bytes, or with a control character).
///
/// # Examples
///
/// ```
/// let sql = locksmith::postgres_setup_sql("postgres://admin@db/app?schema=locks", Some("app_user"))?;
/// assert!(sql.contains("TO \"app_user\""));
/// # Ok::<(), locksmith::LockError>(())
/// ```
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub fn postgres_setup_sql(url: &str, role: Option<&str>) -> Result<String> {
    locksmith_postgres::setup_sql(&BackendUrl::parse(url)?, role)
}

/// The backend serving `scheme` in this build, if any.
///
/// # Examples
///
/// ```
/// assert_eq!(locksmith::backend_for("mem").map(|d| d.name), Some("mem"));
/// assert!(locksmith::backend_for("nosuch").is_none());
/// ```
pub fn backend_for(scheme: &str) -> Option<&'static Descriptor> {
    backends().iter().copied().find(|d| d.schemes.contains(&scheme))
}

/// Settings a program gives [`connect_with`] on top of the URL; an option the URL sets itself wins.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// How long connecting may take (`connect_timeout`), on the backends that connect to a server.
    pub connect_timeout: Option<Duration>,
    /// The session TTL (`ttl`) on the backends whose TTL is per connection (etcd, ZooKeeper); the
    /// per-lock TTL of the others is set on each lock (by default their URL's `ttl=`).
    pub session_ttl: Option<Duration>,
    /// TLS: the CA bundle to trust (`ca`), the client certificate and key (`cert`, `key`).
    pub ca: Option<String>,
    /// See [`ConnectOptions::ca`].
    pub cert: Option<String>,
    /// See [`ConnectOptions::ca`].
    pub key: Option<String>,
    /// A file holding the password (`password_file`); the `LOCKSMITH_PASSWORD` environment
    /// variable is read when neither the URL nor this gives one.
    pub password_file: Option<String>,
}

impl ConnectOptions {
    /// No settings: the URL's own options and the backend's defaults.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = locksmith::ConnectOptions::new();
    /// assert!(options.connect_timeout.is_none() && options.ca.is_none());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`ConnectOptions::connect_timeout`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = locksmith::ConnectOptions::new().connect_timeout(Duration::from_secs(2));
    /// assert_eq!(options.connect_timeout, Some(Duration::from_secs(2)));
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sets [`ConnectOptions::session_ttl`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = locksmith::ConnectOptions::new().session_ttl(Duration::from_secs(10));
    /// assert_eq!(options.session_ttl, Some(Duration::from_secs(10)));
    /// ```
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = Some(ttl);
        self
    }

    /// Sets the TLS files ([`ConnectOptions::ca`], `cert`, `key`); `None` leaves one unset.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = locksmith::ConnectOptions::new().tls_files(Some("/etc/ssl/ca.pem".into()), None, None);
    /// assert_eq!(options.ca.as_deref(), Some("/etc/ssl/ca.pem"));
    /// ```
    pub fn tls_files(mut self, ca: Option<String>, cert: Option<String>, key: Option<String>) -> Self {
        (self.ca, self.cert, self.key) = (ca, cert, key);
        self
    }

    /// Sets [`ConnectOptions::password_file`].
    ///
    /// # Examples
    ///
    /// ```
    /// let options = locksmith::ConnectOptions::new().password_file("/run/secrets/locksmith");
    /// assert_eq!(options.password_file.as_deref(), Some("/run/secrets/locksmith"));
    /// ```
    pub fn password_file(mut self, path: impl Into<String>) -> Self {
        self.password_file = Some(path.into());
        self
    }
}

/// Connects to the backend named by `url` and returns a [`Locker`] over it.
///
/// # Errors
///
/// [`LockError::InvalidUrl`] for a malformed URL, an unknown scheme, an option the backend does
/// not know or a bad value of one (a TTL out of range included), or a backend whose Cargo
/// feature is not enabled (the message names the feature); [`LockError::Unavailable`] when the servers
/// cannot be reached within the connect timeout; [`LockError::Denied`] when they refuse the
/// credentials.
///
/// # Cancel safety
///
/// Cancel-safe: dropping the future before it returns drops the half-made connection; no lock
/// was taken yet.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// // `mem://` needs no server; with the `redis` feature, `redis://127.0.0.1:6379/0` etc.
/// let locker = locksmith::connect("mem://").await?;
/// let guard = locker.lock("reports/daily").try_acquire().await?.expect("free");
/// guard.release().await?;
/// locker.shutdown().await?;
///
/// let err = locksmith::connect("nosuch://host").await.unwrap_err();
/// assert!(matches!(err, locksmith::LockError::InvalidUrl { .. }));
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Locker> {
    connect_url(BackendUrl::parse(url)?).await
}

/// [`connect`] with settings on top of the URL (which wins where it sets them too). Messages show
/// the URL as given, without the options added here and without its password.
///
/// # Errors
///
/// As [`connect`]; also [`LockError::InvalidUrl`] when an option is given for a backend that
/// takes none of that kind (a CA file for `mem://`).
///
/// # Cancel safety
///
/// Cancel-safe: dropping the future before it returns drops the half-made connection; no lock
/// was taken yet.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// use std::time::Duration;
/// use locksmith::{ConnectOptions, LockError};
/// let options = ConnectOptions::new().connect_timeout(Duration::from_secs(2));
/// let locker = locksmith::connect_with("mem://", &options).await?;
/// assert_eq!(locker.backend().kind(), "mem");
/// let with_ca = ConnectOptions::new().tls_files(Some("ca.pem".into()), None, None);
/// assert!(matches!(locksmith::connect_with("mem://", &with_ca).await, Err(LockError::InvalidUrl { .. })));
/// # Ok(()) }
/// ```
pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Locker> {
    let mut parsed = BackendUrl::parse(url)?;
    let backend = find(&parsed)?;
    let millis = |d: Duration| format!("{}ms", d.as_millis());
    if let Some(t) = options.connect_timeout.filter(|_| backend.accepts("connect_timeout")) {
        parsed.set_default_option("connect_timeout", millis(t));
    }
    let files = [
        ("ca", &options.ca),
        ("cert", &options.cert),
        ("key", &options.key),
        ("password_file", &options.password_file),
    ];
    for (option, value) in files {
        if let Some(value) = value {
            if !backend.accepts(option) {
                return Err(parsed.error(format!("{}:// takes no {option}", parsed.scheme)));
            }
            parsed.set_default_option(option, value.clone());
        }
    }
    if let (Some(t), TtlScope::PerSession { option }) = (options.session_ttl, backend.ttl) {
        // An alias the URL may use instead (ZooKeeper's session_timeout) also wins.
        if !parsed.query.contains_key("session_timeout") {
            parsed.set_default_option(option, millis(t));
        }
    }
    tracing::debug!(backend = backend.name, hosts = parsed.hosts.len(), "connecting");
    (backend.connect)(&parsed).await
}

/// [`connect`] with a URL parsed already.
///
/// # Errors
///
/// As [`connect`].
///
/// # Cancel safety
///
/// Cancel-safe: dropping the future before it returns drops the half-made connection; no lock
/// was taken yet.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), locksmith::LockError> {
/// let url = locksmith::driver::BackendUrl::parse("mem://?ttl=5s")?;
/// let locker = locksmith::connect_url(url).await?;
/// let guard = locker.lock("job").acquire().await?;
/// assert_eq!(guard.ttl(), std::time::Duration::from_secs(5)); // the URL's ttl=
/// # Ok(()) }
/// ```
pub async fn connect_url(parsed: BackendUrl) -> Result<Locker> {
    let backend = find(&parsed)?;
    tracing::debug!(backend = backend.name, hosts = parsed.hosts.len(), "connecting");
    (backend.connect)(&parsed).await
}

/// The backend of `url`'s scheme, or the error that says which feature would add it.
fn find(url: &BackendUrl) -> Result<&'static Descriptor> {
    if let Some(backend) = backend_for(&url.scheme) {
        return Ok(backend);
    }
    Err(match KNOWN.iter().find(|(_, schemes)| schemes.contains(&url.scheme.as_str())) {
        Some((feature, _)) => url.error(format!(
            "the `{feature}` feature of locksmith is not enabled; add `features = [\"{feature}\"]` to the locksmith dependency"
        )),
        None => url.error(format!(
            "unknown scheme {:?}; expected one of {}",
            url.scheme,
            KNOWN
                .iter()
                .flat_map(|(_, schemes)| schemes.iter())
                .map(|s| format!("{s}://"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    })
}
