//! # The locksmith Redis backend
//!
//! `redis://[user:password@]host[:port][,host2[:port],...][/db][?options]`
//!
//! A lock is a key set with `SET key <token>:<fence> NX PX <ttl>`, renewed by lockcore's watchdog,
//! released by compare-and-delete; waiters queue in Redis in FIFO order and are woken by the
//! server (pub/sub), one at a time. Works with Redis 6 and later (tested with 7.0, which has no
//! native compare-and-delete: every state change is one Lua script).
//!
//! ## Options
//!
//! | option | default | meaning |
//! |---|---|---|
//! | path `/N` | `0` | the database number |
//! | `prefix` | `locksmith:` | prefix of every key locksmith creates (must not contain `{` or `}`) |
//! | `layout` | `default` | `default` or `plain` (see below) |
//! | `connect_timeout` | `3s` | connecting; an unreachable server is [`lockcore::LockError::Unavailable`] after this |
//! | `response_timeout` | `3s` | one command (no command of this backend blocks on the server, so this is not a wait limit) |
//! | `waiter_ttl` | `10s` | a queue entry whose waiter stopped refreshing it for this long is skipped; waiters refresh every third of it |
//! | `fence_floor` | none | `time` or a number: a lower bound for fencing tokens (see "Fencing after data loss") |
//!
//! ## Key layout
//!
//! Default layout, for the lock named `N` with encoded form `E` ([`lockcore::LockName::encoded`],
//! so `a`, `a/b`, `ab` and `a/` never share a key):
//!
//! | key | type | content |
//! |---|---|---|
//! | `<prefix>{E}:lock` | string, `PX` = lease | `<token>:<fencing token>`; `token` is 128 random bits in hex, the lease's `holder_id` |
//! | `<prefix>{E}:fence` | integer, no expiry | the fencing counter, `INCR`ed by every successful acquire |
//! | `<prefix>{E}:queue` | sorted set | waiter tokens scored by arrival (server time in ms, strictly increasing) |
//! | `<prefix>{E}:alive` | hash | waiter token → server time (ms) after which the entry is stale |
//! | channel `<prefix>{E}:wake:<token>` | pub/sub | the wake-ups of one waiter |
//!
//! All keys of a lock share the hash tag `{E}`, so each script touches one slot, as Redis Cluster
//! requires (this crate itself connects to standalone servers only). The queue and liveness keys
//! expire `2 × waiter_ttl` after the last waiter refreshed them; the fencing counter stays, by design.
//!
//! ## The scripts (one round trip each)
//!
//! - **acquire** (`TRY_ACQUIRE`): drop stale queue heads; if the lock key is absent and no live
//!   waiter is queued, `INCR` the counter and `SET lock token:fence PX ttl` → the fencing token.
//! - **wait step** (`WAIT_STEP`): join the queue tail if not in it, refresh the liveness deadline,
//!   drop stale heads; if the lock is free and we are the head, take it (as above) and leave the
//!   queue. Otherwise return whether we are the head, the holder's `PTTL`, and whether the holder
//!   is a foreign (non-locksmith) client.
//! - **release** (`RELEASE`): compare-and-delete (only if the value is still ours), then `PUBLISH`
//!   one wake-up to the first live waiter: a handover costs the same few commands whether 1 or
//!   1000 clients wait, and one notification plus one round trip of latency.
//! - **renew** (`RENEW_MANY`): compare-and-`PEXPIRE` of a whole batch. The watchdog renews all
//!   leases of a [`lockcore::Locker`] that are due together in one
//!   [`lockcore::LockBackend::renew_many`] call; that is **one `EVALSHA` per 500 leases**
//!   (KEYS: the lock keys; ARGV: token and TTL of each), all of them in **one pipelined round
//!   trip**: 1000 held locks cost two script calls per tick, not 1000. The script answers one
//!   flag per lease; a lease whose key no longer holds our token is reported `NotHeld`, which
//!   fires its `lost()`, and does not affect the others of its batch. The chunks keep each script
//!   short (a script blocks its server while it runs: about a millisecond for 500 leases).
//!   On Redis Cluster the keys of one call would have to share a hash slot, i.e. a batch would
//!   have to be grouped by slot first; this crate connects to standalone servers only.
//! - **leave** (`LEAVE`): a cancelled or timed-out acquire removes its queue entry, releases a lock
//!   granted to it but never returned, and passes the wake-up on if it was first in line.
//!   It runs from a `Drop` guard (spawned), so dropping an acquire future leaves nothing behind.
//! - `RAISE_FENCE` (quorum mode) and `INSPECT` (read-only).
//!
//! Every script is loaded (`SCRIPT LOAD`, one pipelined round trip) when connecting, and sent as
//! `EVALSHA` through [`redis::Script`], which reloads it on `NOSCRIPT` (after a server restart);
//! the renewal pipeline does the same (loads `RENEW_MANY` and sends the pipeline again). An uncontended acquire is one `EVALSHA` (`EXISTS lock
//! queue`, `INCR`, `SET`) and a release one `EVALSHA` (`GET`, `DEL`, `EXISTS queue`): no
//! subscription, queue entry or `TIME` unless the lock is busy or someone waits.
//!
//! ## The queue and wake-ups
//!
//! A waiter subscribes to its own channel (one shared pub/sub connection per backend and server),
//! then joins the queue. It sleeps until a wake-up arrives, until the holder's `PTTL` runs out
//! (only the head waiter watches the holder: a key that expires publishes nothing), or until its
//! heartbeat refreshes its queue entry (`waiter_ttl / 3`). A waiter that died without cleaning up
//! (a crashed process) is skipped once its entry is stale: in the worst case the lock idles for
//! `waiter_ttl` after such a crash. Nothing ever polls the lock in a loop, and no command blocks
//! a connection (no `BLPOP`).
//!
//! ## The plain layout (`?layout=plain`): migrating from redis-py, redsync, node-redlock
//!
//! The lock key is exactly the lock name and its value the holder's token, taken with
//! `SET name token NX PX ttl` and released by compare-and-delete: the layout of redis-py's `Lock`,
//! redsync, node-redlock and most hand-written Redis locks. A process still on such a library and
//! one on locksmith exclude each other on the same name. Locksmith's own bookkeeping lives next to
//! it: `<prefix>{T}:E:fence`, `:queue`, `:alive`, where `T` is the raw name's cluster hash tag
//! (its own `{tag}` if it has one, else the name). Don't name locks so that they start with the
//! prefix.
//!
//! Choose it while old and new clients share locks; choose the default layout otherwise (its keys
//! are namespaced by the prefix and safe for any name).
//!
//! What old clients change:
//! - They never wake anybody. While a foreign holder (a value that is not `<token>:<n>`) has the
//!   lock, the head locksmith waiter re-checks at the holder's `PTTL` and with a backoff from 50 ms
//!   to 1 s, so a lock released early by an old client is noticed within about a second. Only the
//!   head waiter does this: one check per lock, not one per waiter.
//! - They ignore the queue. An old client polling `SET NX` can take a free lock ahead of queued
//!   locksmith waiters (between a release and the head's take-over, one notification plus one
//!   round trip). Mutual exclusion always holds; FIFO holds among locksmith waiters only.
//! - Their holders have no fencing token; a locksmith holder's token comes from the counter key.
//!
//! ## Several independent masters (`redis://h1,h2,h3`)
//!
//! With more than one host, each host is an independent master (not a replica set), and a lock is
//! held when a majority holds it: the Redlock algorithm.
//!
//! - Acquire: the acquire script on every master at once; it succeeds when a majority granted it
//!   within the validity `ttl − elapsed − drift` (drift = 1% of the TTL + 2 ms), and is undone on
//!   every master otherwise. Connecting needs a majority of the masters to answer.
//! - Release: on every master. Renew: on every master, the whole batch as one `RENEW_MANY` call
//!   per 500 leases and one pipelined round trip per master; a lease lives while a majority
//!   extended it, and is `NotHeld` once a majority no longer has it.
//! - Each operation returns as soon as the answers decide it (a majority granted, renewed or
//!   answered; or too few are left to make one) and does not wait for the others. A master that
//!   fails is skipped for a backoff (100 ms doubling to 2 s) and then tried again by one
//!   operation, so one dead master costs no latency. A master that hangs is not detected as down,
//!   but no operation waits for it either.
//!
//! What it guarantees: mutual exclusion as long as fewer than a majority of masters lose their
//! data while a lock is held, clocks advance at about the same rate (1% drift allowed), and a
//! holder is not paused past its validity. One master down: locks still work. A majority down:
//! acquire fails with [`lockcore::LockError::Unavailable`] naming how many masters answered.
//!
//! What it does not guarantee (Kleppmann, "How to do distributed locking", 2016): a process paused
//! (GC, swap, a stopped VM) or a network delay longer than the lease lets a second holder in while
//! the first still believes it holds the lock; timing assumptions cannot rule that out, only a
//! fencing token checked by the storage can. A master restarting without persistence forgets its
//! keys and can hand out a second majority. Waiting is not FIFO in this mode (retries at the
//! holder's TTL or with backoff), and there is no queue.
//!
//! Fencing tokens: each master has its own counter, so there is no single sequence. The token of
//! a quorum lease is the maximum of the counters of the masters that granted it, and those
//! masters' counters are raised to it before the lease is returned (a second round trip). Because
//! any two majorities share a master, tokens strictly increase across holders as long as no
//! master loses its counter; they are not consecutive.
//!
//! ## Fencing after data loss
//!
//! The fencing counter is data: a Redis restarted without persistence (or flushed) starts it from
//! zero, and a new holder's token can be smaller than an earlier one's. Either run Redis with
//! persistence (AOF `appendfsync everysec` or better) or set a floor: `?fence_floor=time` makes
//! every token at least the server's clock in milliseconds (so tokens keep growing across data
//! loss as long as that clock does and the lock is taken less than once per millisecond on
//! average); `?fence_floor=N` is a fixed floor to raise by hand after an incident.
//!
//! After a restart the holder's key is gone too: its next renewal finds nothing and its `lost()`
//! fires, and a new holder can acquire.

#![warn(missing_docs)]

mod backend;
mod cleanup;
mod config;
mod fanout;
mod keys;
mod node;
mod notify;
mod quorum;
mod scripts;
mod wait;

use lockcore::{BackendUrl, Locker, Result};

pub use backend::RedisBackend;
pub use config::{FenceFloor, Layout};
pub use keys::LockKeys;

/// Connects to redis as described by `url` and returns a [`Locker`] over it.
///
/// Fails with [`lockcore::LockError::InvalidUrl`] for a bad URL or option and with
/// [`lockcore::LockError::Unavailable`] if the server (or a majority of the masters) does not
/// answer within `connect_timeout`.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(RedisBackend::connect(url).await?))
}
