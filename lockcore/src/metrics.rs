//! Metrics, through the [`metrics`](https://docs.rs/metrics) crate's facade: any recorder a
//! program installs (Prometheus, StatsD, OpenTelemetry) receives them; with none installed they
//! cost a few atomic loads. `docs/metrics.md` lists them with their units and labels.
//!
//! Every metric has the labels `backend` (`mem`, `etcd`, `zk`, `redis`, `dual`) and, except the
//! renewal ones, `kind` (`mutex`, `semaphore`, `read`, `write`, `election`). Lock names are
//! unbounded, so they are not a label unless the program asks for one with
//! [`crate::Locker::with_name_label`] (e.g. the part of the name before the first `/`).

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::error::LockError;
use crate::lease::{LockKind, LostReason};

/// Acquire and try_acquire calls, by `outcome`: `acquired`, `busy` (a `try_acquire` that found
/// the lock taken), `timeout`, `unavailable`, `error`.
pub const ACQUIRES: &str = "locksmith_acquires_total";
/// Seconds from the start of an `acquire` (or `try_acquire`) to the grant.
pub const ACQUIRE_WAIT: &str = "locksmith_acquire_wait_seconds";
/// Grants that waited for another holder: their granting request was sent more than 1 ms after
/// the call began (a wake-up, not the first attempt).
pub const HANDOVERS: &str = "locksmith_handovers_total";
/// Guards held right now.
pub const HELD: &str = "locksmith_held";
/// Seconds a guard was held, from the grant to its release, drop or loss.
pub const HOLD: &str = "locksmith_hold_seconds";
/// Releases (by `release()` or a drop), by `outcome`: `released`, `not_held`, `error`.
pub const RELEASES: &str = "locksmith_releases_total";
/// Locks lost while held, by `reason`: `renewal_failed`, `lease_gone`, `max_hold`.
pub const LOST: &str = "locksmith_lost_total";
/// Lease renewals (one per lease in a batch), by `outcome`: `renewed`, `gone`, `failed`.
pub const RENEWALS: &str = "locksmith_renewals_total";
/// Seconds one renewal batch took (one request per server, for every lease of a Locker).
pub const RENEWAL_BATCH: &str = "locksmith_renewal_batch_seconds";

/// Turns a lock name into the value of the `name` label, or `None` for no label.
pub type NameLabel = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The labels of one lock's metrics.
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    backend: &'static str,
    kind: &'static str,
    name: Option<String>,
}

impl Labels {
    pub(crate) fn new(backend: &'static str, kind: &LockKind, name: &str, label: Option<&NameLabel>) -> Self {
        Labels {
            backend,
            kind: kind_label(kind),
            name: label.and_then(|f| f(name)),
        }
    }

    fn with(&self, extra: Option<(&'static str, &'static str)>) -> Vec<(&'static str, String)> {
        let mut labels = vec![("backend", self.backend.to_owned()), ("kind", self.kind.to_owned())];
        if let Some(name) = &self.name {
            labels.push(("name", name.clone()));
        }
        if let Some((k, v)) = extra {
            labels.push((k, v.to_owned()));
        }
        labels
    }

    /// An acquire call ended with `outcome` after `waited`; `handover` if it had to wait.
    pub(crate) fn acquire_ended(&self, outcome: &'static str, waited: Duration, handover: bool) {
        counter!(ACQUIRES, &self.with(Some(("outcome", outcome)))).increment(1);
        if outcome == "acquired" {
            histogram!(ACQUIRE_WAIT, &self.with(None)).record(waited.as_secs_f64());
            gauge!(HELD, &self.with(None)).increment(1.0);
            if handover {
                counter!(HANDOVERS, &self.with(None)).increment(1);
            }
        }
    }

    /// A guard ended (released, dropped, or given up after a loss) after `held`.
    pub(crate) fn guard_ended(&self, held: Duration) {
        gauge!(HELD, &self.with(None)).decrement(1.0);
        histogram!(HOLD, &self.with(None)).record(held.as_secs_f64());
    }

    /// A release answered `result`.
    pub(crate) fn released(&self, result: &Result<(), LockError>) {
        let outcome = match result {
            Ok(()) => "released",
            Err(e) if e.is_not_held() => "not_held",
            Err(_) => "error",
        };
        counter!(RELEASES, &self.with(Some(("outcome", outcome)))).increment(1);
    }

    /// The lock was lost for `reason`.
    pub(crate) fn lost(&self, reason: &LostReason) {
        let reason = match reason {
            LostReason::RenewalFailed(_) => "renewal_failed",
            LostReason::LeaseGone(_) => "lease_gone",
            LostReason::MaxHoldReached => "max_hold",
        };
        counter!(LOST, &self.with(Some(("reason", reason)))).increment(1);
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
/// `try_acquire`, `release`), which lockcore records as the `round_trips` field of the call's
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
