//! The `round_trips` field of the `acquire`, `try_acquire` and `release` spans: what each backend
//! reports it sent to its server for one call (none in process).

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Every `round_trips` recorded, with the name of its span.
#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<(String, u64)>>>);

impl Recorded {
    fn take(&self) -> Vec<(String, u64)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct RoundTrips(Option<u64>);

impl Visit for RoundTrips {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "round_trips" {
            self.0 = Some(value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorded {
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut seen = RoundTrips(None);
        values.record(&mut seen);
        if let (Some(n), Some(span)) = (seen.0, ctx.span(id)) {
            self.0.lock().unwrap().push((span.name().to_owned(), n));
        }
    }
}

/// The round trips of a second uncontended `try_acquire` and `release` of one name (the first
/// may create parents), of a `try_acquire` that finds the lock held, and of an uncontended
/// `acquire` and its `release`.
async fn measure(url: &str) -> Vec<(String, u64)> {
    let recorded = Recorded::default();
    let subscriber = tracing_subscriber::registry().with(recorded.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let (a, b) = (
        locksmith::connect(url).await.expect("connect"),
        locksmith::connect(url).await.expect("connect"),
    );
    let name = format!("round-trips/{:016x}", rand_suffix());
    let first = a.lock(&name).try_acquire().await.expect("try").expect("free");
    first.release().await.expect("release");
    recorded.take();
    let guard = a.lock(&name).try_acquire().await.expect("try").expect("free");
    let busy = b.lock(&name).try_acquire().await.expect("try");
    assert!(busy.is_none(), "{url}: the lock is held");
    guard.release().await.expect("release");
    let waited = a.lock(&name).acquire().await.expect("acquire");
    waited.release().await.expect("release");
    recorded.take()
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

fn check(url: &str, seen: &[(String, u64)], most: u64) {
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["try_acquire", "try_acquire", "release", "acquire", "release"],
        "{url}: {seen:?}"
    );
    for (span, n) in seen {
        if url.starts_with("mem:") {
            assert_eq!(*n, 0, "{url}: {span} sends nothing");
        } else {
            assert!((1..=most).contains(n), "{url}: {span} took {n} round trips: {seen:?}");
        }
    }
    println!("{url}: {seen:?}");
}

#[tokio::test]
async fn the_in_process_backend_sends_nothing() {
    let seen = measure("mem://").await;
    check("mem://", &seen, 0);
}

#[cfg(all(feature = "etcd", feature = "zk", feature = "redis"))]
#[tokio::test]
async fn every_server_backend_counts_its_requests() {
    use locksmith_core::conformance::env_url;
    for var in ["LOCKSMITH_TEST_ETCD", "LOCKSMITH_TEST_ZK", "LOCKSMITH_TEST_REDIS"] {
        let url = env_url(var);
        let seen = measure(&url).await;
        // One request each in the common case; a retried or pipelined step may add one.
        check(&url, &seen, 2);
    }
}

/// PostgreSQL: an uncontended try, acquire or release of a mutex is one statement (an update of
/// the lock's row, its own transaction): one round trip. A try that finds the lock taken is one
/// too (the statement answers that a holder is there). Otherwise a step is a transaction of
/// several statements (`BEGIN`, lock the row, prune, read the queue, the step's own, `NOTIFY`,
/// `COMMIT`). The first use of a statement on a connection prepares it: one more (the busy try,
/// on the second locker's connection; the acquire, whose statement is not the try's).
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_counts_its_requests() {
    let url = locksmith_core::conformance::env_url("LOCKSMITH_TEST_POSTGRES");
    let url = format!("{url}?schema=round_trips");
    let seen = measure(&url).await;
    check(&url, &seen, 2);
    let total: u64 = seen.iter().map(|(_, n)| n).sum();
    assert!(total <= 7, "{url}: {seen:?}");
}

/// MySQL: an uncontended try, acquire or release, and a try that finds the lock taken, is one
/// `CALL` of a stored procedure that runs the step's transaction on the server: one round trip
/// each. With `procedures=off` (or a user without `CREATE ROUTINE`) every step is a transaction
/// of several statements, each its own round trip (`BEGIN`, lock the row, read its id, prune,
/// read the queue, the step's own, take a token, `COMMIT`): 10, 6, 8, 11 and 8 here.
#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_counts_its_requests() {
    let url = locksmith_core::conformance::env_url("LOCKSMITH_TEST_MYSQL");
    let seen = measure(&url).await;
    check(&url, &seen, 1);
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}procedures=off");
    let seen = measure(&url).await;
    check(&url, &seen, 12);
}
