//! The metrics of `locksmith_core::metrics`, seen through a recording recorder: every acquire, hold,
//! release, loss and renewal is counted with its labels, and lock names are a label only when the
//! locker asks for one.

use std::time::Duration;

use locksmith_core::driver::LockName;
use locksmith_core::{Locker, MemoryBackend};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// `(kind, name, labels sorted as "k=v")` → value.
fn snapshot(s: &Snapshotter) -> Vec<(MetricKind, String, Vec<String>, DebugValue)> {
    s.snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            labels.sort();
            (kind, key.name().to_owned(), labels, value)
        })
        .collect()
}

fn counter(all: &[(MetricKind, String, Vec<String>, DebugValue)], name: &str, labels: &[&str]) -> u64 {
    all.iter()
        .filter(|(_, n, l, _)| n == name && labels.iter().all(|want| l.iter().any(|have| have == want)))
        .map(|(_, _, _, v)| match v {
            DebugValue::Counter(c) => *c,
            _ => 0,
        })
        .sum()
}

fn histogram_count(all: &[(MetricKind, String, Vec<String>, DebugValue)], name: &str) -> usize {
    all.iter()
        .filter(|(_, n, _, _)| n == name)
        .map(|(_, _, _, v)| match v {
            DebugValue::Histogram(h) => h.len(),
            _ => 0,
        })
        .sum()
}

#[test]
fn every_step_of_a_lock_is_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = MemoryBackend::new();
            let a = Locker::new(store.clone());
            let b = Locker::new(store.clone()).with_name_label(|name| name.split('/').next().map(str::to_owned));
            let held = a
                .lock("orders/1")
                .ttl(Duration::from_millis(300))
                .acquire()
                .await
                .unwrap();
            assert!(b.lock("orders/1").try_acquire().await.unwrap().is_none());
            let waiter = tokio::spawn({
                let b = b.clone();
                async move { b.lock("orders/1").acquire().await }
            });
            tokio::time::sleep(Duration::from_millis(400)).await; // a renewal or two
            held.release().await.unwrap();
            let second = waiter.await.unwrap().unwrap();
            assert!(store.force_remove(&LockName::new("orders/1").unwrap()));
            tokio::time::timeout(Duration::from_secs(5), second.lost())
                .await
                .unwrap();
            assert!(second.release().await.is_err());
            let permit = a.semaphore("quota", 2).try_acquire().await.unwrap().unwrap();
            drop(permit);
            tokio::time::sleep(Duration::from_millis(50)).await; // the release on drop
        });
    });
    let all = snapshot(&snapshotter);
    let acquires = "locksmith_acquires_total";
    assert_eq!(
        counter(&all, acquires, &["outcome=acquired", "kind=mutex"]),
        2,
        "{all:#?}"
    );
    assert_eq!(counter(&all, acquires, &["outcome=busy", "name=orders"]), 1);
    assert_eq!(counter(&all, acquires, &["outcome=acquired", "kind=semaphore"]), 1);
    assert_eq!(
        counter(&all, "locksmith_handovers_total", &["backend=mem", "name=orders"]),
        1
    );
    assert_eq!(
        counter(&all, "locksmith_lost_total", &["reason=lease_gone", "name=orders"]),
        1
    );
    assert_eq!(counter(&all, "locksmith_releases_total", &["outcome=released"]), 2);
    assert_eq!(counter(&all, "locksmith_releases_total", &["outcome=not_held"]), 1);
    assert!(counter(&all, "locksmith_renewals_total", &["outcome=renewed", "backend=mem"]) >= 1);
    assert_eq!(histogram_count(&all, "locksmith_hold_seconds"), 3);
    assert_eq!(histogram_count(&all, "locksmith_acquire_wait_seconds"), 3);
    // Without a name label function, no name label.
    assert!(all
        .iter()
        .filter(|(_, n, l, _)| n == acquires && l.contains(&"kind=semaphore".to_owned()))
        .all(|(_, _, l, _)| !l.iter().any(|l| l.starts_with("name="))));
    let held = all.iter().find(|(_, n, l, _)| {
        n == "locksmith_held" && l.contains(&"kind=mutex".to_owned()) && !l.iter().any(|l| l.starts_with("name="))
    });
    assert!(
        matches!(held, Some((_, _, _, DebugValue::Gauge(g))) if g.into_inner() == 0.0),
        "{held:?}"
    );
}
