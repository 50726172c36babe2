//! Bad input: every bad name, TTL and URL, unreachable and wrong-protocol servers and a server that
//! stops answering, on every backend — with the error each gets and how long it took. None may
//! panic, succeed, hang, or leave anything on the server.

use std::future::Future;
use std::time::Duration;

use locksmith::{LockError, Locker};
use locksmith_core::conformance::proxy::{Mode, Proxy};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::targets::Target;

/// One bad input and what it got.
#[derive(Debug, Serialize, Deserialize)]
pub struct BadInput {
    /// The backend.
    pub backend: String,
    /// What kind of bad input.
    pub case: String,
    /// The input itself (shortened).
    pub input: String,
    /// The error variant (`InvalidName`, `Unavailable`, ...), `panic`, or `ok` (a failure).
    pub outcome: String,
    /// The error message (shortened).
    pub message: String,
    /// How long it took, in ms.
    pub ms: f64,
    /// Holders or waiters of the lock left on the server afterwards.
    pub leftovers: usize,
}

impl BadInput {
    /// What this case broke, if anything.
    pub fn broken(&self) -> Vec<String> {
        let id = format!("bad input {} {} {:?}", self.backend, self.case, self.input);
        let mut out = Vec::new();
        if self.outcome == "panic" || self.outcome == "ok" {
            out.push(format!("{id}: {} ({})", self.outcome, self.message));
        }
        if self.ms > 30_000.0 {
            out.push(format!("{id}: took {:.0} ms", self.ms));
        }
        if self.leftovers > 0 {
            out.push(format!("{id}: {} entries left on the server", self.leftovers));
        }
        out
    }
}

fn variant(e: &LockError) -> String {
    let debug = format!("{e:?}");
    debug.split([' ', '(', '{']).next().unwrap_or_default().to_owned()
}

fn short(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// Runs `attempt` in a task (a panic is caught as one) and records it.
async fn record<F>(backend: &'static str, case: &str, input: &str, attempt: F) -> BadInput
where
    F: Future<Output = Result<(), LockError>> + Send + 'static,
{
    let start = Instant::now();
    let joined = tokio::time::timeout(Duration::from_secs(120), tokio::spawn(attempt)).await;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let (outcome, message) = match joined {
        Ok(Ok(Ok(()))) => ("ok".to_owned(), "accepted".to_owned()),
        Ok(Ok(Err(e))) => (variant(&e), e.to_string()),
        Ok(Err(e)) => ("panic".to_owned(), e.to_string()),
        Err(_) => ("hang".to_owned(), "no answer within 120 s".to_owned()),
    };
    BadInput {
        backend: backend.into(),
        case: case.to_owned(),
        input: short(input),
        outcome,
        message: short(&message),
        ms,
        leftovers: 0,
    }
}

/// Every case on every target.
pub async fn bad_input(targets: &[&Target]) -> Vec<BadInput> {
    let mut out = Vec::new();
    for target in targets {
        tracing::info!(backend = target.backend, "bad input");
        out.extend(one(target).await);
    }
    out
}

async fn one(target: &Target) -> Vec<BadInput> {
    let backend = target.backend;
    let mut out = Vec::new();
    let Ok(locker) = locksmith::connect(&target.url).await else {
        return out;
    };
    let name = format!("chaos/bad/{:08x}", rand::random::<u32>());
    let long = "x".repeat(locksmith::MAX_NAME_LEN + 1);
    for (case, bad) in [
        ("empty name", String::new()),
        ("name too long", long),
        ("NUL in name", "a\0b".into()),
    ] {
        let l: Locker = locker.clone();
        let shown = format!("{bad:?}");
        out.push(
            record(backend, case, &shown, async move {
                l.lock(bad).try_acquire().await.map(drop)
            })
            .await,
        );
    }
    for (case, ttl) in [
        ("zero TTL", Duration::ZERO),
        ("TTL below the minimum", Duration::from_millis(1)),
        ("TTL above the maximum", Duration::from_secs(25 * 3600)),
    ] {
        let (l, n) = (locker.clone(), name.clone());
        out.push(
            record(backend, case, &format!("{ttl:?}"), async move {
                l.lock(n).ttl(ttl).acquire().await.map(drop)
            })
            .await,
        );
    }
    for input in [("absurd timeout", Duration::MAX)] {
        let (l, n) = (locker.clone(), name.clone());
        out.push(
            record(backend, input.0, "Duration::MAX", async move {
                l.lock(n).timeout(input.1).acquire().await.map(drop)
            })
            .await,
        );
    }
    // Nothing above may have left anything.
    if let Ok(info) = locker.inspect(&name).await {
        let left = usize::from(info.holder.is_some()) + info.waiters;
        for r in &mut out {
            r.leftovers = left;
        }
    }
    if backend == "mem" {
        for url in ["mem://a/b", "mem://x?ttl=1ms", "mem://u:p@x"] {
            out.push(connect_case(backend, "bad URL", url).await);
        }
        return out;
    }
    let scheme = backend;
    let closed = closed_port();
    // mysql:// needs a user and a database before it dials (without them the server cases
    // would stop at the URL).
    let (user, db) = if scheme == "mysql" { ("u@", "/db") } else { ("", "") };
    let mut urls = vec![
        ("bad port", format!("{scheme}://127.0.0.1:99999")),
        ("unknown option", format!("{scheme}://127.0.0.1:1?no_such_option=1")),
        ("no host", format!("{scheme}://")),
        ("unknown scheme", "consul://127.0.0.1:8500".to_owned()),
        (
            "unreachable server",
            format!("{scheme}://{user}127.0.0.1:{closed}{db}?connect_timeout=2s"),
        ),
    ];
    // Another backend's server on the URL: the wrong protocol.
    let others = [
        ("etcd", "LOCKSMITH_TEST_ETCD"),
        ("zk", "LOCKSMITH_TEST_ZK"),
        ("redis", "LOCKSMITH_TEST_REDIS"),
    ];
    for (other, var) in others {
        if other == scheme {
            continue;
        }
        if let Ok(url) = crate::targets::env_url(var) {
            let host = url.split_once("://").map_or("", |(_, h)| h).to_owned();
            urls.push((
                "wrong protocol",
                format!("{scheme}://{user}{host}{db}?connect_timeout=2s"),
            ));
        }
    }
    for (case, url) in urls {
        out.push(connect_case(backend, case, &url).await);
    }
    // A server that accepts connections and stops answering.
    if let Ok(Some(host)) = target.hosts().map(|h| h.into_iter().next()) {
        let proxy = Proxy::start(&host).await;
        if let Ok(url) = target.url_with_hosts(&[proxy.addr()]) {
            if let Ok(l) = locksmith::connect(&url).await {
                proxy.set(Mode::FREEZE);
                let (n, ttl) = (name.clone(), target.ttl);
                out.push(
                    record(backend, "server stops answering", "try_acquire", async move {
                        l.lock(n).ttl(ttl).try_acquire().await.map(drop)
                    })
                    .await,
                );
            }
        }
    }
    out
}

async fn connect_case(backend: &'static str, case: &str, url: &str) -> BadInput {
    let url = url.to_owned();
    let shown = url.clone();
    record(backend, case, &shown, async move {
        locksmith::connect(&url).await.map(drop)
    })
    .await
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(1, |a| a.port())
}
