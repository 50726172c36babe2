//! Metrics, through the [`metrics`](https://docs.rs/metrics) crate's facade: any recorder a
//! program installs (Prometheus, StatsD, OpenTelemetry) receives them. A `Locker` registers the
//! metrics of each label set once, when it first takes a lock with those labels, so install the
//! recorder before taking locks; after that a call costs a few atomic operations.
//! `docs/metrics.md` lists them with their units and labels.
//!
//! Every metric has the labels `backend` (`mem`, `etcd`, `zk`, `redis`, `dual`) and, except the
//! renewal ones, `kind` (`mutex`, `semaphore`, `read`, `write`, `election`). Lock names are
//! unbounded, so they are not a label unless the program asks for one with
//! [`crate::Locker::with_name_label`] (e.g. the part of the name before the first `/`).

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram, Label};

use crate::error::LockError;
use crate::lease::{LockKind, LostReason};

/// Acquire and try_acquire calls, by `outcome`: `acquired`, `busy` (a `try_acquire` that found
/// the lock taken), `timeout`, `unavailable`, `error`.
pub const ACQUIRES: &str = "locksmith_acquires_total";
/// Seconds from the start of an `acquire` (or `try_acquire`) to the grant.
pub const ACQUIRE_WAIT: &str = "locksmith_acquire_wait_seconds";
/// Grants that waited for another holder: the request found the lock taken and was granted later,
/// by a hand-over or a takeover ([`crate::driver::Lease::waited`]), not at its first attempt.
pub const HANDOVERS: &str = "locksmith_handovers_total";
/// Guards held right now.
pub const HELD: &str = "locksmith_held";
/// Seconds a guard was held, from the grant to its release, drop or loss.
pub const HOLD: &str = "locksmith_hold_seconds";
/// Releases (by `release()` or a drop), by `outcome`: `released`, `not_held`, `error`.
pub const RELEASES: &str = "locksmith_releases_total";
/// Locks lost while held, by `reason`: `renewal_failed`, `lease_gone`, `max_hold`, `shutdown`.
pub const LOST: &str = "locksmith_lost_total";
/// Lease renewals (one per lease in a batch), by `outcome`: `renewed`, `gone`, `failed`.
pub const RENEWALS: &str = "locksmith_renewals_total";
/// Seconds one renewal batch took (one request per server, for every lease of a Locker).
pub const RENEWAL_BATCH: &str = "locksmith_renewal_batch_seconds";

/// Turns a lock name into the value of the `name` label, or `None` for no label.
pub type NameLabel = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The `outcome` values of [`ACQUIRES`].
const ACQUIRE_OUTCOMES: [&str; 5] = ["acquired", "busy", "timeout", "unavailable", "error"];
/// The `outcome` values of [`RELEASES`].
const RELEASE_OUTCOMES: [&str; 3] = ["released", "not_held", "error"];
/// The `reason` values of [`LOST`].
const LOST_REASONS: [&str; 4] = ["renewal_failed", "lease_gone", "max_hold", "shutdown"];

/// The metrics of one label set (backend, kind, name label), registered once with the recorder
/// and then updated with a few atomic operations per call: a registration builds and hashes the
/// labels, which cost more than the rest of an in-process acquire.
#[derive(Debug)]
struct Handles {
    acquires: [Counter; 5],
    acquire_wait: Histogram,
    held: Gauge,
    handovers: Counter,
    hold: Histogram,
    releases: [Counter; 3],
    lost: [Counter; 4],
}

/// The metrics of one lock's calls (shared by every call with the same labels).
#[derive(Clone, Debug)]
pub(crate) struct Labels(Arc<Handles>);

impl Labels {
    fn register(backend: &'static str, kind: &'static str, name: Option<&str>) -> Self {
        let mut base = vec![
            Label::from_static_parts("backend", backend),
            Label::from_static_parts("kind", kind),
        ];
        if let Some(name) = name {
            base.push(Label::new("name", name.to_owned()));
        }
        let with = |key: &'static str, value: &'static str| {
            let mut labels = base.clone();
            labels.push(Label::from_static_parts(key, value));
            labels
        };
        Labels(Arc::new(Handles {
            acquires: ACQUIRE_OUTCOMES.map(|o| counter!(ACQUIRES, with("outcome", o))),
            acquire_wait: histogram!(ACQUIRE_WAIT, base.clone()),
            held: gauge!(HELD, base.clone()),
            handovers: counter!(HANDOVERS, base.clone()),
            hold: histogram!(HOLD, base.clone()),
            releases: RELEASE_OUTCOMES.map(|o| counter!(RELEASES, with("outcome", o))),
            lost: LOST_REASONS.map(|r| counter!(LOST, with("reason", r))),
        }))
    }

    /// An acquire call ended with `outcome` (one of [`ACQUIRE_OUTCOMES`]) after `waited`;
    /// `handover` if it had to wait.
    pub(crate) fn acquire_ended(&self, outcome: &'static str, waited: Duration, handover: bool) {
        let i = ACQUIRE_OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(4);
        self.0.acquires[i].increment(1);
        if i == 0 {
            self.0.acquire_wait.record(waited.as_secs_f64());
            self.0.held.increment(1.0);
            if handover {
                self.0.handovers.increment(1);
            }
        }
    }

    /// A guard ended (released, dropped, or given up after a loss) after `held`.
    pub(crate) fn guard_ended(&self, held: Duration) {
        self.0.held.decrement(1.0);
        self.0.hold.record(held.as_secs_f64());
    }

    /// A release answered `result`.
    pub(crate) fn released(&self, result: &Result<(), LockError>) {
        let i = match result {
            Ok(()) => 0,
            Err(e) if e.is_not_held() => 1,
            Err(_) => 2,
        };
        self.0.releases[i].increment(1);
    }

    /// The lock was lost for `reason`.
    pub(crate) fn lost(&self, reason: &LostReason) {
        let i = match reason {
            LostReason::RenewalFailed(_) => 0,
            LostReason::LeaseGone(_) => 1,
            LostReason::MaxHoldReached => 2,
            LostReason::Shutdown => 3,
        };
        self.0.lost[i].increment(1);
    }
}

/// A [`crate::Locker`]'s metrics, one [`Labels`] per label set met so far (a few: one per kind,
/// times the values of the name label function, which must be few anyway). They are registered
/// with the recorder installed when the label set is first used: install the recorder before
/// taking locks.
#[derive(Default)]
pub(crate) struct LabelSets {
    sets: std::sync::Mutex<Vec<(&'static str, Option<String>, Labels)>>,
}

impl LabelSets {
    /// The metrics of a call on `name` of `kind`.
    pub(crate) fn get(&self, backend: &'static str, kind: &LockKind, name: &str, label: Option<&NameLabel>) -> Labels {
        let kind = kind_label(kind);
        let name = label.and_then(|f| f(name));
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, labels)) = sets.iter().find(|(k, n, _)| *k == kind && *n == name) {
            return labels.clone();
        }
        let labels = Labels::register(backend, kind, name.as_deref());
        sets.push((kind, name, labels.clone()));
        labels
    }
}

/// The outcome label of an acquire that failed with `e`.
pub(crate) fn failure_outcome(e: &LockError) -> &'static str {
    match e {
        LockError::Timeout(_) => "timeout",
        LockError::Unavailable { .. } => "unavailable",
        _ => "error",
    }
}

/// One renewal batch of `backend` took `took`: `renewed`, `gone` and `failed` leases.
pub(crate) fn renewal_batch(backend: &'static str, took: Duration, renewed: u64, gone: u64, failed: u64) {
    histogram!(RENEWAL_BATCH, "backend" => backend).record(took.as_secs_f64());
    for (outcome, n) in [("renewed", renewed), ("gone", gone), ("failed", failed)] {
        if n > 0 {
            counter!(RENEWALS, "backend" => backend, "outcome" => outcome).increment(n);
        }
    }
}

/// The `kind` label of a lock kind.
///
/// # Examples
///
/// ```
/// # extern crate locksmith_core as locksmith; // users depend on the locksmith facade
/// use locksmith::{metrics::kind_label, LockKind};
/// assert_eq!(kind_label(&LockKind::Permit { permits: 2 }), "semaphore");
/// assert_eq!(kind_label(&LockKind::Write), "write");
/// ```
pub fn kind_label(kind: &LockKind) -> &'static str {
    match kind {
        LockKind::Mutex => "mutex",
        LockKind::Permit { .. } => "semaphore",
        LockKind::Read => "read",
        LockKind::Write => "write",
        LockKind::Leader { .. } => "election",
    }
}

tokio::task_local! {
    static ROUND_TRIPS: Arc<AtomicU32>;
}

/// For backends: counts one request to a server in the call being made (`acquire`,
/// `try_acquire`, `release`), which locksmith-core records as the `round_trips` field of the call's
/// span. Does nothing outside such a call (a renewal, a background clean-up).
pub fn round_trip() {
    let _ = ROUND_TRIPS.try_with(|n| n.fetch_add(1, Ordering::Relaxed));
}

/// The current call's counter, if a call is being made.
fn round_trip_counter() -> Option<Arc<AtomicU32>> {
    ROUND_TRIPS.try_with(Arc::clone).ok()
}

/// For backends that send part of a call's requests from a task of their own: wraps that task's
/// future (before it is spawned, while the call runs) so that its [`round_trip`]s count for the
/// call.
pub fn counting_for_caller<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let counter = round_trip_counter();
    async move {
        match counter {
            Some(n) => ROUND_TRIPS.scope(n, fut).await,
            None => fut.await,
        }
    }
}

/// Runs `call`, counting the round trips its backend reports.
pub(crate) async fn counted<F: Future>(call: F) -> (F::Output, u32) {
    let n = Arc::new(AtomicU32::new(0));
    let out = ROUND_TRIPS.scope(n.clone(), call).await;
    (out, n.load(Ordering::Relaxed))
}
