//! Shared helpers of the Redis backend's tests: server addresses, the conformance harness, and a
//! raw admin connection.
#![allow(dead_code)]

use std::time::Duration;

use backend_redis::LockKeys;
use lockcore::conformance::Harness;
use lockcore::{async_trait, BackendUrl, LockName, Locker};

pub use lockcore::conformance::env_url;

/// The single test server (`LOCKSMITH_TEST_REDIS`).
pub fn redis_url() -> String {
    env_url("LOCKSMITH_TEST_REDIS")
}

/// The three independent masters (`LOCKSMITH_TEST_REDIS_QUORUM`), as single-host URLs.
pub fn quorum_hosts() -> Vec<String> {
    let url = env_url("LOCKSMITH_TEST_REDIS_QUORUM");
    let hosts = url
        .strip_prefix("redis://")
        .expect("a redis:// URL")
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    hosts.split(',').map(|h| format!("redis://{h}")).collect()
}

/// `base` with extra query options.
pub fn with_options(base: &str, options: &str) -> String {
    if options.is_empty() {
        base.to_owned()
    } else if base.contains('?') {
        format!("{base}&{options}")
    } else {
        format!("{base}?{options}")
    }
}

/// A raw connection to the server of a single-host `url`, as an operator or an old client has.
pub async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    let parsed = BackendUrl::parse(url).expect("url");
    let host = parsed.hosts[0].to_addr(6379);
    let db = if parsed.path.is_empty() {
        "0"
    } else {
        parsed.path.as_str()
    };
    let client = redis::Client::open(format!("redis://{host}/{db}")).expect("client");
    tokio::time::timeout(Duration::from_secs(10), client.get_multiplexed_async_connection())
        .await
        .expect("admin connection timed out")
        .expect("admin connection")
}

/// A raw connection over TLS to the server of a `rediss://` `url`, as its user, or as
/// `(user, password)` when given.
#[cfg(feature = "tls")]
pub async fn secure_admin(
    url: &str,
    who: Option<(&str, &str)>,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let parsed = BackendUrl::parse(url).expect("url");
    let files = parsed.tls_files().expect("TLS files");
    let (user, password) = match who {
        Some((u, p)) => (u.to_owned(), p.to_owned()),
        None => (
            parsed.user().expect("a user").to_owned(),
            parsed.password().expect("password").expect("a password"),
        ),
    };
    let host = parsed.hosts[0].to_addr(6379);
    let client = redis::Client::build_with_tls(
        format!("rediss://{user}:{password}@{host}/0"),
        redis::TlsCertificates {
            client_tls: files.identity.map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
            root_cert: files.ca,
        },
    )?;
    tokio::time::timeout(Duration::from_secs(10), client.get_multiplexed_async_connection())
        .await
        .expect("admin connection timed out")
}

/// Connects a new Locker (its own connections) to `url`.
pub async fn locker(url: &str) -> Locker {
    let parsed = BackendUrl::parse(url).expect("url");
    backend_redis::connect(&parsed).await.expect("connect")
}

/// The conformance harness over one Redis server with the given URL options.
pub struct RedisHarness {
    pub url: String,
    parsed: BackendUrl,
    admin: redis::aio::MultiplexedConnection,
}

impl RedisHarness {
    pub async fn new(options: &str) -> RedisHarness {
        let url = with_options(&redis_url(), options);
        let parsed = BackendUrl::parse(&url).expect("url");
        RedisHarness {
            admin: admin(&url).await,
            url,
            parsed,
        }
    }

    /// On the secured server (`LOCKSMITH_TEST_REDIS_SECURE`: mutual TLS and an ACL user); the
    /// admin connection is the same user over the same TLS.
    #[cfg(feature = "tls")]
    pub async fn secure() -> RedisHarness {
        let url = env_url("LOCKSMITH_TEST_REDIS_SECURE");
        let parsed = BackendUrl::parse(&url).expect("url");
        RedisHarness {
            admin: secure_admin(&url, None).await.expect("admin connection"),
            url,
            parsed,
        }
    }

    pub fn keys(&self, name: &LockName) -> LockKeys {
        LockKeys::for_url(&self.parsed, name).expect("keys")
    }
}

#[async_trait]
impl Harness for RedisHarness {
    async fn locker(&self) -> Locker {
        locker(&self.url).await
    }

    async fn delete_behind_back(&self, name: &LockName) {
        let deleted: i64 = redis::cmd("DEL")
            .arg(self.keys(name).lock)
            .query_async(&mut self.admin.clone())
            .await
            .expect("DEL");
        assert_eq!(deleted, 1, "no holder to remove");
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        let keys = self.keys(name);
        let mut conn = self.admin.clone();
        let holder: Option<String> = redis::cmd("GET")
            .arg(&keys.lock)
            .query_async(&mut conn)
            .await
            .expect("GET");
        let queued: Vec<String> = redis::cmd("ZRANGE")
            .arg(&keys.queue)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .expect("ZRANGE");
        holder.into_iter().chain(queued).collect()
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}

/// Whether the server of a single-host `url` answers PING right now.
pub async fn answers(url: &str) -> bool {
    let parsed = BackendUrl::parse(url).expect("url");
    let Ok(client) = redis::Client::open(format!("redis://{}/0", parsed.hosts[0].to_addr(6379))) else {
        return false;
    };
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING").query_async::<String>(&mut conn).await.ok()
    };
    matches!(tokio::time::timeout(Duration::from_secs(2), ping).await, Ok(Some(_)))
}

/// Logs to the test output, filtered by RUST_LOG (default: warnings).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}
