//! `examples/fencing.rs`: a holder paused past its TTL loses the lock to a newer holder, and its
//! late write is rejected by the storage's fencing-token check — on every backend compiled in.

mod examples_support;
#[allow(dead_code)]
#[path = "../examples/fencing.rs"]
mod fencing;

use std::time::Duration;

use fencing::{paused_holder, StaleToken, Storage};

#[test]
fn storage_rejects_only_older_tokens() {
    let storage = Storage::default();
    assert_eq!(storage.write(5, "a"), Ok(()));
    assert_eq!(storage.write(5, "same holder again"), Ok(()));
    assert_eq!(storage.write(4, "stale"), Err(StaleToken { token: 4, highest: 5 }));
    assert_eq!(storage.write(9, "newer"), Ok(()));
    assert_eq!(storage.accepted().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_rejected() {
    for (backend, url) in examples_support::backend_urls() {
        let name = examples_support::unique("fencing");
        let report = tokio::time::timeout(
            Duration::from_secs(120),
            paused_holder(&url, &name, Duration::from_secs(1)),
        )
        .await
        .unwrap_or_else(|_| panic!("{backend}: the scenario did not finish"))
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert!(report.next_token > report.paused_token, "{backend}: {report:?}");
        assert_eq!(
            report.late_write,
            Err(StaleToken {
                token: report.paused_token,
                highest: report.next_token
            }),
            "{backend}"
        );
        let tokens: Vec<u64> = report.accepted.iter().map(|(t, _)| *t).collect();
        assert_eq!(
            tokens,
            [report.paused_token, report.next_token],
            "{backend}: only A's first and B's writes count"
        );
    }
}
