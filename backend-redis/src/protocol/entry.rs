//! What every lock kind supplies to the one wait loop ([`crate::protocol::wait`]) and to the
//! clean-up guard ([`crate::cleanup`]): an [`Entry`], a waiter's or holder's place in one lock's
//! queue, with its four scripts (try, step, leave, release); and what they share: the grant
//! confirmed by replicas, and running the release or clean-up on every server.

use std::future::Future;
use std::time::Duration;

use locksmith_core::driver::LockName;
use locksmith_core::{LockError, Result};

use crate::conn::call::ScriptCall;
use crate::conn::fanout::{counts, fan_out};
use crate::conn::inner::Inner;
use crate::conn::node::Node;

/// Where an attempt or a waiter's step left the entry.
#[derive(Debug)]
pub(crate) enum Turn {
    /// Granted, with this fencing token.
    Granted(u64),
    /// Not yet (for an attempt: busy).
    Waiting {
        /// When the holder this entry waits for runs out (an expired holder publishes nothing,
        /// so the waiters it would let in watch its deadline), or when the server may grant
        /// after a data loss; `None`: only a wake-up can let it in.
        wake_in: Option<Duration>,
        /// The holder is not a locksmith client (plain layout) and this entry is next: nobody
        /// will wake it, so it checks again with a backoff.
        poll: bool,
        /// The liveness deadline this step gave the entry (server ms), which a release that
        /// hands the lock straight to it names in its message (a mutex's step; `None` for the
        /// other kinds and for an attempt).
        deadline: Option<i64>,
    },
    /// Refused for good (a semaphore in use with another permit count); the entry is gone.
    Refused(LockError),
}

impl Turn {
    /// The `Waiting` of a reply's "ms until" field (negative: no deadline to watch), with the
    /// liveness deadline the step set (a mutex's step).
    pub(crate) fn waiting(ms: i64, poll: bool, deadline: Option<i64>) -> Turn {
        let wake_in = u64::try_from(ms).ok().map(Duration::from_millis);
        Turn::Waiting {
            wake_in,
            poll,
            deadline,
        }
    }
}

/// One entry of one lock's queue on the server: a mutex's token ([`crate::protocol::mutex`]) or
/// the `<role>:<token>` entry of a semaphore, read-write lock or election
/// ([`crate::protocol::kinds`]). Every method is one script call, bounded by the node's
/// operation timeout; the wait loop decides when to call which.
pub(crate) trait Entry: Clone + Send + Sync + 'static {
    /// The holder token (the lease's `holder_id`).
    fn token(&self) -> &str;
    /// The key that names the lock in logs, and on which a grant is confirmed by replicas.
    fn key(&self) -> &str;
    /// The lock as messages name it: "the lock", "the semaphore"…
    fn what(&self) -> String;
    /// The TTL this entry asks for when it is granted: how long a grant it never learnt of lives.
    fn ttl(&self) -> Duration;
    /// The pub/sub channel this entry is woken on.
    fn channel(&self) -> String;
    /// One attempt that never queues: `Waiting` means busy.
    fn try_take(&self, node: &Node) -> impl Future<Output = Result<Turn>> + Send;
    /// A waiter's step: joins the queue (again, if the server lost it), keeps the entry alive,
    /// takes the lock when the rule lets it hold.
    fn step(&self, node: &Node) -> impl Future<Output = Result<Turn>> + Send;
    /// Leaves the queue and gives back a grant that never reached its caller; `true` if it did.
    /// Sent again after a dropped connection (a second run answers as the first).
    fn leave(&self, node: &Node) -> impl Future<Output = Result<bool>> + Send;
    /// Gives up a held lock and wakes who may hold now; `true` if it still held. Sent again after
    /// a dropped connection (see [`run_release`]).
    fn release(&self, node: &Node) -> impl Future<Output = Result<bool>> + Send;
}

/// Runs `call`, a script of `entry` that may grant it (reply `{1, fence}`), and with
/// `min_replicas` has the grant confirmed: an unconfirmed grant is given back (`leave`) and is an
/// error. The reply otherwise.
pub(crate) async fn grant<E: Entry>(node: &Node, entry: &E, what: &str, call: &ScriptCall<'_>) -> Result<Vec<i64>> {
    let (reply, acks) = node.run_grant(what, entry.key(), call).await?;
    if let Some(acks) = node.too_few(acks) {
        if let Err(e) = entry.leave(node).await {
            tracing::warn!(lock = %entry.key(), error = %e, "could not give back an unconfirmed grant; it expires with its TTL");
        }
        return Err(node.unconfirmed(&entry.what(), acks));
    }
    Ok(reply)
}

/// Runs a script that answers 1 or 0 (`raise_fence`): `true` for 1.
pub(crate) async fn run_flag(node: &Node, what: &str, call: &ScriptCall<'_>) -> Result<bool> {
    Ok(flag(node, what, call, false).await?.0)
}

/// Runs an entry's `RELEASE` script (answers 1 if the entry still held, and is gone now; 0 if it
/// did not hold): `true` for 1.
///
/// A release whose connection dropped is sent again on the reconnected one. The usual case is a
/// connection the server closed while it was idle (a restart, a sentinel's reconfiguration, an
/// operator's `CLIENT KILL`): the first send never left the client, and the second releases.
/// Run twice, the script is safe (the holder token is this grant's own, so a second run deletes
/// nothing of anyone else's), but its answer can change: when the connection dropped after the
/// first send ran, the second finds nothing to release. That answer cannot tell "released by the
/// first send" from "the lease had already ended", so it is an `Unavailable` error saying so,
/// not a false "not held". Either way the lock is free.
pub(crate) async fn run_release(node: &Node, call: &ScriptCall<'_>) -> Result<bool> {
    match flag(node, "releasing", call, false).await? {
        (released, false) => Ok(released),
        (true, true) => Ok(true),
        (false, true) => Err(LockError::Unavailable {
            message: format!(
                "releasing on redis at {}: the connection dropped with the release sent, and sent again \
                 it found the lock already free: either the first send released it or the lease had \
                 ended before",
                node.link.describe(&node.addr)
            ),
            source: None,
        }),
    }
}

/// Runs an entry's `LEAVE` script (answers 1 or 0): `true` for 1. It goes over the connection the
/// entry's grant-capable scripts use ([`Node::write_conn`]: with `min_replicas` not the one other
/// requests use), so that it reaches the server after the attempt or step it cleans up after; on
/// another connection a step still in flight could queue the entry again after it left.
pub(crate) async fn run_leave(node: &Node, what: &str, call: &ScriptCall<'_>) -> Result<bool> {
    Ok(flag(node, what, call, true).await?.0)
}

/// [`run_flag`], [`run_release`] and [`run_leave`]: over the grants' connection when
/// `after_grants`. Also says whether the script was sent a second time.
async fn flag(node: &Node, what: &str, call: &ScriptCall<'_>, after_grants: bool) -> Result<(bool, bool)> {
    let (done, resent): (i64, bool) = node
        .bounded_sends_on(call.first_key(), what, || async move {
            let mut conn = if after_grants {
                node.write_conn().await?
            } else {
                node.link.conn().await?
            };
            call.invoke(&mut conn).await
        })
        .await?;
    Ok((done == 1, resent))
}

/// A fencing token from a reply: a counter value, always positive.
pub(crate) fn fence_token(n: i64) -> Result<u64> {
    u64::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| LockError::Protocol(format!("fencing counter at {n}")))
}

/// The error for a reply that is none of a script's answers.
pub(crate) fn unexpected(reply: &[i64], script: &str) -> LockError {
    LockError::Protocol(format!("unexpected reply {reply:?} from the {script} script"))
}

/// Releases `entry`'s lock `name` on every server (a quorum's answers are enough).
pub(crate) async fn release_everywhere<E: Entry>(inner: &Inner, name: &LockName, entry: &E) -> Result<()> {
    let quorum = inner.config.quorum();
    let results = fan_out(
        &inner.nodes,
        |_, n| entry.release(n),
        |answers| counts(answers).1 >= quorum,
    )
    .await;
    let mut first_error = None;
    let mut released = false;
    for r in results.into_iter().flatten() {
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
        (false, None) => Err(LockError::not_held(name.as_str())),
    }
}

/// Runs `entry`'s `leave` on every server; the servers (their indexes in `inner.nodes`) that did
/// not answer, or were skipped as known to be down.
pub(crate) async fn leave_everywhere<E: Entry>(inner: &Inner, entry: &E) -> Vec<usize> {
    let results = fan_out(&inner.nodes, |_, n| entry.leave(n), |_| false).await;
    let mut failed = Vec::new();
    for (i, (node, result)) in inner.nodes.iter().zip(results).enumerate() {
        match result {
            Some(Ok(true)) => {
                tracing::debug!(lock = %entry.key(), addr = %node.addr, "released a lock granted to a cancelled acquire")
            }
            Some(Ok(false)) => {}
            Some(Err(e)) => {
                failed.push(i);
                tracing::warn!(lock = %entry.key(), addr = %node.addr, error = %e, "clean-up of a cancelled acquire failed");
            }
            None => failed.push(i),
        }
    }
    failed
}
