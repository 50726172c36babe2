//! # locksmith-zk — locksmith on ZooKeeper
//!
//! Apache Curator's lock recipes in async Rust — `InterProcessMutex`, `InterProcessReadWriteLock`,
//! `InterProcessSemaphoreV2` and `LeaderLatch`, node for node, so that Java services using Curator
//! and Rust services using locksmith share their locks: fair (FIFO) queues of
//! EPHEMERAL_SEQUENTIAL nodes, one node per lock, with the ZooKeeper *session* as the lease. Built
//! on the [`zookeeper_client`] crate.
//!
//! ```no_run
//! # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
//! # #[tokio::main] async fn main() -> locksmith::Result<()> {
//! let url = locksmith::driver::BackendUrl::parse("zk://zk1:2181,zk2:2181,zk3:2181/billing?session_timeout=10s")?;
//! let locker = locksmith_zk::connect(&url).await?;
//! let guard = locker.lock("invoice/42").acquire().await?;
//! // ... pass guard.fencing_token() to the storage you write to ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## URL
//!
//! `zk://[user:password@]host1[:port],host2[:port],.../[namespace]?options`
//!
//! - **hosts**: any number of ensemble members (default port 2181); the client moves between them.
//! - **namespace**: the URL path, the parent of every lock node (default `/locksmith`). It must be a
//!   valid ZooKeeper path and may not be under `/zookeeper`.
//! - `session_timeout` (alias `ttl`), default 10s: the session timeout asked for (see *Session =
//!   lease*).
//! - `connect_timeout`, default 5s: how long [`connect`] (and a reconnect after the session
//!   ended) tries to establish a session, even when longer than `session_timeout` (the ZooKeeper
//!   client's own attempt ends after one session timeout; it is started over); an unreachable ensemble is
//!   [`locksmith_core::LockError::Unavailable`] after at most this long.
//! - `request_timeout`, default 5s: the longest one call other than a waiting `acquire` may take
//!   (`try_acquire`, `release`, `inspect`, a renewal, reconnecting included); a server that
//!   accepts connections but does not answer gives [`locksmith_core::LockError::Unavailable`] after it.
//!   The ZooKeeper client itself would hold a request until it reconnects or the session expires.
//! - `user:password@` (or `user@` with `password_file=` / `LOCKSMITH_PASSWORD`): added to the
//!   session as ZooKeeper `digest` authentication, and every node locksmith creates (namespace,
//!   lock node, contenders) gets an ACL that gives all permissions to this identity only (the
//!   `auth` scheme), plus `admin=user:hash` if given (a digest id as `setAcl digest:user:hash`
//!   takes it). ZooKeeper checks DELETE on the parent, so no other client can delete a
//!   contender and break a lock, nor queue in a lock node (`LockError::Denied`). Without
//!   credentials nodes get the open ACL (`world:anyone`), like Curator's default, and the server
//!   enforces nothing. Note that the digest scheme accepts **any** password: a wrong one is simply
//!   another identity, refused by the ACLs of nodes the right one created. Nodes that existed
//!   before (a namespace node created without credentials) keep their ACL.
//! - `zks://` (feature `tls`): ZooKeeper's secure client port (`secureClientPort`), TLS with
//!   rustls; `ca=` (a PEM bundle) is required (the client has no system roots to fall back on),
//!   `cert=` and `key=` for mutual TLS (`ssl.clientAuth=need`). The host in the URL is what the
//!   server's certificate is verified against (`server_name=` is not supported).
//!
//! Unknown options, malformed durations or paths are [`locksmith_core::LockError::InvalidUrl`].
//!
//! ## Node layout
//!
//! ```text
//! <namespace>                                      container node, created on demand
//! ├── <encoded>                                    a mutex: container, one per lock name
//! │   ├── _c_<uuid>-lock-0000000007                EPHEMERAL_SEQUENTIAL: the holder (lowest sequence)
//! │   ├── _c_<uuid>-lock-0000000008                the first waiter: watches ...07
//! │   └── _c_<uuid>-lock-0000000009                the next waiter: watches ...08
//! ├── <encoded>.rw                                 a read-write lock
//! │   ├── _c_<uuid>-__READ__0000000003             readers: hold together while no writer is ahead
//! │   ├── _c_<uuid>-__READ__0000000004
//! │   ├── _c_<uuid>-__WRIT__0000000005             a writer: holds when first; watches ...04
//! │   └── _c_<uuid>-__READ__0000000006             a later reader waits for the writer: watches ...05
//! ├── <encoded>.sem                                a semaphore
//! │   ├── locks/_c_<uuid>-p3-lock-0000000012       its internal lock (a mutex, as above)
//! │   └── leases/_c_<uuid>-p3-lease-0000000040     one lease per permit held (or being taken)
//! └── <encoded>.elect                              an election
//!     ├── _c_<uuid>-latch-0000000002               the leader; its data is its value
//!     └── _c_<uuid>-latch-0000000005               the next candidate: watches ...02
//! ```
//!
//! - Each lock name is **one path segment** ([`locksmith_core::driver::LockName::encoded`]: `[A-Za-z0-9_-]` and
//!   `%XX`), so `a`, `a/b`, `ab` and `a/` are four sibling nodes that never compete. Each family
//!   has its own segment ([`locksmith_core::Family::segment`]: the suffixes `.rw`, `.sem`, `.elect`;
//!   encoded names never contain a `.`), so the mutex, semaphore, read-write lock and election
//!   named `x` are four independent locks.
//! - The namespace and lock nodes (and a semaphore's `locks` and `leases`) are **container
//!   nodes**: the server deletes them once their last contender is gone (ZooKeeper's container
//!   manager runs every minute by default), and they are created again, pipelined, by the next
//!   contender that finds them missing. They get the session's ACL, as every node locksmith
//!   creates (see the URL's credentials).
//! - Node data: `locksmith pid=<pid>`, for operators; an election candidate's is its value.
//! - **Fencing token** = the `czxid` of the held node (the zxid of the transaction that created
//!   it; a semaphore's: its lease's). zxids are global and only grow, so the token keeps increasing
//!   across holders even when the lock node is deleted and recreated (the per-parent sequence
//!   number restarts then; the czxid does not). Contenders are granted in creation order, so each
//!   holder's czxid is greater than every earlier holder's — a writer's than every reader's and
//!   writer's before it, a leader's (its **term**) than every earlier leader's.
//! - `holder_id` = the held node's full path.
//!
//! ## Round trips
//!
//! The client sends each request when its method is called, and ZooKeeper answers one session's
//! requests in order, so requests issued back to back share a round trip:
//!
//! | operation | round trips |
//! |---|---|
//! | uncontended acquire / `try_acquire` of a mutex, a read or write side, leadership | **1**: `create` + `getChildren` pipelined (+1 the first time, to create the missing container nodes, pipelined) |
//! | uncontended semaphore permit | **2**: internal lock `create` + `getChildren` + leases `getChildren`; lease `create` + `getChildren`. The internal lock's `delete` is sent as the permit is handed out, not waited for |
//! | `try_acquire` on a held lock (or a full semaphore) | 2: the above (its first round trip), then `delete` of our node |
//! | handover to the next waiter | holder's `delete` → watch event (½): on a server that runs alone the event alone hands the lock over (the waiter was first behind the deleted node in its last listing; see "The hand-over" in `protocol/contender.rs`); on an ensemble, then the waiter's `sync` + `getChildren` (+1); a semaphore's first waiter lists the leases again with a watch (½ + 1) |
//! | a wait | `getData` with a watch on the node ahead (1); the first wait sends one on our own node with it, so that a deletion of our node behind our back ends the wait instead of being handed the lock ("Our own node" in `protocol/contender.rs`) |
//! | after every grant | +1 `getData` with a watch on the held node, sent in the background (the acquire does not wait for it): how a deletion behind our back is noticed (see *Losing a lock*); none after a mutex's, read or write side's or candidate's wait, whose watch on our own node becomes it (a semaphore's lease still sends one) |
//! | release | 1 `delete` (its watch event ends the node's watch) |
//! | renewal of *all* leases of a locker | **1 `exists` per watchdog batch, whatever the number and kinds of locks** (see *Session = lease*) |
//! | `inspect` (mutexes) | 2: `getChildren`, `exists` on the holder |
//! | `leader()` | 2: `getChildren`, `getData` of the first candidate |
//! | `observe()` | the first read as `leader()`, then per change of the candidates: watch event, `getChildren` with a watch, `getData` of the first |
//!
//! ## Acquire, wait, cancel
//!
//! Every kind but the semaphore is one queue, granted by one rule ([`locksmith_core::driver::queue::standing`]:
//! an exclusive contender holds when first, a reader when no writer is ahead):
//!
//! 1. Create `_c_<uuid>-<name>` (EPHEMERAL_SEQUENTIAL) and list the children, pipelined. A fresh
//!    version-4 uuid per attempt: if the create's answer is lost to a connection loss, the node it
//!    may have made is found by its `_c_<uuid>-` prefix instead of being orphaned (Curator's
//!    "protected mode").
//! 2. Sort the children by sequence (Curator's order) and apply the rule: held → the lock is ours.
//! 3. Otherwise watch **only the one node in our way** — the predecessor of an exclusive
//!    contender, the nearest writer ahead of a reader — with `getData` and a watch (unlike
//!    `exists`, it leaves no watch behind on a node that is already gone), wait for its event,
//!    list again. A release wakes one waiter (or the readers behind a writer, who all get in): no
//!    herd, and FIFO by sequence; a waiting writer holds back the readers after it.
//! 4. Deadline, timeout or a dropped future: our node is deleted. A `Drop` guard (`cleanup.rs`)
//!    sends the delete synchronously (the client sends on call), or — if the create was sent but
//!    its answer not seen — spawns a task that finds the node by its uuid prefix and deletes it; a
//!    delete, or that search, that fails on a connection loss is retried by the session's monitor
//!    while the session lives (`conn/leftover.rs`), and once more by `Locker::shutdown`.
//!    That covers the window in which the lock was granted but the lease not yet returned.
//!    `try_acquire` deletes its node before returning `None`, and returns `None` whenever anyone
//!    is queued first.
//!
//! If the session ends while waiting, or our node is deleted behind our back, the attempt starts
//! over (a new session if needed), a few times at most, then fails with `Unavailable`.
//!
//! ## Semaphores
//!
//! Curator's `InterProcessSemaphoreV2` algorithm under `<encoded>.sem`: queue in the internal lock
//! `locks/` as for a mutex (the leases are listed in the same round trip); holding it, create our
//! lease `leases/_c_<uuid>-p<N>-lease-<seq>` and list the leases; while there are more than N,
//! list them with a children watch and wait for it — only the internal lock's holder waits on the
//! leases, so a freed permit wakes one client and permits go out in FIFO order; then delete our
//! internal-lock node. A grant counts every lease, granted or being taken, so no more than N are
//! ever held, whatever happens to the internal lock. Leases are created under the internal lock,
//! so their creation order is the grant order and the lease's czxid the fencing token. Both nodes
//! of one contender carry the same uuid, and dropping an acquire deletes both.
//!
//! **Permit counts.** locksmith's nodes carry N after the protected prefix (`p<N>-`, which costs
//! no extra request). A request whose N differs from a locksmith lease's, or from a locksmith
//! waiter's ahead of it in the internal lock, is refused with
//! [`locksmith_core::LockError::InvalidOption`] and its nodes are withdrawn. Curator's nodes carry no
//! count (Curator keeps N in each client): they are counted as leases, but a Curator client with
//! another N cannot be detected — give both sides the same N.
//!
//! ## Elections
//!
//! Curator's `LeaderLatch` layout under `<encoded>.elect`: each candidate is a
//! `_c_<uuid>-latch-<seq>` node whose data is its value (Curator stores the participant id
//! there); the lowest sequence leads, each candidate watches its predecessor, the term is the
//! leader's czxid. `leader()` reads the first candidate (the first whose node can still be read,
//! as Curator's `getLeader()`). `observe()` starts a task of the backend's that lists the
//! candidates with a children watch (an `exists` watch while the election node does not exist)
//! and reads the first one's data after every event, sending only changes of leader; it reads
//! again after a reconnection, opens a new session after an expiry, and ends when the
//! [`locksmith_core::LeaderWatch`] is dropped (or the backend is).
//!
//! ## Session = lease
//!
//! One ZooKeeper session per [`connect`] (per `Locker`): its heartbeats, sent by the client on its
//! own, renew every lock of that locker at once. What that means for a lock's TTL:
//!
//! - **The server enforces the session timeout, not a per-lock TTL.** A process that dies or is
//!   cut off loses all its locks when its session expires. The server clamps the requested timeout
//!   to `[minSessionTimeout, maxSessionTimeout]`, by default `[2, 20] × tickTime` (4 s to 40 s with
//!   the default tickTime of 2 s; the test servers of `scripts/backends` use tickTime 200 ms with
//!   explicit bounds of 400 ms and 60 s). [`locksmith_core::driver::Lease::ttl`] (and `LockGuard::ttl()`) is the
//!   timeout the server **granted**; the TTL given to `LockBuilder::ttl` does not change it (one
//!   session cannot have several timeouts). Pick the URL's `session_timeout` as you would pick a
//!   lock TTL: how long locks outlive a crashed holder.
//! - **Abandoned leases expire too.** A guard forgotten with `abandon()` (or a watchdog that
//!   stopped) while the process and its session live on would otherwise hold the lock forever; the
//!   backend deletes the node of any lease not renewed within its TTL, as the server would after a
//!   crash.
//! - **Renewal** ([`locksmith_core::driver::LockBackend::renew_many`]) costs the same whatever the number of
//!   locks: one `sync` and one `exists` on the namespace node per batch, pipelined (one round
//!   trip; `exists` fails once the session is gone). In an ensemble the leader expires sessions, and
//!   a follower cut off from the quorum goes on answering its clients by itself for `syncLimit`
//!   ticks while the leader side expires their sessions: `sync` goes through the leader, so the
//!   answer proves the leader heard from the session's server after the request was sent, and the
//!   session — the lease of every lock in the batch — cannot expire before about `sent + session
//!   timeout`, which is what the watchdog counts on (a cut-off follower answers neither, and the
//!   holder is told within the TTL). A server that runs alone (its `/zookeeper/config` is
//!   empty, and the URL names no other) expires sessions itself: there the `exists` goes alone,
//!   and a waiter first in line behind the node it watches takes that node's delete event as
//!   its grant, with no request, its lease counted from when its watch was sent (the server's
//!   answer to the watch showed the session alive there). The session state alone would not do: the
//!   client notices a dead connection only after 2/5 of the session timeout, so "connected" can be
//!   stale. A terminated session is `NotHeld` for all leases without a request; a disconnected one
//!   is `Unavailable` (retried). Renewal does not look at the nodes: a deleted node is reported by
//!   its watch (below), which makes its next renewal `NotHeld` too. With the default interval
//!   (TTL/3) that is 3 requests per session timeout; the client's own pings (after 3/20 of the
//!   session timeout without traffic) fill the gaps in between. `tests/renewal_traffic.rs` counts
//!   the packets of one session holding 10 and 1000 locks over four renewal intervals: 7 and 8
//!   (per-lock `multiRead`s of 128 leases, as before, made it 36). The watchdog may split leases
//!   acquired at different times into several batches per interval (those due within a tenth of
//!   the interval go together): each is one request, so at most about ten per interval, however
//!   many locks are held.
//!
//! ## Losing a lock: Curator's connection states and the guard
//!
//! | what happened | Curator | what the guard sees |
//! |---|---|---|
//! | connection lost, session maybe alive | `SUSPENDED` | nothing yet: renewals fail (`Unavailable`) and are retried; `lost()` fires (`RenewalFailed`) once none succeeded for TTL − TTL/10, *before* the server can expire the session |
//! | reconnected within the session timeout | `RECONNECTED` | still held; renewals succeed again |
//! | session expired / closed | `LOST` | `lost()` fires at once (`LeaseGone`), from the session monitor |
//! | our node deleted behind our back | — | `lost()` fires at once (`LeaseGone`): the data watch on the node (set while it waited, or right after the grant) reports `NodeDeleted` |
//! | lease not renewed within its TTL | — | the node is deleted, `lost()` fires (`LeaseGone`) |
//!
//! All of this holds for every kind: the held node is a reader's or writer's node, a semaphore's
//! lease, a leader's candidate node.
//!
//! After an expiry the locker opens a new session for its next request; locks of the old session
//! stay lost.
//!
//! **Watches on held nodes.** Each held node carries one one-shot data watch, set by a `getData`
//! right after the grant, or, for a node that waited in its queue, the watch it set on itself
//! while it waited (see "Our own node" in `protocol/contender.rs`); it costs no traffic until it
//! fires. `NodeDeleted` fires `lost()` unless
//! the lease was released by us (a release forgets the lease before sending its `delete`, so our
//! own deletion is not a loss — and its event is what ends the watch). A data change sets the watch
//! again. The watch outlives a lost connection: `zookeeper-client` re-registers all watches when it
//! reconnects within the session (`SetWatches` with the last zxid seen), and the server then
//! reports a deletion that happened while we were away (`tests/reconnect.rs`). Session expiry ends
//! every watch; the session monitor reports it. All watches of a session are polled by one task,
//! not one task per lock.
//!
//! **Limitation (shared with Curator):** a renewal is answered by the server the client is
//! connected to. A follower cut off from the leader keeps answering until it notices, up to
//! `syncLimit × tickTime`, while the leader may already be counting the session down. Prefer a
//! session timeout of at least `syncLimit × tickTime` (10 s with ZooKeeper's defaults, the default
//! here), so that such a follower drops its clients before the leader can expire their sessions.
//! A holder told its lock is lost deletes its node if it still exists (the watchdog releases it),
//! so a holder that was merely slow does not keep waiters behind a lock it gave up.
//!
//! ## Module map (the layout of `docs/backend-guide.md`)
//!
//! | file | role |
//! |---|---|
//! | `lib.rs` | these docs, `DESCRIPTOR`, `connect` |
//! | `config.rs` | the URL and its options |
//! | `error.rs` | client errors → `LockError` |
//! | `layout.rs` | where each lock lives in the tree; contender names and order |
//! | `backend.rs` | `impl LockBackend`: each call to its protocol |
//! | `conn/` | one session (`session.rs`, the lease of its locks), the current one (`sessions.rs`), the nodes a session still has to delete (`leftover.rs`) |
//! | `protocol/` | a contender in a queue (`contender.rs`), what each kind creates (`recipe.rs`), one try (`take.rs`), Curator's semaphore (`semaphore.rs`), elections (`election.rs`) |
//! | `wake/` | the watch that tells a holder its node is gone (`held.rs`) |
//! | `renew.rs` | `renew_many`: nothing per lock (the session is the lease of every lock, kept by the client's heartbeats); one pipelined `sync` + `exists` (through the leader) confirms the session for the whole batch |
//! | `cleanup.rs` | the clean-up guards: a contender's node nobody holds yet (`PendingNode`), a release not answered yet (`Unanswered`) |
//! | `listing.rs` | `inspect` and `list` |
//! | `guarded.rs` | guarded writes: a `multi` of the holder node's check and the write; [`add_owner_check`] |
//!
//! ## Curator and kazoo interop
//!
//! locksmith's nodes follow Curator's recipes exactly (checked against Curator 5.4's
//! `LockInternals`, `StandardLockInternalsDriver`, `InterProcessReadWriteLock`,
//! `InterProcessSemaphoreV2`, `LeaderLatch`, `ProtectedUtils` and `ZKPaths`): Curator creates
//! `ZKPaths.makePath(path, <name>)` EPHEMERAL_SEQUENTIAL `withProtection()`, that is
//! `<path>/_c_<uuid>-<name><seq>`. So a Java service and a Rust service share a lock when the Java
//! side uses, with `p = "<namespace>/" + encoded(name)`:
//!
//! ```text
//! new InterProcessMutex(client, p)                         locker.lock(name)
//! new InterProcessReadWriteLock(client, p + ".rw")         locker.rwlock(name)
//! new InterProcessSemaphoreV2(client, p + ".sem", n)       locker.semaphore(name, n)
//! new LeaderLatch(client, p + ".elect", value)             locker.election(name).campaign(value)
//! ```
//!
//! where `encoded(name)` is [`locksmith_core::driver::LockName::encoded`] (`orders/42` → `orders%2F42`; names of
//! only `[A-Za-z0-9_-]` are unchanged) and `<namespace>` is the URL path (default `/locksmith`),
//! or, with a Curator client built with `.namespace("locksmith")`, `"/" + encoded(name)`.
//! Contenders of every library are ordered by their sequence number alone, whatever their
//! prefix. The fencing token of a Curator holder is the `czxid` of its node; locksmith's
//! `leader()` shows a Curator leader's participant id, and Curator's `getLeader().getId()` a
//! locksmith leader's value.
//!
//! Differences: Curator's mutex and write lock are re-entrant per thread, and its write-lock
//! holder may also take the read lock (locksmith's are not re-entrant); a Curator reader waits
//! for the *first* writer ahead, locksmith's for the nearest (both wait until no writer is ahead);
//! Curator puts the client's IP address in lock node data; Curator's semaphore nodes carry no
//! permit count (see *Semaphores*). kazoo's read-write lock nodes (`<uuid>__rlock__<seq>` readers,
//! `<uuid>__lock__<seq>` writers) in a `.rw` node are read the same way: `__READ__` and
//! `__rlock__` are readers, every other contender is exclusive.
//!
//! Tests: `tests/curator_interop.rs` runs Curator's own `InterProcessReadWriteLock`,
//! `InterProcessSemaphoreV2` and `LeaderLatch` in a JVM against locksmith on one server (writers
//! and readers of both exclude each other, a semaphore shared by both never has more holders than
//! permits and serves both in order, leaders and `getLeader()` agree); `tests/curator_layout.rs`
//! and `tests/primitives.rs` check the node names; `tests/foreign_recipes.rs` and
//! `tests/primitives.rs` queue kazoo-style nodes with locksmith's.

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly): each feature-gated item shows the feature that enables it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod cleanup;
mod config;
mod conn;
mod error;
mod guarded;
mod layout;
mod listing;
mod protocol;
mod renew;
mod wake;

pub use backend::ZkBackend;
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_NAMESPACE, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TIMEOUT, OPTIONS,
};
pub use guarded::add_owner_check;
/// The ZooKeeper client this crate is built on, for a `multi` of the application's own with
/// [`add_owner_check`].
pub use zookeeper_client;

use locksmith_core::driver::{BackendUrl, Connecting, Descriptor, TtlScope};
use locksmith_core::{Locker, Result};

/// This backend in the registry of `locksmith::connect`.
pub static DESCRIPTOR: Descriptor = Descriptor {
    name: "zk",
    schemes: &["zk", "zks"],
    feature: Some("zk"),
    options: OPTIONS,
    ttl: TtlScope::PerSession { option: "ttl" },
    connect: connect_boxed,
};

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(connect(url))
}

/// Connects to ZooKeeper as described by `url` (see the [crate docs](crate) for its form) and
/// returns a [`Locker`] over one new session.
///
/// Errors: [`locksmith_core::LockError::InvalidUrl`] for a bad URL or option,
/// [`locksmith_core::LockError::Unavailable`] when no session is established within `connect_timeout`.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(ZkBackend::connect(url).await?))
}
