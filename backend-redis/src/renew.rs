//! The watchdog's batched renewal ([`renew_many`]): every lease due, on every server (a quorum of
//! them in quorum mode), in one round trip per server.
//!
//! - On a server (or the master the sentinels name) the whole batch is one `RENEW_MANY` call per
//!   [`RENEW_CHUNK`] leases, all pipelined in one round trip. A batch that mixes kinds has the
//!   mutexes in the mutex's `RENEW_MANY` calls and the semaphore permits, read-write lock sides and
//!   leaderships (a deadline per holder in a sorted set) in the `RENEW_MANY` calls of
//!   `lua/kinds/`, all in the same pipeline.
//! - On a cluster the leases are grouped by the master that serves their slot (`CLUSTER SLOTS`),
//!   and each group is pipelined to its master the same way, the groups in parallel: one round
//!   trip per node, not per lock. A group that meets a node that no longer serves one of its
//!   slots (resharding, failover) is renewed again one lease at a time, each call following
//!   `MOVED`/`ASK` to the right node.
//!   Each lease has its own outcome: a master that fails or hangs costs its own leases only, as
//!   the renewal ends by one deadline, its fallback lease by lease included (a quarter of the
//!   batch's shortest TTL, at least 100 ms, within three quarters of the operation timeout). A
//!   master whose part failed or went unanswered has the slot map read again in the background
//!   at once, and again while the map names it (the map known serves meanwhile; see
//!   [`crate::conn::slots`]).
//! - With `min_replicas`, the batch ends with `WAIT` on the same connection: a renewal that too
//!   few replicas acknowledged does not count (the watchdog tries again, and fires `lost()` if the
//!   lease runs out unconfirmed), because a failover would bring back the older expiry.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::join_all;
use locksmith_core::driver::Lease;
use locksmith_core::{LockError, LockKind, Result};
use redis::{RedisError, Script, Value};

use crate::conn::fanout::fan_out;
use crate::conn::inner::Inner;
use crate::conn::node::{millis, Node};
use crate::error::{is_noscript, is_unanswered, map_error};
use crate::layout::{entry, slot_of, KindKeys, LockKeys};
use crate::protocol::scripts::SCRIPTS;

/// Renews `leases` on every server: each gets the whole batch as one `RENEW_MANY` script call
/// per [`RENEW_CHUNK`] leases of one kind (mutexes, or the others), all pipelined in one round
/// trip. A lease is renewed when a quorum of the servers renewed it (all of one), gone
/// ([`LockError::NotHeld`]) when too many no longer hold it.
pub(crate) async fn renew_many(inner: &Inner, leases: &[Lease]) -> Vec<Result<()>> {
    let targets: Vec<Target> = leases.iter().map(|l| Target::of(inner, l)).collect();
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
    let quorum = inner.config.quorum();
    let n = inner.nodes.len();
    // Done once every lease is decided: renewed on a majority, or gone from too many.
    let per_node = fan_out(
        &inner.nodes,
        |_, server| renew_on_server(server, &items),
        |answers| {
            (0..items.len()).all(|i| {
                let renewed = answers
                    .iter()
                    .filter(|a| matches!(a, Some(Ok(f)) if matches!(f[i], Ok(true))))
                    .count();
                let gone = answers
                    .iter()
                    .filter(|a| matches!(a, Some(Ok(f)) if matches!(f[i], Ok(false))))
                    .count();
                renewed >= quorum || gone > n - quorum
            })
        },
    )
    .await;
    let per_node: Vec<Result<Vec<Result<bool>>>> = per_node.into_iter().flatten().collect();
    leases
        .iter()
        .enumerate()
        .map(|(i, lease)| {
            let (mut renewed, mut gone, mut error) = (0, 0, None);
            for result in &per_node {
                match result.as_ref().map(|flags| &flags[i]) {
                    Ok(Ok(true)) => renewed += 1,
                    Ok(Ok(false)) => gone += 1,
                    Ok(Err(e)) | Err(e) => error = Some(e.with_sources()),
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

/// The keys a lease is renewed in.
enum Target {
    Mutex(LockKeys),
    /// Another kind's keys, and the lease's entry.
    Kind(KindKeys, String),
}

impl Target {
    fn of(inner: &Inner, lease: &Lease) -> Target {
        match lease.kind {
            LockKind::Mutex => Target::Mutex(inner.keys(&lease.name)),
            _ => Target::Kind(
                inner.kind_keys(lease.kind.family(), &lease.name),
                entry(&lease.kind, &lease.holder_id),
            ),
        }
    }
}

/// Leases per `RENEW_MANY` call: a script blocks its server while it runs, so a batch of
/// thousands is split into calls of this size (still sent in one pipelined round trip). 500
/// leases take on the order of a millisecond of server time.
pub(crate) const RENEW_CHUNK: usize = 500;

/// One lease to extend.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    /// A mutex's lock key, or the holders set of another kind.
    pub(crate) key: &'a str,
    /// Another kind's holder data (`None`: a mutex).
    pub(crate) info: Option<&'a str>,
    /// The mutex holder's token, or the other kind's entry.
    pub(crate) id: &'a str,
    pub(crate) ttl: Duration,
}

/// Extends every `(lock key, token, ttl)` on one logical server: for each, `true` where
/// extended, `false` where no longer held, an error where its node did not answer. An error of
/// the whole: a server (not a cluster) that did not answer.
async fn renew_on_server(server: &Node, items: &[Item<'_>]) -> Result<Vec<Result<bool>>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    if !server.link.is_cluster() {
        let flags = renew_batch(server, None, items).await?;
        return Ok(flags.into_iter().map(Ok).collect());
    }
    Ok(renew_on_cluster(server, items).await)
}

/// [`renew_on_server`] on a cluster: the leases grouped by the master of their slot (the map
/// known: see [`crate::conn::link::Link::slot_owners`]), the groups in parallel, each lease's own
/// outcome, each group over its node's connection of its own ([`crate::conn::link::Link::node_conn`]).
/// A master that fails or hangs (down, paused, failing over) costs its own leases only: the
/// whole renewal, the fallback lease by lease included, ends by one deadline
/// ([`group_deadline`]), so that the answers of the others reach the watchdog before their
/// leases' validity ends, and so that the watchdog's next try (a tenth of the TTL later) still
/// comes within the validity of a lease whose node hung; a master that did not answer has the
/// slot map read again until it no longer names it, so that the next try finds a replica
/// promoted meanwhile.
async fn renew_on_cluster(server: &Node, items: &[Item<'_>]) -> Vec<Result<bool>> {
    let deadline = group_deadline(server, items);
    // Each step gets at least `MIN_GROUP_TIME`, within the cap of `group_deadline`.
    let cap = tokio::time::Instant::now() + server.op_timeout * 3 / 4;
    let step_deadline = move || deadline.max(tokio::time::Instant::now() + MIN_GROUP_TIME).min(cap);
    let unanswered = |what: &str| LockError::Unavailable {
        message: format!("renewing on the redis cluster: {what}"),
        source: None,
    };
    // The map known (read inline the first time only); without it (no node answered), each lease
    // goes on its own, routed by its key.
    let owners = match tokio::time::timeout_at(deadline, server.link.slot_owners()).await {
        Ok(Ok(owners)) => owners,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading the cluster's slots failed; renewing lease by lease");
            Vec::new()
        }
        Err(_) => Vec::new(),
    };
    let mut groups: BTreeMap<Option<(String, u16)>, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let slot = slot_of(item.key);
        let owner = owners
            .iter()
            .find(|(first, last, _, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, host, port)| (host.clone(), *port));
        groups.entry(owner).or_default().push(i);
    }
    let results = join_all(groups.iter().map(|(owner, indexes)| async move {
        let group: Vec<Item<'_>> = indexes.iter().map(|&i| items[i]).collect();
        // The deadline bounds the whole renewal, the fallback included: a fresh one would let a
        // hung master (the client's response timeout ending the batch just before the deadline,
        // or a first read of the slot map held up) take twice as long, and push the watchdog's
        // next try past the lease's validity.
        let deadline = step_deadline();
        if let Some(owner) = owner {
            let node = format!("{}:{}", owner.0, owner.1);
            tracing::trace!(%node, leases = group.len(), "renewing on a cluster node");
            match tokio::time::timeout_at(deadline, renew_batch(server, Some(owner), &group)).await {
                Ok(Ok(flags)) => {
                    server.link.answered(owner);
                    return flags.into_iter().map(Ok).collect();
                }
                Ok(Err(e)) => {
                    tracing::debug!(%node, error = %e,
                        "batched renewal on a cluster node failed; renewing its leases one by one");
                    // A node that answered with an error (a moved slot, too few replicas) is read
                    // about once (the request marked the map stale); one that did not answer may
                    // be failing over, and is watched.
                    if is_unanswered(&e) {
                        server.link.suspect(owner);
                    } else if matches!(e, LockError::Denied(_)) {
                        // Refused credentials stay in a lazy connection: it is made again.
                        server.link.forget_conns(owner);
                    }
                }
                Err(_) => {
                    tracing::debug!(%node, leases = group.len(), "a cluster node did not answer the renewal in time");
                    server.link.suspect(owner);
                    let what = format!("{node} did not answer in time");
                    return group.iter().map(|_| Err(unanswered(&what))).collect();
                }
            }
        }
        let deadline = step_deadline();
        join_all(group.iter().map(|item| async move {
            match tokio::time::timeout_at(deadline, renew_batch(server, None, std::slice::from_ref(item))).await {
                Ok(flags) => flags.map(|flags| flags.first().copied().unwrap_or(false)),
                Err(_) => {
                    match owner {
                        Some(owner) => server.link.suspect(owner),
                        None => server.link.failed(None),
                    }
                    Err(unanswered("the node of a lease did not answer in time"))
                }
            }
        }))
        .await
    }))
    .await;
    let mut renewed: Vec<Result<bool>> = (0..items.len()).map(|_| Ok(false)).collect();
    for (indexes, result) in groups.values().zip(results) {
        for (&i, outcome) in indexes.iter().zip(result) {
            renewed[i] = outcome;
        }
    }
    renewed
}

/// When the renewal of one cluster node's part of the batch `items` must have ended, from now: a
/// quarter of the batch's shortest TTL (the whole batch's: the watchdog ends the batch when its
/// first lease's validity does, and every answer with it), at least [`MIN_GROUP_TIME`] and at
/// most three quarters of the operation timeout (the watchdog's budget for the whole renewal,
/// which would also take every answer with it).
fn group_deadline(server: &Node, items: &[Item<'_>]) -> tokio::time::Instant {
    let shortest = items.iter().map(|i| i.ttl).min().unwrap_or(server.op_timeout);
    tokio::time::Instant::now() + (shortest / 4).max(MIN_GROUP_TIME).min(server.op_timeout * 3 / 4)
}

/// The least time a cluster node's renewal is given: a loaded client must not call a node that
/// answers in a few milliseconds silent (leases of a few hundred milliseconds).
const MIN_GROUP_TIME: Duration = Duration::from_millis(100);

/// Renews `items` in one round trip: on the server, on the cluster node `target`, or (`None` on
/// a cluster, for leases of one slot) on the node the cluster routes the first key to.
async fn renew_batch(server: &Node, target: Option<&(String, u16)>, items: &[Item<'_>]) -> Result<Vec<bool>> {
    let cross = target.is_some();
    let (mutexes, others): (Vec<usize>, Vec<usize>) = (0..items.len()).partition(|&i| items[i].info.is_none());
    // One script call per chunk of one kind; `chunks[c]` lists the items call `c` renews.
    let chunks: Vec<&[usize]> = mutexes.chunks(RENEW_CHUNK).chain(others.chunks(RENEW_CHUNK)).collect();
    let mut scripts: Vec<&Script> = Vec::new();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for chunk in &chunks {
        let script = script_for(items[chunk[0]].info.is_none(), cross);
        if !scripts.iter().any(|s| s.get_hash() == script.get_hash()) {
            scripts.push(script);
        }
        let mut call = script.prepare_invoke();
        for item in chunk.iter().map(|&i| items[i]) {
            match (item.info, cross) {
                (None, true) => call.arg(item.key).arg(item.id).arg(millis(item.ttl)),
                (None, false) => call.key(item.key).arg(item.id).arg(millis(item.ttl)),
                (Some(info), true) => call.arg(item.key).arg(info).arg(item.id).arg(millis(item.ttl)),
                (Some(info), false) => call.key(item.key).key(info).arg(item.id).arg(millis(item.ttl)),
            };
        }
        if cross {
            call.key(items[chunk[0]].key);
        }
        pipe.invoke_script(&call);
    }
    let confirm = server.min_replicas > 0;
    if confirm {
        pipe.cmd("WAIT")
            .arg(server.min_replicas)
            .arg(millis(server.replica_timeout));
    }
    let mut replies: Vec<Value> = server
        .bounded("renewing", || {
            let (pipe, scripts) = (&pipe, &scripts);
            async move {
                // A cluster node's part goes over that node's connection of its own.
                let mut conn = match target {
                    Some(target) => server.link.node_conn(target, confirm).await?,
                    None => server.write_conn().await?,
                };
                let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
                if !replies.iter().any(is_noscript) {
                    return Ok(replies);
                }
                // The server lost its script cache (a restart, a promoted replica): load the
                // scripts (on a cluster routed by key: on every master) and go again.
                for script in scripts {
                    script.prepare_invoke().load_async(&mut conn).await?;
                }
                pipe.query_async(&mut conn).await
            }
        })
        .await?;
    // The pipeline's errors come back as values (`ignore_errors`): one that a failover causes
    // (a demoted master's `READONLY`) must make the link look for the master again, as an error
    // of the request itself does.
    for reply in &replies {
        if let Value::ServerError(e) = reply {
            server.link.failed(Some(&RedisError::from(e.clone())));
        }
    }
    let failed =
        |e: redis::ServerError| map_error(RedisError::from(e), "renewing", &server.link.describe(&server.addr));
    if confirm {
        let acks = match replies.pop() {
            Some(Value::Int(acks)) => acks,
            Some(Value::ServerError(e)) => return Err(failed(e)),
            other => return Err(LockError::Protocol(format!("unexpected WAIT reply {other:?}"))),
        };
        if acks < i64::from(server.min_replicas) {
            return Err(server.unconfirmed("renewing", acks));
        }
    }
    if replies.len() != chunks.len() {
        return Err(LockError::Protocol(format!(
            "{} renewal replies for {} script calls",
            replies.len(),
            chunks.len()
        )));
    }
    let mut renewed = vec![false; items.len()];
    for (reply, chunk) in replies.into_iter().zip(&chunks) {
        match reply {
            Value::Array(flags) if flags.len() == chunk.len() => {
                for (flag, &i) in flags.into_iter().zip(*chunk) {
                    match flag {
                        Value::Int(n) => renewed[i] = n == 1,
                        other => return Err(LockError::Protocol(format!("unexpected renewal result {other:?}"))),
                    }
                }
            }
            Value::ServerError(e) => return Err(failed(e)),
            other => {
                return Err(LockError::Protocol(format!(
                    "unexpected renewal reply {other:?} for {} leases",
                    chunk.len()
                )))
            }
        }
    }
    Ok(renewed)
}

/// The renewal script for a chunk of mutexes (`mutex`) or of other kinds, on one node of a
/// cluster (`cross`: keys of several slots) or not.
fn script_for(mutex: bool, cross: bool) -> &'static Script {
    match (mutex, cross) {
        (true, false) => &SCRIPTS.renew_mutexes,
        (true, true) => &SCRIPTS.renew_mutexes_cross,
        (false, false) => &SCRIPTS.renew_kinds,
        (false, true) => &SCRIPTS.renew_kinds_cross,
    }
}
