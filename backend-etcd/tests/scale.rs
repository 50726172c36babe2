//! Many locks on one `Locker` (the lockbench `scale` workload): thousands of locks taken
//! concurrently under a 5 s session survive two TTLs, and the watchdog renews them all in
//! O(1) `renew_many` calls (one session keep-alive each) per renewal interval, not one per lock
//! or per moment a lock was taken. Counts, not timings: calls into the backend are counted by a
//! wrapper, requests by the backend's own counters.
//!
//! Why 5 s: a new lock joins the session's lease as it was last refreshed, up to half a TTL
//! earlier, so while the locks are taken a keep-alive must be answered within half a TTL (less
//! the margin). etcd writing 5,000 keys on a loaded 2-core CI machine answered one later than
//! that under a 3 s session (1.2 s), and some locks were rightly given up; 5 s leaves 2 s.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{async_trait, BackendUrl, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{LockGuard, LockInfo, Locker, Result};
use locksmith_etcd::{Config, EtcdBackend};
use tokio::task::JoinSet;
use tokio::time::Instant;

const DEFAULT_LOCKS: usize = 5_000;
const IN_FLIGHT: usize = 50;

/// Counts `renew_many` calls and the leases they carried.
#[derive(Debug)]
struct Counting {
    inner: Arc<EtcdBackend>,
    renew_calls: AtomicU64,
}

#[async_trait]
impl LockBackend for Counting {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        self.inner.acquire(req, deadline).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.inner.renew(lease).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        self.renew_calls.fetch_add(1, Ordering::Relaxed);
        self.inner.renew_many(leases).await
    }
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.inner.inspect(name).await
    }
    fn renew_interval(&self, ttl: Duration) -> Duration {
        self.inner.renew_interval(ttl)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_locks_survive_with_one_renewal_per_interval() {
    common::init_tracing();
    // SCALE_LOCKS=10000 for the benchmark's full size.
    let locks_env = std::env::var("SCALE_LOCKS").ok().and_then(|v| v.parse().ok());
    let locks: usize = locks_env.unwrap_or(DEFAULT_LOCKS);
    let base = common::env_url("LOCKSMITH_TEST_ETCD");
    let url = BackendUrl::parse(&common::with_query(&base, "ttl=5s")).expect("url");
    let backend = Arc::new(
        EtcdBackend::connect(Config::from_url(&url).expect("config"))
            .await
            .expect("connect"),
    );
    let counting = Arc::new(Counting {
        inner: backend.clone(),
        renew_calls: AtomicU64::new(0),
    });
    let locker = Locker::from_arc(counting.clone());
    let ttl = backend.session_ttl();
    let interval = backend.renew_interval(ttl);

    let prefix = unique_name("scale");
    let started = Instant::now();
    let calls_at_start = counting.renew_calls.load(Ordering::Relaxed);
    let mut guards = Vec::with_capacity(locks);
    let mut tasks: JoinSet<Result<LockGuard>> = JoinSet::new();
    for i in 0..locks {
        if tasks.len() >= IN_FLIGHT {
            if let Some(g) = tasks.join_next().await {
                guards.push(g.expect("task").expect("acquire"));
            }
        }
        let (l, name) = (locker.clone(), format!("{prefix}/{i}"));
        tasks.spawn(async move { l.lock(name).timeout(Duration::from_secs(60)).acquire().await });
    }
    while let Some(g) = tasks.join_next().await {
        guards.push(g.expect("task").expect("acquire"));
    }
    let taking = started.elapsed();
    let calls_while_taking = counting.renew_calls.load(Ordering::Relaxed) - calls_at_start;
    println!("took {locks} locks in {taking:?} with {calls_while_taking} renew_many calls");
    let lost: Vec<_> = guards.iter().filter_map(LockGuard::lost_reason).collect();
    assert!(
        lost.is_empty(),
        "{} of {locks} locks lost while taking them, e.g. {:?}",
        lost.len(),
        lost.first()
    );
    assert_eq!(locker.held_count(), locks);
    // Hold them for two TTLs (after one interval for the last keys' watches to open).
    tokio::time::sleep(interval).await;
    let (calls_before, stats_before) = (counting.renew_calls.load(Ordering::Relaxed), backend.stats());
    let window = ttl * 2;
    tokio::time::sleep(window).await;
    let (calls_after, stats_after) = (counting.renew_calls.load(Ordering::Relaxed), backend.stats());
    let calls = calls_after - calls_before;
    let keep_alives = stats_after.keep_alives - stats_before.keep_alives;
    println!("held {locks} locks for {window:?}: {calls} renew_many calls, {keep_alives} keep-alives");

    let lost: Vec<_> = guards.iter().filter(|g| !g.is_held()).collect();
    assert!(
        lost.is_empty(),
        "{} of {locks} locks lost, e.g. {:?}",
        lost.len(),
        lost.first().and_then(|g| g.lost_reason())
    );
    for g in &guards {
        assert!(g.lost_reason().is_none(), "lost: {:?}", g.lost_reason());
    }
    // Renewal traffic is O(1) per renewal interval, whatever the number of locks: each
    // `renew_many` costs at most one keep-alive, and the watchdog calls it a bounded number of
    // times per interval (against one per lock, or hundreds per second as the benchmark saw).
    // Ideally once: with locksmith-core's watchdog as it is, the batches split while locks are being
    // taken (a lease registered while a batch is in flight is due at once, which chains
    // batches back to back) and never merge again, so a handful per interval is what this
    // measures today (see the crate's report); the bound leaves room for that.
    let intervals = (window.as_secs_f64() / interval.as_secs_f64()).round() as u64;
    assert!(calls >= intervals / 2, "only {calls} renew_many calls in {window:?}");
    assert!(
        calls <= 12 * intervals,
        "{calls} renew_many calls in {window:?} ({intervals} intervals) for {locks} locks"
    );
    assert!(
        keep_alives <= calls,
        "{keep_alives} keep-alives for {calls} renew_many calls"
    );
    assert_eq!(
        stats_after.watch_requests, stats_before.watch_requests,
        "held locks caused watch requests"
    );
    assert_eq!(
        stats_after.transactions, stats_before.transactions,
        "held locks caused transactions"
    );

    // Still held on the server: nobody else can take one.
    let other = locksmith_etcd::connect(&url).await.expect("connect");
    for i in [0, locks / 2, locks - 1] {
        let name = format!("{prefix}/{i}");
        assert!(
            other.lock(&name).try_acquire().await.expect("try").is_none(),
            "{name} was free on the server"
        );
    }

    let mut releases: JoinSet<Result<()>> = JoinSet::new();
    for g in guards {
        if releases.len() >= IN_FLIGHT {
            releases
                .join_next()
                .await
                .expect("task")
                .expect("task")
                .expect("release");
        }
        releases.spawn(g.release());
    }
    while let Some(r) = releases.join_next().await {
        r.expect("task").expect("release");
    }
}
