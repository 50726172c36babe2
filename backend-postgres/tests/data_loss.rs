//! Fencing tokens after the server lost commits that handed tokens out: a standby promoted before
//! it received them (`replication=async`), a restore from a backup. Such a server has the lock
//! rows' `token` of an earlier moment; the test moves them back to 0 as it would have them.
//! Every path that grants must still give a token above every earlier one, or a fenced store
//! would take the writes of the new holder and of the one it overtook alike: the uncontended
//! grant in one statement (`grant_alone`), the hand-over in one statement (`leave_exclusive`) and
//! the full step (a semaphore's permits).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

async fn connect(url: &str) -> Locker {
    locksmith_postgres::connect(&BackendUrl::parse(url).unwrap())
        .await
        .expect("connect")
}

/// What a server that lost the grants since its last backup would hold: every token counter back
/// at its start.
async fn lose_the_grants(schema: &str) {
    common::run_as_owner(&format!("UPDATE \"{schema}\".locks SET token = 0")).await;
}

/// Waits until `n` entries (holders and waiters) are in the schema's queues.
async fn entries_reach(schema: &str, n: usize) {
    let count = format!("SELECT count(*) FROM \"{schema}\".entries");
    for _ in 0..200 {
        if common::query_as_owner(&count).await == [n.to_string()] {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the queue never had {n} entries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_above_every_earlier_one_after_the_server_lost_grants() {
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    let (a, b) = (connect(&harness.url).await, connect(&harness.url).await);

    // Uncontended: the grant in one statement.
    let first = a.lock("m").acquire().await.unwrap();
    let earlier = first.fencing_token();
    first.release().await.unwrap();
    lose_the_grants(&schema).await;
    let held = a.lock("m").acquire().await.unwrap();
    assert!(
        held.fencing_token() > earlier,
        "uncontended grant after lost commits: token {} after {earlier}",
        held.fencing_token()
    );

    // A hand-over to a waiter: the release grants it in one statement.
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("m").acquire().await })
    };
    entries_reach(&schema, 2).await;
    lose_the_grants(&schema).await;
    let earlier = held.fencing_token();
    held.release().await.unwrap();
    let handed = waiting.await.unwrap().expect("the waiter is handed the lock");
    assert!(
        handed.fencing_token() > earlier,
        "hand-over after lost commits: token {} after {earlier}",
        handed.fencing_token()
    );
    handed.release().await.unwrap();

    // The full step: a semaphore's permits.
    let permit = a.semaphore("s", 2).acquire().await.unwrap();
    let earlier = permit.fencing_token();
    lose_the_grants(&schema).await;
    let second = b.semaphore("s", 2).acquire().await.unwrap();
    assert!(
        second.fencing_token() > earlier,
        "semaphore grant after lost commits: token {} after {earlier}",
        second.fencing_token()
    );
    permit.release().await.unwrap();
    second.release().await.unwrap();

    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
}
