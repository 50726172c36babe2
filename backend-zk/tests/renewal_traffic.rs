//! Renewal traffic does not grow with the number of held locks (`LOCKSMITH_TEST_ZK`).
//!
//! The session is the lease: one locker's renewal is one small request per watchdog batch, however
//! many locks it holds. The test holds 10 locks, then 1000, on one session each, and counts the
//! packets the server receives **from that session's connection** over the same window of several
//! renewal intervals: the `recved` counter of the connection with our session id in the output of
//! ZooKeeper's `cons` four-letter word. (The server-wide `zk_packets_received` of `mntr` is useless
//! here: other clients of the shared server add thousands of packets per window.) Each window is
//! measured three times and the smallest count is kept, and the two counts are compared with each
//! other (a ratio measured side by side), never with a fixed number. A window in which the client
//! reconnected (a missed ping on a loaded machine: a new connection, whose count starts again) is
//! measured again. The counts include the client's own pings, which fill the gaps between
//! renewals. Renewing per lock (a `multiRead` of 128 leases per request, as before) made the
//! 1000-lock window five times busier than the 10-lock window (7 packets against 36; now 7
//! against 8).
//!
//! The watchdog renews leases in batches: those due within a tenth of the renewal interval of each
//! other. Locks acquired a few hundred milliseconds apart (1000 at once on a busy machine) fall
//! into several batches per interval — each one request, at most about ten per interval whatever
//! the number of locks, but enough to blur the comparison. So the test's backend wrapper
//! [`Aligned`] dates every lease back to when the acquisitions began (earlier is always safe: the
//! watchdog only renews sooner), which puts all of one locker's leases into one batch; it also
//! counts the batches.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{async_trait, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{LockGuard, LockInfo, Locker, Result};
use tokio::time::Instant;

/// The locker's session timeout: renewals every second (TTL/3).
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// One measurement window: four renewal intervals.
const WINDOW: Duration = Duration::from_secs(4);
/// How many windows are measured per configuration (the smallest count is kept).
const WINDOWS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_traffic_does_not_grow_with_held_locks() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let servers = common::server_addrs(&base);
    let (few, few_batches) = packets_while_holding(&base, &servers, 10).await;
    let (many, many_batches) = packets_while_holding(&base, &servers, 1000).await;
    println!(
        "packets received from the locker's session in {WINDOW:?} (session timeout {SESSION_TIMEOUT:?}, \
         fewest of {WINDOWS} windows): 10 locks held: {few} ({few_batches} renewal batches), \
         1000 locks held: {many} ({many_batches} renewal batches)"
    );
    assert!(few > 0, "no packets counted: is the session's connection in `cons`?");
    // Per-lock renewal costs at least 8 requests per batch with 1000 locks (4 batches: 32+).
    assert!(
        many < 2 * few.max(4),
        "renewal traffic grew with the number of held locks: {few} packets with 10 locks, {many} with 1000"
    );
}

/// The smallest number of packets the server received from one locker's session during one
/// window while it held `n` locks, with the number of renewal batches in that window.
async fn packets_while_holding(base: &str, servers: &[String], n: usize) -> (u64, usize) {
    let url = common::url_with(base, &format!("session_timeout={}ms", SESSION_TIMEOUT.as_millis()));
    let backend = locksmith_zk::ZkBackend::connect(&url)
        .await
        .expect("connect to ZooKeeper");
    let session = backend.session_id().await;
    let backend = Arc::new(Aligned {
        inner: backend,
        since: Mutex::new(Instant::now()),
        batches: AtomicUsize::new(0),
    });
    let locker = Locker::from_arc(backend.clone());
    let prefix = unique_name("traffic");
    *backend.since.lock().expect("lock") = Instant::now();
    let acquired = within(
        Duration::from_secs(120),
        "acquiring the locks",
        join_all((0..n).map(|i| locker.lock(format!("{prefix}-{i}")).acquire())),
    )
    .await;
    let guards: Vec<LockGuard> = acquired.into_iter().map(|r| r.expect("acquire")).collect();
    // Let the acquisitions' trailing requests (watches on the held nodes) settle.
    tokio::time::sleep(SESSION_TIMEOUT / 2).await;

    let (mut fewest, mut measured, mut reconnects) = ((u64::MAX, 0), 0, Vec::new());
    while measured < WINDOWS {
        let batches_before = backend.batches.load(Ordering::SeqCst);
        let before = common::packets_received(servers, session).await;
        tokio::time::sleep(WINDOW).await;
        let after = common::packets_received(servers, session).await;
        let batches = backend.batches.load(Ordering::SeqCst) - batches_before;
        assert!(
            guards.iter().all(LockGuard::is_held),
            "a lock was lost while held ({n} locks)"
        );
        // A window in which the client reconnected (its count starts again) measures nothing:
        // measure another, a few times at most.
        match after.since(&before) {
            Some(packets) => {
                fewest = fewest.min((packets, batches));
                measured += 1;
            }
            None => {
                reconnects.push((before, after));
                assert!(
                    reconnects.len() <= WINDOWS,
                    "the session's connection changed in {} windows ({n} locks held): {reconnects:?}",
                    reconnects.len()
                );
            }
        }
    }
    let released = within(
        Duration::from_secs(120),
        "releasing the locks",
        join_all(guards.into_iter().map(LockGuard::release)),
    )
    .await;
    for r in released {
        r.expect("release");
    }
    fewest
}

/// The ZooKeeper backend, with every lease dated back to `since` (see the module docs) and the
/// renewal batches counted.
#[derive(Debug)]
struct Aligned {
    inner: locksmith_zk::ZkBackend,
    since: Mutex<Instant>,
    batches: AtomicUsize,
}

impl Aligned {
    fn align(&self, mut lease: Lease) -> Lease {
        let since = *self.since.lock().expect("lock");
        lease.acquired_at = lease.acquired_at.min(since);
        lease
    }
}

#[async_trait]
impl LockBackend for Aligned {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        Ok(self.inner.try_acquire(req).await?.map(|l| self.align(l)))
    }

    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        Ok(self.align(self.inner.acquire(req, deadline).await?))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.inner.renew(lease).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.inner.renew_many(leases).await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.inner.inspect(name).await
    }

    fn renew_interval(&self, ttl: Duration) -> Duration {
        self.inner.renew_interval(ttl)
    }
}
