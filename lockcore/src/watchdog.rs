//! The watchdog: one task per [`crate::Locker`] that renews every held lease through
//! [`LockBackend::renew_many`], declares leases lost before the server could expire them, and
//! enforces `max_hold`.
//!
//! Timing, for a lease of TTL `t` (effective, as the backend reports it):
//! - renew every `backend.renew_interval(t)` (default `t/3`); a batch that goes out takes every
//!   lease due within the next half of its interval, and a new lease joins the next batch if that
//!   comes before its own due time, so all leases of a Locker converge into one batch per interval;
//! - a lease is valid until `sent + t - margin`, where `sent` is when the last *successful*
//!   renewal was sent and `margin = t/10` (at least 5 ms): client and server clocks run at
//!   slightly different rates, and the server counts from when it *received* the request;
//! - a failed renewal is retried after `t/10`; `NotHeld` fires `lost()` at once; no success before
//!   the validity ends fires `lost()` with [`LostReason::RenewalFailed`];
//! - a batch runs in a task of its own, and a lease is in at most one batch at a time: a batch
//!   that waits on a slow server keeps neither the ends of the other leases (their validity,
//!   `max_hold`) nor the renewal of leases taken meanwhile waiting.
//!
//! The task exits once no lease has been registered for [`LINGER`] (or at once when its `Locker`
//! is dropped), and is started again by the next registration: an idle `Locker` costs nothing,
//! and a busy one does not start a task for every lock it takes. Meanwhile it looks every
//! [`IDLE_LOOK`], so that a lock taken and released before the task saw it does not make every
//! next lock wake the task (see [`State::wakes_at`]).

use std::collections::HashMap;

use crate::driver::fast_hash::FastBuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::LockBackend;
use crate::driver::cleanup::Tally;
use crate::lease::{Lease, LostReason};
use crate::release_again::release_once;

/// How long the task stays after its last lease ended, waiting for the next one.
const LINGER: Duration = Duration::from_secs(10);

/// How often the task looks by itself while it lingers with no lease: a lease registered meanwhile
/// whose first event comes after the next look needs no wake-up. Without these looks an idle task
/// waited for a wake-up only, and when a lock was taken and released before the task ran (a
/// lock cycle shorter than a thread's wake-up), the task found nothing, idled again, and the next
/// lock woke it again: one wake-up of another thread per lock cycle (lockbench, file://
/// uncontended: 31–40 µs a cycle in the runs where it happened, 22 µs otherwise).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The safety margin subtracted from a lease's TTL.
pub(crate) fn margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(5))
}

/// Whether `lease` has run out by the watchdog's count already, before any renewal: it was
/// granted more than its TTL (less the margin) ago, as when its acquire's caller left the call
/// unpolled after the grant.
pub(crate) fn ran_out(lease: &Lease) -> bool {
    lease.acquired_at + lease.ttl - margin(lease.ttl) <= Instant::now()
}

/// Handle to one Locker's watchdog.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    /// The Locker's clean-up tally: releases of lost leases are counted there.
    tally: Tally,
    /// The Locker's shutdown: a release that got no answer is not tried again after it.
    closed: watch::Receiver<bool>,
    state: Mutex<State>,
    wake: Arc<Notify>,
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry, FastBuildHasher>,
    next_id: u64,
    /// The running task's number, if one runs ([`TaskSlot`]); `next_task` numbers the next.
    task: Option<u64>,
    next_task: u64,
    /// When the task looks at the entries again by itself (`None`: it waits for a wake-up, or is
    /// about to look now). A lease whose first event comes later needs no wake-up: taking and
    /// releasing a lock does not wake the task (a thread wake-up per lock cycle was measurable on
    /// a busy machine). Idle, the task still looks every [`IDLE_LOOK`] until [`LINGER`] ends.
    wakes_at: Option<Instant>,
    /// How many registrations woke the task (tests).
    #[cfg(test)]
    woken_by_register: u64,
}

struct Entry {
    /// Shared with the guard (no copy of the lease per grant).
    lease: Arc<Lease>,
    renew_at: Instant,
    valid_until: Instant,
    max_hold_until: Option<Instant>,
    last_error: Option<String>,
    /// Whether a renewal batch with this lease is on its way (it joins no other batch meanwhile).
    renewing: bool,
}

impl Entry {
    fn next_event(&self) -> Instant {
        let t = if self.renewing {
            self.valid_until
        } else {
            self.renew_at.min(self.valid_until)
        };
        self.max_hold_until.map_or(t, |m| t.min(m))
    }

    /// Until when the holder may act as one: the lease's validity, or its `max_hold` if that
    /// comes first ([`crate::LockGuard::is_held`] is false past it even before the task runs).
    fn held_until(&self) -> Instant {
        self.max_hold_until
            .map_or(self.valid_until, |m| m.min(self.valid_until))
    }

    /// Whether the next batch should take this lease, at `now` with `slack` to spare.
    fn due(&self, now: Instant, slack: Duration) -> bool {
        !self.renewing && self.renew_at <= now + slack
    }
}

impl Watchdog {
    pub(crate) fn new(backend: Arc<dyn LockBackend>, tally: Tally, closed: watch::Receiver<bool>) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                tally,
                closed,
                state: Mutex::new(State::default()),
                wake: Arc::new(Notify::new()),
            }),
        }
    }

    /// Starts renewing `lease`; returns the id to [`Watchdog::unregister`] it with.
    /// Must be called from within a tokio runtime.
    pub(crate) fn register(&self, lease: Arc<Lease>, max_hold: Option<Duration>) -> u64 {
        let interval = self.shared.backend.renew_interval(lease.ttl);
        let own_due = lease.acquired_at + interval;
        let mut state = self.shared.lock();
        // Join the next batch if it comes before this lease's own due time: renewing early is
        // always safe, and it keeps every lease of a Locker in one batch instead of one batch per
        // moment a lock was taken.
        // (Only a batch still to come: one that is due or in flight is no batch to join.)
        let now = Instant::now();
        let next_batch = (state.entries.values())
            .filter(|e| !e.renewing)
            .map(|e| e.renew_at)
            .filter(|&t| t > now)
            .min();
        let entry = Entry {
            renew_at: next_batch.map_or(own_due, |b| b.min(own_due)),
            valid_until: lease.acquired_at + lease.ttl - margin(lease.ttl),
            // A cap beyond what an `Instant` can hold is no cap.
            max_hold_until: max_hold.and_then(|d| lease.acquired_at.checked_add(d)),
            last_error: None,
            renewing: false,
            lease,
        };
        entry.lease.lost.set_valid_until(entry.held_until());
        let id = state.next_id;
        state.next_id += 1;
        let must_wake = state.wakes_at.is_none_or(|t| entry.next_event() < t);
        state.entries.insert(id, entry);
        if state.task.is_none() {
            // The batches of an earlier task went with it (its runtime dropped): the new one
            // renews every lease again.
            for e in state.entries.values_mut() {
                e.renewing = false;
            }
            let number = state.next_task;
            state.next_task += 1;
            state.task = Some(number);
            state.wakes_at = Some(now); // a new task looks at once
            let slot = TaskSlot {
                shared: Arc::downgrade(&self.shared),
                number,
            };
            // Spawned without the state's lock: a runtime that is shutting down drops the task at
            // once, and its slot takes that lock.
            drop(state);
            tokio::spawn(run(self.shared.clone(), slot));
        } else if must_wake {
            state.wakes_at = Some(now);
            #[cfg(test)]
            {
                state.woken_by_register += 1;
            }
            drop(state);
            self.shared.wake.notify_one();
        }
        id
    }

    /// Stops renewing; no-op if the watchdog already dropped the lease. The task is not woken:
    /// at its next planned look it finds the lease gone (and, with no lease left, idles).
    pub(crate) fn unregister(&self, id: u64) {
        self.shared.lock().entries.remove(&id);
    }

    /// Ends every lease for `reason` (see [`end_lease`]): for [`crate::Locker::shutdown`].
    pub(crate) fn end_all(&self, reason: LostReason) {
        let leases: Vec<Arc<Lease>> = self.shared.lock().entries.drain().map(|(_, e)| e.lease).collect();
        for lease in leases {
            end_lease(&self.shared, lease, reason.clone());
        }
    }

    /// How many leases are being renewed (for tests and metrics).
    pub(crate) fn len(&self) -> usize {
        self.shared.lock().entries.len()
    }
}

impl Drop for Watchdog {
    /// Wakes the task, which finds its `Locker` gone and ends.
    fn drop(&mut self) {
        self.shared.wake.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the map inconsistent; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running task's place in its [`State`]: freed when the task ends, however it ends (it
/// returns, panics, or is dropped with its runtime, even before its first poll), so that the
/// next [`Watchdog::register`] starts a task again. A task that only the flag said was running
/// would leave every later lease of its `Locker` unrenewed.
struct TaskSlot {
    shared: std::sync::Weak<Shared>,
    number: u64,
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut state = shared.lock();
            // A task that ended by itself was already replaced; only the current one frees it.
            if state.task == Some(self.number) {
                state.task = None;
                state.wakes_at = None;
            }
        }
    }
}

async fn run(shared: Arc<Shared>, _slot: TaskSlot) {
    // Between looks the task holds only a weak reference, so that dropping the Locker frees the
    // backend (its connections) without waiting for the task.
    let (weak, wake) = (Arc::downgrade(&shared), shared.wake.clone());
    drop(shared);
    let mut idle_since: Option<Instant> = None;
    // The renewal batches on their way, each in a task of its own (dropped with this task).
    let mut batches = tokio::task::JoinSet::new();
    loop {
        let Some(shared) = weak.upgrade() else { return };
        let now = Instant::now();
        let mut due = Vec::new();
        let mut ended = Vec::new();
        let work = {
            let mut state = shared.lock();
            state.entries.retain(|_, e| {
                if e.lease.lost.is_lost() {
                    false
                } else if e.max_hold_until.is_some_and(|m| m <= now) {
                    ended.push((e.lease.clone(), LostReason::MaxHoldReached));
                    false
                } else if e.valid_until <= now {
                    let why = e.last_error.clone().unwrap_or_else(|| "no renewal was answered".into());
                    ended.push((e.lease.clone(), LostReason::RenewalFailed(why)));
                    false
                } else {
                    true
                }
            });
            if state.entries.is_empty() && ended.is_empty() {
                let since = *idle_since.get_or_insert(now);
                if now >= since + LINGER {
                    state.task = None;
                    return;
                }
                let look = (now + IDLE_LOOK).min(since + LINGER);
                state.wakes_at = Some(look);
                Err(look)
            } else {
                idle_since = None;
                // When a batch goes out, it takes everything due within the next half interval too:
                // renewing early is safe, and it merges leases taken at different times into one
                // batch per interval.
                if state.entries.values().any(|e| e.due(now, Duration::ZERO)) {
                    for (id, e) in state.entries.iter_mut() {
                        let slack = shared.backend.renew_interval(e.lease.ttl) / 2;
                        if e.due(now, slack) {
                            e.renewing = true;
                            due.push((*id, Lease::clone(&e.lease), e.valid_until));
                        }
                    }
                }
                let next_wake = state.entries.values().map(Entry::next_event).min();
                state.wakes_at = next_wake.or(Some(now));
                Ok(next_wake)
            }
        };
        // `Err`: idle until then (the next look, or the end of the linger).
        let next_wake = match work {
            Ok(next_wake) => next_wake,
            Err(look) => {
                // Idle: nothing is held, so a renewal still on its way is of no use. Wait for the
                // next lease (or the Locker's end) without holding the backend.
                batches.abort_all();
                drop(shared);
                tokio::select! {
                    _ = tokio::time::sleep_until(look) => {}
                    _ = wake.notified() => {}
                }
                continue;
            }
        };

        for (lease, ending) in ended {
            end_lease(&shared, lease, ending);
        }

        if !due.is_empty() {
            let batch_shared = shared.clone();
            batches.spawn(async move { renew_batch(&batch_shared, due).await });
        }

        match next_wake {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = shared.wake.notified() => {}
                    Some(done) = batches.join_next(), if !batches.is_empty() => {
                        // (One aborted when the task went idle ended as asked.)
                        if let Some(e) = done.err().filter(|e| !e.is_cancelled()) {
                            // Its leases stay marked as renewing: they end when their validity does.
                            tracing::error!(error = %e, "a lease renewal batch ended without an answer");
                        }
                    }
                }
            }
            None => continue, // only ended leases this round; the next round exits if empty
        }
    }
}

/// Renews `due` (id, lease, valid until) in one request and records what each lease got.
async fn renew_batch(shared: &Shared, due: Vec<(u64, Lease, Instant)>) {
    let earliest_expiry = due.iter().map(|(_, _, valid_until)| *valid_until).min();
    let (ids, leases): (Vec<u64>, Vec<Lease>) = due.into_iter().map(|(id, lease, _)| (id, lease)).unzip();
    let sent = Instant::now();
    let span = tracing::debug_span!("renew", backend = shared.backend.kind(), leases = leases.len());
    // Do not let a hung server keep us from renewing again after a request timeout, nor past the
    // moment the batch's first lease ends (it is declared lost then, without this batch).
    // A backend may report a request timeout no `Instant` can hold: then only the expiry bounds it.
    let limit = sent.checked_add(shared.backend.request_timeout());
    let budget = [earliest_expiry, limit].into_iter().flatten().min();
    let outcome = match budget {
        Some(budget) => {
            tokio::time::timeout_at(budget, shared.backend.renew_many(&leases))
                .instrument(span)
                .await
        }
        None => Ok(shared.backend.renew_many(&leases).instrument(span).await),
    };
    let now = Instant::now();
    let mut lost = Vec::new();
    let (mut renewed, mut gone, mut failed) = (0, 0, 0);
    {
        let mut state = shared.lock();
        for (i, id) in ids.iter().enumerate() {
            let outcome = match &outcome {
                Ok(results) => match results.get(i) {
                    Some(Ok(())) => Renewal::Renewed,
                    Some(Err(e)) if e.is_not_held() => Renewal::Gone(e.to_string()),
                    Some(Err(e)) => Renewal::Failed(e.with_sources()),
                    None => Renewal::Failed("the backend returned too few renewal results".into()),
                },
                Err(_) => Renewal::Failed("the renewal request timed out".into()),
            };
            let Some(entry) = state.entries.get_mut(id) else {
                continue;
            };
            entry.renewing = false;
            let ttl = entry.lease.ttl;
            match &outcome {
                Renewal::Renewed => renewed += 1,
                Renewal::Gone(_) => gone += 1,
                Renewal::Failed(_) => failed += 1,
            }
            match outcome {
                Renewal::Renewed => {
                    entry.valid_until = sent + ttl - margin(ttl);
                    entry.lease.lost.set_valid_until(entry.held_until());
                    entry.renew_at = sent + shared.backend.renew_interval(ttl);
                    entry.last_error = None;
                }
                Renewal::Gone(e) => {
                    lost.push((entry.lease.clone(), LostReason::LeaseGone(e)));
                    state.entries.remove(id);
                }
                Renewal::Failed(e) => {
                    tracing::warn!(lock = %entry.lease.name, error = %e, "lease renewal failed; retrying");
                    entry.last_error = Some(e);
                    entry.renew_at = now + (ttl / 10).max(Duration::from_millis(5));
                }
            }
        }
    }
    crate::metrics::renewal_batch(shared.backend.kind(), now - sent, renewed, gone, failed);
    for (lease, reason) in lost {
        fire_lost(&lease, reason);
    }
}

enum Renewal {
    Renewed,
    Gone(String),
    Failed(String),
}

fn fire_lost(lease: &Lease, reason: LostReason) {
    let shutdown = reason == LostReason::Shutdown;
    if lease.lost.fire(reason.clone()) {
        if shutdown {
            tracing::info!(lock = %lease.name, fencing_token = lease.fencing_token, "releasing at shutdown");
        } else {
            tracing::warn!(lock = %lease.name, fencing_token = lease.fencing_token, %reason, "lock lost");
        }
    }
}

/// Fires the lost signal and releases in the background (a clean-up of the Locker, which
/// [`crate::Locker::shutdown`] waits for) whatever may still be ours on the server: after
/// `max_hold` the whole lease, after a failed renewal what is left of it. A release that got no
/// answer is tried again (see [`crate::release_again`]).
fn end_lease(shared: &Shared, lease: Arc<Lease>, reason: LostReason) {
    let backend = shared.backend.clone();
    let closed = shared.closed.clone();
    // Fire first: the holder must stop acting as one before the lock can pass to someone else.
    fire_lost(&lease, reason);
    crate::driver::cleanup::spawn_in(&shared.tally, async move {
        let (result, retry) = release_once(&backend, &lease, "releasing a lost lock", closed).await;
        match &result {
            Ok(()) => {}
            Err(e) if e.is_not_held() => {
                tracing::debug!(lock = %lease.name, error = %e, "release after loss found nothing to release");
            }
            Err(e) if retry.is_some() => {
                tracing::warn!(lock = %lease.name, error = %e, "release after loss got no answer; trying again while the lease may last");
            }
            Err(e) => {
                tracing::warn!(lock = %lease.name, error = %e, "release after loss failed; the lock expires after its TTL");
            }
        }
        if let Some(retry) = retry {
            retry.run().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{LockRequest, LostSignal};
    use crate::name::LockName;
    use crate::{LockKind, MemoryBackend};

    fn lease(ttl: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            name: LockName::new("watched").unwrap(),
            kind: LockKind::Mutex,
            fencing_token: 1,
            ttl,
            holder_id: "holder".into(),
            acquired_at: Instant::now(),
            waited: false,
            lost: LostSignal::new(),
        })
    }

    /// Lets the watchdog task run as far as it can (one thread: it runs only while this yields).
    async fn let_the_task_run() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// A watchdog on `backend` whose task was started by a lease released before it looked, and
    /// so idles; with the sender of its `Locker`'s shutdown, to keep.
    async fn idling(backend: Arc<dyn LockBackend>) -> (Watchdog, watch::Sender<bool>) {
        let (closing, closed) = watch::channel(false);
        let watchdog = Watchdog::new(backend, Tally::default(), closed);
        let id = watchdog.register(lease(crate::DEFAULT_TTL), None);
        watchdog.unregister(id);
        let_the_task_run().await;
        (watchdog, closing)
    }

    /// Locks taken and released faster than the task runs: each release comes before the task
    /// looked, so the task finds nothing and idles. The next lock must not wake it again (its
    /// first renewal is due long after the task's next look of its own): before `IDLE_LOOK`, an
    /// idle task waited for a wake-up only, and every lock cycle woke another thread.
    #[tokio::test(start_paused = true)]
    async fn locks_taken_and_released_before_the_task_looks_do_not_wake_it_each_time() {
        let (watchdog, _closing) = idling(Arc::new(MemoryBackend::new())).await;
        for _ in 0..100 {
            let id = watchdog.register(lease(crate::DEFAULT_TTL), None);
            watchdog.unregister(id);
            let_the_task_run().await;
        }
        let state = watchdog.shared.lock();
        assert_eq!(state.woken_by_register, 0, "lock cycles woke the idle task");
        assert!(state.task.is_some(), "the task lingers");
    }

    /// A lease whose first renewal comes before the idle task's next look still wakes it, and is
    /// renewed on time: had the task waited for its next look (a second away), the lease would
    /// have run out first and been declared lost.
    #[tokio::test(start_paused = true)]
    async fn a_lease_due_before_the_idle_look_wakes_the_task_and_is_renewed() {
        let backend = Arc::new(MemoryBackend::new());
        let (watchdog, _closing) = idling(backend.clone()).await;
        // Valid for 270 ms, renewed every 100 ms.
        let req = LockRequest::mutex(LockName::new("short").unwrap(), Duration::from_millis(300));
        let granted = Arc::new(backend.try_acquire(&req).await.unwrap().expect("free"));
        assert!(granted.ttl < IDLE_LOOK);
        watchdog.register(granted.clone(), None);
        assert_eq!(watchdog.shared.lock().woken_by_register, 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!granted.lost.is_lost(), "{:?}", granted.lost.reason());
    }
}
