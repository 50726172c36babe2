//! The typed calls of the semaphore, read-write lock and election scripts
//! ([`crate::kind_scripts`]) on one logical server, with the same bounds, resends and replica
//! confirmation as the mutex's calls ([`crate::session`]).

use std::time::Duration;

use lockcore::{Leader, LockError, LockKind, LockRequest, Result};
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
    /// unless renewed.
    pub(crate) async fn leader(&self, keys: &KindKeys) -> Result<Option<(Leader, Duration)>> {
        let reply: Vec<Value> = self
            .bounded("reading the leader", Resend::IfDropped, || async move {
                let mut conn = self.link.conn().await?;
                KIND_SCRIPTS
                    .leader
                    .key(&keys.holders)
                    .key(&keys.info)
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

/// `{entry, '<fence>:<value>', ms left}` or `{}`.
fn parse_leader(reply: &[Value]) -> Result<Option<(Leader, Duration)>> {
    let bad = || LockError::Protocol(format!("unexpected reply {reply:?} from the leader script"));
    let [entry, info, left] = reply else {
        return if reply.is_empty() { Ok(None) } else { Err(bad()) };
    };
    let entry: String = redis::from_redis_value_ref(entry).map_err(|_| bad())?;
    let info: String = redis::from_redis_value_ref(info).map_err(|_| bad())?;
    let left: i64 = redis::from_redis_value_ref(left).map_err(|_| bad())?;
    let (fence, value) = info.split_once(':').ok_or_else(bad)?;
    let holder_id = entry.split_once(':').map(|(_, t)| t.to_owned()).ok_or_else(bad)?;
    let leader = Leader {
        value: value.to_owned(),
        term: fence.parse().map_err(|_| bad())?,
        holder_id,
    };
    Ok(Some((leader, Duration::from_millis(left.max(0).unsigned_abs()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_replies() {
        assert_eq!(parse_leader(&[]).unwrap(), None);
        let reply = [
            Value::BulkString(b"X:abc".to_vec()),
            Value::BulkString(b"42:host:1 a".to_vec()),
            Value::Int(900),
        ];
        let (leader, left) = parse_leader(&reply).unwrap().unwrap();
        assert_eq!(
            (leader.value.as_str(), leader.term, leader.holder_id.as_str()),
            ("host:1 a", 42, "abc")
        );
        assert_eq!(left, Duration::from_millis(900));
        assert!(parse_leader(&[Value::Int(1)]).is_err());
    }
}
