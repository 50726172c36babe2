//! One logical Redis server (a server, the master the sentinels name, or a cluster): its command
//! connection, its pub/sub side, whether it is up, and how one request is sent to it. What the
//! requests say (the scripts and their replies) is the protocol's ([`crate::protocol`]).
//!
//! Commands go over auto-reconnecting multiplexed connections (see [`crate::conn::link`]).
//! Nothing blocks on them (no BLPOP): waiting happens on the pub/sub connection of [`Notifier`].
//! Every call is bounded by the connect plus response timeout, so a dead or paused server yields
//! [`LockError::Unavailable`], never a hang.
//!
//! With `min_replicas`, a grant is trusted only once that many replicas acknowledged it (`WAIT`
//! on the connection that made it; [`Node::run_grant`]). Renewals are confirmed the same way
//! (see [`crate::renew`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use locksmith_core::{LockError, Result};

use crate::error::map_error;

use crate::config::Config;
use crate::conn::call::{already_loaded, load_library, ScriptCall, ScriptMode};
use crate::conn::link::{Conn, Link};
use crate::protocol::library::LuaScript;
use crate::protocol::scripts::{LockScripts, RENEWAL_SOURCES, SCRIPTS};
use crate::wake::Notifier;

/// One Redis server.
pub(crate) struct Node {
    pub(crate) addr: String,
    pub(crate) link: Arc<Link>,
    pub(crate) notifier: Notifier,
    pub(crate) op_timeout: Duration,
    /// Replicas that must acknowledge a grant or renewal (0: none), and how long to wait for them.
    pub(crate) min_replicas: u32,
    pub(crate) replica_timeout: Duration,
    /// The scripts that read this URL's settings, with them written in (one set for all the
    /// backend's servers).
    pub(crate) scripts: Arc<LockScripts>,
    pub(crate) waiter_ttl: Duration,
    /// Whether this server is sent function calls (`FCALL`) or plain scripts (`EVALSHA`).
    pub(crate) script_mode: ScriptMode,
    health: std::sync::Mutex<Health>,
}

/// Whether a server (of several, in quorum mode) is known to be down, and when to try it again.
#[derive(Default)]
struct Health {
    /// Down until then: operations skip it. `None`: believed up.
    retry_at: Option<Instant>,
    /// The next pause after a failed try (doubles from [`MIN_RETRY`] to [`MAX_RETRY`]).
    backoff: Duration,
}

const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(2);

impl Node {
    /// Prepares the connections to server `i` of `config` without contacting it (see [`Node::ping`]),
    /// with the scripts of `config`'s settings.
    pub(crate) fn new(config: &Config, i: usize, scripts: Arc<LockScripts>) -> Result<Node> {
        let addr = config.addrs[i].clone();
        let manager_config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let link = Link::new(config, i, manager_config).map_err(|e| LockError::InvalidUrl {
            url: addr.clone(),
            reason: e.to_string(),
        })?;
        let link = Arc::new(link);
        let notifier = Notifier::new(
            link.clone(),
            addr.clone(),
            config.connect_timeout,
            config.response_timeout,
        );
        let op_timeout = config.connect_timeout + config.response_timeout;
        Ok(Node {
            addr,
            link,
            notifier,
            op_timeout,
            min_replicas: config.min_replicas,
            replica_timeout: config.replica_timeout,
            scripts,
            waiter_ttl: config.waiter_ttl,
            script_mode: ScriptMode::default(),
            health: Default::default(),
        })
    }

    /// Quorum mode: `false` while this server is known to be down and its next try is not due.
    /// When it is due, the caller that gets `true` is the one try (the next is pushed back by
    /// the backoff at once), so a dead server costs one request per backoff, not one per operation.
    pub(crate) fn usable(&self) -> bool {
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        match h.retry_at {
            None => true,
            Some(at) if Instant::now() < at => false,
            Some(_) => {
                h.retry_at = Some(Instant::now() + h.backoff);
                true
            }
        }
    }

    /// Records the outcome of a request: a server that is unavailable is skipped until its
    /// backoff (100 ms doubling to 2 s) passes; an answer makes it usable again.
    pub(crate) fn record<T>(&self, result: &Result<T>) {
        let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(LockError::Unavailable { .. }) => {
                let backoff = if h.retry_at.is_some() {
                    (h.backoff * 2).clamp(MIN_RETRY, MAX_RETRY)
                } else {
                    MIN_RETRY
                };
                if h.retry_at.is_none() {
                    tracing::warn!(addr = %self.addr, "redis master unavailable; retrying it with backoff");
                }
                h.retry_at = Some(Instant::now() + backoff);
                h.backoff = backoff;
            }
            _ => {
                if h.retry_at.take().is_some() {
                    tracing::info!(addr = %self.addr, "redis master answers again");
                }
                h.backoff = MIN_RETRY;
            }
        }
    }

    /// The error for an operation that skipped this server.
    pub(crate) fn skipped(&self) -> LockError {
        LockError::Unavailable {
            message: format!("redis at {} is down (retrying it with backoff)", self.addr),
            source: None,
        }
    }

    /// A call of `script` on `keys` to this server, as a function or a plain script as the server
    /// allows (see [`ScriptMode`]); add its arguments with [`ScriptCall::arg`].
    pub(crate) fn call<'a>(&'a self, script: &'a LuaScript, keys: &[&str]) -> ScriptCall<'a> {
        ScriptCall::new(script, keys, &self.script_mode, &self.addr)
    }

    /// Checks that the server answers, and loads our function libraries and the watchdog's plain
    /// scripts (one pipelined round trip), so that the first call of each does not cost a
    /// "not found" error and a second round trip. A server that refuses functions (Redis 6, or
    /// the user's ACL) is sent every script as a plain one instead (a second round trip, once),
    /// and from then on `EVALSHA`. On a cluster every master loads them (`FUNCTION LOAD` and
    /// `SCRIPT LOAD` go to all masters).
    pub(crate) async fn ping(&self) -> Result<()> {
        let libraries = [&*self.scripts.library, &*SCRIPTS.library];
        let renewals = &SCRIPTS.sources[..RENEWAL_SOURCES];
        let plain: Vec<&String> = self
            .scripts
            .sources
            .iter()
            .chain(&SCRIPTS.sources[RENEWAL_SOURCES..])
            .collect();
        let plain = &plain;
        let cluster = self.link.is_cluster();
        self.bounded("connecting", || async move {
            let mut conn = self.link.conn().await?;
            let mut refused = None;
            if cluster {
                for library in libraries {
                    match load_library(library, &mut conn).await {
                        Err(e) if ScriptMode::refused(&e) => refused = Some(e),
                        other => other?,
                    }
                }
                for source in renewals {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(source)
                        .exec_async(&mut conn)
                        .await?;
                }
            } else {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for library in libraries {
                    pipe.cmd("FUNCTION").arg("LOAD").arg(&library.source);
                }
                for source in renewals {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(source);
                }
                pipe.cmd("PING");
                let replies: Vec<redis::RedisResult<redis::Value>> = pipe.query_async(&mut conn).await?;
                for (i, reply) in replies.into_iter().enumerate() {
                    match reply {
                        Err(e) if i < libraries.len() && already_loaded(&e) => {}
                        // Not loaded for another reason (the server is out of memory, or refuses
                        // writes): each call loads its library again when it misses it.
                        Err(e) if i < libraries.len() && !ScriptMode::refused(&e) => {
                            tracing::debug!(addr = %self.addr, error = %e, "loading a function library failed")
                        }
                        Err(e) if i < libraries.len() => refused = Some(e),
                        other => drop(other?),
                    }
                }
            }
            if let Some(e) = refused {
                self.script_mode.fall_back(&self.addr, &e);
            }
            if !self.script_mode.functions() {
                for source in plain {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(*source)
                        .exec_async(&mut conn)
                        .await?;
                }
            }
            if cluster {
                redis::cmd("PING").exec_async(&mut conn).await?;
            }
            Ok(())
        })
        .await
    }

    /// Runs `call`, a script that may grant a lock (its reply starts with 1 then), on the
    /// connection grants go over; with `min_replicas`, also says how many replicas acknowledged a
    /// grant on `key` (`None`: nothing to confirm). See [`Node::too_few`].
    pub(crate) async fn run_grant(
        &self,
        what: &str,
        key: &str,
        call: &ScriptCall<'_>,
    ) -> Result<(Vec<i64>, Option<i64>)> {
        Ok(self.run_confirmed(what, key, call).await?.0)
    }

    /// [`Node::run_grant`] for any script whose reply starts with 1 when it wrote what replicas
    /// must confirm (a guarded write); also says whether it was sent a second time (see
    /// [`Node::bounded_sends`]).
    pub(crate) async fn run_confirmed(
        &self,
        what: &str,
        key: &str,
        call: &ScriptCall<'_>,
    ) -> Result<((Vec<i64>, Option<i64>), bool)> {
        self.bounded_sends_on(call.first_key(), what, || async move {
            let mut conn = self.write_conn().await?;
            let reply: Vec<i64> = call.invoke(&mut conn).await?;
            let acks = self.confirm_if(reply.first() == Some(&1), &mut conn, key).await?;
            Ok((reply, acks))
        })
        .await
    }

    /// The acknowledgements of a grant, if they are fewer than `min_replicas` (the grant must be
    /// given back: a failover could hand the lock to someone else).
    pub(crate) fn too_few(&self, acks: Option<i64>) -> Option<i64> {
        acks.filter(|a| *a < i64::from(self.min_replicas))
    }

    /// The connection for a write that replicas may have to confirm (a grant, a renewal batch):
    /// with `min_replicas`, the one `WAIT` is sent on.
    pub(crate) async fn write_conn(&self) -> redis::RedisResult<Conn> {
        if self.min_replicas > 0 {
            self.link.confirm_conn().await
        } else {
            self.link.conn().await
        }
    }

    /// With `min_replicas`, after a request that `granted` a lock on `conn`: how many replicas
    /// acknowledged it (`None`: nothing to confirm).
    async fn confirm_if(&self, granted: bool, conn: &mut Conn, key: &str) -> redis::RedisResult<Option<i64>> {
        if !granted || self.min_replicas == 0 {
            return Ok(None);
        }
        conn.wait_replicas(key, self.min_replicas, self.replica_timeout)
            .await
            .map(Some)
    }

    /// The error for a write that only `acks` replicas acknowledged.
    pub(crate) fn unconfirmed(&self, what: &str, acks: i64) -> LockError {
        // A master that lost its replicas may have been failed over: ask the sentinels again.
        self.link.failed(None);
        LockError::Unavailable {
            message: format!(
                "{what} on redis at {} was acknowledged by {acks} replica(s) within {:?}; min_replicas={} \
                 (a failover could lose it; the default on Sentinel and Cluster is 1, and a master \
                 without replicas needs min_replicas=0)",
                self.link.describe(&self.addr),
                self.replica_timeout,
                self.min_replicas
            ),
            source: None,
        }
    }

    /// Runs one request within the operation timeout, mapping the client's errors to
    /// [`LockError`]. A request that met a dropped connection (the server restarted, or closed
    /// the connection while it sat idle) is sent once more, on the reconnected connection: most
    /// scripts answer the same when run twice. Those whose answer can change use
    /// [`Node::bounded_sends`].
    pub(crate) async fn bounded<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        Ok(self.bounded_sends(what, call).await?.0)
    }

    /// [`Node::bounded`], also saying whether the request was sent a second time. Then its first
    /// send met a dropped connection, and may or may not have run: usually it never left the
    /// client (the connection had been closed while idle), but it may have run with its answer
    /// lost. A script whose second run answers differently (a release finds nothing to release,
    /// a compare-and-set finds its own value) cannot tell which, and must say so.
    pub(crate) async fn bounded_sends<T, F, Fut>(&self, what: &str, call: F) -> Result<(T, bool)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.bounded_sends_on(None, what, call).await
    }

    /// [`Node::bounded_sends`] of a request on `key`: unanswered, it makes a cluster suspect the
    /// master of the key's slot ([`crate::conn::link::Link::unanswered_on`]).
    pub(crate) async fn bounded_sends_on<T, F, Fut>(
        &self,
        key: Option<&str>,
        what: &str,
        mut call: F,
    ) -> Result<(T, bool)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let unanswered = |sent| {
            self.link.unanswered(sent);
            if let Some(key) = key {
                self.link.unanswered_on(key);
            }
        };
        let deadline = Instant::now() + self.op_timeout;
        let mut resent = false;
        loop {
            locksmith_core::metrics::round_trip();
            let sent = Instant::now();
            let answer = match key.and_then(|key| self.link.slot_moved(key)) {
                None => tokio::time::timeout_at(deadline, call()).await,
                Some(moved) => tokio::select! {
                    biased;
                    answer = tokio::time::timeout_at(deadline, call()) => answer,
                    () = moved => return Err(self.slot_moved_error(what)),
                },
            };
            match answer {
                Ok(Ok(v)) => return Ok((v, resent)),
                Ok(Err(e)) if !resent && e.is_connection_dropped() => {
                    self.link.failed(Some(&e));
                    resent = true;
                    tracing::debug!(addr = %self.addr, error = %e, what, "redis connection dropped; sending again");
                }
                Ok(Err(e)) => {
                    if e.is_timeout() {
                        unanswered(sent);
                    }
                    self.link.failed(Some(&e));
                    return Err(map_error(e, what, &self.link.describe(&self.addr)));
                }
                Err(_) => {
                    unanswered(sent);
                    self.link.failed(None);
                    return Err(LockError::Unavailable {
                        message: format!(
                            "{what} on redis at {}: no answer within {:?}",
                            self.link.describe(&self.addr),
                            self.op_timeout
                        ),
                        source: None,
                    });
                }
            }
        }
    }

    /// A request given up as the cluster promoted another master for its slot while it waited
    /// (see [`crate::conn::link::Link::slot_moved`]): the caller sends it again, to the new one.
    fn slot_moved_error(&self, what: &str) -> LockError {
        LockError::Unavailable {
            message: format!(
                "{what} on redis at {}: the cluster promoted another master for its slot while it waited",
                self.link.describe(&self.addr)
            ),
            source: None,
        }
    }
}

/// A TTL in whole milliseconds, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
