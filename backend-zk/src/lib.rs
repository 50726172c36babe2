//! # backend-zk — locksmith on ZooKeeper
//!
//! Curator's `InterProcessMutex` recipe in async Rust: a fair (FIFO) queue of EPHEMERAL_SEQUENTIAL
//! nodes under one node per lock, with the ZooKeeper *session* as the lease. Built on the
//! [`zookeeper_client`] crate.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> lockcore::Result<()> {
//! let url = lockcore::BackendUrl::parse("zk://zk1:2181,zk2:2181,zk3:2181/billing?session_timeout=10s")?;
//! let locker = backend_zk::connect(&url).await?;
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
//!   ended) tries to establish a session; an unreachable ensemble is
//!   [`lockcore::LockError::Unavailable`] after at most this long.
//! - `request_timeout`, default 5s: the longest one call other than a waiting `acquire` may take
//!   (`try_acquire`, `release`, `inspect`, a renewal, reconnecting included); a server that
//!   accepts connections but does not answer gives [`lockcore::LockError::Unavailable`] after it.
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
//! Unknown options, malformed durations or paths are [`lockcore::LockError::InvalidUrl`].
//!
//! ## Node layout
//!
//! ```text
//! <namespace>                                  container node, created on demand
//! └── <LockName::encoded()>                    the lock node: container, one per lock name
//!     ├── _c_<uuid>-lock-0000000007            EPHEMERAL_SEQUENTIAL: the holder (lowest sequence)
//!     ├── _c_<uuid>-lock-0000000008            the first waiter: watches ...07
//!     └── _c_<uuid>-lock-0000000009            the next waiter: watches ...08
//! ```
//!
//! - Each lock name is **one path segment** ([`lockcore::LockName::encoded`]: `[A-Za-z0-9_-]` and
//!   `%XX`), so `a`, `a/b`, `ab` and `a/` are four sibling nodes that never compete.
//! - The namespace and lock nodes are **container nodes**: the server deletes them once their last
//!   contender is gone (ZooKeeper's container manager runs every minute by default), and they are
//!   created again, pipelined, by the next contender that finds them missing.
//! - Node data: `locksmith pid=<pid>`, for operators.
//! - **Fencing token** = the holder node's `czxid` (the zxid of the transaction that created it).
//!   zxids are global and only grow, so the token keeps increasing across holders even when the lock
//!   node is deleted and recreated (the per-parent sequence number restarts then; the czxid does
//!   not). Because contenders hold the lock in creation order, each holder's czxid is greater than
//!   every earlier holder's.
//! - `holder_id` = the holder node's full path.
//!
//! ## Round trips
//!
//! The client sends each request when its method is called, and ZooKeeper answers one session's
//! requests in order, so requests issued back to back share a round trip:
//!
//! | operation | round trips |
//! |---|---|
//! | uncontended acquire / `try_acquire` | **1**: `create` + `getChildren` pipelined (+1 the first time, to create the missing container nodes, pipelined) |
//! | `try_acquire` on a held lock | 2: the above, then `delete` of our node |
//! | handover to the next waiter | holder's `delete` → watch event → waiter's `getChildren` (½ + 1) |
//! | after every grant | +1 `getData` with a watch on our node, sent in the background (the acquire does not wait for it): how a deletion behind our back is noticed (see *Losing a lock*) |
//! | release | 1 `delete` (its watch event ends the node's watch) |
//! | renewal of *all* leases of a locker | **1 `exists` per watchdog batch, whatever the number of locks** (see *Session = lease*) |
//! | `inspect` | 2: `getChildren`, `exists` on the holder |
//!
//! ## Acquire, wait, cancel
//!
//! 1. Create `_c_<uuid>-lock-` (EPHEMERAL_SEQUENTIAL) and list the children, pipelined. A fresh
//!    version-4 uuid per attempt: if the create's answer is lost to a connection loss, the node it
//!    may have made is found by its `_c_<uuid>-` prefix instead of being orphaned (Curator's
//!    "protected mode").
//! 2. Sort the children by sequence (Curator's order). First → the lock is ours.
//! 3. Otherwise watch **only the predecessor** (`getData` with a watch — unlike `exists`, it leaves
//!    no watch behind on a node that is already gone), wait for its event, list again. Every
//!    release wakes exactly one waiter: no herd, and FIFO by sequence.
//! 4. Deadline, timeout or a dropped future: our node is deleted. A `Drop` guard sends the delete
//!    synchronously (the client sends on call), or — if the create was sent but its answer not
//!    seen — spawns a task that finds the node by its uuid prefix and deletes it. That covers the
//!    window in which the lock was granted but the lease not yet returned. `try_acquire` deletes
//!    its node before returning `None`, and returns `None` whenever anyone is queued first.
//!
//! If the session ends while waiting, or our node is deleted behind our back, the attempt starts
//! over (a new session if needed), a few times at most, then fails with `Unavailable`.
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
//!   explicit bounds of 400 ms and 60 s). [`lockcore::Lease::ttl`] (and `LockGuard::ttl()`) is the
//!   timeout the server **granted**; the TTL given to `LockBuilder::ttl` does not change it (one
//!   session cannot have several timeouts). Pick the URL's `session_timeout` as you would pick a
//!   lock TTL: how long locks outlive a crashed holder.
//! - **Abandoned leases expire too.** A guard forgotten with `abandon()` (or a watchdog that
//!   stopped) while the process and its session live on would otherwise hold the lock forever; the
//!   backend deletes the node of any lease not renewed within its TTL, as the server would after a
//!   crash.
//! - **Renewal** ([`lockcore::LockBackend::renew_many`]) costs the same whatever the number of
//!   locks: one `exists` request on the namespace node per batch, the cheapest request the server
//!   answers itself (no write, no leader round trip) and one that fails once the session is gone.
//!   Its answer proves the server heard from the session after the request was sent, so the
//!   session — the lease of every lock in the batch — cannot expire before `sent + session
//!   timeout`, which is what the watchdog counts on. The session state alone would not do: the
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
//! | our node deleted behind our back | — | `lost()` fires at once (`LeaseGone`): the data watch set on the node when it was granted reports `NodeDeleted` |
//! | lease not renewed within its TTL | — | the node is deleted, `lost()` fires (`LeaseGone`) |
//!
//! After an expiry the locker opens a new session for its next request; locks of the old session
//! stay lost.
//!
//! **Watches on held nodes.** Each held node carries one one-shot data watch, set by a `getData`
//! right after the grant; it costs no traffic until it fires. `NodeDeleted` fires `lost()` unless
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
//! ## Curator interop
//!
//! locksmith's nodes follow Curator's `InterProcessMutex` layout exactly (checked against Curator's
//! `LockInternals`, `StandardLockInternalsDriver`, `ProtectedUtils` and `ZKPaths`): Curator creates
//! `ZKPaths.makePath(path, "lock-")` EPHEMERAL_SEQUENTIAL `withProtection()`, that is
//! `<path>/_c_<uuid>-lock-<seq>`, and orders contenders by the text after the last `lock-`. So a
//! Java service and a Rust service exclude each other when the Java side locks
//!
//! ```text
//! new InterProcessMutex(client, "<namespace>/" + encoded(name))
//! ```
//!
//! where `encoded(name)` is [`lockcore::LockName::encoded`] (`orders/42` → `orders%2F42`; names of
//! only `[A-Za-z0-9_-]` are unchanged) and `<namespace>` is the URL path (default `/locksmith`),
//! or, with a Curator client built with `.namespace("locksmith")`, `"/" + encoded(name)`.
//! The fencing token of a Curator holder is the `czxid` of its node (`inspect` shows it).
//! Differences: Curator's mutex is re-entrant per thread (locksmith's is not); Curator puts the
//! client's IP address in the node data. (`tests/curator_layout.rs` checks the layout and that a
//! contender creating Curator's nodes and locksmith queue behind each other; no JVM is involved.)

#![warn(missing_docs)]

mod backend;
mod config;
mod error;
mod layout;
mod queue;
mod renew;
mod session;
mod watch;

pub use backend::ZkBackend;
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_NAMESPACE, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TIMEOUT, OPTIONS,
};

use lockcore::{BackendUrl, Connecting, Descriptor, Locker, Result, TtlScope};

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
/// Errors: [`lockcore::LockError::InvalidUrl`] for a bad URL or option,
/// [`lockcore::LockError::Unavailable`] when no session is established within `connect_timeout`.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(ZkBackend::connect(url).await?))
}
