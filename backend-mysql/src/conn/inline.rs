//! A step polled in its caller's task ([`RunToEnd`]), and the hand-off that moves it into a task
//! of its own when nobody polls it ([`LastInCaller`]).
//!
//! A step runs in the caller's task to spare a task spawned and woken for it. But it goes on
//! only while its caller polls it, and it holds the locker's one steps' connection meanwhile: a
//! caller that leaves it pending unpolled (a `select!` whose other branch's body runs long) would
//! hold up every later step of the locker, renewals included. So a step that has waited for the
//! connection for [`super::HAND_OFF_AFTER`] hands the running step off: moved, unless its caller
//! is polling it right then, into a clean-up task of its own, which ends it and sends its result
//! to the caller. A caller dropped before its step ends moves the rest into such a task too.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use locksmith_core::driver::cleanup;
use locksmith_core::{LockError, Result};

/// A step's future.
type Task<T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'static>>;

/// What a step in its caller's task and its hand-off share.
struct Shared<T> {
    /// `None` once it ended or was handed off.
    task: Option<Task<T>>,
    /// Where a handed-off task sends its result.
    result: Option<tokio::sync::oneshot::Sender<Result<T>>>,
    /// The caller's, woken at a hand-off so that it waits for the result from then on.
    caller: Option<Waker>,
}

/// A step's task polled in the caller's task: the caller's thread sends its statements and reads
/// their answers, as a bare client's would. Dropped before the task ends (the caller gave up), it
/// moves the rest into a clean-up task of its own, which still holds the connection: the step
/// runs to its end, and the next step finds the connection idle. Without a runtime to take it (the
/// process is ending), the rest is dropped with its connection, and the server rolls back what it
/// had begun.
pub(super) struct RunToEnd<T: Send + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
    handed_off: tokio::sync::oneshot::Receiver<Result<T>>,
}

/// A [`RunToEnd`]'s shared state, whatever its step's output.
trait HandOff: Send + Sync {
    /// Moves the step into a task of its own, if it has not ended and its caller is not polling
    /// it right now.
    fn hand_off(&self);
}

/// The locker's last step run in its caller's task, held weakly (gone once it ended).
#[derive(Default)]
pub(super) struct LastInCaller(Mutex<Option<Weak<dyn HandOff>>>);

impl LastInCaller {
    /// `step` is the last step run in its caller's task.
    pub(super) fn set<T: Send + 'static>(&self, step: &RunToEnd<T>) {
        let weak: Weak<Mutex<Shared<T>>> = Arc::downgrade(&step.shared);
        let weak: Weak<dyn HandOff> = weak;
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(weak);
    }

    /// Moves that step, if it still runs and its caller is not polling it, into a task of its own.
    pub(super) fn hand_off(&self) {
        let last = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(Weak::upgrade);
        if let Some(step) = last {
            step.hand_off();
        }
    }
}

impl std::fmt::Debug for LastInCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastInCaller")
    }
}

impl<T: Send + 'static> RunToEnd<T> {
    /// `task` to run in the caller's task.
    pub(super) fn new(task: impl Future<Output = Result<T>> + Send + 'static) -> RunToEnd<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = Arc::new(Mutex::new(Shared {
            task: Some(Box::pin(task)),
            result: Some(tx),
            caller: None,
        }));
        RunToEnd { shared, handed_off: rx }
    }
}

impl<T: Send + 'static> HandOff for Mutex<Shared<T>> {
    fn hand_off(&self) {
        // Locked: its caller is polling it, so it is not stalled.
        let Ok(mut s) = self.try_lock() else { return };
        let (Some(task), Some(result)) = (s.task.take(), s.result.take()) else {
            return;
        };
        let caller = s.caller.take();
        drop(s);
        tracing::debug!(
            "mysql: a step's caller stopped polling it while steps waited; it goes on in a task of its own"
        );
        cleanup::spawn(async move {
            let _ = result.send(task.await);
        });
        if let Some(caller) = caller {
            caller.wake();
        }
    }
}

impl<T: Send + 'static> Future for RunToEnd<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        {
            let mut guard = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let Shared { task, result, caller } = &mut *guard;
            if let Some(running) = task.as_mut() {
                if !caller.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *caller = Some(cx.waker().clone());
                }
                let out = std::task::ready!(running.as_mut().poll(cx));
                *task = None;
                *result = None;
                return Poll::Ready(out);
            }
        }
        // Handed off: its task sends the result (or it ended before: no sender, no result).
        Pin::new(&mut self.handed_off)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(LockError::Closed)))
    }
}

impl<T: Send + 'static> Drop for RunToEnd<T> {
    fn drop(&mut self) {
        let task = self.shared.lock().unwrap_or_else(|e| e.into_inner()).task.take();
        if let Some(task) = task {
            // Counted in the call's locker (the drop runs in the call's scope), so that
            // `Locker::shutdown` waits for it.
            cleanup::spawn(async move {
                let _ = task.await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Polls `fut` once; whether it finished.
    async fn poll_once<F: Future + Unpin>(fut: &mut F) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx).is_ready())).await
    }

    /// A step that holds `slot` (as a step holds the connection), waits for its gate to open,
    /// then adds one to the slot's count and answers the count; the gate's opener.
    async fn gated_step(
        slot: &Arc<tokio::sync::Mutex<u32>>,
    ) -> (Pin<Box<RunToEnd<u32>>>, tokio::sync::oneshot::Sender<()>) {
        let held = slot.clone().lock_owned().await;
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let step = Box::pin(RunToEnd::new(async move {
            let mut held = held;
            let _ = gate.await;
            *held += 1;
            Ok(*held)
        }));
        (step, open)
    }

    /// A step runs in the caller's task (no task is spawned and woken for it) and answers there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_runs_in_the_callers_task() {
        let (caller, ran_in) = tokio::spawn(async {
            let step = RunToEnd::new(async { Ok(tokio::task::id()) });
            (tokio::task::id(), step.await.unwrap())
        })
        .await
        .unwrap();
        assert_eq!(ran_in, caller);
    }

    /// A step whose caller gave up half-way runs to its end in a task of its own, still holding
    /// what it held (the connection).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_step_runs_to_its_end() {
        let slot = Arc::new(tokio::sync::Mutex::new(0u32));
        let (mut step, open) = gated_step(&slot).await;
        assert!(!poll_once(&mut step).await, "the step waits at its gate");
        drop(step);
        open.send(()).unwrap();
        let after = tokio::time::timeout(Duration::from_secs(5), slot.lock())
            .await
            .expect("the rest of the step ran and let the connection go");
        assert_eq!(*after, 1, "the rest of the step did its work");
    }

    /// A step whose caller stopped polling it is moved into a task of its own by its hand-off:
    /// it ends, and lets the connection go, without its caller; the caller, polled again (woken
    /// by the hand-off), gets its result.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_its_caller_left_unpolled_is_handed_off() {
        let slot = Arc::new(tokio::sync::Mutex::new(0u32));
        let (mut step, open) = gated_step(&slot).await;
        let last = LastInCaller::default();
        last.set(&step);
        assert!(!poll_once(&mut step).await, "the step waits at its gate");
        // The caller polls no more; a step waiting for the connection hands it off.
        last.hand_off();
        open.send(()).unwrap();
        let after = tokio::time::timeout(Duration::from_secs(5), slot.lock())
            .await
            .expect("the handed-off step ran without its caller and let the connection go");
        assert_eq!(*after, 1);
        drop(after);
        let out = tokio::time::timeout(Duration::from_secs(5), step)
            .await
            .expect("the result");
        assert_eq!(out.unwrap(), 1, "the caller gets the handed-off step's result");
    }

    /// A hand-off after the step ended, or while its caller polls it, does nothing.
    #[tokio::test]
    async fn a_hand_off_leaves_an_ended_step_alone() {
        let step = RunToEnd::new(async { Ok(7u32) });
        let last = LastInCaller::default();
        last.set(&step);
        assert_eq!(step.await.unwrap(), 7);
        last.hand_off();
    }
}
