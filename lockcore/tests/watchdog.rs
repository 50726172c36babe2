//! The watchdog's guarantees, observed through a wrapper over the real memory backend that can make
//! renewals fail (as a partitioned network would) and counts the renewal batches it receives.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{async_trait, Lease, LockBackend, LockName, LockRequest};
use locksmith_core::{LockError, LockInfo, Locker, LostReason, MemoryBackend, Result};
use tokio::time::Instant;

#[derive(Debug, Default)]
struct Partitionable {
    inner: MemoryBackend,
    cut_off: AtomicBool,
    /// Milliseconds each renewal batch takes, as a loaded server's would.
    batch_delay_ms: AtomicUsize,
    batches: AtomicUsize,
    renewed_leases: AtomicUsize,
}

impl Partitionable {
    fn reachable(&self) -> Result<()> {
        if self.cut_off.load(Ordering::SeqCst) {
            // As a client library's error comes: what was done in the message, why in the source.
            let why = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "network cut");
            return Err(LockError::unavailable("renewing on the partitioned server", why));
        }
        Ok(())
    }
}

#[async_trait]
impl LockBackend for Partitionable {
    fn kind(&self) -> &'static str {
        "partitionable-mem"
    }
    async fn try_acquire(&self, req: &LockRequest) -> Result<Option<Lease>> {
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &LockRequest, deadline: Option<Instant>) -> Result<Lease> {
        self.inner.acquire(req, deadline).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.reachable()?;
        self.inner.release(lease).await
    }
    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.reachable()?;
        self.inner.renew(lease).await
    }
    async fn renew_many(&self, leases: &[Lease]) -> Vec<Result<()>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.renewed_leases.fetch_add(leases.len(), Ordering::SeqCst);
        let delay = self.batch_delay_ms.load(Ordering::SeqCst) as u64;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let mut out = Vec::new();
        for lease in leases {
            out.push(self.renew(lease).await);
        }
        out
    }
    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.inner.inspect(name).await
    }
}

#[tokio::test]
async fn lost_fires_before_the_server_could_expire_the_lease() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let ttl = Duration::from_millis(600);
    let guard = locker.lock("partitioned").ttl(ttl).acquire().await.unwrap();
    // Let a few renewals succeed, then cut the network.
    tokio::time::sleep(ttl).await;
    assert!(guard.is_held());
    backend.cut_off.store(true, Ordering::SeqCst);
    let reason = tokio::time::timeout(ttl * 4, guard.lost())
        .await
        .expect("lost() never fired");
    assert!(
        matches!(reason, LostReason::RenewalFailed(ref e) if e.contains("network cut")),
        "the reason must say why the renewals failed (the client's error, the source): {reason:?}"
    );
    // At the moment lost() fired, the server still counted the lease as ours: the holder was told
    // before anyone else could get the lock.
    let info = backend
        .inner
        .inspect(&LockName::new("partitioned").unwrap())
        .await
        .unwrap();
    let holder = info.holder.expect("the server expired the lease before lost() fired");
    assert_eq!(holder.holder_id, guard.lease().holder_id);
    assert!(!guard.is_held());
}

#[tokio::test]
async fn transient_renewal_failures_are_retried() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let ttl = Duration::from_millis(900);
    let guard = locker.lock("flaky").ttl(ttl).acquire().await.unwrap();
    for _ in 0..3 {
        backend.cut_off.store(true, Ordering::SeqCst);
        tokio::time::sleep(ttl / 3).await; // one missed renewal, well inside the lease
        backend.cut_off.store(false, Ordering::SeqCst);
        tokio::time::sleep(ttl / 2).await;
    }
    assert!(guard.is_held(), "lost after short outages: {:?}", guard.lost_reason());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn many_leases_are_renewed_in_few_batches() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let ttl = Duration::from_millis(600);
    let mut guards = Vec::new();
    for i in 0..200 {
        guards.push(locker.lock(format!("batch/{i}")).ttl(ttl).acquire().await.unwrap());
    }
    assert_eq!(locker.held_count(), 200);
    tokio::time::sleep(ttl * 2).await;
    let (batches, leases) = (
        backend.batches.load(Ordering::SeqCst),
        backend.renewed_leases.load(Ordering::SeqCst),
    );
    assert!(
        leases >= 200 * 2,
        "each lease renewed at least twice in two TTLs ({leases} renewals)"
    );
    assert!(
        batches * 20 <= leases,
        "{batches} batches for {leases} renewals: renewals are not batched"
    );
    assert!(guards.iter().all(|g| g.is_held()));
    drop(guards);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(locker.held_count(), 0, "dropped guards are still renewed");
}

#[tokio::test]
async fn the_watchdog_task_stops_when_nothing_is_held() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let guard = locker
        .lock("idle")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = backend.batches.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(backend.batches.load(Ordering::SeqCst), before, "renewals after release");
}

#[tokio::test]
async fn leases_taken_at_different_times_converge_into_one_batch_per_interval() {
    let backend = Arc::new(Partitionable::default());
    // Slow batches: locks are taken while a batch is in flight, as under load.
    backend.batch_delay_ms.store(40, Ordering::SeqCst);
    let locker = Locker::from_arc(backend.clone());
    let ttl = Duration::from_millis(900); // renewal interval 300 ms
    let mut guards = Vec::new();
    // Take locks spread over more than three intervals, so their own due times all differ.
    for i in 0..200 {
        guards.push(locker.lock(format!("spread/{i}")).ttl(ttl).acquire().await.unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let during = backend.batches.load(Ordering::SeqCst);
    tokio::time::sleep(ttl).await; // settle
    let before = backend.batches.load(Ordering::SeqCst);
    tokio::time::sleep(ttl * 2).await; // six intervals
    let batches = backend.batches.load(Ordering::SeqCst) - before;
    assert!(
        batches <= 9,
        "{batches} renewal batches in six intervals for 200 locks: they did not converge"
    );
    assert!(
        during <= 20,
        "{during} renewal batches while 200 locks were taken over ~1.5 s: batches ran back to back"
    );
    assert!(guards.iter().all(|g| g.is_held()));
}

/// A `Locker` used in a second runtime after the runtime its watchdog task ran in was dropped
/// (a `Locker` in a static shared by tests, a lock taken in a temporary runtime at start-up): its
/// new leases are renewed, by a task started again in the runtime at hand. (Before, the dropped
/// task left its `Locker` believing a task was running, and nothing renewed anything again.)
#[test]
fn leases_are_renewed_after_the_watchdog_task_s_runtime_was_dropped() {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let first = runtime();
    first.block_on(async { locker.lock("a").acquire().await.unwrap().release().await.unwrap() });
    drop(first); // within the task's linger time: it was still waiting for the next lease
    runtime().block_on(async {
        let ttl = Duration::from_millis(300);
        let guard = locker.lock("b").ttl(ttl).acquire().await.unwrap();
        tokio::time::sleep(ttl * 3).await;
        assert!(backend.batches.load(Ordering::SeqCst) > 0, "nothing was renewed");
        assert!(guard.is_held(), "{:?}", guard.lost_reason());
        let other = Locker::from_arc(backend.clone());
        assert!(
            other.lock("b").try_acquire().await.unwrap().is_none(),
            "the lease ran out unrenewed"
        );
        guard.release().await.unwrap();
    });
}

/// A holder whose runtime could not run the watchdog past its lease (its only thread blocked, as
/// in a process that was paused) is told at once that it no longer holds the lock: `is_held` is
/// false from the moment the lease ran out unrenewed, before the watchdog ran. (Before, it said
/// true until the watchdog's next look, while another holder could already have the lock.)
#[tokio::test(flavor = "current_thread")]
async fn is_held_is_false_once_the_lease_ran_out_even_before_the_watchdog_runs() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let ttl = Duration::from_millis(200);
    let guard = locker.lock("blocked").ttl(ttl).acquire().await.unwrap();
    assert!(guard.is_held());
    std::thread::sleep(ttl * 2); // the runtime's only thread: nothing else runs meanwhile
    assert!(!guard.is_held(), "is_held said true after the lease ran out unrenewed");
    drop(guard);
}

/// A renewal batch that a slow server keeps waiting does not keep the watchdog from the other
/// leases: a lease taken while it is on its way is renewed in a batch of its own, or told it is
/// lost before the server could expire it, and a lease's `max_hold` ends it on time. (Before, the
/// watchdog waited for the batch, up to the request timeout or the batch's earliest expiry: a
/// 300 ms lease taken then was expired by the server seconds before `lost()` fired.)
#[tokio::test]
async fn a_slow_renewal_batch_does_not_hold_up_the_other_leases() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let busy = locker.lock("busy").ttl(Duration::from_secs(6)).acquire().await.unwrap();
    backend.batch_delay_ms.store(4_000, Ordering::SeqCst);
    // The busy lease's first batch goes out at 2 s and waits 4 s for its answer.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let short = locker
        .lock("short")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let capped = locker
        .lock("capped")
        .ttl(Duration::from_secs(30))
        .max_hold(Duration::from_millis(500))
        .acquire()
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_millis(600), short.lost())
        .await
        .expect("lost() did not fire while another lease's renewal was on its way");
    assert!(matches!(reason, LostReason::RenewalFailed(_)), "{reason:?}");
    assert!(
        Instant::now() < short.lease().acquired_at + short.ttl(),
        "lost() fired after the server could expire the lease"
    );
    let reason = tokio::time::timeout(Duration::from_millis(600), capped.lost())
        .await
        .expect("max_hold did not end the lease while another lease's renewal was on its way");
    assert_eq!(reason, LostReason::MaxHoldReached);
    assert!(busy.is_held());
}

/// A holder whose runtime could not run past its `max_hold` (its only thread blocked) is told at
/// once: `is_held` is false from that moment, before the watchdog ran to end the lease. (Before,
/// it said true until the watchdog's next look, which then released the lock.)
#[tokio::test(flavor = "current_thread")]
async fn is_held_is_false_once_max_hold_passed_even_before_the_watchdog_runs() {
    let backend = Arc::new(Partitionable::default());
    let locker = Locker::from_arc(backend.clone());
    let hold = Duration::from_millis(100);
    let guard = (locker.lock("capped-blocked"))
        .ttl(Duration::from_secs(10))
        .max_hold(hold)
        .acquire()
        .await
        .unwrap();
    assert!(guard.is_held());
    std::thread::sleep(hold * 3); // the runtime's only thread: nothing else runs meanwhile
    assert!(!guard.is_held(), "is_held said true after max_hold passed");
    drop(guard);
}
