//! The entry of a semaphore, read-write lock or election: holders in a sorted set scored by
//! lease deadline, a FIFO queue of entries `<role>:<token>` beside it, and the scripts of
//! `lua/kinds/` (see the crate docs, "Semaphores, read-write locks and elections"). The grant
//! rule is locksmith-core's ([`locksmith_core::driver::queue`]): the holders are the front of the queue, and
//! - `X` (a writer, a candidate) holds when nobody holds and it is the first waiter;
//! - `S` (a reader) holds when no `X` holds and no `X` waits ahead of it (the `writers` set);
//! - `P<n>` (one permit of `n`) holds when fewer than `n` entries are ahead of it.

use std::time::Duration;

use locksmith_core::driver::queue::permit_mismatch;
use locksmith_core::driver::{Lease, LockName, LockRequest};
use locksmith_core::{LockError, LockKind, Result};

use crate::conn::call::ScriptCall;
use crate::conn::inner::{new_token, Inner};
use crate::conn::node::{millis, Node};
use crate::layout::{entry, KindKeys};
use crate::protocol::entry::{fence_token, grant, run_leave, run_release, unexpected, Entry, Turn};
use crate::protocol::library::LuaScript;

/// A waiter or holder of a lock of any kind but the mutex.
#[derive(Clone)]
pub(crate) struct KindEntry {
    pub(crate) keys: KindKeys,
    token: String,
    /// `<role>:<token>`.
    entry: String,
    /// What it asks for (the permit count of a semaphore, the campaign value of an election).
    kind: LockKind,
    /// The lease's TTL (for the scripts that grant).
    ttl: Duration,
}

impl KindEntry {
    /// A new waiter (a fresh token) for `req`.
    pub(crate) fn new(inner: &Inner, req: &LockRequest) -> KindEntry {
        Self::with_token(inner, &req.kind, &req.name, new_token(), req.ttl)
    }

    /// Its member in the holders and queue sets: `<role>:<token>`.
    pub(crate) fn member(&self) -> &str {
        &self.entry
    }

    /// The holder of `lease`.
    pub(crate) fn of_lease(inner: &Inner, lease: &Lease) -> KindEntry {
        Self::with_token(inner, &lease.kind, &lease.name, lease.holder_id.clone(), lease.ttl)
    }

    fn with_token(inner: &Inner, kind: &LockKind, name: &LockName, token: String, ttl: Duration) -> KindEntry {
        KindEntry {
            keys: inner.kind_keys(kind.family(), name),
            entry: entry(kind, &token),
            token,
            kind: kind.clone(),
            ttl,
        }
    }

    /// The uniform call of a lock script (`lua/kinds/state.lua`): every key of the lock, then
    /// entry, TTL, wake prefix, waiter TTL, leader channel and campaign value. The scripts that
    /// give an entry up get neither TTL nor value (1 ms and `''`).
    fn call<'a>(&self, node: &'a Node, script: &'a LuaScript, grants: bool) -> ScriptCall<'a> {
        let (ttl, value) = match (&self.kind, grants) {
            (LockKind::Leader { value }, true) => (self.ttl, value.as_str()),
            (_, true) => (self.ttl, ""),
            (_, false) => (Duration::ZERO, ""),
        };
        let mut call = node.call(script, &self.keys.script_keys());
        call.arg(&self.entry)
            .arg(millis(ttl))
            .arg(&self.keys.wake)
            .arg(millis(node.waiter_ttl))
            .arg(self.keys.announce())
            .arg(value);
        call
    }

    /// The answer of `TRY_ACQUIRE` or `WAIT_STEP`: `{1, fence}`, `{0, ms until the holder this
    /// entry waits for runs out, or -1}` or `{-1, the semaphore's permit count}`.
    async fn take(&self, node: &Node, script: &LuaScript, what: &str) -> Result<Turn> {
        let call = self.call(node, script, true);
        match grant(node, self, what, &call).await?.as_slice() {
            [1, fence] => Ok(Turn::Granted(fence_token(*fence)?)),
            [0, wait] => Ok(Turn::waiting(*wait, false, None)),
            [-1, permits] => {
                let held = u32::try_from(*permits)
                    .map_err(|_| LockError::Protocol(format!("a semaphore of {permits} permits")))?;
                Ok(Turn::Refused(self.mismatch(held)))
            }
            other => Err(unexpected(other, &format!("{} ({what})", self.keys.family.name()))),
        }
    }

    /// The error for a permit request whose count differs from the semaphore's (`held`).
    fn mismatch(&self, held: u32) -> LockError {
        match self.kind {
            LockKind::Permit { permits } => permit_mismatch(held, permits),
            _ => LockError::Protocol(format!(
                "a permit count ({held}) reported for a {}",
                self.keys.family.name()
            )),
        }
    }
}

impl Entry for KindEntry {
    fn token(&self) -> &str {
        &self.token
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn key(&self) -> &str {
        &self.keys.holders
    }

    fn what(&self) -> String {
        format!("the {}", self.keys.family.name())
    }

    fn channel(&self) -> String {
        self.keys.channel(&self.token)
    }

    async fn try_take(&self, node: &Node) -> Result<Turn> {
        self.take(node, &node.scripts.kinds.try_acquire, "acquiring").await
    }

    async fn step(&self, node: &Node) -> Result<Turn> {
        self.take(node, &node.scripts.kinds.wait_step, "waiting").await
    }

    async fn leave(&self, node: &Node) -> Result<bool> {
        let call = self.call(node, &node.scripts.kinds.leave, false);
        run_leave(node, "leaving the queue", &call).await
    }

    async fn release(&self, node: &Node) -> Result<bool> {
        let call = self.call(node, &node.scripts.kinds.release, false);
        run_release(node, &call).await
    }
}
