//! One logical Redis server (a server, the master the sentinels name, or a cluster): its command
//! connection, its pub/sub side, and the typed calls of the scripts.
//!
//! Commands go over auto-reconnecting multiplexed connections (see [`crate::link`]). Nothing
//! blocks on them (no BLPOP): waiting happens on the pub/sub connection of [`Notifier`]. Every
//! call is bounded by the connect plus response timeout, so a dead or paused server yields
//! [`LockError::Unavailable`], never a hang.
//!
//! With `min_replicas`, a grant is trusted only once that many replicas acknowledged it (`WAIT`
//! on the connection that made it); otherwise the lock is given back at once and the call fails
//! with [`LockError::Unavailable`]. Renewals are confirmed the same way (see [`crate::renew`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use lockcore::{LockError, Result};

use crate::error::map_error;

use crate::call::ScriptCall;
use crate::config::Config;
use crate::keys::LockKeys;
use crate::kind_scripts::KIND_SCRIPTS;
use crate::link::{Conn, Link};
use crate::notify::Notifier;
use crate::scripts::{LockScripts, SCRIPTS};

/// The answer of a one-shot attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token.
    Acquired(u64),
    /// Held by someone (or reserved for the head of the queue); the holder's PTTL in ms (-2: no
    /// holder, -1: a holder without expiry).
    Busy { pttl_ms: i64 },
}

/// The answer of a waiter's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Taken, with this fencing token.
    Acquired(u64),
    /// Still queued.
    Waiting {
        /// This waiter is the first live one in the queue.
        head: bool,
        /// The holder's PTTL in ms (-2: none, -1: no expiry).
        pttl_ms: i64,
        /// The holder is not a locksmith client (plain layout): it will not wake us on release.
        foreign: bool,
    },
}

/// What [`Node::inspect`] reads.
pub(crate) struct RawInfo {
    pub(crate) value: Option<String>,
    pub(crate) pttl_ms: i64,
    pub(crate) waiters: usize,
}

/// One Redis server.
pub(crate) struct Node {
    pub(crate) addr: String,
    pub(crate) link: Arc<Link>,
    pub(crate) notifier: Notifier,
    pub(crate) op_timeout: Duration,
    /// Replicas that must acknowledge a grant or renewal (0: none), and how long to wait for them.
    pub(crate) min_replicas: u32,
    pub(crate) replica_timeout: Duration,
    /// The scripts' fence floor argument (see [`crate::FenceFloor`]).
    pub(crate) floor: String,
    /// The scripts' restart delay argument, in ms (0: none).
    pub(crate) restart_delay_ms: u64,
    /// The mutex scripts, with this URL's settings in them.
    scripts: LockScripts,
    pub(crate) waiter_ttl: Duration,
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
    /// Prepares the connections to server `i` of `config` without contacting it (see [`Node::ping`]).
    pub(crate) fn new(config: &Config, i: usize) -> Result<Node> {
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
        let floor = config.fence_floor.arg();
        // Not `millis`: 0 means "off" for these.
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let restart_delay_ms = ms(config.restart_delay);
        let scripts = LockScripts::new(
            &floor,
            restart_delay_ms,
            ms(config.poller_gap),
            ms(config.max_pass_over),
        );
        Ok(Node {
            addr,
            link,
            notifier,
            op_timeout,
            min_replicas: config.min_replicas,
            replica_timeout: config.replica_timeout,
            floor,
            restart_delay_ms,
            scripts,
            waiter_ttl: config.waiter_ttl,
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

    /// Checks that the server answers, and loads every script (one pipelined round trip), so
    /// that the first `EVALSHA` of each does not cost a `NOSCRIPT` error and a second round trip.
    /// On a cluster every master loads them (`SCRIPT LOAD` goes to all masters).
    pub(crate) async fn ping(&self) -> Result<()> {
        let sources: Vec<&String> = (self.scripts.sources.iter())
            .chain(&SCRIPTS.sources)
            .chain(&KIND_SCRIPTS.sources)
            .collect();
        let mut pipe = redis::pipe();
        for source in &sources {
            pipe.cmd("SCRIPT").arg("LOAD").arg(*source).ignore();
        }
        pipe.cmd("PING");
        let cluster = self.link.is_cluster();
        self.bounded("connecting", Resend::IfDropped, || {
            let (pipe, sources) = (&pipe, &sources);
            async move {
                let mut conn = self.link.conn().await?;
                if !cluster {
                    return pipe.query_async::<(String,)>(&mut conn).await.map(drop);
                }
                for source in sources {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(*source)
                        .exec_async(&mut conn)
                        .await?;
                }
                redis::cmd("PING").exec_async(&mut conn).await
            }
        })
        .await
    }

    pub(crate) async fn try_acquire(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Result<Attempt> {
        let scripts = &self.scripts;
        let mut call = ScriptCall::new(&scripts.try_acquire, &keys.lock_script_keys()[..scripts.keys]);
        call.arg(token).arg(millis(ttl)).arg(&keys.wake);
        let reply = self.grant("acquiring", keys, token, &call).await?;
        match reply.as_slice() {
            [1, fence] => Ok(Attempt::Acquired(fence_token(*fence)?)),
            [0, pttl] => Ok(Attempt::Busy { pttl_ms: *pttl }),
            other => Err(LockError::Protocol(format!(
                "unexpected reply {other:?} from the acquire script"
            ))),
        }
    }

    pub(crate) async fn wait_step(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Result<Step> {
        let scripts = &self.scripts;
        let mut call = ScriptCall::new(&scripts.wait_step, &keys.lock_script_keys()[..scripts.keys]);
        call.arg(token)
            .arg(millis(ttl))
            .arg(&keys.wake)
            .arg(millis(self.waiter_ttl));
        let reply = self.grant("waiting", keys, token, &call).await?;
        match reply.as_slice() {
            [1, fence] => Ok(Step::Acquired(fence_token(*fence)?)),
            [0, head, pttl, foreign] => Ok(Step::Waiting {
                head: *head == 1,
                pttl_ms: *pttl,
                foreign: *foreign == 1,
            }),
            other => Err(LockError::Protocol(format!(
                "unexpected reply {other:?} from the wait script"
            ))),
        }
    }

    /// Compare-and-delete; `true` if the lock was ours. Never sent twice: a second run after a
    /// first whose answer was lost would answer "not ours".
    pub(crate) async fn release(&self, keys: &LockKeys, token: &str) -> Result<bool> {
        let taken = &keys.release_script_keys()[..self.scripts.keys - 1]; // lock, queue, alive (, streak, gap)
        self.give_up(
            &self.scripts.release,
            "releasing",
            Resend::Never,
            taken,
            &keys.wake,
            token,
        )
        .await
    }

    /// Leaves the queue and releases a lock granted to `token`; `true` if a lock was released.
    pub(crate) async fn leave(&self, keys: &LockKeys, token: &str) -> Result<bool> {
        let taken = &keys.release_script_keys()[..3]; // lock, queue, alive
        self.give_up(
            &self.scripts.leave,
            "leaving the queue",
            Resend::IfDropped,
            taken,
            &keys.wake,
            token,
        )
        .await
    }

    /// Runs `release` or `leave` on `keys` (the lock, queue and liveness keys, and for `RELEASE`
    /// with `poller_gap` the streak and gap keys) with the token and the wake channel prefix;
    /// both answer 1 when they released a lock of `token`'s.
    async fn give_up(
        &self,
        script: &redis::Script,
        what: &str,
        resend: Resend,
        keys: &[&str],
        wake: &str,
        token: &str,
    ) -> Result<bool> {
        let released: i64 = self
            .bounded(what, resend, || async move {
                let mut conn = self.link.conn().await?;
                let mut call = ScriptCall::new(script, keys);
                call.arg(token).arg(wake);
                call.invoke(&mut conn).await
            })
            .await?;
        Ok(released == 1)
    }

    /// Quorum mode: raises the fencing counter to `fence` if `token` still holds the lock.
    pub(crate) async fn raise_fence(&self, keys: &LockKeys, token: &str, fence: u64) -> Result<bool> {
        let held: i64 = self
            .bounded("raising the fencing counter", Resend::IfDropped, || async move {
                let mut conn = self.link.conn().await?;
                SCRIPTS
                    .raise_fence
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .arg(token)
                    .arg(fence)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(held == 1)
    }

    pub(crate) async fn inspect(&self, keys: &LockKeys) -> Result<RawInfo> {
        let (value, pttl_ms, waiters): (Option<String>, i64, usize) = self
            .bounded("inspecting", Resend::IfDropped, || async move {
                let mut conn = self.link.conn().await?;
                SCRIPTS
                    .inspect
                    .key(&keys.lock)
                    .key(&keys.queue)
                    .key(&keys.alive)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(RawInfo {
            value,
            pttl_ms,
            waiters,
        })
    }

    /// Runs a script that may grant the lock to `token` (its reply starts with 1 then) and, with
    /// `min_replicas`, has the grant confirmed; an unconfirmed grant is given back and is an error.
    async fn grant(&self, what: &str, keys: &LockKeys, token: &str, call: &ScriptCall<'_>) -> Result<Vec<i64>> {
        let (reply, acks) = self
            .bounded(what, Resend::IfDropped, || async move {
                let mut conn = self.grant_conn().await?;
                let reply: Vec<i64> = call.invoke(&mut conn).await?;
                let acks = self
                    .confirm_if(reply.first() == Some(&1), &mut conn, &keys.lock)
                    .await?;
                Ok((reply, acks))
            })
            .await?;
        self.check_confirmed(keys, token, acks).await?;
        Ok(reply)
    }

    /// The connection for a request that may grant a lock: the one `WAIT` is sent on when grants
    /// must be confirmed.
    pub(crate) async fn grant_conn(&self) -> redis::RedisResult<Conn> {
        if self.min_replicas > 0 {
            self.link.confirm_conn().await
        } else {
            self.link.conn().await
        }
    }

    /// With `min_replicas`, after a request that `granted` a lock on `conn`: how many replicas
    /// acknowledged it (`None`: nothing to confirm).
    pub(crate) async fn confirm_if(
        &self,
        granted: bool,
        conn: &mut Conn,
        key: &str,
    ) -> redis::RedisResult<Option<i64>> {
        if !granted || self.min_replicas == 0 {
            return Ok(None);
        }
        conn.wait_replicas(key, self.min_replicas, self.replica_timeout)
            .await
            .map(Some)
    }

    /// Gives back a lock that too few replicas acknowledged (a failover could hand it to someone
    /// else), and says so.
    async fn check_confirmed(&self, keys: &LockKeys, token: &str, acks: Option<i64>) -> Result<()> {
        let Some(acks) = acks.filter(|a| *a < i64::from(self.min_replicas)) else {
            return Ok(());
        };
        if let Err(e) = self.leave(keys, token).await {
            tracing::warn!(lock = %keys.lock, error = %e, "could not give back an unconfirmed lock; it expires with its TTL");
        }
        Err(self.unconfirmed("the lock", acks))
    }

    /// The error for a write that only `acks` replicas acknowledged.
    pub(crate) fn unconfirmed(&self, what: &str, acks: i64) -> LockError {
        // A master that lost its replicas may have been failed over: ask the sentinels again.
        self.link.failed(None);
        LockError::Unavailable {
            message: format!(
                "{what} on redis at {} was acknowledged by {acks} replica(s) within {:?}; min_replicas={} \
                 (a failover could lose it)",
                self.link.describe(&self.addr),
                self.replica_timeout,
                self.min_replicas
            ),
            source: None,
        }
    }

    /// Runs one request within the operation timeout, mapping the client's errors to
    /// [`LockError`]. A request that met a dropped connection (the server restarted, the
    /// connection was reset) is sent once more on the reconnected connection when `resend`
    /// allows it: every script but `RELEASE` gives the same answer when run twice.
    pub(crate) async fn bounded<T, F, Fut>(&self, what: &str, resend: Resend, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let deadline = Instant::now() + self.op_timeout;
        let mut resends = usize::from(resend == Resend::IfDropped);
        loop {
            lockcore::metrics::round_trip();
            match tokio::time::timeout_at(deadline, call()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if resends > 0 && e.is_connection_dropped() => {
                    self.link.failed(Some(&e));
                    resends -= 1;
                    tracing::debug!(addr = %self.addr, error = %e, what, "redis connection dropped; sending again");
                }
                Ok(Err(e)) => {
                    self.link.failed(Some(&e));
                    return Err(map_error(e, what, &self.link.describe(&self.addr)));
                }
                Err(_) => {
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
}

/// Whether a request may be sent again after its connection dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Once more: running it twice answers as running it once.
    IfDropped,
    /// Never: a second run could answer differently (`RELEASE`).
    Never,
}

fn fence_token(n: i64) -> Result<u64> {
    u64::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| LockError::Protocol(format!("fencing counter at {n}")))
}

/// A TTL in whole milliseconds, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
