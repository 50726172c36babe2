//! Helpers shared by the etcd backend's tests: server addresses from the environment, and an
//! admin etcd client to reach around the lock.

#![allow(dead_code)]

use std::time::Duration;

use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use lockcore::BackendUrl;

pub use lockcore::conformance::env_url;

/// `base` with `query` appended (`base` has no query of its own in our env vars).
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
