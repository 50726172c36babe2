//! # The locksmith Redis backend
//!
//! - `redis[s]://[user[:password]@]host[:port][/db][?options]`: one server.
//! - `redis[s]://host1[:port],host2[:port],host3[:port][/db]`: independent masters, a quorum
//!   (Redlock; see "Several independent masters").
//! - `redis[s]+sentinel://[user[:password]@]s1[:26379],s2[:26379],…/mastername[?db=N&…]`: the
//!   master that these sentinels monitor under `mastername`, followed across failovers (see
//!   "Redis Sentinel and Redis Cluster").
//! - `redis[s]-cluster://[user[:password]@]h1[:6379],h2[:6379],…`: a Redis Cluster found from
//!   these seed nodes.
//!
//! `rediss://` (feature `tls`) is TLS with rustls: the system's roots, or `ca=` (a PEM bundle),
//! and `cert=`/`key=` for mutual TLS (`tls-auth-clients yes`); the host of the URL is what the
//! server's certificate is verified against. `user:password@` is an ACL user (Redis 6+
//! `AUTH user password`), `:password@` the `default` user's password (`requirepass`); the
//! password may come from `password_file=` or `LOCKSMITH_PASSWORD` instead. A wrong password, or
//! an ACL that forbids the scripts (`EVALSHA`, `SCRIPT LOAD`) or the keys (`~locksmith:*`), is
//! [`locksmith_core::LockError::Denied`]; so is waiting for a lock as a user whose ACL gives no
//! right to the pub/sub channels that wake waiters (Redis 7 gives a new user none: add `&*`, or
//! the channels under the keys' prefix, `&locksmith:*` by default). Such a user can take and
//! release free locks, but its release of a lock that others wait for fails too (`NOPERM` on the
//! `PUBLISH` that wakes the next waiter, after the lock was handed over): give every user of
//! locksmith the channels. An ACL that forbids function libraries (`FUNCTION
//! LOAD`, `FCALL`) but allows scripts is fine: locksmith then sends plain scripts (see "Function
//! libraries" below). Redis enforces ACLs per user, not per lock: any client allowed
//! to write the keys can delete a lock key.
//!
//! A lock is a key set to `<token>:<fence>:<ttl>` for `<ttl>` ms (`SET … PX`), renewed by locksmith-core's watchdog,
//! released by compare-and-delete; waiters queue in Redis in FIFO order and are woken by the
//! server (pub/sub), one at a time. Semaphores, read-write locks and elections keep their holders
//! in a sorted set instead (see "Semaphores, read-write locks and elections"). Works with Redis 6 and later (tested with 7.0, which has no
//! native compare-and-delete: every state change is one Lua script).
//!
//! ## Options
//!
//! | option | default | meaning |
//! |---|---|---|
//! | path `/N` | `0` | the database number (`db=N` on Sentinel; a cluster has only 0) |
//! | `ttl` | `15s` ([`locksmith_core::DEFAULT_TTL`]) | the TTL of every lock whose builder sets no `.ttl(…)` (a builder's TTL wins), as `ttl=` on etcd and ZooKeeper; 50 ms to 24 h, at most `restart_delay` unless that is `0` |
//! | `prefix` | `locksmith:` | prefix of every key locksmith creates (must not contain `{` or `}`) |
//! | `layout` | `default` | `default` or `plain` (see below) |
//! | `connect_timeout` | `3s` | connecting; an unreachable server is [`locksmith_core::LockError::Unavailable`] after this |
//! | `response_timeout` | `3s` | one command (no command of this backend blocks on the server, so this is not a wait limit) |
//! | `waiter_ttl` | `10s` | a queue entry whose waiter stopped refreshing it for this long is skipped; waiters refresh every third of it. Give every client of a lock the same: a waiter's steps bound the others' entries by its own, so a client with a much shorter one drops the others' entries as dead and they queue again at the tail (FIFO is kept only among equal settings) |
//! | `fence_floor` | `time` | `time`, `none` or a number: a lower bound for fencing tokens (see "After data loss") |
//! | `poller_gap` | none | plain layout: leave the lock free this long for clients that poll, once locksmith clients have passed it among themselves for `max_pass_over` (see "The plain layout") |
//! | `max_pass_over` | `1s` | plain layout with `poller_gap`: how long locksmith clients may hand the lock to each other before such a gap |
//! | `ca`, `cert`, `key` | — | `rediss://`: the CA bundle to trust, the client certificate and key (PEM files) |
//! | `password_file` | — | the password in a file; else `LOCKSMITH_PASSWORD` |
//! | `min_replicas` | `1` on Sentinel and Cluster, else `0` | replicas that must acknowledge every grant and renewal (`WAIT`) before it is trusted; 0 to 16; `0` opts out (see "Replica confirmation") |
//! | `replica_timeout` | `500ms` | how long a grant or renewal waits for them (less than `response_timeout`) |
//! | `restart_delay` | `15s` | after the server lost its data, no lock without a fencing counter is granted until the server has been up this long; no lock's TTL may be longer (see "After data loss"); `0` turns it off |
//! | `eviction` | `refuse` | `refuse` a master whose `maxmemory-policy` is not `noeviction` (its keys may be evicted, a held lock's among them: see "Eviction"), or `allow` it with a warning |
//!
//! ## Key layout
//!
//! Default layout, for the lock named `N` with encoded form `E` ([`locksmith_core::driver::LockName::encoded`],
//! so `a`, `a/b`, `ab` and `a/` never share a key):
//!
//! | key | type | content |
//! |---|---|---|
//! | `<prefix>{E}:lock` | string, `PX` = lease | `<token>:<fencing token>:<ttl ms>`; `token` is 128 random bits in hex, the lease's `holder_id`; the TTL it was granted bounds a clock step back (see "Clock jumps"; versions before it wrote `<token>:<fencing token>`, still read) |
//! | `<prefix>{E}:fence` | integer | the fencing counter, raised by every successful acquire; with `fence_floor=time` it expires an hour (plus a TTL) after it was created, and the next grant starts it again at the clock (never with `fence_floor=none` or a number) |
//! | `<prefix>{E}:fence:restart` | string | only after the server's clock was stepped back past its start (a negative uptime, see "After data loss"): `run_id:deadline`, the server-time ms until which the lock is held back once; it expires when the uptime has reached `restart_delay` again |
//! | `<prefix>{E}:queue` | sorted set | waiter tokens scored by arrival (server time in ms, strictly increasing) |
//! | `<prefix>{E}:alive` | hash | waiter token → server time (ms) after which the entry is stale |
//! | `<prefix>{E}:streak`, `:gap` | string | plain layout with `poller_gap` only: when locksmith clients began holding the lock without a break; the gap left for polling clients |
//! | channel `<prefix>{E}:wake:<token>` | pub/sub | the wake-ups of one waiter |
//!
//! All keys of a lock share the hash tag `{E}`, so each script touches one slot, as Redis Cluster
//! requires; different locks spread over the slots, and so over the masters. The queue and liveness keys
//! expire `2 × waiter_ttl` after the last waiter refreshed them, the fencing counter an hour after
//! it was created: a program that locks one name per entity (`orders/<id>`) leaves at most one
//! counter per name taken in the last hour. (With `fence_floor=none` or a number the counter
//! is all that orders the tokens, and it never expires.)
//!
//! ## The scripts (one round trip each)
//!
//! - **acquire** (`TRY_ACQUIRE`): drop stale queue heads; if the lock key is absent and no live
//!   waiter is queued (and the server has not just lost its data: see "After data loss"), raise
//!   the counter (by one, and to at least the floor) and `SET lock token:fence PX ttl` → the
//!   fencing token. A second run of the same call (sent again after a dropped connection) finds
//!   the lock already ours and answers the same.
//! - **wait step** (`WAIT_STEP`): join the queue tail if not in it, refresh the liveness deadline,
//!   drop stale heads; if the lock is free and we are the head, take it (as above) and leave the
//!   queue. Otherwise return whether we are the head, the holder's `PTTL`, and whether the holder
//!   is a foreign (non-locksmith) client.
//! - **release** (`RELEASE`): compare-and-delete (only if the value is still ours), then hand the
//!   lock to the first live waiter: take it for that waiter as its step would (a new fencing
//!   token, the TTL its last step left in the queue) and `PUBLISH` one message saying so
//!   (`grant:<fencing token>:<deadline>`). The waiter holds on that message, with no request of
//!   its own, if the deadline is the liveness deadline its last step was answered with (then the
//!   grant came after that step, and its lease counts from when the step was sent); otherwise
//!   the message is a wake-up and its next step finds the lock its own. Where a grant needs more
//!   than one server's word (several masters, or `min_replicas`), and while the restart delay or
//!   a poller gap runs, the release only wakes the head (`wake`), whose step takes the lock.
//!   Whoever takes the lock from the queue (a release handing it over, or the head's own step)
//!   also wakes the next live waiter, first now: its step watches the new holder's lease, so
//!   that a new holder that dies is followed a TTL later, not at that waiter's heartbeat. A
//!   handover costs the same few commands whether 2 or 1000 clients wait (two script calls, the
//!   release and that waiter's step, and 29 commands; `tests/herd.rs`), and one notification of
//!   latency (one notification plus one round trip where the head's step takes the lock).
//!   A release whose connection dropped is sent again on the reconnected one: usually the
//!   server closed that connection while it sat idle (a restart, a sentinel's reconfiguration,
//!   `CLIENT KILL`, an idle `timeout`), so the first send never left the client
//!   (`tests/closed_connections.rs`). Run twice it deletes nothing of anyone else's (the value
//!   names this grant's token); if the second run finds the lock already free, the first may
//!   have freed it or the lease may have ended before, and the release says so as an
//!   `Unavailable` error rather than a false "not held".
//! - **renew** (`RENEW_MANY`): compare-and-`PEXPIRE` of a whole batch. The watchdog renews all
//!   leases of a [`locksmith_core::Locker`] that are due together in one
//!   [`locksmith_core::driver::LockBackend::renew_many`] call; that is **one `EVALSHA` per 500 leases**
//!   (KEYS: the lock keys; ARGV: token and TTL of each), all of them in **one pipelined round
//!   trip**: 1000 held locks cost two script calls per tick, not 1000. The script answers one
//!   flag per lease; a lease whose key no longer holds our token is reported `NotHeld`, which
//!   fires its `lost()`, and does not affect the others of its batch. The chunks keep each script
//!   short (a script blocks its server while it runs: about a millisecond for 500 leases).
//!   On Redis Cluster the batch is grouped by the master that serves each lock's slot, and each
//!   group is one `RENEW_MANY_CROSS` call (the same script, flagged `allow-cross-slot-keys`) on
//!   its master: one round trip per node, the nodes in parallel.
//! - **leave** (`LEAVE`): a cancelled or timed-out acquire removes its queue entry, releases a lock
//!   granted to it but never returned, and passes the wake-up on if it was first in line.
//!   It runs from a `Drop` guard (spawned), so dropping an acquire future leaves nothing behind.
//! - `RAISE_FENCE` (quorum mode) and `INSPECT` (read-only).
//!
//! ## Function libraries
//!
//! On Redis 7 the lock scripts are functions of two libraries (`FUNCTION LOAD`, called with
//! `FCALL`): one per set of the URL's settings (the mutex's and the other kinds' four scripts),
//! one for the rest (`RAISE_FENCE`, `INSPECT`, `LEADER`, the guarded write). A library defines
//! its helpers and settings once, when it is loaded; a plain script (`EVALSHA`) builds every
//! helper it calls as a closure again on every call. A library's name is `locksmith_` and the
//! hash of its code, so libraries of other versions or settings never replace each other, and
//! loading one that is there changes nothing. Both libraries and the watchdog's plain
//! `RENEW_MANY` scripts are loaded when connecting (one pipelined round trip); a call that finds
//! its function missing (the server restarted without persistence, `FUNCTION FLUSH`) loads the
//! library and is sent again (it did not run, so this is safe even for `RELEASE`). Functions
//! are replicated, so a promoted replica has them. The functions that give a lock up (`RELEASE`,
//! `LEAVE`) are flagged `allow-oom`: Redis refuses an unflagged function up front when it is over
//! `maxmemory`, and a full server must still take releases (`tests/oom.rs`). A server that
//! refuses functions (Redis 6: no such command; an ACL without `FUNCTION LOAD` or `FCALL`) is sent every script as a plain
//! script (`SCRIPT LOAD` at connect, `EVALSHA`, reloaded on `NOSCRIPT`) for the rest of the
//! process: the same code, the helpers and settings written before each body. The watchdog's
//! batches (one call per tick and 500 leases) are plain scripts everywhere; the renewal pipeline
//! loads them again on `NOSCRIPT`. An uncontended acquire is one `FCALL` (`EXISTS lock queue`, `GET fence`, `TIME`, `SET fence`
//! (keeping its expiry), `SET lock`; plus one `INFO server` when the lock has no counter) and a
//! release one `FCALL` (`GET`, `DEL`, `ZRANGE queue`): no subscription or queue entry unless
//! the lock is busy or someone waits. Every script but `RELEASE` may be sent a
//! second time when its connection dropped (the server restarted): each answers a repeat as it
//! answered the first run.
//!
//! Every script that reads one of the URL's settings (`fence_floor`, `restart_delay`,
//! `poller_gap`, `max_pass_over`), the mutex's and the other kinds', carries them as constants in
//! its source instead of as arguments, and the mutex's take the streak and gap keys only with
//! `poller_gap`: an uncontended acquire sends 4 keys and 3 arguments, a
//! release 3 keys and 2 arguments (each key or argument costs the server about as much as a
//! `GET`). Clients with different settings therefore run different scripts (their own SHA1s) on
//! the same keys.
//!
//! ## Semaphores, read-write locks and elections
//!
//! Default layout only, on one server, Sentinel or Cluster (the plain layout and the quorum mode
//! refuse them with [`locksmith_core::LockError::InvalidOption`], saying why). Each is one lock queue per
//! name and family, granted by locksmith-core's rule ([`locksmith_core::driver::queue`]), in keys of its own:
//! `<prefix>{S}:…` where `S` is [`locksmith_core::Family::segment`] (`orders%2F42.sem`, `.rw`,
//! `.elect`), so the families of one name never mix and each lock is in one cluster slot.
//!
//! | key | type | content |
//! |---|---|---|
//! | `<prefix>{S}:holders` | sorted set | holder entries scored by lease deadline (server ms); past it a holder is gone |
//! | `<prefix>{S}:info` | hash | entry → `<fencing token>:<campaign value>` |
//! | `<prefix>{S}:fence` | integer | the fencing counter, as the mutex's |
//! | `<prefix>{S}:queue` | sorted set | waiter entries scored by arrival |
//! | `<prefix>{S}:alive` | sorted set | waiter entries scored by liveness deadline (server ms) |
//! | `<prefix>{S}:writers` | sorted set | the exclusive waiters, scored as in the queue |
//! | channel `<prefix>{S}:wake:<token>` | pub/sub | the wake-ups of one waiter |
//! | channel `<prefix>{S}:leader` | pub/sub | elections: a message at every change of leader |
//!
//! An entry is `X:<token>` (a writer, a candidate: exclusive), `S:<token>` (a reader: shared) or
//! `P<n>:<token>` (a permit of `n`); the lease's `holder_id` is the token. Redis 7.0 has no
//! per-field TTL, so every script first drops the holders past their deadline and the waiters
//! past their liveness (`ZRANGEBYSCORE … -inf now`); the keys themselves expire once their last
//! deadline has passed. The rule, in O(log n) per check: an exclusive entry holds when nobody
//! holds and it heads the queue; a reader when no writer holds and no writer waits ahead of it
//! (the first of `writers`); a permit when holders plus waiters ahead of it are fewer than `n`.
//! A permit request whose count differs from the semaphore's holders (or its first waiter) is
//! refused. Every grant raises the counter (with `fence_floor` and `restart_delay` as for the
//! mutex), so every token, readers' and permits' too, is above every earlier grant's.
//!
//! Scripts (one `FCALL` each, or `EVALSHA`, see "Function libraries"): `TRY_ACQUIRE` (an uncontended acquire: one round trip),
//! `WAIT_STEP` (join the queue, take when the rule allows), `RELEASE` (one round trip), `LEAVE`
//! (clean-up of a cancelled acquire), `RENEW_MANY` (the holders' deadlines, in the watchdog's
//! batch beside the mutexes': one pipelined round trip per server, per node on a cluster) and
//! `LEADER` (read-only). A release, a leave or a noticed expiry `PUBLISH`es one wake-up to each
//! waiter that can hold now and to no other: the first writer, the readers ahead of the first
//! waiting writer, or the first `n − holders` permit waiters (`tests/herd_kinds.rs`: a writer's
//! release wakes exactly the 20 readers queued behind it, a release of a semaphore with 20
//! waiters exactly one). A waiter sleeps until a wake-up, its heartbeat, or the deadline of the
//! holder it depends on (the step names it: the last holder for a head writer, the writer for a
//! reader, the `k`-th deadline for the `k`-th permit waiter), never polling. A wait costs the
//! attempt, a `SUBSCRIBE`, one step to queue, and one step when woken; a hand-over, one
//! notification plus one round trip (a mutex's release hands the lock over itself: see
//! `RELEASE` above).
//!
//! Elections: the campaign value is stored with the holder; [`locksmith_core::driver::LockBackend::leader`] is
//! one `LEADER` call (the holder before its deadline, its value and fencing token = term).
//! [`locksmith_core::driver::LockBackend::observe`] subscribes to the leader channel (shared by the observers of
//! one backend), reads the leader, then reads it again at every message and at the leader's
//! deadline (an expiry publishes nothing); a broken pub/sub connection (a restart, a failover) is
//! subscribed again and the leader read again; it ends when its watch is dropped. A handover is
//! one change, as on etcd and ZooKeeper: while nobody holds but a live candidate waits in line
//! (between a leader's release or expiry and the next candidate's grant), the observer keeps the
//! previous leader and waits for the grant's message, rather than reporting nobody in between;
//! it reads again when a candidate leaves the queue (announced on the leader channel too) or its
//! entry goes stale (`waiter_ttl`), and reports nobody once no live candidate is left.
//!
//! ## The queue and wake-ups
//!
//! A waiter subscribes to its own channel (one shared pub/sub connection per backend and server),
//! then joins the queue. It sleeps until a wake-up arrives, until the holder's `PTTL` runs out
//! (only the head waiter watches the holder: a key that expires publishes nothing; a waiter that
//! becomes the head when another takes the lock is woken to do so), or until its
//! heartbeat refreshes its queue entry (`waiter_ttl / 3`). A waiter that died without cleaning up
//! (a crashed process) is skipped once its entry is stale: in the worst case the lock idles for
//! `waiter_ttl` after such a crash. One exception: on one server without `min_replicas` a
//! mutex's release hands the lock to the live head of the queue directly, for the TTL the head
//! asked for (`protocol/wait.rs`, *The hand-over*); a head that died while its entry still
//! looked live is then handed a lock nobody renews, and the lock idles until that TTL runs out,
//! as after a holder's crash. So does a head that is paused (SIGSTOP, a long GC pause) when the
//! lock is handed to it: it holds the lock, as a paused holder would, for one TTL (its own), and
//! its next step on resuming finds the lock its own or not. That is the bound of a paused first
//! waiter on Redis (on PostgreSQL and etcd the next step grants past it at once); a hand-over
//! that waited for the head to confirm would cost every hand-over a round trip. Nothing ever
//! polls the lock in a loop, and no command blocks a
//! connection (no `BLPOP`).
//!
//! ## The plain layout (`?layout=plain`): migrating from redis-py, redsync, node-redlock
//!
//! The lock key is exactly the lock name and its value the holder's token, taken with
//! `SET name token NX PX ttl` and released by compare-and-delete: the layout of redis-py's `Lock`,
//! redsync, node-redlock and most hand-written Redis locks. A process still on such a library and
//! one on locksmith exclude each other on the same name. Locksmith's own bookkeeping lives next to
//! it: `<prefix>{T}:E:fence`, `:queue`, `:alive`, where `T` puts them in the Redis Cluster slot
//! of the raw name: the name's own `{tag}` if it has one, else the name itself (for a name with
//! a `}` and no tag, another short tag of the same slot). So on Redis Cluster the lock key that
//! redis-py's `SET name …` writes and locksmith's bookkeeping are on one node, and one script
//! reaches them all. Don't name locks so that they start with the prefix.
//!
//! Choose it while old and new clients share locks; choose the default layout otherwise (its keys
//! are namespaced by the prefix and safe for any name). The plain layout serves mutexes only:
//! those libraries have no semaphores, read-write locks or elections to share keys with.
//!
//! What old clients change:
//! - They never wake anybody. While a foreign holder (a value that is not `<token>:<n>`) has the
//!   lock, the head locksmith waiter re-checks at the holder's `PTTL` and with a backoff from 50 ms
//!   to 1 s, so a lock released early by an old client is noticed within about a second. Only the
//!   head waiter does this: one check per lock, not one per waiter.
//! - They ignore the queue. An old client polling `SET NX` can take a free lock ahead of queued
//!   locksmith waiters (between a release and the head's take-over, one notification plus one
//!   round trip). Mutual exclusion always holds; FIFO holds among locksmith waiters only.
//! - The other way round, locksmith waiters hand the lock to each other in about a millisecond,
//!   while an old client tries only every so often (redis-py sleeps 0.1 s between tries): as long
//!   as locksmith waiters keep coming, a polling client can be passed over for good (in
//!   `tests/interop.rs`, 3.5 s and counting behind four busy locksmith clients). `?poller_gap=150ms`
//!   bounds that: once locksmith clients have held the lock without a break for `max_pass_over`
//!   (default 1 s), a release leaves it free for `poller_gap`, during which no locksmith client
//!   takes it, so a client that polls at least that often gets it within about
//!   `max_pass_over + poller_gap` (0.1 s in the same test, with `max_pass_over=500ms`). Set
//!   `poller_gap` a little above the old clients' retry interval. The cost: the lock idles for
//!   `poller_gap` once per `max_pass_over` of continuous use, whether or not a poller waits.
//! - Their holders have no fencing token; a locksmith holder's token comes from the counter key.
//! - After a restart without persistence their own locks are not protected by `restart_delay`:
//!   they may take a lock that a locksmith holder still believes it holds.
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
//! `try_acquire` fails with [`locksmith_core::LockError::Unavailable`] naming how many masters
//! answered; `acquire` retries until its deadline (without one, for `waiter_ttl`), as a waiter
//! rides out an outage of one server, and then fails the same way.
//!
//! What it does not guarantee (Kleppmann, "How to do distributed locking", 2016): a process paused
//! (GC, swap, a stopped VM) or a network delay longer than the lease lets a second holder in while
//! the first still believes it holds the lock; timing assumptions cannot rule that out, only a
//! fencing token checked by the storage can. A master restarting without persistence forgets its
//! keys, but grants nothing for `restart_delay` after it (see "After data loss"), so it cannot
//! help a second majority form while the first holder's lease may still run. Waiting is not FIFO in this mode (retries at the
//! holder's TTL or with backoff), and there is no queue.
//!
//! Fencing tokens: each master has its own counter, so there is no single sequence. The token of
//! a quorum lease is the maximum of the counters of the masters that granted it, and those
//! masters' counters are raised to it before the lease is returned (a second round trip). Because
//! any two majorities share a master, tokens strictly increase across holders as long as no
//! master loses its counter; they are not consecutive. A counter raised to a token from another
//! master's clock, ahead of its own, is kept until its own clock has passed that token (its
//! hourly expiry would otherwise restart it at its clock, below the token).
//!
//! Mutexes only: semaphores, read-write locks and elections are refused. A semaphore cannot be
//! made safe this way (DistributedLock documents the same for its Redis semaphore): each master
//! counts holders on its own, so with 3 masters and 2 permits, three clients holding the
//! majorities {1,2}, {2,3} and {1,3} are each within the count on every master, yet three hold.
//! And there is no queue to keep readers, writers and candidates in order or to push leader
//! changes.
//!
//! ## After data loss
//!
//! A Redis without persistence (the `save ""` / `appendonly no` of many cache deployments) that
//! restarts forgets every key: the locks, the queues and the fencing counters. Two things go
//! wrong unless the backend guards against them, and it does by default (for a restart: a
//! `FLUSHALL` or `FLUSHDB` on a server that keeps running is not seen, see below):
//!
//! - **A second holder while the first still works.** The old holder learns of the loss only at
//!   its next renewal (up to a third of its TTL later), or — if it cannot reach the server — when
//!   its lease runs out; a client that asks the restarted server at once would be granted the lock
//!   meanwhile. So a server that has been up for less than `restart_delay` (15 s by default) grants
//!   no lock that has no fencing counter on the server: its scripts read the server's uptime
//!   (`INFO server`) and answer "busy for N ms" instead. A waiter sleeps until then; `try_acquire`
//!   answers `None` (the lock may well be held). Every lease granted before the loss has run out by
//!   then, and its holder's `lost()` has fired, as long as no lease is longer than `restart_delay`:
//!   a TTL above it is refused with [`locksmith_core::LockError::InvalidOption`]. Use the same
//!   `restart_delay` in every client of a server, at least the longest TTL of any of them. A lock
//!   whose counter survived (the server persists its data) is granted at once. The price: on a
//!   freshly started Redis the first lock of each name waits until the server is `restart_delay`
//!   old (the server cannot tell a first start from a restart that lost data). `restart_delay=0`
//!   turns this off, for servers that persist every write (AOF with `appendfsync always`).
//!   A server whose wall clock was stepped back past its start (a machine that booted with its
//!   clock ahead, then NTP) reports a negative uptime for as long as the step: that is no
//!   restart, but no uptime either, so the delay is then served once per lock and server run
//!   (`run_id`), counted from the first acquire that sees it (the key `…:fence:restart` keeps the
//!   deadline), and later grants are at once (`tests/clock.rs`).
//! - **Fencing tokens going backwards.** With the default `fence_floor=time` every token is at
//!   least the server's clock in microseconds since the Unix epoch (about 1.8 × 10^15 today, well
//!   within the 2^53 that every JSON reader keeps exact), and above the counter: tokens keep growing
//!   across data loss as long as the server's clock does (a clock stepped back by more than the
//!   time since the lost tokens were granted could repeat one: clock jumps are not covered). With
//!   the time floor the counter is only a tie-breaker, so it can expire (an hour after it was
//!   created; the next grant starts it again at the clock). `fence_floor=none` gives small
//!   consecutive tokens that start over after data loss; `fence_floor=N` is a fixed floor to raise
//!   by hand after an incident.
//!
//! **A restart that loses only the newest writes** — a crash of a server that persists with RDB
//! save points (Redis's default) or AOF `appendfsync everysec`, then reloads a snapshot older
//! than the last grant — keeps the lock's fencing counter but not its holder: the counter says
//! the data survived, and the lock is granted at once although its last holder may still believe
//! it holds until its next renewal. Tokens still grow (the time floor), so a resource that checks
//! fencing tokens refuses the old holder; mutual exclusion alone is not promised across such a
//! crash. For it, persist every write (`appendfsync always`) or check tokens.
//!
//! **A flush** (`FLUSHALL`, `FLUSHDB`) on a server that keeps running leaves its uptime as it
//! was, so `restart_delay` does not apply: a lock of a holder that still believes in it is
//! granted at once, and its fencing counter starts again at the clock (tokens still grow with the
//! default time floor). Only fencing covers it; do not flush a database that holds locks.
//!
//! What stays uncovered: a failover to a replica that had not received the latest writes, unless
//! `min_replicas` is set (see "Replica confirmation"); data lost to eviction on a server
//! connected to with `eviction=allow` (see "Eviction"); a server clock that jumps. `tests/restart.rs` restarts a server without
//! persistence under a held lock and a queued waiter: the old holder is told ~0.5 s after the
//! restart, the waiter gets the lock only after `restart_delay`, with a larger token.
//!
//! ## Eviction
//!
//! A Redis whose `maxmemory-policy` is not `noeviction` deletes keys when it reaches `maxmemory`:
//! `allkeys-*` any key, `volatile-*` those with a TTL, which every lock key has (so
//! `volatile-lru` evicts them first). A held lock's key would vanish without its holder being
//! told, and the lock be granted again. So connecting reads the policy of every master it uses
//! (the server, the Sentinel's master, each Cluster master, each master of a quorum that answers
//! by 250 ms after a majority did) with `CONFIG GET maxmemory-policy`, or from `INFO memory`
//! where `CONFIG` is disabled or not permitted, and refuses a policy other than `noeviction` with
//! [`locksmith_core::LockError::Denied`] (CLI exit 5) that names it and the fix: `CONFIG SET
//! maxmemory-policy noeviction` (and the same in the server's config file). `eviction=allow` in
//! the URL connects anyway, with a warning in the log: for a server you know never reaches its
//! `maxmemory`. A server where neither command is permitted is used, with a warning. (A policy
//! changed after connecting is not seen.) With `noeviction`, a full server refuses what needs
//! memory: an acquire fails with an error (`tests/oom.rs`), and a holder can still release.
//!
//! ## Redis Sentinel and Redis Cluster
//!
//! Everything above holds on both: the FIFO queue with wake-ups pushed by the server, fencing,
//! batched renewal, cancellation safety, semaphores, read-write locks and elections (and their
//! observers, which subscribe again on the new master after a failover), the plain layout, TLS
//! and ACL users.
//!
//! - **Sentinel** (`redis+sentinel://s1,s2,s3/mymaster`): the backend asks the sentinels for the
//!   master (and checks with `ROLE` that it is one), and sends everything there. A request that
//!   fails as a failover makes it fail (connection refused or dropped, no answer, `READONLY` from
//!   a demoted master, no replica acknowledging a write) makes it ask the sentinels again (at most
//!   every 200 ms); if they name another master, every request goes there, and the pub/sub
//!   connection is closed so that every waiter subscribes again on the new master and re-checks
//!   its lock. A holder's watchdog keeps renewing on the new master, which knows the lease if it
//!   was replicated; if it was not, the renewal answers "not held" and `lost()` fires; if the new
//!   master cannot be reached before the lease's validity ends, `lost()` fires then.
//! - **Cluster** (`redis-cluster://h1:7000,h2:7001`): each request goes to the master of its key's
//!   slot, following `MOVED` (resharding, failover) and `ASK` (a slot being migrated). All keys of
//!   a lock share one slot; the renewals of a batch are grouped by node (above). Wake-ups are
//!   `PUBLISH`ed by the scripts on the lock's node and reach the waiters' pub/sub connection on
//!   any node (the first seed that answers).
//!
//! Until the old master is demoted (the sentinels reconfigure it, or the cluster notices it is
//! back), it may still accept writes that its successor never sees: a lease renewed only there
//! is shorter on the new master than its holder believes. Replica confirmation closes that gap.
//!
//! ## Replica confirmation (`min_replicas`)
//!
//! Redis replicates asynchronously: a master can acknowledge a lock and fail before any replica
//! received it, and the replica promoted in its place then grants the lock to someone else while
//! the first holder still believes it holds it. With `min_replicas=n`, every grant and every
//! renewal batch is followed by `WAIT n replica_timeout` on the connection that wrote it; a grant
//! fewer than `n` replicas acknowledged is given back at once (the acquire fails with
//! [`locksmith_core::LockError::Unavailable`], or a waiting acquire keeps trying until its deadline),
//! and a renewal they did not acknowledge does not count (the watchdog retries, and fires
//! `lost()` when the lease runs out unconfirmed). A replica that the sentinels or the cluster
//! promote has then seen every lease its holder believes in.
//!
//! **It is on by default on Sentinel and Cluster** (`min_replicas=1`), as Redisson's
//! `checkLockSyncedSlaves` is: those topologies exist to fail over to a replica, and without it a
//! failover after a replication lag double-grants silently (`docs/reliability.md`). Opt out with
//! `min_replicas=0` (efficiency locks, a cluster whose masters have no replicas: every grant
//! would be refused there, with an error naming the option). On one server (`redis://`) it is
//! off by default: set it when something outside locksmith promotes a replica behind that
//! address. Raise it to the number of replicas of the master for more margin (the failover
//! picks the most up-to-date replica, but with `n` smaller than the replica count it may pick
//! one that did not acknowledge). It costs one round trip to
//! a replica per grant and per renewal batch (`docs/comparison.md`), and while fewer than `n`
//! replicas answer nothing can be granted or renewed. `docs/reliability.md` measures failovers
//! with and without it. Not with a quorum of independent masters (they have no replicas).
//!
//! **After a failover** the promoted replica has no replica of its own until one attaches: the
//! old master once it is back and the sentinels have turned it into a replica (about 10 s after
//! its return on the test servers), or another replica of the old master. Until then no grant is
//! confirmed, so a waiter gets the lock only then: give a master two replicas where locks must
//! be granted through a failover. A waiter follows the promotion itself within a response
//! timeout (with `min_replicas=0`, it is granted 0.4–0.7 s after the sentinels name the new
//! master; with the default, within 0.1 s of the new master's replica coming online:
//! `tests/sentinel.rs`).
//!
//! What it does not cover: a master and its replicas that lose their data together (restarted
//! without persistence; `restart_delay` covers that), a replica that acknowledged a write and
//! then lost it before being promoted, and clock jumps (next section).
//!
//! ## Clock jumps
//!
//! Redis keeps a key's expiry as an absolute time on the server's wall clock, so a clock step
//! changes every lease at once:
//! - **Back** (by `d`): every key gains `d`. A live holder loses nothing (its next renewal sets its
//!   TTL again), but a dead holder's lock would stay held for `d` (measured: a 3 s lock held for an
//!   hour after a 1 h step). The lock's value carries the TTL it was granted, and the next
//!   contender's attempt or wait step cuts a key with more time left than that back to it
//!   (`lua/helpers/bounded_pttl.lua`): the lock is free at most one TTL after a contender saw it.
//!   A live holder is never cut below what it believes (it renewed less than a TTL ago). Other
//!   clients' keys (the plain layout) carry no TTL and are left as they are. The other kinds'
//!   holder deadlines (sorted-set scores on the same clock) are bounded the same way, by the
//!   longest TTL a current holder was granted (the holder data's field `~ttl`), and waiters'
//!   liveness (the mutex's head, the other kinds' waiters) by three waiter TTLs of the caller:
//!   a waiter that died just before the step does not keep its place, and the lock from
//!   everyone behind it, for the whole step.
//! - **Forward** (by `d`): every lease loses `d`; a holder whose remaining lease is shorter than
//!   `d` loses its lock at once, before its watchdog can tell it: another process can be granted
//!   the lock while the first still works. Nothing on the server can see this; fencing tokens
//!   (which never go backwards: the counter survives the step) make the protected resource refuse
//!   the old holder's writes. Run Redis hosts with a slewing clock (chrony, ntpd without `-x`
//!   steps) to avoid steps.
//!
//! ## Module map (the layout of `docs/backend-guide.md`)
//!
//! | file | role |
//! |---|---|
//! | `lib.rs` | these docs, `DESCRIPTOR`, `connect` |
//! | `config.rs` | the URL and its options |
//! | `error.rs` | Redis client errors → `LockError` (TLS that cannot be established: `Denied`, through `locksmith_core::driver::permanent`) |
//! | `layout.rs` | where a lock's keys and channels live, in both layouts; cluster slots |
//! | `backend.rs` | `impl LockBackend`: each call to its protocol |
//! | `conn/` | what connecting checks (`admit.rs`: TLS spoken where asked for, no `maxmemory-policy` that evicts), one logical server (`node.rs`), its connections per topology (`link.rs`), a Redis Cluster's slot map as this client knows it, read again after a failure (`slots.rs`), one script call (`call.rs`), a request on every server at once (`fanout.rs`), what every task shares (`inner.rs`) |
//! | `protocol/` | the one wait loop (`wait.rs`) over an entry (`entry.rs`: try, step, leave, release) of the mutex (`mutex.rs`) or the other kinds (`kinds.rs`); elections (`election.rs`); the quorum of independent masters (`quorum.rs`); the Lua sources with the helpers each calls (`lua.rs`), assembled into function libraries (`library.rs`) and plain scripts with the URL's settings (`scripts.rs`), and every script's behaviour tested on a real server with raw KEYS and ARGV (`script_tests.rs`, unit tests: the scripts are private to the crate) |
//! | `lua/` | the scripts: `mutex/`, `kinds/`, `guarded/`, `helpers/` (one file each) |
//! | `wake.rs` | pub/sub: one subscriber connection per server, a channel per waiter |
//! | `renew.rs` | the watchdog's batch: one pipelined round trip per server (per cluster node) |
//! | `cleanup.rs` | the clean-up of a cancelled acquire and of a cancelled release |
//! | `listing.rs` | `list` and `inspect` |
//! | `guarded.rs` | guarded writes: the lease's check and the write in one script (`lua/guarded/write.lua`) |

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

use locksmith_core::driver::{BackendUrl, Connecting, Descriptor, TtlScope};
use locksmith_core::{Locker, Result};

pub use backend::RedisBackend;
pub use config::{FenceFloor, Layout, DEFAULT_RESTART_DELAY, OPTIONS};

/// This backend in the registry of `locksmith::connect`.
pub static DESCRIPTOR: Descriptor = Descriptor {
    name: "redis",
    schemes: &[
        "redis",
        "rediss",
        "redis+sentinel",
        "rediss+sentinel",
        "redis-cluster",
        "rediss-cluster",
    ],
    feature: Some("redis"),
    options: OPTIONS,
    ttl: TtlScope::PerLock,
    connect: connect_boxed,
};

fn connect_boxed(url: &BackendUrl) -> Connecting<'_> {
    Box::pin(connect(url))
}
pub use layout::{KindKeys, LockKeys};

/// Connects to redis as described by `url` and returns a [`Locker`] over it.
///
/// Fails with [`locksmith_core::LockError::InvalidUrl`] for a bad URL or option and with
/// [`locksmith_core::LockError::Unavailable`] if the server (or a majority of the masters) does not
/// answer within `connect_timeout`.
pub async fn connect(url: &BackendUrl) -> Result<Locker> {
    Ok(Locker::new(RedisBackend::connect(url).await?))
}
