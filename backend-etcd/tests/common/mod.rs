//! Helpers shared by the etcd backend's tests: server addresses from the environment, and an
//! admin etcd client to reach around the lock.

#![allow(dead_code)]

use std::time::Duration;

use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, BackendUrl, LockName};
use locksmith_core::{Family, Locker};
use locksmith_etcd::{Layout, DEFAULT_NAMESPACE};

pub use locksmith_core::conformance::env_url;

/// `base` with `query` appended.
pub fn with_query(base: &str, query: &str) -> String {
    if base.contains('?') {
        format!("{base}&{query}")
    } else {
        format!("{base}?{query}")
    }
}

/// The `host:port` endpoints of an `etcd://` URL.
pub fn endpoints(url: &str) -> Vec<String> {
    let parsed = BackendUrl::parse(url).expect("test URL");
    parsed.hosts.iter().map(|h| h.to_addr(2379)).collect()
}

/// A plain etcd client for the test's own reads and deletes.
pub async fn admin(url: &str) -> Client {
    let options = etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(3));
    tokio::time::timeout(Duration::from_secs(10), Client::connect(endpoints(url), Some(options)))
        .await
        .expect("admin client: connect timed out")
        .expect("admin client")
}

/// Keys under `prefix`, oldest create revision first.
pub async fn keys_under(client: &Client, prefix: &str) -> Vec<String> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only();
    let resp = client.kv_client().get(prefix, Some(options)).await.expect("get");
    resp.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The sum of etcd's `grpc_server_msg_received_total` for `method` (e.g. `LeaseKeepAlive`,
/// `Txn`, `Watch`), read from the member's `/metrics` (served on its client port).
pub async fn messages_received(endpoint: &str, method: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(endpoint)
        .await
        .expect("connect to /metrics");
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n");
    conn.write_all(request.as_bytes()).await.expect("request /metrics");
    let mut body = String::new();
    conn.read_to_string(&mut body).await.expect("read /metrics");
    let needle = format!("grpc_method=\"{method}\"");
    body.lines()
        .filter(|l| l.starts_with("grpc_server_msg_received_total{") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The single test server's minimum lease TTL (scripts/backends configures it for 1 s leases).
pub const CONFORMANCE_TTL: Duration = Duration::from_secs(1);

/// The conformance harness: lockers on `url` (each its own client and session lease), an admin
/// client to reach around the lock.
pub struct EtcdHarness {
    url: BackendUrl,
    /// The same with a 5 s session TTL ([`Harness::sturdy_locker`]).
    sturdy_url: BackendUrl,
    admin: Client,
    layout: Layout,
}

impl EtcdHarness {
    /// The key layout of the lockers it makes.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// On the plain server (`LOCKSMITH_TEST_ETCD`), default layout.
    pub async fn plain() -> EtcdHarness {
        init_tracing();
        let base = env_url("LOCKSMITH_TEST_ETCD");
        EtcdHarness {
            admin: admin(&base).await,
            url: BackendUrl::parse(&with_query(&base, "ttl=1s")).expect("LOCKSMITH_TEST_ETCD"),
            sturdy_url: BackendUrl::parse(&with_query(&base, "ttl=5s")).expect("LOCKSMITH_TEST_ETCD"),
            layout: Layout::Default {
                namespace: DEFAULT_NAMESPACE.to_owned(),
            },
        }
    }

    /// On the secured server (`LOCKSMITH_TEST_ETCD_SECURE`: mutual TLS and a user with a password);
    /// the admin client is the same user over the same TLS.
    #[cfg(feature = "tls")]
    pub async fn secure() -> EtcdHarness {
        init_tracing();
        let base = env_url("LOCKSMITH_TEST_ETCD_SECURE");
        EtcdHarness {
            admin: secure_admin(&base).await,
            url: BackendUrl::parse(&with_query(&base, "ttl=1s")).expect("LOCKSMITH_TEST_ETCD_SECURE"),
            sturdy_url: BackendUrl::parse(&with_query(&base, "ttl=5s")).expect("LOCKSMITH_TEST_ETCD_SECURE"),
            layout: Layout::Default {
                namespace: DEFAULT_NAMESPACE.to_owned(),
            },
        }
    }
}

/// A plain etcd client over TLS with the user, password, CA and client certificate of `url`.
#[cfg(feature = "tls")]
pub async fn secure_admin(url: &str) -> Client {
    use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
    let parsed = BackendUrl::parse(url).expect("secure URL");
    let files = parsed.tls_files().expect("TLS files");
    let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(files.ca.expect("ca")));
    if let Some((cert, key)) = files.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let password = parsed.password().expect("password").expect("a password");
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_tls(tls)
        .with_user(parsed.user().expect("a user"), password);
    let endpoints: Vec<String> = parsed
        .hosts
        .iter()
        .map(|h| format!("https://{}", h.to_addr(2379)))
        .collect();
    tokio::time::timeout(Duration::from_secs(10), Client::connect(endpoints, Some(options)))
        .await
        .expect("admin client: connect timed out")
        .expect("admin client")
}

#[async_trait]
impl Harness for EtcdHarness {
    async fn locker(&self) -> Locker {
        locksmith_etcd::connect(&self.url).await.expect("connect to etcd")
    }

    async fn sturdy_locker(&self) -> Locker {
        locksmith_etcd::connect(&self.sturdy_url)
            .await
            .expect("connect to etcd")
    }

    async fn delete_behind_back(&self, name: &LockName) {
        self.delete_behind_back_in(Family::Mutex, name).await;
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        let holder = keys_under(&self.admin, &self.layout.prefix(family, name))
            .await
            .into_iter()
            .next()
            .expect("no holder to delete");
        let deleted = self
            .admin
            .kv_client()
            .delete(holder, None)
            .await
            .expect("delete holder");
        assert_eq!(deleted.deleted(), 1);
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        keys_under(&self.admin, &self.layout.lock_prefix(name)).await
    }

    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        keys_under(&self.admin, &self.layout.prefix(family, name)).await
    }

    fn short_ttl(&self) -> Duration {
        CONFORMANCE_TTL
    }
}
