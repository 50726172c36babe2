//! Operator faults: what operators do to servers, which is how locks fail in production.
//!
//! - **Misconfiguration** must end at once, never be retried: TLS asked of a server without it
//!   (every backend), a wrong password, a database that does not exist, a Redis whose
//!   `maxmemory-policy` may evict lock keys. Expected: [`LockError::Denied`] within 10 s.
//! - **Out of space, out of connections, out of memory**: etcd at its space quota (the NOSPACE
//!   alarm; `etcd-quota`), PostgreSQL at its connection limit (the role `locksmith_few`), Redis
//!   over its `maxmemory` with `noeviction`, PostgreSQL with a full disk (a tablespace on a small
//!   tmpfs; root only), `file://` on a full tmpfs (root only). Expected: an
//!   acquire ends with a clear error within its timeout, and a lock held before the fault is kept
//!   (or its holder told) and nobody else gets it; afterwards the server is freed again.
//!
//! Each case is one row; a row whose expectation failed is a broken promise.

use std::future::Future;
use std::time::Duration;

use locksmith::{LockError, Locker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::targets::env_url;

/// One operator fault and what it got.
#[derive(Debug, Serialize, Deserialize)]
pub struct OperatorFault {
    /// The backend.
    pub backend: String,
    /// What the operator did.
    pub case: String,
    /// What must happen.
    pub expected: String,
    /// The error variant the acquire or connect got (`Denied`, `Unavailable`, ...), `ok` (it
    /// succeeded), `panic` or `hang`.
    pub outcome: String,
    /// The error message (shortened).
    pub message: String,
    /// How long the acquire or connect took, in ms.
    pub ms: f64,
    /// For the resource cases: what became of a lock held before the fault (`kept`, `lost (told)`).
    pub held: Option<String>,
    /// Whether the expectation held.
    pub ok: bool,
}

impl OperatorFault {
    /// What this case broke, if anything.
    pub fn broken(&self) -> Vec<String> {
        if self.ok {
            return Vec::new();
        }
        vec![format!(
            "operator fault {} {}: expected {}, got {} after {:.0} ms ({}); held lock: {}",
            self.backend,
            self.case,
            self.expected,
            self.outcome,
            self.ms,
            self.message,
            self.held.as_deref().unwrap_or("-")
        )]
    }
}

/// What an attempt got: the variant, the message, and the time.
struct Attempt {
    outcome: String,
    message: String,
    ms: f64,
    error: Option<LockError>,
}

/// Runs `attempt` in a task (a panic is caught as one), within two minutes.
async fn attempt<F, T>(f: F) -> Attempt
where
    F: Future<Output = Result<T, LockError>> + Send + 'static,
    T: Send + 'static,
{
    let start = Instant::now();
    let joined = tokio::time::timeout(Duration::from_secs(120), tokio::spawn(f)).await;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let (outcome, message, error) = match joined {
        Ok(Ok(Ok(_))) => ("ok".to_owned(), "accepted".to_owned(), None),
        Ok(Ok(Err(e))) => (variant(&e), short(&e.to_string()), Some(e)),
        Ok(Err(e)) => ("panic".to_owned(), short(&e.to_string()), None),
        Err(_) => ("hang".to_owned(), "no answer within 120 s".to_owned(), None),
    };
    Attempt {
        outcome,
        message,
        ms,
        error,
    }
}

fn variant(e: &LockError) -> String {
    let debug = format!("{e:?}");
    debug.split([' ', '(', '{']).next().unwrap_or_default().to_owned()
}

fn short(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// A row for a misconfiguration: `connect` must be refused (`Denied`) within 10 s, with a
/// message that contains `names`.
async fn misconfigured(backend: &str, case: &str, url: String, names: &'static str) -> OperatorFault {
    let got = attempt(async move { locksmith::connect(&url).await.map(drop) }).await;
    let ok = got.outcome == "Denied" && got.ms < 10_000.0 && got.message.to_lowercase().contains(names);
    OperatorFault {
        backend: backend.into(),
        case: case.into(),
        expected: format!("Denied within 10 s, naming {names:?}"),
        outcome: got.outcome,
        message: got.message,
        ms: got.ms,
        held: None,
        ok,
    }
}

/// Every operator fault whose servers run here (`scripts/backends up`), in turn.
pub async fn operator_faults() -> Vec<OperatorFault> {
    let mut out = Vec::new();
    tracing::info!("operator faults: misconfiguration");
    out.extend(misconfigurations().await);
    tracing::info!("operator faults: resources");
    if let Ok(url) = env_url("LOCKSMITH_TEST_ETCD_QUOTA") {
        out.push(resources::etcd_nospace(&url).await);
    }
    if let Ok(url) = env_url("LOCKSMITH_TEST_POSTGRES_FEW") {
        out.push(resources::postgres_connections(&url).await);
    }
    if let Ok(url) = env_url("LOCKSMITH_TEST_REDIS") {
        out.push(resources::redis_oom(&url).await);
    }
    if let (Ok(url), Ok(admin)) = (
        env_url("LOCKSMITH_TEST_POSTGRES"),
        env_url("LOCKSMITH_TEST_POSTGRES_ADMIN"),
    ) {
        if let Some(row) = postgres_disk::postgres_full_disk(&url, &admin).await {
            out.push(row);
        }
    }
    if let Some(row) = resources::file_full_disk().await {
        out.push(row);
    }
    out
}

async fn misconfigurations() -> Vec<OperatorFault> {
    let mut out = Vec::new();
    let host = |var: &str| {
        env_url(var)
            .ok()
            .and_then(|u| u.split_once("://").map(|(_, h)| h.to_owned()))
    };
    if let Some(h) = host("LOCKSMITH_TEST_REDIS") {
        let url = format!("rediss://{h}?connect_timeout=5s");
        out.push(misconfigured("redis", "TLS asked of a server without it", url, "tls").await);
    }
    if let Some(h) = host("LOCKSMITH_TEST_ETCD") {
        let url = format!("etcds://{h}?connect_timeout=5s");
        out.push(misconfigured("etcd", "TLS asked of a server without it", url, "tls").await);
    }
    if let (Some(h), Ok(tls)) = (host("LOCKSMITH_TEST_ZK"), std::env::var("LOCKSMITH_TEST_TLS_DIR")) {
        // zks:// needs a CA (the ZooKeeper client has no system roots): the test servers' own.
        let url = format!("zks://{h}?connect_timeout=5s&ca={tls}/ca.pem");
        out.push(misconfigured("zk", "TLS asked of a server without it", url, "tls").await);
    }
    if let Ok(pg) = env_url("LOCKSMITH_TEST_POSTGRES") {
        let url = format!("{pg}?sslmode=require&connect_timeout=5s");
        out.push(misconfigured("postgres", "TLS asked of a server without it", url, "tls").await);
        if let Some((user, rest)) = pg
            .split_once(':')
            .and_then(|(s, r)| r.split_once('@').map(|(u, h)| ((s, u), h)))
        {
            let (scheme, creds) = user;
            let name = creds.split(':').next().unwrap_or_default().trim_start_matches("//");
            let url = format!("{scheme}://{name}:wrong-password@{rest}");
            out.push(misconfigured("postgres", "wrong password", url, "password").await);
        }
        if let Some((base, _db)) = pg.rsplit_once('/') {
            let url = format!("{base}/no_such_database");
            out.push(misconfigured("postgres", "a database that does not exist", url, "no_such_database").await);
        }
    }
    if let Ok(url) = env_url("LOCKSMITH_TEST_REDIS_EVICTING") {
        out.push(
            misconfigured(
                "redis",
                "maxmemory-policy that evicts (allkeys-lru)",
                url,
                "maxmemory-policy",
            )
            .await,
        );
    }
    out
}

mod postgres_disk;
mod resources;

/// A lock held through a fault: what became of it after `wait`, as the row's `held` column.
async fn held_through(guard: &locksmith::LockGuard, other: &Locker, name: &str, wait: Duration) -> (String, bool) {
    tokio::time::sleep(wait).await;
    let taken = matches!(other.lock(name).try_acquire().await, Ok(Some(_)));
    match (guard.lost_reason(), taken) {
        (_, true) => ("granted to another while held".into(), false),
        (None, false) => ("kept".into(), true),
        (Some(reason), false) => (format!("lost (told: {reason})"), true),
    }
}

/// `true` when `e` is an error of a variant that says the server is out of something and may
/// recover (`Unavailable`) or refused for good (`Denied`), and its message names `names`.
fn clear(got: &Attempt, names: &[&str]) -> bool {
    matches!(got.error, Some(LockError::Unavailable { .. } | LockError::Denied(_)))
        && names.iter().any(|n| got.message.contains(n))
}
