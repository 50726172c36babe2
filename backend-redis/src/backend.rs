//! [`RedisBackend`]: the [`LockBackend`] over one Redis server, or over several independent
//! masters with a quorum. Each method picks the protocol of the request's kind: the one wait loop
//! ([`crate::protocol::wait`]) with the mutex's entry ([`crate::protocol::mutex`]) or the other
//! kinds' ([`crate::protocol::kinds`]), the quorum ([`crate::protocol::quorum`]), elections
//! ([`crate::protocol::election`]); renewal ([`crate::renew`]), `list` and `inspect`
//! ([`crate::listing`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use locksmith_core::driver::{async_trait, BackendUrl, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{Leader, LeaderWatch, LockError, LockInfo, LockKind, Result};
use tokio::time::Instant;

use crate::cleanup;
use crate::config::Config;
use crate::conn::admit;
use crate::conn::fanout::counts;
use crate::conn::inner::Inner;
use crate::conn::node::Node;
use crate::protocol::kinds::KindEntry;
use crate::protocol::mutex::MutexEntry;
use crate::protocol::scripts::LockScripts;
use crate::protocol::{election, quorum, wait};

/// The Redis backend. Build it with [`RedisBackend::connect`] (or [`crate::connect`] for a
/// [`locksmith_core::Locker`]).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

impl RedisBackend {
    /// Connects to the server(s) of `url`. Fails with [`LockError::InvalidUrl`] for a bad URL,
    /// [`LockError::Denied`] when a master may evict lock keys (its `maxmemory-policy`; see
    /// `conn/admit.rs`) or refuses us for good (credentials, TLS) where the others cannot
    /// form a majority, and [`LockError::Unavailable`] when the server (in quorum mode: a
    /// majority of the masters) does not answer within the connect timeout.
    pub async fn connect(url: &BackendUrl) -> Result<RedisBackend> {
        let config = Config::parse(url)?;
        let scripts = Arc::new(LockScripts::for_config(&config));
        let nodes = (0..config.node_urls.len())
            .map(|i| Node::new(&config, i, scripts.clone()))
            .collect::<Result<Vec<_>>>()?;
        let quorum = config.quorum();
        // A majority is enough: a master that is down does not delay connecting (by more than
        // STRAGGLERS, when the majority answered first).
        let pings = first_answers(&nodes, &config, quorum).await;
        let mut pings: Vec<Result<()>> = pings.into_iter().flatten().collect();
        // A master that may evict lock keys is refused even when a majority without it answered.
        if let Some(i) = pings
            .iter()
            .position(|p| matches!(p, Err(LockError::Denied(m)) if m.contains("maxmemory-policy")))
        {
            return Err(pings.swap_remove(i).unwrap_err());
        }
        let reachable = pings.iter().filter(|p| p.is_ok()).count();
        let denied = pings.iter().filter(|p| matches!(p, Err(LockError::Denied(_)))).count();
        if reachable < config.quorum() && nodes.len() - denied < config.quorum() {
            // No retry brings a majority: the refusal, not "unavailable".
            let first = pings.into_iter().find(|p| matches!(p, Err(LockError::Denied(_))));
            return Err(first.and_then(Result::err).unwrap_or(LockError::Denied("redis".into())));
        }
        if reachable < config.quorum() {
            let mut errors = pings.into_iter().filter_map(|p| p.err());
            if nodes.len() == 1 {
                return Err(errors.next().unwrap_or_else(|| LockError::Unavailable {
                    message: "redis".into(),
                    source: None,
                }));
            }
            let detail: Vec<String> = errors.map(|e| e.to_string()).collect();
            return Err(LockError::Unavailable {
                message: format!(
                    "only {reachable} of {} redis masters answered; a quorum of {} is needed ({})",
                    nodes.len(),
                    config.quorum(),
                    detail.join("; ")
                ),
                source: None,
            });
        }
        tracing::debug!(masters = nodes.len(), reachable, layout = ?config.layout, "connected to redis");
        Ok(RedisBackend {
            inner: Arc::new(Inner { config, nodes }),
        })
    }
}

/// How long connecting waits for the other masters once a majority answered: a master that is
/// down does not delay connecting by more, and one that answers as fast as the others (one of
/// them may evict lock keys) is among the answers.
const STRAGGLERS: Duration = Duration::from_millis(250);

/// [`check`] of every node, at once: the answers in by [`STRAGGLERS`] after a majority's, or all
/// of them, or those that show a majority impossible (masters that refused us for good leave too
/// few). `answers[i]` is `None` for a node that had not answered.
async fn first_answers(nodes: &[Node], config: &Config, quorum: usize) -> Vec<Option<Result<()>>> {
    let mut answers: Vec<Option<Result<()>>> = nodes.iter().map(|_| None).collect();
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| async move {
            // Boxed as a trait object: the whole connect future's type stays small enough for
            // the compiler to prove it `Send` (callers' futures embed it).
            let checking: std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send + '_>> =
                Box::pin(check(node, config));
            let r = checking.await;
            // A quorum's health (as `fan_out` keeps it); one server has none to keep.
            if nodes.len() > 1 {
                node.record(&r);
            }
            (i, r)
        })
        .collect();
    let mut until: Option<Instant> = None;
    loop {
        let next = match until {
            None => pending.next().await,
            Some(at) => match tokio::time::timeout_at(at, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some((i, r)) = next else { break };
        answers[i] = Some(r);
        if answers.len() - refusals(&answers) < quorum {
            break;
        }
        if until.is_none() && counts(&answers).1 >= quorum {
            until = Some(Instant::now() + STRAGGLERS);
        }
    }
    answers
}

/// Whether `node` may be used, within the connect timeout: it answers, speaks TLS if the URL asks
/// for it ([`admit::plain_answer`] tells a plain server at once) and may not evict lock keys
/// ([`admit::eviction`]).
async fn check(node: &Node, config: &Config) -> Result<()> {
    let limit = config.connect_timeout;
    let checked = async {
        node.ping().await?;
        admit::eviction(node, config).await
    };
    let checked = async {
        tokio::select! {
            r = checked => r,
            refused = admit::plain_answer(node, config) => Err(refused),
        }
    };
    match tokio::time::timeout(limit, checked).await {
        Ok(r) => r,
        Err(_) => Err(LockError::Unavailable {
            message: format!("connecting to redis at {}: timed out after {limit:?}", node.addr),
            source: None,
        }),
    }
}

/// How many masters refused us for good ([`LockError::Denied`]): TLS that cannot be
/// established, credentials, a `maxmemory-policy` that evicts.
fn refusals(answers: &[Option<Result<()>>]) -> usize {
    answers
        .iter()
        .filter(|a| matches!(a, Some(Err(LockError::Denied(_)))))
        .count()
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        let inner = &self.inner;
        inner.check_ttl(req)?;
        if req.kind != LockKind::Mutex {
            inner.check_family(req.kind.family())?;
            wait::try_acquire(inner, req, KindEntry::new(inner, req)).await
        } else if inner.is_quorum() {
            quorum::try_acquire(inner, req).await.map(|t| t.lease())
        } else {
            wait::try_acquire(inner, req, MutexEntry::new(inner, &req.name, req.ttl)).await
        }
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        let inner = &self.inner;
        inner.check_ttl(req)?;
        if req.kind != LockKind::Mutex {
            inner.check_family(req.kind.family())?;
            wait::acquire(inner, req, KindEntry::new(inner, req), deadline).await
        } else if inner.is_quorum() {
            quorum::acquire(inner, req, deadline).await
        } else {
            wait::acquire(inner, req, MutexEntry::new(inner, &req.name, req.ttl), deadline).await
        }
    }

    /// Runs the release script (on every server of a quorum). Cancel-safe: dropped before it
    /// finished, the release is run again in the background (see the crate docs, "The scripts").
    async fn release(&self, lease: &Lease) -> Result<()> {
        let inner = &self.inner;
        if lease.kind == LockKind::Mutex {
            cleanup::release(inner, &lease.name, MutexEntry::of_lease(inner, lease)).await
        } else {
            inner.check_family(lease.kind.family())?;
            cleanup::release(inner, &lease.name, KindEntry::of_lease(inner, lease)).await
        }
    }

    /// One script: the lease's check and the write (see `guarded.rs`).
    async fn write_guarded(&self, lease: &Lease, write: &locksmith_core::driver::GuardedWrite) -> Result<bool> {
        crate::guarded::write(&self.inner, lease, write).await
    }

    /// `locksmith-data:{<tag>}:<segment>:<suffix>`, in the lock's hash slot (see `guarded.rs`).
    fn data_key(&self, family: locksmith_core::Family, lock: &LockName, suffix: &str) -> Result<String> {
        crate::guarded::data_key(&self.inner, family, lock, suffix)
    }

    /// A plain `GET` of `key`.
    async fn read_key(&self, key: &str) -> Result<Option<Vec<u8>>> {
        crate::guarded::read(&self.inner, key).await
    }

    /// Each server gets the whole batch in one round trip (see the crate docs, "The scripts").
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        crate::renew::renew_many(&self.inner, leases).await
    }

    /// The URL's `ttl=`.
    fn default_ttl(&self) -> Option<Duration> {
        self.inner.config.default_ttl
    }

    /// The URL's `connect_timeout` plus `response_timeout`: one request on a connection that may
    /// have to be made again first.
    fn request_timeout(&self) -> Duration {
        self.inner.config.connect_timeout + self.inner.config.response_timeout
    }

    async fn list(&self, prefix: &str) -> Result<Vec<locksmith_core::ListedLock>> {
        crate::listing::list(&self.inner, prefix).await
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        election::leader(&self.inner, name).await
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        election::observe(&self.inner, name).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        crate::listing::inspect(&self.inner, name).await
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("servers", &self.inner.config.addrs)
            .field("layout", &self.inner.config.layout)
            .field("prefix", &self.inner.config.prefix)
            .finish()
    }
}
