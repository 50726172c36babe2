//! A backend's requests run in their callers' tasks ([`InCaller::run`]), and the hand-off that
//! moves one into a task of its own when nobody polls it ([`InCaller::hand_off`]).
//!
//! A backend whose locker shares one connection among its calls, one request at a time, can run
//! each request in its caller's task, sparing a task spawned and woken for it (tens of
//! microseconds a request on a loaded machine). But such a request goes on only while its caller
//! polls it, and it holds the connection meanwhile (or its place in the line for it): a caller
//! that leaves it pending unpolled (a `select!` whose other branch's body runs long, a
//! `buffer_unordered` stream whose consumer is busy with an item) would hold up every later
//! request of the locker, renewals included, and lose its leases. So:
//!
//! - the backend runs each such request, its wait for the connection included, through its
//!   locker's [`InCaller::run`];
//! - while requests wait for the connection ([`InCaller::wait`]), one watch per connection looks
//!   every [`HAND_OFF_AFTER`]: if the line has not moved since its last look, it hands off the
//!   requests whose callers are not polling them right then (the one holding the connection, or
//!   the first in line, may be one whose caller stopped): each moves into a clean-up task of its
//!   own ([`crate::driver::cleanup::spawn`]), which ends it and hands its result to its caller.
//!   It is counted in the locker whose calls wait for the connection, so that
//!   [`crate::Locker::shutdown`] waits for it as for the locker's other clean-up.
//!
//! A caller dropped before its request ends moves the rest into such a task too ([`RunToEnd`]), so
//! the request runs to its end, and the next request finds the connection idle (the guarantee
//! that a dropped release has in the core).
//!
//! # Examples
//!
//! ```
//! # extern crate locksmith_core as locksmith;
//! use std::sync::Arc;
//! use locksmith::driver::in_caller::InCaller;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> locksmith::Result<()> {
//! let connection = Arc::new(tokio::sync::Mutex::new(0u32));
//! let requests = Arc::new(InCaller::default());
//! let (c, r) = (connection.clone(), requests.clone());
//! // Waited for in line, handing off the requests its wait is held up by; then held to the end.
//! let wait = async move { Ok(r.wait(c.lock_owned()).await) };
//! let request = requests.run(wait, |mut held| async move {
//!     *held += 1;
//!     Ok(*held)
//! });
//! assert_eq!(request.await?, 1);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use crate::driver::cleanup;
use crate::{LockError, Result};

/// How long the line for a connection may stand still before the requests whose callers stopped
/// polling them are handed off ([`InCaller::wait`]): ten times a slow request on a loaded
/// machine, and far below any TTL.
pub const HAND_OFF_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// A request's future.
type Task<T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'static>>;

/// What a request in its caller's task and its hand-off share.
struct Shared<T> {
    /// `None` once it ended or was handed off.
    task: Option<Task<T>>,
    /// Where a handed-off task sends its result.
    result: Option<tokio::sync::oneshot::Sender<Result<T>>>,
    /// The caller's, woken at a hand-off so that it waits for the result from then on.
    caller: Option<Waker>,
    /// Set once the request has the connection: dropped before, it is dropped whole (it sent
    /// nothing); after, it runs to its end.
    started: Arc<AtomicBool>,
}

/// A request polled in its caller's task: the caller's thread sends it and reads its answer, as
/// a bare client's would (see the module docs).
///
/// # Errors
///
/// The request's own; [`LockError::Closed`] if it was handed off into a task that the runtime
/// dropped before its end (the runtime shut down).
///
/// # Cancel safety
///
/// Dropped while it waits for the connection, it is dropped whole: it sent nothing. Dropped
/// after it has the connection but before it ends (its caller gave up), it moves the rest into a
/// clean-up task of its own, which still holds what the request held (the connection): the
/// request runs to its end, and the next one finds the connection idle. Without a runtime to take
/// it (the process is ending), the rest is dropped with its connection, and the server rolls back
/// what it had begun.
pub struct RunToEnd<T: Send + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
    handed_off: tokio::sync::oneshot::Receiver<Result<T>>,
}

/// A [`RunToEnd`]'s shared state, whatever its request's output.
trait HandOff: Send + Sync {
    /// Moves the request into a task of its own, if it has not ended and its caller is not polling
    /// it right now, counted in `locker` (or, unknown, where [`cleanup::spawn`] counts it).
    /// Whether it is still in its caller's task (its caller was polling it).
    fn hand_off(&self, locker: Option<&cleanup::LockerScope>) -> bool;
}

/// The requests of a locker's connection running in their callers' tasks, waiting for the
/// connection or holding it, held weakly (gone once they end), and the watch that hands them off
/// when the line for the connection stops moving (see the module docs).
///
/// A waiting request counts as much as the one holding the connection: a fair lock (tokio's
/// `Mutex`) hands the connection to the first waiter in line when it is let go, polled or not,
/// so a waiter whose caller stopped polling it would hold up the line as surely.
#[derive(Clone, Default)]
pub struct InCaller(Arc<Inner>);

/// [`InCaller`]'s state.
#[derive(Default)]
struct Inner {
    /// The requests still in their callers' tasks (and some that ended since: pruned as they are
    /// met).
    requests: Mutex<Requests>,
    /// How many waits for the connection are under way ([`InCaller::wait`]).
    waiting: AtomicUsize,
    /// How many waits got the connection: the line moved.
    moved: AtomicU64,
    /// Whether a watch runs ([`watch`]).
    watching: AtomicBool,
    /// The locker whose calls wait here (one connection, one locker), taken from the first wait
    /// made in a call: its hand-offs are counted there, so that `Locker::shutdown` waits for them
    /// (the watch runs outside every call).
    locker: OnceLock<cleanup::LockerScope>,
}

#[derive(Default)]
struct Requests {
    all: Vec<Weak<dyn HandOff>>,
    /// The length past which the next request prunes the ended ones (amortized: twice the length
    /// left after the last pruning).
    prune_at: usize,
}

impl InCaller {
    /// Runs a request of this connection in its caller's task: waits for `connection` (a wait
    /// through [`InCaller::wait`], watched for a line that stopped moving), then runs `request`
    /// with it. The returned future is handed off into a task of its own when its caller stops
    /// polling it while the line waits ([`InCaller::hand_off`]).
    ///
    /// # Errors
    ///
    /// `connection`'s, then `request`'s; [`LockError::Closed`] if it was handed off into a task
    /// that the runtime dropped before its end (the runtime shut down).
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for `connection`, the request is dropped whole (it sent nothing);
    /// dropped after, it runs to its end in a task of its own ([`RunToEnd`]).
    pub fn run<C, T, F>(
        &self,
        connection: impl Future<Output = Result<C>> + Send + 'static,
        request: impl FnOnce(C) -> F + Send + 'static,
    ) -> RunToEnd<T>
    where
        C: Send + 'static,
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let started = Arc::new(AtomicBool::new(false));
        let once_held = started.clone();
        let task = async move {
            let held = connection.await?;
            once_held.store(true, Ordering::Release);
            request(held).await
        };
        let request = RunToEnd::new(task, started);
        let weak: Weak<Mutex<Shared<T>>> = Arc::downgrade(&request.shared);
        let weak: Weak<dyn HandOff> = weak;
        let mut requests = self.0.requests.lock().unwrap_or_else(|e| e.into_inner());
        if requests.all.len() >= requests.prune_at {
            requests.all.retain(|r| r.strong_count() > 0);
            requests.prune_at = (requests.all.len() * 2).max(16);
        }
        requests.all.push(weak);
        request
    }

    /// Waits for `connection` (a wait for the locker's connection in line), watched: while any
    /// wait is under way, a watch task hands off the requests whose callers stopped polling them
    /// whenever the line has not moved for [`HAND_OFF_AFTER`]. One timer per connection, however
    /// many wait: a backlog of thousands of steps does not wake up each of them every 20 ms.
    ///
    /// # Cancel safety
    ///
    /// As `connection`'s.
    pub async fn wait<F: Future>(&self, connection: F) -> F::Output {
        let mut connection = std::pin::pin!(connection);
        // Most waits end at once (the connection is free): no watch for them, nor a task woken to
        // start one.
        let first = std::future::poll_fn(|cx| Poll::Ready(connection.as_mut().poll(cx))).await;
        let out = match first {
            Poll::Ready(out) => out,
            Poll::Pending => {
                let _waiting = Waiting::new(self);
                connection.await
            }
        };
        // The line moved. (Not a wait given up on: waits cut off by their timeouts, however many,
        // must not hide a line that stands still.)
        self.0.moved.fetch_add(1, Ordering::AcqRel);
        out
    }

    /// Moves every request of [`InCaller::run`]'s that still runs and whose caller is not polling
    /// it right now into a task of its own; each goes on there, and its caller gets its result
    /// when it polls again.
    pub fn hand_off(&self) {
        let locker = self.0.locker.get();
        let mut requests = self.0.requests.lock().unwrap_or_else(|e| e.into_inner());
        // Those handed off now, or ended, leave the list: only those being polled stay.
        requests
            .all
            .retain(|r| r.upgrade().is_some_and(|request| request.hand_off(locker)));
    }
}

/// One wait for the connection ([`InCaller::wait`]), counted while it lasts; the first starts the
/// watch.
struct Waiting<'a>(&'a Inner);

impl<'a> Waiting<'a> {
    fn new(requests: &'a InCaller) -> Waiting<'a> {
        let inner = &requests.0;
        inner.waiting.fetch_add(1, Ordering::AcqRel);
        if inner.locker.get().is_none() {
            if let Some(locker) = cleanup::locker_here() {
                let _ = inner.locker.set(locker);
            }
        }
        if !inner.watching.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(watch(Arc::downgrade(inner)))),
                Err(_) => inner.watching.store(false, Ordering::Release),
            }
        }
        Waiting(inner)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The watch of an [`InCaller`]'s line: every [`HAND_OFF_AFTER`] while waits are under way, it
/// hands the requests off ([`InCaller::hand_off`]) if no wait got the connection since its last
/// look (the request holding the connection, or the first in line, may be one whose caller
/// stopped polling it). Ends when no wait is left (the next wait starts another), or with its `InCaller`.
async fn watch(inner: Weak<Inner>) {
    let mut seen = None;
    loop {
        tokio::time::sleep(HAND_OFF_AFTER).await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.waiting.load(Ordering::Acquire) == 0 {
            inner.watching.store(false, Ordering::Release);
            // A wait that began meanwhile saw the watch still running, and started none: taken
            // up again, unless a new wait started one since.
            if inner.waiting.load(Ordering::Acquire) == 0 || inner.watching.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let moved = inner.moved.load(Ordering::Acquire);
        if seen == Some(moved) {
            InCaller(inner).hand_off();
        }
        seen = Some(moved);
    }
}

impl std::fmt::Debug for InCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InCaller")
    }
}

impl<T: Send + 'static> RunToEnd<T> {
    /// `task` to run in the caller's task.
    fn new(task: impl Future<Output = Result<T>> + Send + 'static, started: Arc<AtomicBool>) -> RunToEnd<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = Arc::new(Mutex::new(Shared {
            task: Some(Box::pin(task)),
            result: Some(tx),
            caller: None,
            started,
        }));
        RunToEnd { shared, handed_off: rx }
    }
}

impl<T: Send + 'static> HandOff for Mutex<Shared<T>> {
    fn hand_off(&self, locker: Option<&cleanup::LockerScope>) -> bool {
        // Locked: its caller is polling it, so it is not stalled.
        let Ok(mut s) = self.try_lock() else { return true };
        let (Some(task), Some(result)) = (s.task.take(), s.result.take()) else {
            return false;
        };
        let (caller, started) = (s.caller.take(), s.started.clone());
        drop(s);
        tracing::debug!(
            "a request's caller stopped polling it while others waited for its connection; it goes on in a task of its own"
        );
        let task = handed_off(task, result, started);
        match locker {
            Some(locker) => locker.spawn(task),
            None => cleanup::spawn(task),
        };
        if let Some(caller) = caller {
            caller.wake();
        }
        false
    }
}

/// A handed-off request's task: runs `task` and sends its result to its caller, as the caller's
/// own polls would have. A caller that drops its request meanwhile has it treated as a drop of
/// the request it polled: dropped whole while it still waits for the connection (it sent
/// nothing: a clean-up its caller left may be on the server before it, and must not be
/// followed by it), run to its end once it has the connection.
async fn handed_off<T>(
    mut task: Task<T>,
    mut result: tokio::sync::oneshot::Sender<Result<T>>,
    started: Arc<AtomicBool>,
) {
    tokio::select! {
        out = &mut task => {
            let _ = result.send(out);
        }
        () = result.closed() => {
            if started.load(Ordering::Acquire) {
                let _ = task.await;
            }
        }
    }
}

impl<T: Send + 'static> Future for RunToEnd<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        {
            let mut guard = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let Shared {
                task, result, caller, ..
            } = &mut *guard;
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
        let task = {
            let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            // Still waiting for the connection: it sent nothing, and is dropped whole.
            let started = shared.started.load(Ordering::Acquire);
            shared.task.take().filter(|_| started)
        };
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

    /// The requests of a connection, and the slot (the connection) they wait for.
    fn fixture() -> (Arc<InCaller>, Arc<tokio::sync::Mutex<u32>>) {
        (Arc::new(InCaller::default()), Arc::new(tokio::sync::Mutex::new(0u32)))
    }

    /// A request of `requests` that waits for `slot` (as a request waits for the connection),
    /// then for its gate to open, then adds one to the slot's count and answers the count; the
    /// gate's opener.
    fn gated(
        requests: &Arc<InCaller>,
        slot: &Arc<tokio::sync::Mutex<u32>>,
    ) -> (Pin<Box<RunToEnd<u32>>>, tokio::sync::oneshot::Sender<()>) {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let (r, slot) = (requests.clone(), slot.clone());
        let wait = async move { Ok(r.wait(slot.lock_owned()).await) };
        let request = Box::pin(requests.run(wait, |mut held| async move {
            let _ = gate.await;
            *held += 1;
            Ok(*held)
        }));
        (request, open)
    }

    /// A request runs in the caller's task (no task is spawned and woken for it) and answers
    /// there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_runs_in_the_callers_task() {
        let (caller, ran_in) = tokio::spawn(async {
            let request = InCaller::default().run(async { Ok(()) }, |()| async { Ok(tokio::task::id()) });
            (tokio::task::id(), request.await.unwrap())
        })
        .await
        .unwrap();
        assert_eq!(ran_in, caller);
    }

    /// A request whose caller gave up half-way runs to its end in a task of its own, still
    /// holding what it held (the connection).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_request_runs_to_its_end() {
        let (requests, slot) = fixture();
        let (mut request, open) = gated(&requests, &slot);
        assert!(!poll_once(&mut request).await, "the request waits at its gate");
        drop(request);
        open.send(()).unwrap();
        let after = tokio::time::timeout(Duration::from_secs(5), slot.lock())
            .await
            .expect("the rest of the request ran and let the connection go");
        assert_eq!(*after, 1, "the rest of the request did its work");
    }

    /// A request whose caller stopped polling it while it held the connection is moved into a
    /// task of its own by the next request's wait: it ends, and lets the connection go, without
    /// its caller; the caller, polled again, gets its result.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_its_caller_left_unpolled_is_handed_off() {
        let (requests, slot) = fixture();
        let (mut stalled, open) = gated(&requests, &slot);
        assert!(
            !poll_once(&mut stalled).await,
            "the request holds the slot, at its gate"
        );
        open.send(()).unwrap();
        // Its caller polls no more; the next request waits for the slot.
        let (next, open_next) = gated(&requests, &slot);
        open_next.send(()).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(5), next).await;
        assert_eq!(out.expect("the next request got the slot").unwrap(), 2);
        let out = tokio::time::timeout(Duration::from_secs(5), stalled).await;
        assert_eq!(out.expect("the result").unwrap(), 1, "the caller gets its result");
    }

    /// A request whose caller stopped polling it while it waited in line is handed off too: a
    /// fair lock gives it the slot when the slot is let go, polled or not, and the line behind it
    /// would wait for its caller.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_left_unpolled_in_line_is_handed_off() {
        let (requests, slot) = fixture();
        let held = slot.clone().lock_owned().await;
        let (mut stalled, open) = gated(&requests, &slot);
        open.send(()).unwrap();
        assert!(!poll_once(&mut stalled).await, "the request waits in line");
        drop(held); // the slot goes to the stalled request, which nobody polls
        let (next, open_next) = gated(&requests, &slot);
        open_next.send(()).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(5), next).await;
        assert_eq!(out.expect("the next request got the slot").unwrap(), 2);
        assert_eq!(stalled.await.unwrap(), 1);
    }

    /// Waits given up on, however often, do not hide a line that stands still: a request whose
    /// caller stopped polling it is handed off all the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_given_up_on_do_not_hide_a_stalled_line() {
        let (requests, slot) = fixture();
        let (mut stalled, open) = gated(&requests, &slot);
        assert!(
            !poll_once(&mut stalled).await,
            "the request holds the slot, at its gate"
        );
        open.send(()).unwrap();
        // Its caller polls no more; waits cut off every 5 ms, as by short timeouts.
        let (r, s) = (requests.clone(), slot.clone());
        let giving_up = tokio::spawn(async move {
            loop {
                let _ = tokio::time::timeout(Duration::from_millis(5), r.wait(s.clone().lock_owned())).await;
            }
        });
        let (next, open_next) = gated(&requests, &slot);
        open_next.send(()).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(5), next).await;
        giving_up.abort();
        assert_eq!(out.expect("the next request got the slot").unwrap(), 2);
        assert_eq!(stalled.await.unwrap(), 1);
    }

    /// A request dropped while it waits in line is dropped whole: it never runs, and the line
    /// goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_dropped_in_line_never_runs() {
        let (requests, slot) = fixture();
        let held = slot.clone().lock_owned().await;
        let (mut dropped, open) = gated(&requests, &slot);
        open.send(()).unwrap();
        assert!(!poll_once(&mut dropped).await, "the request waits in line");
        drop(dropped);
        drop(held);
        let after = tokio::time::timeout(Duration::from_secs(5), slot.lock())
            .await
            .expect("the line went on");
        assert_eq!(*after, 0, "the dropped request did not run");
    }

    /// A request handed off while it waited in line, and then dropped by its caller before it had
    /// the connection, never runs: its caller's clean-up may already have run, and must not be
    /// followed by it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handed_off_request_dropped_in_line_never_runs() {
        let (requests, slot) = fixture();
        let held = slot.clone().lock_owned().await;
        let (mut dropped, open) = gated(&requests, &slot);
        open.send(()).unwrap();
        assert!(!poll_once(&mut dropped).await, "the request waits in line");
        requests.hand_off();
        drop(dropped);
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        let after = tokio::time::timeout(Duration::from_secs(5), slot.lock())
            .await
            .expect("the line went on");
        assert_eq!(*after, 0, "the dropped request did not run");
    }

    /// A request handed off is counted in its locker's clean-up, which `Locker::shutdown` waits
    /// for, until it ends: the watch that hands it off runs outside every call of the locker.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_handed_off_request_is_counted_in_its_locker() {
        let (requests, slot) = fixture();
        let locker = cleanup::Tally::default();
        let (mut stalled, open) = gated(&requests, &slot);
        let (started, _) = cleanup::scoped(&locker, poll_once(&mut stalled)).await;
        assert!(!started, "the request holds the slot, at its gate");
        // Another call of the locker waits in line; the watch hands the stalled request off (and
        // the waiting one, whose task is not polled while it waits).
        let (next, open_next) = gated(&requests, &slot);
        open_next.send(()).unwrap();
        let in_locker = locker.clone();
        let next = tokio::spawn(async move { cleanup::scoped(&in_locker, next).await });
        let counted = tokio::time::timeout(Duration::from_secs(2), async {
            while locker.in_flight() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(counted.is_ok(), "the handed-off request is counted in its locker");
        open.send(()).unwrap();
        let (out, _) = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("the next request got the slot")
            .unwrap();
        assert_eq!(out.unwrap(), 2);
        assert_eq!(stalled.await.unwrap(), 1, "the caller gets its result");
        assert!(
            locker.idle_within(Duration::from_secs(5)).await,
            "the handed-off request is counted out once it ended"
        );
    }

    /// A hand-off after a request ended does nothing, and ended requests are forgotten.
    #[tokio::test]
    async fn a_hand_off_leaves_an_ended_request_alone() {
        let requests = InCaller::default();
        let request = requests.run(async { Ok(()) }, |()| async { Ok(7u32) });
        assert_eq!(request.await.unwrap(), 7);
        requests.hand_off();
        drop(requests.run(async { Ok(()) }, |()| async { Ok(8u32) }));
        requests.0.requests.lock().unwrap().prune_at = 0;
        drop(requests.run(async { Ok(()) }, |()| async { Ok(9u32) }));
        assert_eq!(
            requests.0.requests.lock().unwrap().all.len(),
            1,
            "the ended requests were forgotten"
        );
    }
}
