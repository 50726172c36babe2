//! The Lua scripts of semaphores, read-write locks and elections: every state change of one of
//! these locks is one atomic script on the server, as for the mutex ([`crate::scripts`], whose
//! helpers they reuse: the server clock, the fencing counter with its floor, the data-loss wait).
//!
//! These locks may have several holders, so holders live in a sorted set rather than in one key.
//! Every holder and waiter is an *entry* `<role>:<token>`: role `X` (exclusive: a writer, a
//! candidate), `S` (shared: a reader) or `P<n>` (one permit of a semaphore of `n`). The grant rule
//! is lockcore's ([`lockcore::driver::queue`]): the holders are the front of the queue, and
//! - `X` holds when nobody holds and it is the first waiter;
//! - `S` holds when no `X` holds and no `X` waits ahead of it (the `writers` set);
//! - `P<n>` holds when fewer than `n` entries are ahead of it (holders plus waiters ahead).
//!
//! Key arguments of every lock script come in the order of [`crate::keys::KindKeys`]: `holders,
//! info, fence, queue, alive, writers`; ARGV: entry, TTL ms, fence floor, wake prefix, waiter TTL
//! ms, restart delay ms, leader channel (`''` but for elections), campaign value.
//!
//! The scripts are the files of `src/lua/kinds/` (`state.lua` is sent before each lock script);
//! their helpers are in `src/lua/helpers/`, and each script carries only the helpers it calls.

use std::sync::LazyLock;

use redis::Script;

use crate::scripts::{code, renewal_sources, with_helpers};

/// The state of one lock and its rules (the names of its keys and arguments, and the functions
/// of the grant rule); sent before every lock script (see [`lock_script`]).
const STATE: &str = include_str!("lua/kinds/state.lua");
/// One attempt, never queueing (see the file for its reply).
const TRY_ACQUIRE: &str = include_str!("lua/kinds/try_acquire.lua");
/// A waiter's one step.
const WAIT_STEP: &str = include_str!("lua/kinds/wait_step.lua");
/// Gives up a holder and wakes the waiters that may hold now.
const RELEASE: &str = include_str!("lua/kinds/release.lua");
/// Clean-up of a cancelled or failed acquire.
const LEAVE: &str = include_str!("lua/kinds/leave.lua");
/// The watchdog's batch for these kinds. Its leases are read through the header before it:
/// [`RENEW_MANY_LEASES`], or [`RENEW_MANY_CROSS_LEASES`] on a Redis Cluster node (see
/// [`crate::scripts::renewal_sources`]).
pub(crate) const RENEW_MANY: &str = include_str!("lua/kinds/renew_many.lua");
/// The header of [`RENEW_MANY`] that reads its leases from KEYS (holders set and holder data of
/// each) and ARGV.
const RENEW_MANY_LEASES: &str = include_str!("lua/kinds/renew_many_leases.lua");
/// The header of [`RENEW_MANY`] for the locks of one Redis Cluster node: the keys are in ARGV
/// (with `allow-cross-slot-keys`), only the first is declared in KEYS.
const RENEW_MANY_CROSS_LEASES: &str = include_str!("lua/kinds/renew_many_cross_leases.lua");
/// Read-only: the leader of an election.
const LEADER: &str = include_str!("lua/kinds/leader.lua");

/// A lock script: [`STATE`] and the code of `file`, after the helpers they call.
fn lock_script(file: &str) -> String {
    with_helpers(&format!("{}{}", code(STATE), code(file)))
}

/// The renewal's sources: the plain one and the one for a Redis Cluster node.
fn renewal() -> (String, String) {
    renewal_sources(RENEW_MANY, RENEW_MANY_LEASES, RENEW_MANY_CROSS_LEASES)
}

/// The source of `renew_many_cross`, for the tests of [`crate::scripts`].
#[cfg(test)]
pub(crate) fn renewal_cross_source() -> String {
    renewal().1
}

/// The compiled scripts of the kinds other than the mutex.
pub(crate) struct KindScripts {
    /// One attempt, never queueing (`lua/kinds/try_acquire.lua`).
    pub(crate) try_acquire: Script,
    /// A waiter's one step (`lua/kinds/wait_step.lua`).
    pub(crate) wait_step: Script,
    /// Gives up a holder (`lua/kinds/release.lua`).
    pub(crate) release: Script,
    /// Clean-up of a cancelled or failed acquire (`lua/kinds/leave.lua`).
    pub(crate) leave: Script,
    /// The watchdog's batch (`lua/kinds/renew_many.lua` after its KEYS header).
    pub(crate) renew_many: Script,
    /// `RENEW_MANY` for the locks of one Redis Cluster node (Redis 7): generated from it with the
    /// header [`RENEW_MANY_CROSS_LEASES`].
    pub(crate) renew_many_cross: Script,
    /// Read-only: the leader of an election (`lua/kinds/leader.lua`).
    pub(crate) leader: Script,
    /// The source of every script but `renew_many_cross`, for `SCRIPT LOAD` at connect.
    pub(crate) sources: Vec<String>,
}

/// The one instance.
pub(crate) static KIND_SCRIPTS: LazyLock<KindScripts> = LazyLock::new(|| {
    let (renew_many, renew_many_cross) = renewal();
    let mut sources: Vec<String> = [TRY_ACQUIRE, WAIT_STEP, RELEASE, LEAVE]
        .iter()
        .map(|file| lock_script(file))
        .collect();
    sources.push(renew_many);
    sources.push(with_helpers(code(LEADER)));
    let s = |i: usize| Script::new(&sources[i]);
    KindScripts {
        try_acquire: s(0),
        wait_step: s(1),
        release: s(2),
        leave: s(3),
        renew_many: s(4),
        leader: s(5),
        renew_many_cross: Script::new(&renew_many_cross),
        sources,
    }
});
