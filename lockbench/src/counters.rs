//! Server-side request counters, read from the servers themselves: Redis `INFO`
//! (`total_commands_processed`), etcd's `/metrics` on its client URL (the sum of
//! `grpc_server_msg_received_total`: unary requests and every message sent on a stream, such as
//! lease keep-alives), ZooKeeper's `mntr` (`zk_packets_received`). For the in-process backend,
//! which has no server, [`Counting`] counts the calls made to the backend instead.
//!
//! Counters are server-wide: anything else talking to the same server during a measurement is
//! counted too, so measure on otherwise idle servers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use async_trait::async_trait;
use locksmith::{BackendUrl, Lease, LockBackend, LockInfo, LockName, LockRequest, Locker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A source of "requests received so far".
#[derive(Clone)]
pub enum Counter {
    /// Redis `INFO stats`, at this address.
    Redis(String),
    /// etcd `/metrics`, at this address.
    Etcd(String),
    /// ZooKeeper `mntr`, at this address.
    Zk(String),
    /// Calls made through a [`Counting`] backend.
    Calls(Arc<AtomicU64>),
}

impl Counter {
    /// The counter of the server behind `url` (`None` for mem: wrap the locker with [`Counting`]).
    pub fn for_url(url: &str) -> Result<Option<Counter>> {
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
            _ => None,
        })
    }

    /// The current value.
    pub async fn read(&self) -> Result<u64> {
        let fut = async {
            match self {
                Counter::Redis(addr) => {
                    let text = exchange(addr, b"INFO stats\r\n", true).await?;
                    field(&text, "total_commands_processed:")
                }
                Counter::Etcd(addr) => {
                    let req = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
                    let text = exchange(addr, req.as_bytes(), false).await?;
                    Ok(sum_metric(&text, "grpc_server_msg_received_total"))
                }
                Counter::Zk(addr) => {
                    let text = exchange(addr, b"mntr", false).await?;
                    field(&text, "zk_packets_received")
                }
                Counter::Calls(n) => Ok(n.load(Ordering::SeqCst)),
            }
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .map_err(|_| anyhow!("reading the server counter timed out"))?
    }

    /// Requests the act of reading adds to the counter (Redis counts its own INFO command).
    pub fn self_cost(&self) -> u64 {
        matches!(self, Counter::Redis(_)) as u64
    }

    /// What is counted, for the report.
    pub fn describe(&self) -> &'static str {
        match self {
            Counter::Redis(_) => "Redis INFO total_commands_processed",
            Counter::Etcd(_) => "etcd /metrics grpc_server_msg_received_total",
            Counter::Zk(_) => "ZooKeeper mntr zk_packets_received",
            Counter::Calls(_) => "calls to the in-process backend",
        }
    }
}

/// Sends `request` and reads the answer: to EOF, or one RESP bulk string when `resp`.
async fn exchange(addr: &str, request: &[u8], resp: bool) -> Result<String> {
    let mut s = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    s.write_all(request).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if resp && resp_complete(&buf)? {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Whether `buf` holds one whole RESP bulk string (`$len\r\n...\r\n`).
fn resp_complete(buf: &[u8]) -> Result<bool> {
    if buf.first() == Some(&b'-') {
        bail!("redis answered: {}", String::from_utf8_lossy(buf).trim());
    }
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(false);
    };
    let len: usize = std::str::from_utf8(&buf[1..end])?.parse().context("bad RESP length")?;
    Ok(buf.len() >= end + 2 + len + 2)
}

/// The integer after `key` (`key:value` or `key<TAB>value` lines).
fn field(text: &str, key: &str) -> Result<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_start_matches(':').trim().parse().ok())
        .ok_or_else(|| anyhow!("{key} not found in the server's answer (is the 4lw command / stat enabled?)"))
}

/// The sum of all series of a Prometheus counter.
fn sum_metric(text: &str, metric: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
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
        assert_eq!(sum_metric(prom, "grpc_server_msg_received_total"), 7);
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
        assert!(resp_complete(b"$3\r\nabc\r\n").unwrap());
        assert!(!resp_complete(b"$10\r\nabc").unwrap());
    }
}
