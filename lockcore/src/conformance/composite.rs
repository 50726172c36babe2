//! Work under a lock ([`crate::LockBuilder::run`]), re-entry detection
//! ([`crate::LockError::WouldDeadlock`]) and several locks at once ([`crate::Locker::lock_all`]),
//! on a live backend. Expanded by [`composite_tests!`](crate::composite_tests).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::harness::{patience, Harness};
use super::{unique_name, until_waiters, until_waiters_at_most, within};
use crate::name::LockName;
use crate::{LockError, LostReason};

/// A wait that would only end with the lock's timeout if a request were queued instead of refused.
const LONG: Duration = Duration::from_secs(60);

/// `run` returns the work's value, gives the work the lock's token while it is held, and the lock
/// is free as soon as `run` returned.
pub async fn run_returns_the_value_and_releases(h: &impl Harness) {
    let name = unique_name("run_value");
    let (a, b) = (h.locker().await, h.locker().await);
    let before = a.lock(&name).acquire().await.expect("acquire");
    let first = before.fencing_token();
    before.release().await.expect("release");
    let other = b.clone();
    let probe = name.clone();
    let (token, busy) = within(patience(h), "run", {
        a.lock(&name).ttl(h.short_ttl()).run(|held| async move {
            assert!(held.is_held());
            assert_eq!(held.name(), probe);
            // Another locker cannot have it while the work runs.
            let busy = other.lock(&probe).try_acquire().await.expect("try").is_none();
            (held.fencing_token(), busy)
        })
    })
    .await
    .expect("run");
    assert!(busy, "another locker took the lock while the work ran");
    assert!(
        token > first,
        "the work's token {token} is not above the earlier holder's {first}"
    );
    let after = b.lock(&name).try_acquire().await.expect("try");
    assert!(after.is_some(), "the lock is still held after run returned");
    after.unwrap().release().await.expect("release");
}

/// A work that fails (returns its `Err`) or panics leaves the lock free: the error comes back as
/// the work's value, the panic resumes in the caller once the lock is released.
pub async fn run_releases_on_error_and_panic(h: &impl Harness) {
    let name = unique_name("run_error");
    let (a, b) = (h.locker().await, h.locker().await);
    let answer = a
        .lock(&name)
        .run(|_| async { Err::<(), &str>("the work failed") })
        .await
        .expect("run");
    assert_eq!(answer, Err("the work failed"));
    let free = b.lock(&name).try_acquire().await.expect("try");
    assert!(free.is_some(), "held after a work that failed");
    free.unwrap().release().await.expect("release");

    let (locker, lock) = (a.clone(), name.clone());
    let panicked = tokio::spawn(async move {
        locker
            .lock(&lock)
            .run(|_| async {
                panic!("the work panicked");
            })
            .await
    })
    .await;
    let panic = panicked.expect_err("run should have resumed the work's panic");
    assert!(panic.is_panic());
    let free = b.lock(&name).try_acquire().await.expect("try");
    assert!(free.is_some(), "held after a work that panicked");
    free.unwrap().release().await.expect("release");
}

/// A holder whose lock is removed behind its back while the work runs gets [`LockError::Lost`]
/// naming the lock, never the work's value; the work is stopped (it never reaches its end) and
/// another locker can take the lock.
pub async fn run_stops_the_work_when_the_lock_is_lost(h: &impl Harness) {
    let name = unique_name("run_lost");
    let (a, b) = (h.locker().await, h.locker().await);
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    let run = tokio::spawn({
        let (a, name, ttl) = (a.clone(), name.clone(), h.short_ttl());
        async move {
            a.lock(&name)
                .ttl(ttl)
                .run(|held| async move {
                    let _ = started_tx.send(held.name().to_owned());
                    tokio::time::sleep(LONG).await;
                    done.store(true, Ordering::SeqCst);
                    "the work's value"
                })
                .await
        }
    });
    let held_name = within(patience(h), "the work to start", started_rx)
        .await
        .expect("started");
    h.delete_behind_back(&LockName::new(&held_name).expect("name")).await;
    let answer = within(patience(h), "run to notice the loss", run)
        .await
        .expect("the run task");
    match answer {
        Err(LockError::Lost { name: lost, reason }) => {
            assert_eq!(lost, name);
            assert!(
                matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
                "{reason:?}"
            );
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(!finished.load(Ordering::SeqCst), "the work ran on after the loss");
    let next = within(patience(h), "taking the lost lock", b.lock(&name).acquire())
        .await
        .expect("acquire");
    next.release().await.expect("release");
}

/// A task that holds a lock and asks for it again on the same locker is refused at once with
/// [`LockError::WouldDeadlock`] naming the lock by `acquire` (a request with a long timeout does
/// not wait for it; `try_acquire`, which never waits, answers `None` as for any held lock);
/// nothing is queued, and the guard it holds is untouched.
pub async fn reentry_is_refused_at_once(h: &impl Harness) {
    let name = unique_name("reentry");
    let a = h.locker().await;
    let guard = a.lock(&name).acquire().await.expect("acquire");
    let again = within(
        Duration::from_secs(5),
        "a re-entrant acquire",
        a.lock(&name).timeout(LONG).acquire(),
    )
    .await;
    match again {
        Err(LockError::WouldDeadlock {
            name: named,
            fencing_token,
            ..
        }) => {
            assert_eq!(named, name);
            assert_eq!(fencing_token, guard.fencing_token());
        }
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    // One attempt cannot deadlock: try_acquire answers "held", as it always did.
    let tried = a.lock(&name).try_acquire().await.expect("try");
    assert!(tried.is_none());
    assert_eq!(a.inspect(&name).await.expect("inspect").waiters, 0);
    assert!(guard.is_held());
    guard.release().await.expect("release");
    // Released: the same task takes it again.
    let again = a.lock(&name).acquire().await.expect("acquire after release");
    again.release().await.expect("release");
}

/// Two tasks of one locker that contend for a lock are not taken for re-entry: the second waits
/// and gets the lock once the first releases. Neither is a task that handed its guard to another
/// task: after [`crate::LockGuard::detach_from_task`] (the other task not using it), or once the
/// other task used it, the taker asking again waits (or, with a zero timeout, times out) instead
/// of being refused.
pub async fn reentry_spares_tasks_that_contend(h: &impl Harness) {
    let name = unique_name("contend");
    let a = h.locker().await;
    let guard = a.lock(&name).acquire().await.expect("acquire");
    let waiter = tokio::spawn({
        let (a, name) = (a.clone(), name.clone());
        async move { a.lock(&name).timeout(LONG).acquire().await }
    });
    until_waiters(&a, &name, 1, patience(h)).await;
    guard.release().await.expect("release");
    let second = within(patience(h), "the other task's acquire", waiter)
        .await
        .expect("task")
        .expect("the other task gets the lock");
    second.release().await.expect("release");

    // Taken here, detached, handed to a task that does not touch it until told to release.
    let guard = a.lock(&name).acquire().await.expect("acquire");
    guard.detach_from_task();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        let _ = go_rx.await;
        guard.release().await
    });
    let busy = a.lock(&name).timeout(Duration::ZERO).acquire().await;
    assert!(matches!(busy, Err(LockError::Timeout(_))), "{busy:?}");
    go_tx.send(()).expect("the holder waits");
    let again = within(
        patience(h),
        "the taker's acquire",
        a.lock(&name).timeout(LONG).acquire(),
    )
    .await
    .expect("acquire once the other task released");
    holder.await.expect("task").expect("release");

    // Taken here, used by another task (which holds it from then on).
    let (used_tx, used_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let user = tokio::spawn(async move {
        let _ = again.fencing_token();
        let _ = used_tx.send(());
        let _ = go_rx.await;
        again.release().await
    });
    used_rx.await.expect("the user task runs");
    let busy = a.lock(&name).timeout(Duration::ZERO).acquire().await;
    assert!(matches!(busy, Err(LockError::Timeout(_))), "{busy:?}");
    go_tx.send(()).expect("the user waits");
    user.await.expect("task").expect("release");
    let last = a.lock(&name).acquire().await.expect("acquire");
    last.release().await.expect("release");
}

/// The futures of one task polled each with a waker of its own (as a `FuturesUnordered`,
/// `buffer_unordered` or `for_each_concurrent` polls them) contend as two holders: the second
/// waits for the first's release instead of being refused. Futures that share the task's waker
/// (`tokio::join!`, `select!` branches) are one holder to re-entry detection: the second is
/// refused, as documented.
pub async fn reentry_spares_futures_with_their_own_wakers(h: &impl Harness) {
    let name = unique_name("futures");
    let a = h.locker().await;
    let held = Arc::new(AtomicBool::new(false));
    let first = {
        let (a, name, held) = (a.clone(), name.clone(), held.clone());
        async move {
            let guard = a.lock(&name).acquire().await.expect("acquire");
            held.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            guard.release().await.expect("release");
        }
    };
    let second = {
        let (a, name, held) = (a.clone(), name.clone(), held.clone());
        async move {
            while !held.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            a.lock(&name).timeout(LONG).acquire().await
        }
    };
    let ((), second) = within(patience(h), "two futures of one task", OwnWakers::new(first, second)).await;
    second
        .expect("the second future waits for the first's release")
        .release()
        .await
        .expect("release");

    held.store(false, Ordering::SeqCst);
    let first = {
        let (a, name, held) = (a.clone(), name.clone(), held.clone());
        async move {
            let guard = a.lock(&name).acquire().await.expect("acquire");
            held.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            guard.release().await.expect("release");
        }
    };
    let second = async {
        while !held.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        a.lock(&name).timeout(LONG).acquire().await
    };
    let ((), second) = within(patience(h), "two branches of a join", async {
        tokio::join!(first, second)
    })
    .await;
    assert!(matches!(second, Err(LockError::WouldDeadlock { .. })), "{second:?}");
}

/// Polls two futures to their ends, each with a waker of its own that wakes the task (what a
/// `FuturesUnordered` does).
struct OwnWakers<A: std::future::Future, B: std::future::Future> {
    a: (std::pin::Pin<Box<A>>, Option<A::Output>, Arc<Forward>),
    b: (std::pin::Pin<Box<B>>, Option<B::Output>, Arc<Forward>),
}

/// A waker that wakes the task's current waker.
struct Forward(std::sync::Mutex<Option<std::task::Waker>>);

impl std::task::Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(waker) = self.0.lock().expect("waker").as_ref() {
            waker.wake_by_ref();
        }
    }
}

impl<A: std::future::Future, B: std::future::Future> OwnWakers<A, B> {
    fn new(a: A, b: B) -> Self {
        let forward = || Arc::new(Forward(std::sync::Mutex::new(None)));
        OwnWakers {
            a: (Box::pin(a), None, forward()),
            b: (Box::pin(b), None, forward()),
        }
    }
}

impl<A: std::future::Future, B: std::future::Future> Unpin for OwnWakers<A, B> {}

impl<A: std::future::Future, B: std::future::Future> std::future::Future for OwnWakers<A, B> {
    type Output = (A::Output, B::Output);

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        for forward in [&this.a.2, &this.b.2] {
            *forward.0.lock().expect("waker") = Some(cx.waker().clone());
        }
        if this.a.1.is_none() {
            let waker = std::task::Waker::from(this.a.2.clone());
            if let std::task::Poll::Ready(v) = this.a.0.as_mut().poll(&mut std::task::Context::from_waker(&waker)) {
                this.a.1 = Some(v);
            }
        }
        if this.b.1.is_none() {
            let waker = std::task::Waker::from(this.b.2.clone());
            if let std::task::Poll::Ready(v) = this.b.0.as_mut().poll(&mut std::task::Context::from_waker(&waker)) {
                this.b.1 = Some(v);
            }
        }
        match (this.a.1.take(), this.b.1.take()) {
            (Some(a), Some(b)) => std::task::Poll::Ready((a, b)),
            (a, b) => {
                this.a.1 = a;
                this.b.1 = b;
                std::task::Poll::Pending
            }
        }
    }
}

/// Re-entry by kind: a second read lock of the same task is granted (readers share), a write
/// lock while holding a read is refused; a second permit is granted while the semaphore has
/// permits the task does not hold, and refused once every permit is its own; a second campaign
/// of a leader is refused.
pub async fn reentry_by_kind(h: &impl Harness) {
    let name = unique_name("reentry_kinds");
    let a = h.locker().await;
    let rw = a.rwlock(&name);
    let r1 = rw.read().acquire().await.expect("read");
    let r2 = rw
        .read()
        .timeout(patience(h))
        .acquire()
        .await
        .expect("a second read of the task");
    let w = rw.write().timeout(LONG).acquire().await;
    assert!(matches!(w, Err(LockError::WouldDeadlock { .. })), "{w:?}");
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = rw.write().acquire().await.expect("write");
    let r = rw.read().timeout(LONG).acquire().await;
    assert!(matches!(r, Err(LockError::WouldDeadlock { .. })), "{r:?}");
    w.release().await.expect("release");

    let p1 = a.semaphore(&name, 2).acquire().await.expect("permit");
    let p2 = a
        .semaphore(&name, 2)
        .timeout(patience(h))
        .acquire()
        .await
        .expect("a second permit");
    let p3 = a.semaphore(&name, 2).timeout(LONG).acquire().await;
    match p3 {
        Err(LockError::WouldDeadlock { held, .. }) => assert!(held.contains("2 of the 2"), "{held}"),
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    p1.release().await.expect("release");
    p2.release().await.expect("release");

    let leader = a.election(&name).campaign("me").acquire().await.expect("campaign");
    let again = a.election(&name).campaign("me again").timeout(LONG).acquire().await;
    assert!(matches!(again, Err(LockError::WouldDeadlock { .. })), "{again:?}");
    leader.resign().await.expect("resign");
}

/// Two tasks, on two lockers, take `[a, b]` and `[b, a]` `rounds` times each: they never
/// deadlock (the whole run is bounded) and never hold the set at once.
pub async fn lock_all_never_deadlocks_nor_overlaps(h: &impl Harness, rounds: usize) {
    let (a_name, b_name) = (unique_name("all_a"), unique_name("all_b"));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for order in [[a_name.clone(), b_name.clone()], [b_name.clone(), a_name.clone()]] {
        let locker = h.locker().await;
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let set = locker.lock_all(order.clone()).acquire().await.expect("lock_all");
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders of the set at once"
                );
                tokio::task::yield_now().await;
                assert!(set.is_held());
                inside.fetch_sub(1, Ordering::SeqCst);
                set.release().await.expect("release");
            }
        }));
    }
    let limit = patience(h) + Duration::from_millis(50) * u32::try_from(rounds).unwrap_or(u32::MAX);
    for task in tasks {
        within(limit, "lock_all rounds (a deadlock?)", task)
            .await
            .expect("task");
    }
}

/// A `lock_all` whose timeout passes with one lock held by another ends with the set's
/// [`LockError::Timeout`] and releases what it took before returning; one cancelled while it
/// waits for its second lock releases the first at once.
pub async fn lock_all_releases_what_it_took_on_failure(h: &impl Harness) {
    let (a_name, b_name) = (unique_name("part_a"), unique_name("part_b"));
    let (mine, other) = (h.locker().await, h.locker().await);
    // `first` sorts before `second`: it is taken first, then `second` waits.
    let (first, second) = if a_name < b_name {
        (a_name, b_name)
    } else {
        (b_name, a_name)
    };
    let blocker = other.lock(&second).acquire().await.expect("acquire");
    let limit = Duration::from_millis(300);
    let failed = mine
        .lock_all([second.clone(), first.clone()])
        .timeout(limit)
        .acquire()
        .await;
    assert!(matches!(failed, Err(LockError::Timeout(t)) if t == limit), "{failed:?}");
    let free = other.lock(&first).try_acquire().await.expect("try");
    assert!(free.is_some(), "the first lock stayed held after lock_all timed out");
    free.unwrap().release().await.expect("release");

    let waiting = tokio::spawn({
        let (mine, names) = (mine.clone(), [first.clone(), second.clone()]);
        async move { mine.lock_all(names).acquire().await }
    });
    until_waiters(&other, &second, 1, patience(h)).await;
    waiting.abort();
    let _ = waiting.await;
    let free = within(patience(h), "the first lock after a cancelled lock_all", async {
        other.lock(&first).timeout(patience(h)).acquire().await
    })
    .await
    .expect("acquire");
    free.release().await.expect("release");
    blocker.release().await.expect("release");
    // The cancelled call's entry for `second` goes with its clean-up, in the background.
    until_waiters_at_most(&other, &second, 0, patience(h)).await;
}

/// One `lost()` for the set: a lock of it removed behind its back fires it with that lock's
/// name, and `run` over the set answers [`LockError::Lost`] naming it.
pub async fn lock_all_reports_a_loss_of_any(h: &impl Harness) {
    let (a_name, b_name) = (unique_name("set_a"), unique_name("set_b"));
    let a = h.locker().await;
    let set = a
        .lock_all([a_name.clone(), b_name.clone()])
        .ttl(h.short_ttl())
        .acquire()
        .await
        .expect("lock_all");
    let lost = set.lost();
    h.delete_behind_back(&LockName::new(&b_name).expect("name")).await;
    let (name, _) = within(patience(h), "the set's lost()", lost).await;
    assert_eq!(name, b_name);
    assert!(!set.is_held());
    assert!(matches!(set.release().await, Err(LockError::NotHeld { .. })));

    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let run = tokio::spawn({
        let (a, names, ttl) = (a.clone(), [a_name.clone(), b_name.clone()], h.short_ttl());
        async move {
            a.lock_all(names)
                .ttl(ttl)
                .run(|held| async move {
                    let _ = started_tx.send(held.iter().count());
                    tokio::time::sleep(LONG).await;
                })
                .await
        }
    });
    assert_eq!(
        within(patience(h), "the work to start", started_rx)
            .await
            .expect("started"),
        2
    );
    h.delete_behind_back(&LockName::new(&a_name).expect("name")).await;
    let answer = within(patience(h), "run to notice the loss", run).await.expect("task");
    assert!(
        matches!(&answer, Err(LockError::Lost { name, .. }) if *name == a_name),
        "{answer:?}"
    );
}

/// Expands to one `#[tokio::test]` per test of the composite suite ([`composite`](self)):
/// `run`, re-entry, `lock_all`; `rounds` is how many times each of two tasks takes the set in
/// [`lock_all_never_deadlocks_nor_overlaps`]. `mutex_only: ...` leaves out the test over
/// read-write locks, semaphores and elections; `no_removal: ...` the two tests that remove a
/// holder behind its back (for a harness without [`Harness::delete_behind_back`]).
#[macro_export]
macro_rules! composite_tests {
    (no_removal: $harness:expr, rounds = $rounds:expr) => {
        $crate::conformance_tests!(@tests $harness;
            composite::run_returns_the_value_and_releases, composite::run_releases_on_error_and_panic,
            composite::reentry_is_refused_at_once, composite::reentry_spares_tasks_that_contend,
            composite::reentry_spares_futures_with_their_own_wakers, composite::reentry_by_kind,
            composite::lock_all_releases_what_it_took_on_failure);

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn lock_all_never_deadlocks_nor_overlaps() {
            let harness = $harness;
            $crate::conformance::composite::lock_all_never_deadlocks_nor_overlaps(&harness, $rounds).await;
        }
    };
    (mutex_only: $harness:expr, rounds = $rounds:expr) => {
        $crate::conformance_tests!(@tests $harness;
            composite::run_returns_the_value_and_releases, composite::run_releases_on_error_and_panic,
            composite::run_stops_the_work_when_the_lock_is_lost, composite::reentry_is_refused_at_once,
            composite::reentry_spares_tasks_that_contend, composite::reentry_spares_futures_with_their_own_wakers,
            composite::lock_all_releases_what_it_took_on_failure, composite::lock_all_reports_a_loss_of_any);

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn lock_all_never_deadlocks_nor_overlaps() {
            let harness = $harness;
            $crate::conformance::composite::lock_all_never_deadlocks_nor_overlaps(&harness, $rounds).await;
        }
    };
    ($harness:expr, rounds = $rounds:expr) => {
        $crate::composite_tests!(mutex_only: $harness, rounds = $rounds);
        $crate::conformance_tests!(@tests $harness; composite::reentry_by_kind);
    };
}
