//! The typed calls of the semaphore, read-write lock and election scripts
//! ([`crate::kind_scripts`]) on one logical server, with the same bounds, resends and replica
//! confirmation as the mutex's calls ([`crate::session`]).

use std::time::Duration;

use lockcore::driver::LockRequest;
use lockcore::{Leader, LockError, LockKind, Result};
use redis::{Script, ScriptInvocation, Value};

use crate::keys::KindKeys;
use crate::kind_scripts::KIND_SCRIPTS;
use crate::session::{millis, Node, Resend};

/// The answer of an attempt or a waiter's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KindStep {
    /// Held, with this fencing token.
    Acquired(u64),
    /// Not yet. For a waiter: ms until the holder deadline it waits for, or until the server may
    /// grant after a data loss (-1: it waits for a wake-up only).
    Waiting(i64),
    /// Refused: the semaphore is in use with this many permits, not the requested count.
    Mismatch(u32),
}

impl Node {
    /// The uniform invocation of a lock script (see [`crate::kind_scripts`]): every key of the
    /// lock, then entry, TTL, fence floor, wake prefix, waiter TTL, restart delay, leader channel
    /// and campaign value.
    fn kind_call<'a>(
        &self,
        script: &'a Script,
        keys: &KindKeys,
        entry: &str,
        ttl: Duration,
        kind: Option<&LockKind>,
    ) -> ScriptInvocation<'a> {
        let value = match kind {
            Some(LockKind::Leader { value }) => value.as_str(),
            _ => "",
        };
        let mut call = script.prepare_invoke();
        call.key(&keys.holders)
            .key(&keys.info)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.alive)
            .key(&keys.writers)
            .arg(entry)
            .arg(millis(ttl))
            .arg(&self.floor)
            .arg(&keys.wake)
            .arg(millis(self.waiter_ttl))
            .arg(self.restart_delay_ms)
            .arg(keys.announce())
            .arg(value);
        call
    }

    /// One attempt that never queues: `Waiting` means busy.
    pub(crate) async fn try_acquire_kind(&self, keys: &KindKeys, entry: &str, req: &LockRequest) -> Result<KindStep> {
        let call = self.kind_call(&KIND_SCRIPTS.try_acquire, keys, entry, req.ttl, Some(&req.kind));
        self.grant_kind("acquiring", keys, entry, &call).await
    }

    /// A waiter's step: joins the queue, takes the lock when the rule lets it hold.
    pub(crate) async fn wait_step_kind(&self, keys: &KindKeys, entry: &str, req: &LockRequest) -> Result<KindStep> {
        let call = self.kind_call(&KIND_SCRIPTS.wait_step, keys, entry, req.ttl, Some(&req.kind));
        self.grant_kind("waiting", keys, entry, &call).await
    }

    /// Gives up a held lease; `true` if it still held. Never sent twice (a second run would answer
    /// "not held").
    pub(crate) async fn release_kind(&self, keys: &KindKeys, entry: &str) -> Result<bool> {
        let call = self.kind_call(&KIND_SCRIPTS.release, keys, entry, Duration::ZERO, None);
        self.give_up_kind("releasing", Resend::Never, &call).await
    }

    /// Leaves the queue and gives back a grant that never reached its caller; `true` if it did.
    pub(crate) async fn leave_kind(&self, keys: &KindKeys, entry: &str) -> Result<bool> {
        let call = self.kind_call(&KIND_SCRIPTS.leave, keys, entry, Duration::ZERO, None);
        self.give_up_kind("leaving the queue", Resend::IfDropped, &call).await
    }

    /// The leader of the election whose keys these are, and how long until its lease runs out
    /// unless renewed; or, while nobody leads, whether a candidate is about to.
    pub(crate) async fn leader(&self, keys: &KindKeys) -> Result<LeaderRead> {
        let reply: Vec<Value> = self
            .bounded("reading the leader", Resend::IfDropped, || async move {
                let mut conn = self.link.conn().await?;
                KIND_SCRIPTS
                    .leader
                    .key(&keys.holders)
                    .key(&keys.info)
                    .key(&keys.alive)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        parse_leader(&reply)
    }

    async fn give_up_kind(&self, what: &str, resend: Resend, call: &ScriptInvocation<'_>) -> Result<bool> {
        let done: i64 = self
            .bounded(what, resend, || async move {
                let mut conn = self.link.conn().await?;
                call.invoke_async(&mut conn).await
            })
            .await?;
        Ok(done == 1)
    }

    /// Runs a script that may grant (its reply starts with 1 then) and, with `min_replicas`, has
    /// the grant confirmed; an unconfirmed grant is given back and is an error.
    async fn grant_kind(
        &self,
        what: &str,
        keys: &KindKeys,
        entry: &str,
        call: &ScriptInvocation<'_>,
    ) -> Result<KindStep> {
        let (reply, acks): (Vec<i64>, Option<i64>) = self
            .bounded(what, Resend::IfDropped, || async move {
                let mut conn = self.grant_conn().await?;
                let reply: Vec<i64> = call.invoke_async(&mut conn).await?;
                let acks = self
                    .confirm_if(reply.first() == Some(&1), &mut conn, &keys.holders)
                    .await?;
                Ok((reply, acks))
            })
            .await?;
        if let Some(acks) = acks.filter(|a| *a < i64::from(self.min_replicas)) {
            if let Err(e) = self.leave_kind(keys, entry).await {
                tracing::warn!(lock = %keys.holders, error = %e, "could not give back an unconfirmed grant; it expires with its TTL");
            }
            return Err(self.unconfirmed(&format!("the {}", keys.family.name()), acks));
        }
        match reply.as_slice() {
            [1, fence] => u64::try_from(*fence)
                .ok()
                .filter(|f| *f > 0)
                .map(KindStep::Acquired)
                .ok_or_else(|| LockError::Protocol(format!("fencing counter at {fence}"))),
            [0, wait] => Ok(KindStep::Waiting(*wait)),
            [-1, permits] => u32::try_from(*permits)
                .map(KindStep::Mismatch)
                .map_err(|_| LockError::Protocol(format!("a semaphore of {permits} permits"))),
            other => Err(LockError::Protocol(format!(
                "unexpected reply {other:?} from the {} script ({what})",
                keys.family.name()
            ))),
        }
    }
}

/// What the `LEADER` script read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaderRead {
    /// This leader leads, its lease runs out after this long unless renewed.
    Leads(Leader, Duration),
    /// Nobody leads, but a candidate that is still alive waits in line: it is about to lead (its
    /// grant publishes on the leader channel), unless every such candidate leaves (announced too)
    /// or stops refreshing its entry; the first of them goes stale after this long.
    Pending(Duration),
    /// Nobody leads and nobody waits.
    Nobody,
}

impl LeaderRead {
    /// The leader, if one leads now.
    pub(crate) fn leader(self) -> Option<Leader> {
        match self {
            LeaderRead::Leads(leader, _) => Some(leader),
            LeaderRead::Pending(_) | LeaderRead::Nobody => None,
        }
    }
}

/// `{entry, '<fence>:<value>', ms left}`, `{ms}` or `{}`.
fn parse_leader(reply: &[Value]) -> Result<LeaderRead> {
    let bad = || LockError::Protocol(format!("unexpected reply {reply:?} from the leader script"));
    let millis = |v: &Value| -> Result<Duration> {
        let ms: i64 = redis::from_redis_value_ref(v).map_err(|_| bad())?;
        Ok(Duration::from_millis(ms.max(0).unsigned_abs()))
    };
    let [entry, info, left] = reply else {
        return match reply {
            [] => Ok(LeaderRead::Nobody),
            [stale_in] => Ok(LeaderRead::Pending(millis(stale_in)?)),
            _ => Err(bad()),
        };
    };
    let entry: String = redis::from_redis_value_ref(entry).map_err(|_| bad())?;
    let info: String = redis::from_redis_value_ref(info).map_err(|_| bad())?;
    let left = millis(left)?;
    let (fence, value) = info.split_once(':').ok_or_else(bad)?;
    let holder_id = entry.split_once(':').map(|(_, t)| t.to_owned()).ok_or_else(bad)?;
    let leader = Leader {
        value: value.to_owned(),
        term: fence.parse().map_err(|_| bad())?,
        holder_id,
    };
    Ok(LeaderRead::Leads(leader, left))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_replies() {
        assert_eq!(parse_leader(&[]).unwrap(), LeaderRead::Nobody);
        assert_eq!(
            parse_leader(&[Value::Int(700)]).unwrap(),
            LeaderRead::Pending(Duration::from_millis(700))
        );
        let reply = [
            Value::BulkString(b"X:abc".to_vec()),
            Value::BulkString(b"42:host:1 a".to_vec()),
            Value::Int(900),
        ];
        let LeaderRead::Leads(leader, left) = parse_leader(&reply).unwrap() else {
            panic!("a leader")
        };
        assert_eq!(
            (leader.value.as_str(), leader.term, leader.holder_id.as_str()),
            ("host:1 a", 42, "abc")
        );
        assert_eq!(left, Duration::from_millis(900));
        assert!(parse_leader(&[Value::BulkString(b"x".to_vec())]).is_err());
        assert!(parse_leader(&[Value::Int(1), Value::Int(2)]).is_err());
    }
}
