//! [`RedisBackend`]: the [`LockBackend`] over one Redis server, or over several independent
//! masters with a quorum (see [`crate::quorum`]). Mutexes go to [`crate::queue`] and
//! [`crate::quorum`]; semaphores, read-write locks and elections to [`crate::kind_queue`] and
//! [`crate::election`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lockcore::driver::{async_trait, BackendUrl, Lease, LockBackend, LockName, LockRequest};
use lockcore::{HolderInfo, Leader, LeaderWatch, LockError, LockInfo, LockKind, Result};
use tokio::time::Instant;

use crate::cleanup::Cleanup;
use crate::config::Config;
use crate::fanout::{counts, fan_out};
use crate::inner::{lease, new_token, Inner};
use crate::keys::{entry, KindKeys, LockKeys};
use crate::renew::Item;
use crate::session::{Attempt, Node};
use crate::{election, kind_queue, queue, quorum};

/// The Redis backend. Build it with [`RedisBackend::connect`] (or [`crate::connect`] for a
/// [`lockcore::Locker`]).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

impl RedisBackend {
    /// Connects to the server(s) of `url`. Fails with [`LockError::InvalidUrl`] for a bad URL and
    /// [`LockError::Unavailable`] when the server (in quorum mode: a majority of the masters) does
    /// not answer within the connect timeout.
    pub async fn connect(url: &BackendUrl) -> Result<RedisBackend> {
        let config = Config::parse(url)?;
        let nodes = (0..config.node_urls.len())
            .map(|i| Node::new(&config, i))
            .collect::<Result<Vec<_>>>()?;
        let (limit, quorum) = (config.connect_timeout, config.quorum());
        // A majority is enough: a master that is down does not delay connecting.
        let pings = fan_out(
            &nodes,
            |_, n| async move {
                match tokio::time::timeout(limit, n.ping()).await {
                    Ok(r) => r,
                    Err(_) => Err(LockError::Unavailable {
                        message: format!("connecting to redis at {}: timed out after {limit:?}", n.addr),
                        source: None,
                    }),
                }
            },
            |answers| counts(answers).1 >= quorum,
        )
        .await;
        let pings: Vec<Result<()>> = pings.into_iter().flatten().collect();
        let reachable = pings.iter().filter(|p| p.is_ok()).count();
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

#[async_trait]
impl LockBackend for RedisBackend {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        self.inner.check_ttl(req)?;
        if req.kind != LockKind::Mutex {
            self.inner.check_family(req.kind.family())?;
            return kind_queue::try_acquire(&self.inner, req).await;
        }
        if self.inner.is_quorum() {
            return quorum::try_acquire(&self.inner, req).await.map(|t| t.lease());
        }
        let keys = Arc::new(self.inner.keys(&req.name));
        let token = new_token();
        let mut guard = Cleanup::new(self.inner.clone(), keys.clone(), token.clone());
        let sent = Instant::now();
        let attempt = self.inner.nodes[0].try_acquire(&keys, &token, req.ttl).await?;
        guard.disarm();
        Ok(match attempt {
            Attempt::Acquired(fence) => Some(lease(req, fence, token, sent)),
            Attempt::Busy { .. } => None,
        })
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        self.inner.check_ttl(req)?;
        if req.kind != LockKind::Mutex {
            self.inner.check_family(req.kind.family())?;
            kind_queue::acquire(&self.inner, req, deadline).await
        } else if self.inner.is_quorum() {
            quorum::acquire(&self.inner, req, deadline).await
        } else {
            queue::acquire(&self.inner, req, deadline).await
        }
    }

    /// Runs the release script (on every server of a quorum). Cancel-safe: dropped before it
    /// finished (a request timeout, a lost connection; on a Cluster its first poll sends
    /// nothing), the release is run again in the background (a [`lockcore::driver::cleanup::spawn`]),
    /// so the key goes now rather than after its TTL.
    async fn release(&self, lease: &Lease) -> Result<()> {
        let mut again = ReleaseAgain {
            inner: self.inner.clone(),
            lease: Some(lease.clone()),
        };
        let result = release(&self.inner, lease).await;
        again.lease = None; // finished: nothing to do again
        result
    }

    /// Each server gets the whole batch as one `RENEW_MANY` script call per 500 leases of one
    /// kind (mutexes, or the others), all pipelined in one round trip (see the crate docs, "The
    /// scripts").
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        let targets: Vec<Target> = leases.iter().map(|l| Target::of(&self.inner, l)).collect();
        let items: Vec<Item<'_>> = leases
            .iter()
            .zip(&targets)
            .map(|(l, t)| match t {
                Target::Mutex(k) => Item {
                    key: &k.lock,
                    info: None,
                    id: &l.holder_id,
                    ttl: l.ttl,
                },
                Target::Kind(k, entry) => Item {
                    key: &k.holders,
                    info: Some(&k.info),
                    id: entry,
                    ttl: l.ttl,
                },
            })
            .collect();
        let quorum = self.inner.config.quorum();
        let n = self.inner.nodes.len();
        // Done once every lease is decided: renewed on a majority, or gone from too many.
        let per_node = fan_out(
            &self.inner.nodes,
            |_, node| node.renew_many(&items),
            |answers| {
                (0..items.len()).all(|i| {
                    let renewed = answers.iter().filter(|a| matches!(a, Some(Ok(f)) if f[i])).count();
                    let gone = answers.iter().filter(|a| matches!(a, Some(Ok(f)) if !f[i])).count();
                    renewed >= quorum || gone > n - quorum
                })
            },
        )
        .await;
        let per_node: Vec<Result<Vec<bool>>> = per_node.into_iter().flatten().collect();
        leases
            .iter()
            .enumerate()
            .map(|(i, lease)| {
                let (mut renewed, mut gone, mut error) = (0, 0, None);
                for result in &per_node {
                    match result {
                        Ok(flags) if flags[i] => renewed += 1,
                        Ok(_) => gone += 1,
                        Err(e) => error = Some(e.to_string()),
                    }
                }
                if renewed >= quorum {
                    Ok(())
                } else if gone > n - quorum {
                    Err(LockError::not_held(lease.name.as_str()))
                } else {
                    Err(LockError::Unavailable {
                        message: format!(
                            "renewed on {renewed} of {n} redis servers, {quorum} needed: {}",
                            error.unwrap_or_default()
                        ),
                        source: None,
                    })
                }
            })
            .collect()
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

    async fn list(&self, prefix: &str) -> Result<Vec<lockcore::ListedLock>> {
        crate::listing::list(&self.inner, prefix).await
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        election::leader(&self.inner, name).await
    }

    async fn observe(&self, name: &LockName) -> Result<LeaderWatch> {
        election::observe(&self.inner, name).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        let keys = self.inner.keys(name);
        let quorum = self.inner.config.quorum();
        let answers = fan_out(
            &self.inner.nodes,
            |_, n| n.inspect(&keys),
            // Done once the holder is decided: some holder on a majority, or no holder able to
            // reach one with the answers still missing (a majority of answers is not enough: a
            // master that has not seen the latest acquire yet must not hide the holder).
            |answers| {
                let (answered, ok) = counts(answers);
                let missing = answers.len() - answered;
                let mut ids: Vec<String> = answers
                    .iter()
                    .filter_map(|a| match a {
                        Some(Ok(info)) => info.value.as_deref().map(|v| parse_value(v).0),
                        _ => None,
                    })
                    .collect();
                ids.sort_unstable();
                let best = ids.chunk_by(|a, b| a == b).map(<[String]>::len).max().unwrap_or(0);
                missing == 0 || ok + missing < quorum || best >= quorum || (ok >= quorum && best + missing < quorum)
            },
        )
        .await;
        let answers = answers.into_iter().flatten();
        let mut infos = Vec::new();
        let mut first_error = None;
        for a in answers {
            match a {
                Ok(info) => infos.push(info),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if infos.len() < self.inner.config.quorum() {
            return Err(first_error.unwrap_or_else(|| LockError::Protocol("no inspect answer".into())));
        }
        let waiters = infos.iter().map(|i| i.waiters).max().unwrap_or(0);
        // The holder is whoever holds the key on a quorum of the servers (on all of one).
        let holders: Vec<(String, Option<u64>, i64)> = infos
            .iter()
            .filter_map(|i| i.value.as_deref().map(|v| (parse_value(v), i.pttl_ms)))
            .map(|((id, fence), pttl)| (id, fence, pttl))
            .collect();
        let holder = holders.iter().find_map(|(id, _, _)| {
            let same: Vec<_> = holders.iter().filter(|(other, _, _)| other == id).collect();
            (same.len() >= self.inner.config.quorum()).then(|| HolderInfo {
                holder_id: id.clone(),
                fencing_token: same.iter().filter_map(|(_, f, _)| *f).max(),
                ttl_remaining: same
                    .iter()
                    .filter(|(_, _, p)| *p >= 0)
                    .map(|(_, _, p)| Duration::from_millis(p.unsigned_abs()))
                    .min(),
            })
        });
        Ok(LockInfo { holder, waiters })
    }
}

/// The keys a lease is renewed in.
enum Target {
    Mutex(LockKeys),
    /// Another kind's keys, and the lease's entry.
    Kind(KindKeys, String),
}

impl Target {
    fn of(inner: &crate::inner::Inner, lease: &Lease) -> Target {
        match lease.kind {
            LockKind::Mutex => Target::Mutex(inner.keys(&lease.name)),
            _ => Target::Kind(
                inner.kind_keys(lease.kind.family(), &lease.name),
                entry(&lease.kind, &lease.holder_id),
            ),
        }
    }
}

/// Splits a lock value into the holder id and the fencing token: `<32 hex>:<n>` is a locksmith
/// holder; anything else (another client's token in the plain layout) is shown whole.
fn parse_value(v: &str) -> (String, Option<u64>) {
    if let Some((token, fence)) = v.split_once(':') {
        if token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Ok(fence) = fence.parse() {
                return (token.to_owned(), Some(fence));
            }
        }
    }
    (v.to_owned(), None)
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

/// The release of `lease`: the backend's `release` without its clean-up guard.
async fn release(inner: &Inner, lease: &Lease) -> Result<()> {
    if lease.kind != LockKind::Mutex {
        inner.check_family(lease.kind.family())?;
        let keys = inner.kind_keys(lease.kind.family(), &lease.name);
        let entry = entry(&lease.kind, &lease.holder_id);
        return match inner.nodes[0].release_kind(&keys, &entry).await? {
            true => Ok(()),
            false => Err(LockError::not_held(lease.name.as_str())),
        };
    }
    let keys = inner.keys(&lease.name);
    let quorum = inner.config.quorum();
    let results = fan_out(
        &inner.nodes,
        |_, n| n.release(&keys, &lease.holder_id),
        |answers| counts(answers).1 >= quorum,
    )
    .await;
    let results = results.into_iter().flatten();
    let mut first_error = None;
    let mut released = false;
    for r in results {
        match r {
            Ok(r) => released |= r,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (released, first_error) {
        (true, _) => Ok(()),
        (false, Some(e)) => Err(e),
        (false, None) => Err(LockError::not_held(lease.name.as_str())),
    }
}

/// A release in flight: dropped while it still holds its lease (the call was cancelled before it
/// finished), it runs the release again in the background.
struct ReleaseAgain {
    inner: Arc<Inner>,
    lease: Option<Lease>,
}

impl Drop for ReleaseAgain {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else { return };
        let inner = self.inner.clone();
        let name = lease.name.clone();
        let spawned = lockcore::driver::cleanup::spawn(async move {
            match release(&inner, &lease).await {
                Ok(()) => tracing::debug!(lock = %lease.name, "released in the background after a cancelled release"),
                Err(e) => {
                    tracing::debug!(lock = %lease.name, error = %e, "background release after a cancelled release")
                }
            }
        });
        if !spawned {
            tracing::warn!(lock = %name, "release cancelled outside a runtime; the key expires after its TTL");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_values() {
        let t = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_value(&format!("{t}:42")), (t.to_owned(), Some(42)));
        assert_eq!(
            parse_value("some-redis-py-uuid"),
            ("some-redis-py-uuid".to_owned(), None)
        );
        assert_eq!(parse_value("short:1"), ("short:1".to_owned(), None));
    }
}
