//! `Dual` over two memory stores against the whole conformance suite, plus its own rollback rules.

use std::time::Duration;

mod support;

use locksmith_core::conformance::Harness;
use locksmith_core::driver::{async_trait, LockBackend, LockName};
use locksmith_core::{Dual, Family, LockError, Locker, MemoryBackend};

struct DualHarness {
    old: MemoryBackend,
    new: MemoryBackend,
}

fn harness() -> DualHarness {
    DualHarness {
        old: MemoryBackend::new(),
        new: MemoryBackend::new(),
    }
}

#[async_trait]
impl Harness for DualHarness {
    async fn locker(&self) -> Locker {
        Dual::locker(&Locker::new(self.old.clone()), &Locker::new(self.new.clone()))
    }

    async fn delete_behind_back(&self, name: &LockName) {
        assert!(self.new.force_remove(name), "no holder to remove");
    }

    async fn delete_behind_back_in(&self, family: Family, name: &LockName) {
        assert!(self.new.force_remove_in(family, name), "no holder to remove");
    }

    /// Holders and waiters of the old store (where dual waiters queue first), the new store's
    /// waiters, and a new-store holder that has no old-store holder beside it (a leak).
    async fn residue(&self, name: &LockName) -> Vec<String> {
        let old = self.old.inspect(name).await.expect("inspect");
        let new = self.new.inspect(name).await.expect("inspect");
        let mut entries: Vec<String> = old.holder.iter().map(|h| h.holder_id.clone()).collect();
        entries.extend((0..old.waiters).map(|i| format!("old-waiter-{i}")));
        entries.extend((0..new.waiters).map(|i| format!("new-waiter-{i}")));
        if old.holder.is_none() {
            entries.extend(new.holder.map(|h| format!("leaked-new-holder-{}", h.holder_id)));
        }
        entries
    }

    /// The entries of both stores; a new-store holder without an old-store holder is a leak.
    async fn residue_in(&self, family: Family, name: &LockName) -> Vec<String> {
        let old = self.old.entries(family, name);
        let new = self.new.entries(family, name);
        let old_holders = old.iter().filter(|e| e.starts_with("holder:")).count();
        let new_holders = new.iter().filter(|e| e.starts_with("holder:")).count();
        let mut entries: Vec<String> = old.into_iter().map(|e| format!("old-{e}")).collect();
        entries.extend(
            new.iter()
                .filter(|e| e.starts_with("waiter:"))
                .map(|e| format!("new-{e}")),
        );
        entries.extend((old_holders..new_holders).map(|i| format!("leaked-new-holder-{i}")));
        entries
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(300)
    }

    fn seamless_handover(&self) -> bool {
        false
    }
}

locksmith_core::conformance_tests!(harness());
locksmith_core::primitive_tests!(harness());

#[tokio::test]
async fn failed_second_lock_rolls_back_the_first() {
    let h = harness();
    let (old, new) = (Locker::new(h.old.clone()), Locker::new(h.new.clone()));
    let dual = Dual::locker(&old, &new);
    let name = LockName::new("rollback").unwrap();
    // Someone holds the lock in the new backend only.
    let blocker = new.lock("rollback").acquire().await.unwrap();

    assert!(dual.lock("rollback").try_acquire().await.unwrap().is_none());
    assert!(
        h.old.inspect(&name).await.unwrap().holder.is_none(),
        "try_acquire left the old lock held"
    );

    let timed_out = dual
        .lock("rollback")
        .timeout(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");
    tokio::time::timeout(Duration::from_secs(5), async {
        while h.old.inspect(&name).await.unwrap().holder.is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the old lock was not rolled back after the timeout");

    blocker.release().await.unwrap();
    let guard = dual.lock("rollback").acquire().await.unwrap();
    // Held in both: old-only and new-only clients are both excluded.
    assert!(old.lock("rollback").try_acquire().await.unwrap().is_none());
    assert!(new.lock("rollback").try_acquire().await.unwrap().is_none());
    let new_token = h.new.inspect(&name).await.unwrap().holder.unwrap().fencing_token;
    assert_eq!(
        Some(guard.fencing_token()),
        new_token,
        "the token comes from the new backend"
    );
    guard.release().await.unwrap();
    assert!(old.lock("rollback").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn losing_either_half_loses_the_dual_lock() {
    for lose_old in [true, false] {
        let h = harness();
        let dual = Dual::locker(&Locker::new(h.old.clone()), &Locker::new(h.new.clone()));
        let guard = dual
            .lock("half")
            .ttl(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        let name = LockName::new("half").unwrap();
        let store = if lose_old { &h.old } else { &h.new };
        assert!(store.force_remove(&name));
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("lost() did not fire");
        assert!(!guard.is_held());
        assert!(guard.release().await.is_err());
        assert_eq!(h.old.inspect(&name).await.unwrap().holder, None, "old half left held");
        assert_eq!(h.new.inspect(&name).await.unwrap().holder, None, "new half left held");
        let _ = h.old.kind();
    }
}

/// A lock whose builder sets no TTL gets the smaller of the two URLs' `ttl=` (either one's when
/// only one has one); the builder's wins.
#[tokio::test]
async fn the_url_ttl_is_the_smaller_of_the_two() {
    let mem = |url: &str| MemoryBackend::connect(&locksmith_core::driver::BackendUrl::parse(url).unwrap()).unwrap();
    let both = Dual::locker(&mem("mem://dual-ttl-a?ttl=3s"), &mem("mem://dual-ttl-b?ttl=2s"));
    let guard = both.lock("ttl").acquire().await.unwrap();
    assert_eq!(guard.ttl(), Duration::from_secs(2));
    guard.release().await.unwrap();
    let guard = both.lock("ttl").ttl(Duration::from_secs(5)).acquire().await.unwrap();
    assert_eq!(guard.ttl(), Duration::from_secs(5));
    guard.release().await.unwrap();
    let one = Dual::locker(&mem("mem://dual-ttl-a?ttl=3s"), &mem("mem://dual-ttl-b"));
    let guard = one.lock("ttl").acquire().await.unwrap();
    assert_eq!(guard.ttl(), Duration::from_secs(3));
    guard.release().await.unwrap();
}

/// A dual acquire that waits for the new backend for longer than the TTL keeps its first lock:
/// it is renewed during the wait (nothing else knew of it yet, so it expired, an old-only client
/// took it, and the dual acquire then answered Ok with a guard already past its validity).
#[tokio::test]
async fn the_first_lock_is_renewed_while_the_second_is_awaited() {
    let h = harness();
    let (old, new) = (Locker::new(h.old.clone()), Locker::new(h.new.clone()));
    let dual = Dual::locker(&old, &new);
    let blocker = new.lock("slow").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let dual = dual.clone();
        async move { dual.lock("slow").ttl(Duration::from_millis(600)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(2000)).await; // over three TTLs
    let intruder = old.lock("slow").try_acquire().await.unwrap();
    assert!(
        intruder.is_none(),
        "an old-only client took the lock a dual acquire held while it waited"
    );
    blocker.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the dual acquire after the blocker released")
        .unwrap()
        .unwrap();
    assert!(guard.is_held(), "the dual guard came out already expired");
    guard.release().await.unwrap();
}

/// A dual release whose old half got no answer is tried again in the background, and that try
/// releases the old half: it used to find the pair already forgotten, answer "not held", and
/// leave the old lock held for its TTL.
#[tokio::test]
async fn a_dual_release_without_an_answer_is_tried_again() {
    let h = harness();
    let flaky = support::FaultyRelease::new(h.old.clone());
    let flaky = std::sync::Arc::new(flaky);
    let old = Locker::from_arc(flaky.clone());
    let dual = Dual::locker(&old, &Locker::new(h.new.clone()));
    let guard = dual.lock("again").ttl(Duration::from_secs(30)).acquire().await.unwrap();
    flaky.fail_next.store(true, std::sync::atomic::Ordering::SeqCst);
    let released = guard.release().await;
    assert!(matches!(released, Err(LockError::Unavailable { .. })), "{released:?}");
    let plain_old = Locker::new(h.old.clone());
    tokio::time::timeout(Duration::from_secs(5), async {
        while plain_old.lock("again").try_acquire().await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the old half is still held 5 s after a release it did not answer (TTL 30 s)");
}

/// Bug: a dual acquire whose first lock was lost while it waited for the second (removed on the
/// server, its session ended: the old backend fires its lost signal) handed out a guard once the
/// second came, while an old-only client held the first: two holders. It now fails.
#[tokio::test]
async fn a_first_lock_lost_while_the_second_is_awaited_fails_the_acquire() {
    let h = harness();
    let (old, new) = (Locker::new(h.old.clone()), Locker::new(h.new.clone()));
    let dual = Dual::locker(&old, &new);
    let blocker = new.lock("lost-first").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let dual = dual.clone();
        async move { dual.lock("lost-first").ttl(Duration::from_secs(30)).acquire().await }
    });
    let name = LockName::new("lost-first").unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while h.old.inspect(&name).await.unwrap().holder.is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the dual acquire took the old lock");
    assert!(h.old.force_remove(&name));
    let intruder = old.lock("lost-first").try_acquire().await.unwrap();
    assert!(intruder.is_some(), "the removed old lock is free");
    blocker.release().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the dual acquire ended")
        .unwrap();
    assert!(
        acquired.is_err(),
        "a dual guard was handed out whose old lock an old-only client holds"
    );
    assert_eq!(h.new.inspect(&name).await.unwrap().holder, None, "new half left held");
}

/// A memory store whose leases all carry one holder id per lock, as etcd's key names are reused
/// once released: a lease is known by its fencing token underneath.
#[derive(Debug)]
struct ReusedIds {
    store: MemoryBackend,
    leases: std::sync::Mutex<std::collections::HashMap<u64, locksmith_core::driver::Lease>>,
    /// The next release is done, but answers `Unavailable` (its answer lost).
    lose_next_answer: std::sync::atomic::AtomicBool,
}

impl ReusedIds {
    fn new(store: MemoryBackend) -> ReusedIds {
        ReusedIds {
            store,
            leases: Default::default(),
            lose_next_answer: false.into(),
        }
    }

    fn shown(&self, real: locksmith_core::driver::Lease) -> locksmith_core::driver::Lease {
        let mut shown = real.clone();
        shown.holder_id = format!("slot-0-of-{}", real.name);
        self.leases.lock().unwrap().insert(real.fencing_token, real);
        shown
    }

    fn real(&self, shown: &locksmith_core::driver::Lease) -> locksmith_core::driver::Lease {
        let leases = self.leases.lock().unwrap();
        leases
            .get(&shown.fencing_token)
            .cloned()
            .unwrap_or_else(|| shown.clone())
    }
}

#[async_trait]
impl LockBackend for ReusedIds {
    fn kind(&self) -> &'static str {
        "mem"
    }
    async fn try_acquire(
        &self,
        req: &locksmith_core::driver::LockRequest,
    ) -> locksmith_core::Result<Option<locksmith_core::driver::Lease>> {
        Ok(self.store.try_acquire(req).await?.map(|l| self.shown(l)))
    }
    async fn acquire(
        &self,
        req: &locksmith_core::driver::LockRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> locksmith_core::Result<locksmith_core::driver::Lease> {
        Ok(self.shown(self.store.acquire(req, deadline).await?))
    }
    async fn release(&self, lease: &locksmith_core::driver::Lease) -> locksmith_core::Result<()> {
        let released = self.store.release(&self.real(lease)).await;
        if self.lose_next_answer.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(LockError::Unavailable {
                message: "the answer was lost (test)".into(),
                source: None,
            });
        }
        released
    }
    async fn renew_many(&self, leases: &[locksmith_core::driver::Lease]) -> Vec<locksmith_core::Result<()>> {
        let real: Vec<_> = leases.iter().map(|l| self.real(l)).collect();
        self.store.renew_many(&real).await
    }
    async fn inspect(&self, name: &LockName) -> locksmith_core::Result<locksmith_core::LockInfo> {
        self.store.inspect(name).await
    }
}

/// Bug: the dual id of a lease is made of its two backends' ids, which are unique among live
/// leases only (etcd reuses a released key's name). A release whose answer was lost is tried
/// again later; the lock taken again meanwhile got the same dual id, and the try again released
/// the new lease's two locks: an old-only client could then take the lock it held.
#[tokio::test]
async fn a_release_tried_again_never_releases_a_later_lease_of_the_same_id() {
    let h = harness();
    let new_half = std::sync::Arc::new(ReusedIds::new(h.new.clone()));
    let old = Locker::from_arc(std::sync::Arc::new(ReusedIds::new(h.old.clone())));
    let dual = Dual::locker(&old, &Locker::from_arc(new_half.clone()));
    let first = dual
        .lock("reused")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    new_half
        .lose_next_answer
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let released = first.release().await;
    assert!(matches!(released, Err(LockError::Unavailable { .. })), "{released:?}");
    let second = dual
        .lock("reused")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await; // the tries again: after 100, 300 ms
    let name = LockName::new("reused").unwrap();
    assert!(
        h.old.inspect(&name).await.unwrap().holder.is_some(),
        "the old half of the later lease was released by the earlier lease's try again"
    );
    assert!(
        h.new.inspect(&name).await.unwrap().holder.is_some(),
        "the new half of the later lease was released by the earlier lease's try again"
    );
    assert!(second.is_held());
    second.release().await.unwrap();
}

/// Bug: a dual lease whose release got no answer went on forwarding its halves' lost signals,
/// so `lost()` fired after `release()` (a half that then expired, or was removed), which the
/// guard's docs rule out.
#[tokio::test]
async fn lost_never_fires_after_a_release_without_an_answer() {
    let h = harness();
    let flaky = std::sync::Arc::new(support::FaultyRelease::new(h.old.clone()));
    let dual = Dual::locker(&Locker::from_arc(flaky.clone()), &Locker::new(h.new.clone()));
    let guard = dual.lock("quiet").ttl(Duration::from_secs(30)).acquire().await.unwrap();
    let lost = guard.lost();
    flaky.fail_next.store(true, std::sync::atomic::Ordering::SeqCst);
    let released = guard.release().await;
    assert!(matches!(released, Err(LockError::Unavailable { .. })), "{released:?}");
    assert!(h.old.force_remove(&LockName::new("quiet").unwrap()));
    let fired = tokio::time::timeout(Duration::from_millis(500), lost).await;
    assert!(fired.is_err(), "lost() fired after release(): {fired:?}");
}

/// Bug: an election's leader, as `leader()` and an observer show it, carried the new backend's
/// holder id where the leader's own guard carries its dual id.
#[tokio::test]
async fn a_dual_leader_is_shown_by_its_dual_id() {
    let h = harness();
    let dual = Dual::locker(&Locker::new(h.old.clone()), &Locker::new(h.new.clone()));
    let election = dual.election("dual-ids");
    let lead = election.campaign("me").acquire().await.unwrap();
    let id = lead.guard().lease().holder_id.clone();
    let shown = election.leader().await.unwrap().expect("a leader");
    assert_eq!(shown.holder_id, id, "leader()");
    let watch = election.observe().await.unwrap();
    assert_eq!(watch.leader().expect("a leader").holder_id, id, "observe()");
    lead.resign().await.unwrap();
}
