//! # locksmith-etcd — locksmith locks on etcd v3
//!
//! `locksmith::connect("etcd://h1:2379,h2:2379,h3:2379/namespace?ttl=10s")` (or
//! [`connect`] here) returns a [`Locker`] whose locks live in etcd: mutexes, semaphores,
//! read-write locks and leader elections. The algorithm is the one of etcd's Go `concurrency`
//! package (a key prefix per lock, a queue ordered by create revision, one session lease), with
//! three differences: waiters watch so that the handover is not delayed by etcd's
//! unsynced-watcher loop, `try_acquire` never writes when it fails, and a lock is reported lost
//! when its key is deleted behind its back. Semaphores and read-write locks are the same queue,
//! with what each entry is written in its key's value (see *Semaphores, read-write locks and
//! elections*); elections are laid out exactly as Go's `concurrency.Election`.
//!
//! ## URL
//!
//! `etcd[s]://[user[:password]@]host[:port][,host[:port]...][/namespace][?options]`, port 2379 by
//! default. Several hosts form one cluster: the client balances over them and fails over when one
//! is down (a member cut off from the leader refuses requests, so it is skipped too).
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `ttl` | `10s` | the session TTL (see below); rounded up to whole seconds |
//! | `connect_timeout` | `3s` | bound on [`connect`]: unreachable endpoints give [`LockError::Unavailable`] after this, never a hang |
//! | `request_timeout` | `5s` | bound on every later request (renewals included) |
//! | `layout` | `default` | `default` or `go-mutex` (see *Layouts*) |
//!
//! | `ca`, `cert`, `key` | — | `etcds://` (feature `tls`): TLS with rustls; a PEM bundle to trust instead of the system's roots; a client certificate and key for mutual TLS (`--client-cert-auth`) |
//! | `server_name` | the host | `etcds://`: the name to verify the server's certificate against |
//! | `password_file` | — | the password of `user@` in a file; else `LOCKSMITH_PASSWORD` |
//!
//! Unknown options, zero durations and unknown layouts are [`LockError::InvalidUrl`].
//! `user:password@` authenticates with etcd's users and roles (`auth enable`); a wrong password
//! or a role without the namespace's key range is [`LockError::Denied`]. With mutual TLS and no
//! password, etcd takes the client certificate's CN as the user.
//!
//! ## Session and TTL
//!
//! Each [`connect`] (each `Locker`) has one etcd client and one **session lease**, granted at
//! connect with the URL's `ttl`. Every key of that locker — held or waiting — is attached to it,
//! and ONE keep-alive stream keeps it alive: the watchdog's `renew_many` sends one keep-alive per
//! tick for all held locks (10,000 held locks cost one keep-alive, not 10,000 requests), and
//! while an `acquire` waits with no lock held a small keeper task does the same.
//!
//! TTL semantics follow from the shared lease:
//! - etcd TTLs are whole seconds, and the server raises small ones to its minimum (1.5 × the
//!   election timeout, i.e. 2 s with default settings). The effective TTL is what the server
//!   granted, and every [`locksmith_core::driver::Lease::ttl`] / `LockGuard::ttl()` reports it. **Asking for
//!   `ttl=300ms` gives 1 s after rounding, then the server minimum: 2 s on a default etcd.**
//! - The per-lock TTL of `LockBuilder::ttl` is **ignored**: one session serves all locks, so all
//!   locks of a `Locker` share the session TTL. Use separate `connect` calls (URLs with different
//!   `ttl=`) for locks that need different expiry.
//! - The TTL is how long a lock outlives its *process* (or its connection): when the process
//!   dies, every lock it held goes after one TTL. A single lock whose guard is `abandon()`ed
//!   expires after about one TTL too, even while the same `Locker` holds other locks and keeps
//!   the session alive: the backend remembers when each lock was last included in a successful
//!   `renew_many` (or granted), and one sweeper task per session (one timer, a quarter of the
//!   TTL) deletes the key of a lock not renewed for its TTL and fires its `lost()` with
//!   `LeaseGone` (see `conn/sweep.rs`).
//! - A lease that was lost (etcd answered a keep-alive with TTL 0) is replaced by a new one on
//!   the next request; waiters that were queued under it queue again at the end.
//!
//! ## Algorithm and round trips
//!
//! This section is the mutex's; the other kinds follow it (see the next sections). The keys of
//! lock `L` live under a prefix `P(L)`; one key per holder or waiter, attached to the session
//! lease, empty value. The queue is ordered by **create revision** (FIFO), the
//! oldest key holds the lock, and its create revision is the **fencing token** (etcd's revision
//! is cluster-wide and strictly increasing, so tokens of later holders are always larger).
//!
//! - **`acquire`** — one transaction: *if my key does not exist, put it with the lease*, and in
//!   the same round trip *read the oldest key under `P(L)`* (the holder) and the two newest (my
//!   key and my predecessor). Oldest == mine: held, **1 round trip**, nothing else sent (plus one keep-alive if
//!   the session was not refreshed for half its TTL: after an idle period, or when a waiter is
//!   granted the lock after an outage). Otherwise wait:
//!   1. open a watch on the DELETE of my **predecessor only** (the newest key with a lower
//!      create revision: no herd when the holder leaves), on the session's shared watch
//!      stream, **without a start revision** (1 round trip; when the last look found me right
//!      behind the holder, a watch on the DELETE of my own key is created with it, once: see
//!      step 3);
//!   2. confirm in one transaction that my key still exists and the predecessor is still my
//!      predecessor (1 round trip); if not, go back to 1 with the new predecessor, or hold the
//!      lock if none is left;
//!   3. on the delete event: if step 2 found the predecessor to be the **oldest** key (the
//!      holder: it read the two newest keys older than mine, and found one), the lock is mine,
//!      with no request (keys are created with ever larger revisions, so none can come between;
//!      my key lives while the session lease does, which is checked locally: one keep-alive only
//!      if the session was not refreshed for half its TTL; and no one deleted it behind my back:
//!      the watch on my own key is looked at first, and its event ends the wait and queues me
//!      again. The stream delivers events in revision order, and the watch hub applies every
//!      response it has received before a waiter runs, so a deletion of my key in the same
//!      transaction, an operator's `del --prefix`, is seen too when its response came in with
//!      the predecessor's; without the watch on my own key, the event is not enough); otherwise
//!      look again (step 2's transaction, 1 round trip, which shows my key gone).
//! - **handover** (holder releases, the next waiter takes over) = the release's delete and one
//!   watch notification: the waiter holds the lock **one notification** after the release was
//!   applied, at any wait time, as with etcd's own lock RPC (which waits on the server), when it
//!   was already right behind the holder at step 2. A waiter that queued behind other waiters
//!   does not know when the keys before its predecessor leave (nothing wakes it then: no herd),
//!   so on its predecessor's delete it looks again, **one notification + one round trip**.
//!   Requests per handover: the delete; the waiter's watch cancel (sent, not awaited, after the
//!   waiter has run: the server would keep a watcher until the stream closes); and for a waiter
//!   right behind the holder the cancel of the watch on its own key, for a waiter that queued
//!   behind others its place transaction: 3, of which 1 or 2 on the critical path (a waiter
//!   right behind the holder also created the watch on its own key while it waited); plus a
//!   held-key watch create and cancel for a lock held longer than 100 ms (the cancel sent after
//!   the release's delete is answered).
//! - **`try_acquire`** — one transaction: *if no key exists under `P(L)` (a compare over the
//!   range), put mine*. Fails without writing anything when the lock is held or anyone waits:
//!   **1 round trip**.
//! - **`release`** — one transaction: *if my key still has my create revision, delete it*
//!   (**1 round trip**); a stale lease never deletes a newer holder's key. An uncontended
//!   acquire + release is its two transactions and nothing else (`examples/etcd_uncontended.rs`).
//! - **renewal** — one keep-alive per tick for the whole session.
//! - **cancellation** — the key of an `acquire` (or `try_acquire`) that times out or is dropped
//!   at any await point is deleted by a background task spawned from a drop guard; nothing
//!   stays in the queue. The transaction that creates the key runs in a task of its own, so a
//!   dropped caller never cuts it off: the clean-up waits for its outcome and deletes exactly
//!   the key revision it created, whichever reaches etcd first. (Deleting by name at once lost
//!   that race about once per hundred cancellations that struck while the transaction was in
//!   flight, and the key it then created blocked the lock for as long as the session lived.)
//!   Only when the transaction itself failed (timeout, lost connection) is its outcome unknown:
//!   then the key is deleted by name, deleted again by the session's sweeper every quarter TTL
//!   for two TTLs in case etcd applies the transaction late, and its name is not reused. (The Go
//!   layout has one key name per session and lock, so the next attempt must reuse it: the
//!   sweeper deletes it only while no attempt of the session on that lock is under way, never a
//!   later holder's key.)
//!
//! ### The unsynced-watch pitfall (and how it is avoided)
//!
//! etcd keeps watchers that start at a revision at or below its current one ("unsynced") apart
//! from those created at the current revision ("synced"), and catches the unsynced ones up in a
//! loop that runs every 100 ms; events for an unsynced watcher wait for that loop. The natural
//! way to wait — watch the predecessor from the revision of the read that found it, as the Go
//! `Mutex` and the server-side lock RPC do — creates an unsynced watcher, and a release that
//! comes before the next run of the loop is seen up to 100 ms late. Here the watch is created
//! *without* a start revision, so the server makes it synced at once; the confirmation read of
//! step 2 happens *after* the server acknowledged the watch, so a delete between the first read
//! and the watch is seen by the read, and a delete after it by the watch. Nothing is missed and
//! nothing waits for the loop.
//!
//! Measured on the test machine (single etcd 3.4 on loopback; `examples/unsynced_watch.rs` and
//! `examples/handover.rs`): a delete reaches a synced watch in ~1 ms and an unsynced one in
//! ~90 ms; the handover (release called → waiter's `acquire` returns) takes ~2–4 ms after waits
//! of 20 ms to 600 ms, against 57–77 ms for short waits when the same code watches from the
//! predecessor's revision instead.
//!
//! ## Semaphores, read-write locks and elections
//!
//! Every kind is one queue per name, in a namespace of its own (`<namespace>/<name>.sem/`,
//! `.rw/`, `.elect/`; see *Layouts*), one key per holder or waiter as for the mutex (same key
//! names, same session lease, same clean-up of cancelled attempts, same `lost()` watch, same
//! riding out of outages), granted by the one rule of [`locksmith_core::driver::queue::standing`]. The value
//! says what an entry is: a permit's key holds the semaphore's permit count in decimal, a
//! read-write lock's key `read` or `write`, a candidate's key its campaign value. The fencing
//! token is the key's create revision, so tokens follow arrival, which is grant order: a writer's
//! token is above every earlier reader's and writer's, a leader's term above every earlier
//! leader's.
//!
//! - **Writers and candidates** hold when they are first, whatever is ahead of them, so they
//!   use the mutex's protocol unchanged (with their value in the key): `acquire` uncontended 1
//!   round trip; waiting on the predecessor's deletion with a synced watch; `try_acquire` 1
//!   round trip that writes nothing unless the queue is empty; release 1 round trip.
//! - **Readers and permits** hold depending on what is ahead (a reader: no writer ahead; a
//!   permit of `n`: fewer than `n` entries ahead), so their join transaction creates the key and
//!   reads the queue with values (**1 round trip** uncontended; release 1 round trip). A waiter
//!   watches ONE thing, on the session's shared watch stream, synced and confirmed by reading
//!   the queue again after the server created the watch (as the mutex does): a reader the
//!   deletion of the nearest writer ahead; a semaphore's first waiter the deletion of any holder
//!   (a watch of the prefix for deletions, filtered to the keys ahead of it); every later
//!   semaphore waiter the deletion of the entry just ahead of it, or a put to it. A semaphore
//!   waiter that waited and then holds **touches** its key (puts its value again), if anyone
//!   queued behind it, so that the waiter behind it reads the queue and becomes the first
//!   waiter. A wait costs the watch and the confirming read; the handover costs one
//!   notification and one read of the queue up to the waiter (plus the touch, 1 round trip,
//!   when someone waits behind a semaphore waiter that gets a permit). A released permit wakes
//!   the first waiter only; a released writer wakes the readers behind it (who all get in) or
//!   the next writer. No polling, no herd.
//! - **`try_acquire`** never writes when it fails. A reader: one transaction that creates its
//!   key if every key of the queue says `read` (a compare over the prefix) or the queue is
//!   empty. A permit: one transaction that creates its key if the queue is empty, else reads
//!   it; if a permit is free, a second one creates the key unless a key of the queue was
//!   created or changed since (a mod-revision compare over the prefix): 1 round trip on an
//!   unused or full semaphore, 2 when taking a permit beside other holders.
//! - **Permit counts**: a permit whose count differs from an entry ahead of it is refused with
//!   `InvalidOption` (its key is deleted first), by `acquire` and `try_acquire`; entries ahead
//!   are not affected. A value locksmith does not write (someone else's key) counts as an
//!   exclusive entry: it can delay others, never let in more than the lock allows.
//! - **Elections**: `leader()` reads the oldest key of the prefix (1 round trip): its value,
//!   its create revision (the term) and its key (the holder id). `observe()` reads it and
//!   starts a task that watches the leader's key (or, while nobody leads, the prefix's puts)
//!   on a watch stream of its own, synced and confirmed by a read; on an event it reads the
//!   leader again and reports the change (a new value of the same leader is reported as it
//!   comes). A change costs the observer one read, then one watch and one read to follow the
//!   new leader. A failure (an outage, a broken stream) is retried with a backoff of 50 ms
//!   doubling to 1 s, starting afresh with a read, while the last leader seen stays; the task
//!   ends when the watch or the backend is dropped. Every request is bounded by the request
//!   timeout.
//!
//! Measured on the test machine (single etcd 3.4 on loopback, debug build,
//! `examples/primitive_handover.rs`): handovers of a permit, writer → reader, reader → writer
//! and leader → candidate take ~2–4 ms (median) after waits of 20 ms and 620 ms, as the
//! mutex's; an observer reports the next leader ~4–5 ms after the resignation.
//!
//! ## Outages and failover
//!
//! - Every request has a time limit (`request_timeout`), so a dead or hung server never hangs
//!   a renewal, a release or an acquire: they fail with [`LockError::Unavailable`].
//! - A request that certainly had no effect (the chosen member refused the connection, or has
//!   no leader during an election) is sent again within its time limit; the balanced client
//!   then usually reaches another member.
//! - `acquire` rides out an outage until its deadline (a waiter keeps its queue key and place
//!   while the session lease lives), and then says `Unavailable`, not `Timeout`; without a
//!   deadline it rides out an outage of up to the session TTL plus the request timeout, then
//!   fails with `Unavailable`.
//! - A holder whose keep-alives fail for the TTL minus the safety margin is told by `lost()`
//!   (the watchdog) before the server can expire its lease. After a leader change, etcd extends
//!   every lease by an election timeout, so a holder with a TTL well above the election time
//!   usually keeps its lock; with a TTL near the election time it may lose it (tested both
//!   ways in `tests/cluster.rs`).

//! ## Losing a lock
//!
//! `lost()` fires when:
//! - a keep-alive answers TTL 0 (the lease expired or was revoked): every lock of the session;
//! - no keep-alive succeeds for longer than the TTL minus the safety margin (the watchdog);
//! - the lock's key is deleted behind its back (an operator, `etcdctl del`): each key held for
//!   100 ms gets a watch for its deletion on the session's shared watch stream, opened by the
//!   session's sweeper (never awaited by `acquire`), from its create revision + 1 (so a deletion
//!   before the watch reached the server is replayed: nothing is missed, it is only reported up
//!   to ~100 ms later). A lock released within 100 ms costs no watch request at all; a longer
//!   one costs one message when the watch opens and one when it is released, and no traffic
//!   in between: renewal traffic does not grow with the number of held locks. (Checking the
//!   keys in `renew_many` would cost a compare per lock per tick and hit etcd's limit of 128
//!   operations per transaction.) When the stream breaks, the watches are re-created from the
//!   same revisions; if that history was compacted, the key is read instead. That is the one
//!   cost that does grow with the number of held locks: after a reconnect, one watch request
//!   per held lock (and the server replays each key's history since it was created);
//! - the lock was not renewed for its TTL (its guard was abandoned): see *Session and TTL*.
//!
//! ## Layouts
//!
//! - **`default`**: `<namespace>/<name><family>/<lease id hex>-<n>`, where the namespace (the
//!   URL path, `locksmith` when empty) and the name are each encoded into one segment without
//!   `/` ([`locksmith_core::driver::LockName::encoded`]) and `<family>` is nothing for a mutex, `.sem`,
//!   `.rw` or `.elect` ([`locksmith_core::Family::segment`]; an encoded name has no `.`, so the four
//!   kinds of one name never share keys). No lock's prefix is a prefix of another's, in any
//!   namespace: `a`, `a/b`, `ab` and `a/` are independent. Each live attempt has its own key, so
//!   attempts of one `Locker` on one lock queue like any others. `n` is the lowest number not
//!   used by another live attempt of the session on that lock: a lock taken and released in a
//!   loop reuses one key name. (etcd keeps every deleted key in its index until a compaction,
//!   and the range reads of `acquire` visit them all: with a fresh name per attempt, each
//!   uncontended acquire + release got slower, about +0.4 ms after 2000 of them on one lock.) A name
//!   is reused only once its key is known to be deleted.
//! - **`go-mutex`** (`?layout=go-mutex`): exactly the keys of etcd's Go `concurrency.Mutex` and of
//!   `etcdctl lock NAME`: `NAME/<lease id in lower-case hex>` with the raw name (prefixed by
//!   `<path>/` when the URL has a path), owner = lowest create revision under `NAME/`. A Go
//!   service and a Rust service exclude each other on the same name, e.g. during a migration.
//!   It **inherits the Go prefix pitfall**: the lock `a` is the prefix `a/`, which also holds the
//!   keys of the lock `a/b`, so a holder or waiter of `a/b` can own or block `a`. Use names that
//!   are not prefixes of one another (or the default layout). Since a session has one key per
//!   lock in this layout, attempts of one `Locker` on one lock are serialised in the process.
//!   **Elections** are etcd's Go `concurrency.Election` and `etcdctl elect NAME PROPOSAL`:
//!   the same `NAME/<lease id hex>` keys, with the campaign value as the value, leader = lowest
//!   create revision; `etcdctl elect -l NAME` shows locksmith's leaders and locksmith's
//!   `leader()`/`observe()` show etcdctl's. As in Go, a mutex and an election of one name share
//!   the prefix `NAME/` (they are one queue): give them different names. Go has no semaphore or
//!   read-write lock, so this layout refuses them (`InvalidOption`).
//!
//! ## Inspect
//!
//! `inspect` (mutexes) reads the holder key (its create revision is the fencing token) and the
//! number of keys under the prefix in one transaction, then the holder lease's remaining TTL
//! (`LeaseTimeToLive`).
//!
//! ## Module map (the layout of `docs/backend-guide.md`)
//!
//! | file | role |
//! |---|---|
//! | `lib.rs` | these docs, `DESCRIPTOR`, `connect` |
//! | `config.rs` | the URL and its options |
//! | `error.rs` | etcd client errors → `LockError` |
//! | `layout.rs` | where a lock's keys live, in both layouts |
//! | `backend.rs` | `impl LockBackend`: each call to its protocol |
//! | `conn/` | the connection (`mod.rs`), the session lease (`session.rs`), the locks it holds (`held.rs`), its sweeper (`sweep.rs`, `sweeper.rs`) |
//! | `protocol/` | one-round-trip requests (`requests.rs`), what every kind's attempt shares (`attempt.rs`), exclusive and shared kinds (`exclusive.rs`, `shared.rs`, `line.rs`, `kinds.rs`), the Go layout's slots (`slots.rs`), elections (`election.rs`) |
//! | `wake/` | the session's one watch stream (`watch.rs`) and its task (`hub.rs`) |
//! | `cleanup.rs` | the clean-up guard of a queue key no caller will hold |
//! | `renew.rs` | `renew_many`: one keep-alive of the session lease for the whole batch |
//! | `listing.rs` | `inspect` and `list` |
//! | `guarded.rs` | guarded writes: the write and the holder's create-revision check in one transaction; [`owner_compare`] |
//! | `test_support.rs` | `#[cfg(test)]`: the unit tests' shared set-up (a backend and a key of its session lease) |
//!
//! ## Tests (real servers from `scripts/backends`)
//!
//! `tests/conformance.rs` (the locksmith-core suites of every kind, default layout),
//! `tests/primitives.rs` (keys and values per kind, requests per operation, one waiter woken
//! per released permit, an election observer through an outage), `tests/compat_elect.rs`
//! (`etcdctl elect` and `etcdctl elect -l` against `layout=go-mutex` elections, both ways), `tests/session.rs` (one lease
//! for all locks, revoked leases, long waits), `tests/batch_renewal.rs` (300 held locks cost
//! one keep-alive per tick, counted with etcd's metrics), `tests/scale.rs` (5,000 locks taken
//! 50 at a time on one `Locker` with `ttl=3s` survive three TTLs with a bounded number of
//! `renew_many` calls and at most one keep-alive each; `SCALE_LOCKS=10000` for the
//! benchmark's size), `tests/compat.rs` (`etcdctl lock`
//! against `layout=go-mutex`, both ways, and the inherited prefix pitfall), `tests/cluster.rs`
//! (leader SIGKILLed under a held lock with queued waiters), `tests/outage.rs` (a hung server),
//! `tests/bad_input.rs` (unreachable and silent endpoints, TTLs below the minimum, bad options).

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
#[cfg(test)]
mod test_support;
mod wake;

pub use backend::{EtcdBackend, EtcdStats};
pub use config::{
    Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_NAMESPACE, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TTL,
    OPTIONS,
};
/// The etcd client this crate is built on, for transactions of the application's own with
/// [`owner_compare`].
pub use etcd_client;
pub use guarded::owner_compare;
pub use layout::Layout;

use locksmith_core::driver::{BackendUrl, Connecting, Descriptor, TtlScope};
use locksmith_core::{Locker, Result};

#[allow(unused_imports)] // for the docs
use locksmith_core::LockError;

/// This backend in the registry of `locksmith::connect`.
pub static DESCRIPTOR: Descriptor = Descriptor {
    name: "etcd",
    schemes: &["etcd", "etcds"],
    feature: Some("etcd"),
    options: OPTIONS,
    ttl: TtlScope::PerSession { option: "ttl" },
    connect: connect_boxed,
};

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(connect(url))
}

/// Connects to etcd as described by `url` (see the [crate docs](crate) for the options) and
/// returns a [`Locker`] with its own client and session lease.
///
/// Errors: [`LockError::InvalidUrl`] for a bad URL or option; [`LockError::Unavailable`] when no
/// endpoint answers within the connect timeout.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    let cfg = Config::from_url(url)?;
    tracing::debug!(endpoints = ?cfg.endpoints, layout = ?cfg.layout, "connecting to etcd");
    Ok(Locker::new(EtcdBackend::connect(cfg).await?))
}
