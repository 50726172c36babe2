//! Clean-up that runs in the background — a cancelled acquire's queue entry, a dropped guard's
//! release, a delete retried after a failure — and must still end before the process does.
//!
//! Backends spawn such work with [`spawn`] instead of `tokio::spawn`. Each task is counted twice:
//!
//! - in the [`crate::Locker`] whose call started it (directly, or from a clean-up task that call
//!   spawned), so that [`crate::Locker::shutdown`] waits for every one of them: a process that
//!   dropped a guard through an early `?` and shuts its locker down leaves nothing held;
//! - in the call that started it, so that `acquire` and `try_acquire` return an error only once the
//!   clean-up of their own attempt has ended (within a bound): a process that exits right after a
//!   `Timeout` leaves no waiter behind to become the holder later.
//!
//! A task spawned outside any locker call (a backend's own timer, a test calling a backend
//! directly) is counted nowhere and runs as a plain tokio task.
//!
//! A call's future dropped where no runtime runs (moved to a plain thread, dropped by another
//! executor or a synchronous `Drop`) spawns its clean-up on the runtime the call started on, as
//! a guard dropped there releases on the runtime its lock was taken on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;

/// A count of clean-up tasks in flight that one can wait on to reach zero.
///
/// Counted in and out on every acquire and release: an atomic count, and a wake-up only when it
/// falls to zero (a `watch` channel told every change, ~1.8 k instructions a cycle;
/// `docs/overhead.md`).
#[derive(Clone, Default)]
pub(crate) struct Tally(Arc<TallyState>);

#[derive(Default)]
struct TallyState {
    count: AtomicUsize,
    /// Told when `count` falls to zero.
    idle: Notify,
}

impl Tally {
    /// Counts one task (or a request in flight) in until the returned token is dropped.
    pub(crate) fn enter(&self) -> Entered {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        Entered(self.clone())
    }

    /// How many tasks are in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Waits until no task is in flight.
    pub(crate) async fn idle(&self) {
        loop {
            // Registered before the check: a fall to zero after it wakes this one.
            let idle = self.0.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Waits until no task is in flight, for at most `limit`; `true` if none is left.
    pub(crate) async fn idle_within(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.idle()).await.is_ok()
    }
}

/// One counted task; dropping it counts the task out (also when its runtime shuts down).
pub(crate) struct Entered(Tally);

impl Drop for Entered {
    fn drop(&mut self) {
        let state = &self.0 .0;
        if state.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            state.idle.notify_waiters();
        }
    }
}

/// Where a clean-up spawned now is counted, and where it runs when no runtime is at hand.
#[derive(Clone)]
struct Scope {
    locker: Tally,
    call: Option<Tally>,
    /// The runtime the call (or the clean-up task) started on.
    runtime: Option<tokio::runtime::Handle>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Spawns `task`, a clean-up that must end before the process does, on the current tokio
/// runtime (or, where none runs, the one the locker call started on), counted in the locker and
/// the call it comes from (see the module docs). Returns `false`, without running it, when there
/// is no runtime (the caller logs what is left to expire); a runtime that has shut down takes the
/// task and drops it (`true`, and nothing runs: the process is ending).
///
/// Clean-up spawned from within `task` is counted in the same locker.
pub fn spawn<F>(task: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    match SCOPE.try_with(Scope::clone) {
        Ok(scope) => {
            let call = scope.call.as_ref().map(Tally::enter);
            let task = async move {
                let _call = call;
                task.await;
            };
            spawn_in_or(&scope.locker, scope.runtime.as_ref(), task).is_some()
        }
        Err(_) => match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(task);
                true
            }
            Err(_) => false,
        },
    }
}

/// The locker whose call is running here, kept to count clean-up that something outside its
/// calls spawns for it later (a watch's hand-off of a request the call made): see
/// [`locker_here`].
#[derive(Clone)]
pub(crate) struct LockerScope(Scope);

/// The locker of the call (or clean-up task) running here, if any.
pub(crate) fn locker_here() -> Option<LockerScope> {
    SCOPE
        .try_with(|scope| {
            LockerScope(Scope {
                locker: scope.locker.clone(),
                call: None,
                runtime: scope.runtime.clone(),
            })
        })
        .ok()
}

impl LockerScope {
    /// [`spawn`] as from a clean-up task of this locker: counted in the locker (not in any
    /// call), so that [`crate::Locker::shutdown`] waits for it. `false` without a runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        spawn_in_or(&self.0.locker, self.0.runtime.as_ref(), task).is_some()
    }
}

/// Runs `call` so that the clean-up it spawns is counted in `locker` and in a tally of the call's
/// own, returned with its output. The scope also covers dropping `call` part-way (a timeout that
/// cuts it off inside this future).
pub(crate) async fn scoped<F: Future>(locker: &Tally, call: F) -> (F::Output, Tally) {
    let own = Tally::default();
    let scope = Scope {
        locker: locker.clone(),
        call: Some(own.clone()),
        runtime: tokio::runtime::Handle::try_current().ok(),
    };
    (SCOPE.scope(scope, call).await, own)
}

/// Runs `task` as a clean-up of `locker` (a guard's release): counted there, so that
/// [`crate::Locker::shutdown`] waits for it, and run to its end even if whoever awaits the returned
/// handle gives up. `None` without a runtime.
pub(crate) fn spawn_in<F>(locker: &Tally, task: F) -> Option<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    spawn_in_or(locker, None, task)
}

/// [`spawn_in`] on the runtime at hand or, where none runs (a plain thread, another executor, a
/// synchronous `Drop`), on `fallback`: the runtime a guard was taken on. `None` with neither. A
/// `fallback` that was shut down drops the task (its handle answers cancelled).
pub(crate) fn spawn_in_or<F>(
    locker: &Tally,
    fallback: Option<&tokio::runtime::Handle>,
    task: F,
) -> Option<tokio::task::JoinHandle<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = tokio::runtime::Handle::try_current()
        .ok()
        .or_else(|| fallback.cloned())?;
    Some(handle.spawn(counted_in(locker, &handle, task)))
}

/// `task` as a clean-up of `locker`, to run on `runtime`: counted there until it ends or is
/// dropped, and the clean-up it spawns counted there too.
fn counted_in<F: Future>(locker: &Tally, runtime: &tokio::runtime::Handle, task: F) -> impl Future<Output = F::Output> {
    let counted = locker.enter();
    let scope = Scope {
        locker: locker.clone(),
        call: None,
        runtime: Some(runtime.clone()),
    };
    SCOPE.scope(scope, async move {
        let _counted = counted;
        task.await
    })
}

/// Runs `task` as a clean-up of `locker` (a guard's release) *in the caller's task*: counted
/// there while it runs, so that [`crate::Locker::shutdown`] waits for it, and run to its end even
/// if the returned future is dropped first (a timeout around it, a `select!`): its drop moves the
/// rest of `task` into a task of its own. Where nobody drops it, no task is spawned and no thread
/// is woken to run one. Without a runtime at hand, `task` comes back (see [`spawn_in_or`]).
pub(crate) fn run_to_end<F>(locker: &Tally, task: F) -> std::result::Result<RunToEnd<F::Output>, F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return Err(task);
    };
    Ok(RunToEnd {
        task: Some(Box::pin(counted_in(locker, &handle, task))),
        handle,
    })
}

/// The future of [`run_to_end`]: polls its task inline; dropped before the task ends, it spawns
/// the rest on the runtime it was made on.
pub(crate) struct RunToEnd<T: Send + 'static> {
    /// `None` once the task has ended.
    task: Option<Pin<Box<dyn Future<Output = T> + Send + 'static>>>,
    handle: tokio::runtime::Handle,
}

impl<T: Send + 'static> Future for RunToEnd<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(task) = self.task.as_mut() else {
            // Polled again after it ended: `run_to_end`'s only caller awaits it once.
            return Poll::Pending;
        };
        let out = std::task::ready!(task.as_mut().poll(cx));
        self.task = None;
        Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for RunToEnd<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // A runtime that is shutting down drops the task at once; its TTL ends the lock then.
            drop(self.handle.spawn(task));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_waits_for_the_clean_up_it_spawned_and_the_locker_counts_it() {
        let locker = Tally::default();
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let ((), own) = scoped(&locker, async move {
            assert!(spawn(async move {
                let _ = gate.await;
                // Spawned from a clean-up: counted in the locker, not in the call.
                spawn(tokio::time::sleep(Duration::from_millis(20)));
            }));
        })
        .await;
        assert_eq!(own.in_flight(), 1);
        assert_eq!(locker.in_flight(), 1);
        assert!(!own.idle_within(Duration::from_millis(20)).await, "still gated");
        release.send(()).unwrap();
        assert!(own.idle_within(Duration::from_secs(5)).await);
        assert!(locker.idle_within(Duration::from_secs(5)).await);
        assert_eq!(locker.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_task_outside_any_call_is_not_counted() {
        let locker = Tally::default();
        assert!(spawn(async {}));
        assert_eq!(locker.in_flight(), 0);
    }

    /// Polls `fut` once; `true` if it finished.
    async fn poll_once<F: Future + Unpin>(mut fut: F) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut fut).poll(cx).is_ready())).await
    }

    #[tokio::test]
    async fn run_to_end_runs_inline_and_counts_while_it_runs() {
        let locker = Tally::default();
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let mut task = std::pin::pin!(run_to_end(&locker, async move { gate.await.is_ok() })
            .ok()
            .expect("a runtime"));
        assert!(!poll_once(task.as_mut()).await, "gated");
        assert_eq!(locker.in_flight(), 1);
        open.send(()).unwrap();
        // Ready on the next poll of the caller: nothing else had to run it.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(task.as_mut().poll(&mut cx), Poll::Ready(true));
        assert_eq!(locker.in_flight(), 0);
    }

    #[tokio::test]
    async fn run_to_end_dropped_midway_finishes_in_a_task_of_its_own() {
        let locker = Tally::default();
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let mut task = Box::pin(
            run_to_end(&locker, async move {
                let _ = gate.await;
                let _ = done.send(());
            })
            .ok()
            .expect("a runtime"),
        );
        assert!(!poll_once(task.as_mut()).await, "gated");
        drop(task);
        assert_eq!(locker.in_flight(), 1, "the rest still counts in the locker");
        open.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), finished)
            .await
            .expect("the rest ran to its end")
            .expect("and finished its work");
        assert!(locker.idle_within(Duration::from_secs(5)).await);
    }

    #[test]
    fn without_a_runtime_nothing_is_spawned() {
        assert!(!spawn(async {}));
    }
}
