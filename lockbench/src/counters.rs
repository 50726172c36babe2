//! Server-side request counters. What counts as a request on each backend:
//!
//! - **Redis**: every command a client of *this process* sends, counted exactly on a `MONITOR`
//!   connection for the measured window (see [`crate::monitor`]); commands a Lua script runs
//!   inside the server are not requests and are left out (Redis's own `INFO` counters include
//!   them), and so is everyone else's traffic.
//! - **etcd**: the delta of `grpc_server_msg_received_total` on `/metrics` (client URL), summed
//!   over all methods: one per unary request (Range, Txn, Put, LeaseGrant, ...) and one per message
//!   a client sends on a stream (each lease keep-alive, each watch create/cancel); opening a stream
//!   adds nothing by itself. Server-wide. The split by gRPC method (`measured_requests_by_method`)
//!   says which requests they were.
//! - **ZooKeeper**: the delta of `zk_packets_received` from `mntr`: one per request packet, session
//!   pings included. Server-wide.
//! - **PostgreSQL**: the delta of `calls` in `pg_stat_statements` for the URL's database: one per
//!   top-level statement a client had executed (a prepared statement's `Execute`, a simple query,
//!   `LISTEN`); the statements a function runs inside the server are not requests. Split by the
//!   function called (`measured_requests_by_method`). A server without the extension (it must be
//!   in `shared_preload_libraries`, and created in the database) falls back to the calls made into
//!   the backend, and `measured_counter` says so.
//! - **mem** and **file** (no server): [`Counting`] counts the calls made into the backend instead.
//!
//! The etcd, ZooKeeper and PostgreSQL counters are server-wide (PostgreSQL: database-wide):
//! anything else talking to the same server during a measurement is counted too, so measure on
//! otherwise idle servers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use locksmith::driver::{BackendUrl, Lease, LockBackend, LockName, LockRequest};
use locksmith::{LockInfo, Locker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::monitor::{Monitor, Tally};

/// A source of "requests received so far".
#[derive(Clone)]
pub enum Counter {
    /// Redis `MONITOR`, at this address, filtered to this process's connections.
    Redis(String),
    /// etcd `/metrics`, at this address.
    Etcd(String),
    /// ZooKeeper `mntr`, at this address.
    Zk(String),
    /// PostgreSQL `pg_stat_statements`, through this URL (the statement counter's own excluded).
    #[cfg(feature = "postgres-ref")]
    Postgres(String),
    /// Calls made through a [`Counting`] backend.
    Calls(Arc<AtomicU64>),
}

impl Counter {
    /// The counter of the server behind `url` (`None` for mem and file, and for a PostgreSQL
    /// server without `pg_stat_statements`: wrap the locker with [`Counting`]).
    pub async fn for_url(url: &str) -> Result<Option<Counter>> {
        let parsed = BackendUrl::parse(url)?;
        let first = |port| {
            parsed
                .hosts
                .first()
                .map(|h| h.to_addr(port))
                .ok_or_else(|| anyhow!("{url} names no host"))
        };
        Ok(match parsed.scheme.as_str() {
            "redis" => Some(Counter::Redis(first(6379)?)),
            "etcd" => Some(Counter::Etcd(first(2379)?)),
            "zk" => Some(Counter::Zk(first(2181)?)),
            #[cfg(feature = "postgres-ref")]
            "postgres" | "postgresql" => {
                let counter = Counter::Postgres(url.to_owned());
                match counter.read().await {
                    Ok(_) => Some(counter),
                    Err(e) => {
                        eprintln!("postgres: no server request counter ({e:#}); counting the calls into the backend");
                        None
                    }
                }
            }
            _ => None,
        })
    }

    /// Opens a measurement window (on Redis: starts the `MONITOR` connection).
    pub async fn start(&self) -> Result<Window> {
        match self {
            Counter::Redis(addr) => {
                let fut = Monitor::start(addr);
                let monitor = tokio::time::timeout(Duration::from_secs(10), fut)
                    .await
                    .map_err(|_| anyhow!("starting MONITOR timed out"))??;
                Ok(Window::Monitor(monitor))
            }
            other => Ok(Window::Snapshot {
                counter: other.clone(),
                before: other.read_split().await?,
            }),
        }
    }

    /// The current value of a counter that can be read at any time (not Redis).
    pub async fn read(&self) -> Result<u64> {
        Ok(self.read_split().await?.values().sum())
    }

    /// The current value of a counter that can be read at any time (not Redis), split by what
    /// the server tells apart (etcd: the gRPC method; PostgreSQL: the statement, keyed `label
    /// #id`, so that a statement the server dropped from its table between two reads is left out
    /// rather than subtracted; the others: one entry, `all`).
    async fn read_split(&self) -> Result<BTreeMap<String, u64>> {
        let all = |n: u64| BTreeMap::from([("all".to_string(), n)]);
        let fut = async {
            match self {
                Counter::Redis(_) => bail!("the Redis count is taken over a window: use start()"),
                Counter::Etcd(addr) => {
                    let req = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
                    let text = exchange(addr, req.as_bytes()).await?;
                    Ok(metric_by_method(&text, "grpc_server_msg_received_total"))
                }
                Counter::Zk(addr) => {
                    let text = exchange(addr, b"mntr").await?;
                    Ok(all(field(&text, "zk_packets_received")?))
                }
                #[cfg(feature = "postgres-ref")]
                Counter::Postgres(url) => crate::reference::statements_executed(url).await,
                Counter::Calls(n) => Ok(all(n.load(Ordering::SeqCst))),
            }
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .map_err(|_| anyhow!("reading the server counter timed out"))?
    }

    /// What is counted, for the report.
    pub fn describe(&self) -> &'static str {
        match self {
            Counter::Redis(_) => {
                "Redis MONITOR: commands sent by lockbench's own connections (script-internal commands excluded)"
            }
            Counter::Etcd(_) => "etcd /metrics grpc_server_msg_received_total (server-wide)",
            Counter::Zk(_) => "ZooKeeper mntr zk_packets_received (server-wide)",
            #[cfg(feature = "postgres-ref")]
            Counter::Postgres(_) => "PostgreSQL pg_stat_statements calls (database-wide)",
            Counter::Calls(_) => "calls into the backend (no server counter)",
        }
    }
}

/// A measurement window opened by [`Counter::start`].
pub enum Window {
    /// A counter read at the start and again at the end.
    Snapshot {
        /// The counter.
        counter: Counter,
        /// Its value at the start, split as [`Counter::read_split`] splits it.
        before: BTreeMap<String, u64>,
    },
    /// A Redis `MONITOR` connection.
    Monitor(Monitor),
}

/// The requests counted in a window.
#[derive(Clone, Debug, Default)]
pub struct Count {
    /// Requests received by the server.
    pub requests: u64,
    /// Per-command detail, where the counter has it (Redis).
    pub detail: Option<Tally>,
    /// Per-method split (`Txn×50 Watch×100`), where the counter has one (etcd).
    pub by_method: Option<String>,
}

impl Window {
    /// Closes the window.
    pub async fn finish(self) -> Result<Count> {
        match self {
            Window::Snapshot { counter, before } => {
                let after = counter.read_split().await?;
                // Keyed as `read_split` keys them; `label #id` keys add up under their label.
                let mut delta: BTreeMap<String, u64> = BTreeMap::new();
                for (key, n) in after {
                    let added = n.saturating_sub(before.get(&key).copied().unwrap_or(0));
                    let label = key.split_once(" #").map_or(key.as_str(), |(l, _)| l);
                    if added > 0 {
                        *delta.entry(label.to_owned()).or_insert(0) += added;
                    }
                }
                let split = !delta.keys().all(|k| k == "all");
                Ok(Count {
                    requests: delta.values().sum(),
                    detail: None,
                    by_method: split.then(|| Tally::summary_of(&delta)),
                })
            }
            Window::Monitor(m) => {
                let tally = m.finish().await?;
                Ok(Count {
                    requests: tally.requests(),
                    detail: Some(tally),
                    by_method: None,
                })
            }
        }
    }
}

impl Count {
    /// Adds the per-command detail to a row's params (`measured_requests_by_command`,
    /// `measured_script_internal_commands`), where there is one.
    pub fn annotate(&self, params: &mut serde_json::Map<String, serde_json::Value>) {
        if let Some(t) = &self.detail {
            params.insert("measured_requests_by_command".into(), t.summary().into());
            params.insert("measured_script_internal_commands".into(), t.script_internal.into());
            params.insert("measured_other_clients_commands".into(), t.others.into());
        }
        if let Some(m) = &self.by_method {
            params.insert("measured_requests_by_method".into(), m.clone().into());
        }
    }
}

/// Sends `request` and reads the answer to EOF.
async fn exchange(addr: &str, request: &[u8]) -> Result<String> {
    let mut s = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    s.write_all(request).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The integer after `key` (`key:value` or `key<TAB>value` lines).
fn field(text: &str, key: &str) -> Result<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_start_matches(':').trim().parse().ok())
        .ok_or_else(|| anyhow!("{key} not found in the server's answer (is the 4lw command / stat enabled?)"))
}

/// The series of a Prometheus counter, summed by their `grpc_method` label (`all` for a series
/// without one).
fn metric_by_method(text: &str, metric: &str) -> BTreeMap<String, u64> {
    let mut by_method = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let method = rest
            .split_once("grpc_method=\"")
            .and_then(|(_, m)| m.split_once('"'))
            .map_or("all", |(m, _)| m);
        *by_method.entry(method.to_string()).or_insert(0) += value as u64;
    }
    by_method
}

/// A backend wrapper that counts every call into the backend (the mem backend's "requests").
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn LockBackend>,
    calls: Arc<AtomicU64>,
}

impl Counting {
    /// Wraps the backend of `locker` in a new locker whose calls are added to `calls` (read them
    /// with [`Counter::Calls`]).
    pub fn wrap(locker: &Locker, calls: Arc<AtomicU64>) -> Locker {
        Locker::new(Counting {
            inner: locker.backend().clone(),
            calls,
        })
    }

    fn tick(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl LockBackend for Counting {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn try_acquire(&self, req: &LockRequest) -> locksmith::Result<Option<Lease>> {
        self.tick();
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> locksmith::Result<Lease> {
        self.tick();
        self.inner.acquire(req, deadline).await
    }
    async fn release(&self, lease: &Lease) -> locksmith::Result<()> {
        self.tick();
        self.inner.release(lease).await
    }
    async fn renew(&self, lease: &Lease) -> locksmith::Result<()> {
        self.tick();
        self.inner.renew(lease).await
    }
    async fn inspect(&self, name: &LockName) -> locksmith::Result<LockInfo> {
        self.tick();
        self.inner.inspect(name).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Vec<locksmith::Result<()>> {
        self.tick();
        self.inner.renew_many(leases).await
    }
    fn renew_interval(&self, ttl: Duration) -> Duration {
        self.inner.renew_interval(ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters() {
        let prom = "# HELP x\ngrpc_server_msg_received_total{grpc_method=\"Range\"} 3\n\
                    grpc_server_msg_received_total{grpc_method=\"Txn\"} 4\ngrpc_server_msg_received_totalx 9\n";
        let split = metric_by_method(prom, "grpc_server_msg_received_total");
        assert_eq!(split, BTreeMap::from([("Range".into(), 3), ("Txn".into(), 4)]));
        assert_eq!(
            field("zk_version\t3.8\nzk_packets_received\t42\n", "zk_packets_received").unwrap(),
            42
        );
        assert_eq!(
            field(
                "# Stats\r\ntotal_commands_processed:17\r\n",
                "total_commands_processed:"
            )
            .unwrap(),
            17
        );
    }
}
