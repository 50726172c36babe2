//! The mutex's entry: one lock key holding `<token>:<fencing token>:<ttl ms>`, a FIFO queue of waiter
//! tokens beside it, and the scripts of `lua/mutex/` (see the crate docs, "The scripts"). Also
//! the mutex's two other requests: raising the fencing counter in quorum mode, and `inspect`.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{Lease, LockName};
use locksmith_core::Result;

use crate::conn::call::ScriptCall;
use crate::conn::inner::{new_token, Inner};
use crate::conn::node::{millis, Node};
use crate::layout::LockKeys;
use crate::protocol::entry::{fence_token, grant, run_flag, run_leave, run_release, unexpected, Entry, Turn};
use crate::protocol::library::LuaScript;
use crate::protocol::scripts::SCRIPTS;

/// A mutex waiter or holder: the lock's keys and its token.
#[derive(Clone)]
pub(crate) struct MutexEntry {
    pub(crate) keys: Arc<LockKeys>,
    token: String,
    /// The lease's TTL (for the scripts that grant).
    ttl: Duration,
}

impl MutexEntry {
    /// A new waiter (a fresh token) for lock `name` with this TTL.
    pub(crate) fn new(inner: &Inner, name: &LockName, ttl: Duration) -> MutexEntry {
        MutexEntry {
            keys: Arc::new(inner.keys(name)),
            token: new_token(),
            ttl,
        }
    }

    /// The holder of `lease`.
    pub(crate) fn of_lease(inner: &Inner, lease: &Lease) -> MutexEntry {
        MutexEntry {
            keys: Arc::new(inner.keys(&lease.name)),
            token: lease.holder_id.clone(),
            ttl: lease.ttl,
        }
    }

    /// A call of an acquire script (`TRY_ACQUIRE`, `WAIT_STEP`): the lock keys, token, TTL and
    /// wake channel prefix, and the waiter TTL (which bounds a queued head's liveness deadline).
    fn acquire_call<'a>(&self, node: &'a Node, wait_step: bool) -> ScriptCall<'a> {
        let scripts = &node.scripts.mutex;
        let script = if wait_step {
            &scripts.wait_step
        } else {
            &scripts.try_acquire
        };
        let mut call = node.call(script, &self.keys.lock_script_keys()[..node.scripts.mutex_keys]);
        call.arg(&self.token)
            .arg(millis(self.ttl))
            .arg(&self.keys.wake)
            .arg(millis(node.waiter_ttl));
        call
    }

    /// A call of `RELEASE` (`keys`: the acquire scripts' keys, for the hand-over) or `LEAVE` (the
    /// lock, queue and liveness keys), with the token and the wake channel prefix.
    fn give_up_call<'a>(&self, node: &'a Node, script: &'a LuaScript, keys: &[&str]) -> ScriptCall<'a> {
        let mut call = node.call(script, keys);
        call.arg(&self.token).arg(&self.keys.wake);
        call
    }

    /// Quorum mode: raises the fencing counter to `fence` if this entry still holds the lock.
    pub(crate) async fn raise_fence(&self, node: &Node, fence: u64) -> Result<bool> {
        let mut call = node.call(&SCRIPTS.raise_fence, &[&self.keys.lock, &self.keys.fence]);
        call.arg(&self.token).arg(fence);
        run_flag(node, "raising the fencing counter", &call).await
    }
}

impl Entry for MutexEntry {
    fn token(&self) -> &str {
        &self.token
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn key(&self) -> &str {
        &self.keys.lock
    }

    fn what(&self) -> String {
        "the lock".to_owned()
    }

    fn channel(&self) -> String {
        self.keys.channel(&self.token)
    }

    /// Reply `{1, fence}` or `{0, the holder's PTTL}` (-2: none, -1: no expiry).
    async fn try_take(&self, node: &Node) -> Result<Turn> {
        let call = self.acquire_call(node, false);
        match grant(node, self, "acquiring", &call).await?.as_slice() {
            [1, fence] => Ok(Turn::Granted(fence_token(*fence)?)),
            [0, pttl] => Ok(Turn::waiting(*pttl, false, None)),
            other => Err(unexpected(other, "acquire")),
        }
    }

    /// Reply `{1, fence}` or `{0, head, the holder's PTTL, foreign}`: only the first live waiter
    /// (`head`) watches the holder's deadline, and polls a holder that is not a locksmith client.
    async fn step(&self, node: &Node) -> Result<Turn> {
        let call = self.acquire_call(node, true);
        match grant(node, self, "waiting", &call).await?.as_slice() {
            [1, fence] => Ok(Turn::Granted(fence_token(*fence)?)),
            [0, head, pttl, foreign, deadline] => {
                let head = *head == 1;
                let pttl = if head { *pttl } else { -1 };
                Ok(Turn::waiting(pttl, head && *foreign == 1, Some(*deadline)))
            }
            other => Err(unexpected(other, "wait")),
        }
    }

    async fn leave(&self, node: &Node) -> Result<bool> {
        let call = self.give_up_call(node, &node.scripts.mutex.leave, &self.keys.leave_script_keys());
        run_leave(node, "leaving the queue", &call).await
    }

    async fn release(&self, node: &Node) -> Result<bool> {
        // lock, fence, queue, alive (, streak, gap)
        let keys = &self.keys.lock_script_keys()[..node.scripts.mutex_keys];
        let call = self.give_up_call(node, &node.scripts.mutex.release, keys);
        run_release(node, &call).await
    }
}

/// What `inspect` reads of a mutex on one server.
pub(crate) struct RawInfo {
    /// The lock key's value (`<token>:<fence>`, or a foreign client's token).
    pub(crate) value: Option<String>,
    /// Its PTTL in ms (-2: no key, -1: no expiry).
    pub(crate) pttl_ms: i64,
    /// Live waiters in the queue.
    pub(crate) waiters: usize,
}

/// Reads the holder and the queue length of the mutex with these keys.
pub(crate) async fn inspect(node: &Node, keys: &LockKeys) -> Result<RawInfo> {
    let (value, pttl_ms, waiters): (Option<Vec<u8>>, i64, usize) = node
        .bounded("inspecting", || async move {
            let mut conn = node.link.conn().await?;
            let call = node.call(&SCRIPTS.inspect, &[&keys.lock, &keys.queue, &keys.alive]);
            call.invoke(&mut conn).await
        })
        .await?;
    Ok(RawInfo {
        value: value.map(printable_value),
        pttl_ms,
        waiters,
    })
}

/// A lock value as text: as it is when it is UTF-8 (locksmith's, redis-py's), else its bytes in
/// hex after `hex:` (another client's raw random token, rslock's 20 bytes): an operator compares
/// it with what that client logs, and nothing parses it.
fn printable_value(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let hex: String = e.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
            format!("hex:{hex}")
        }
    }
}
