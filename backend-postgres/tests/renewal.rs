//! Renewals keep up: a locker that holds a lock with a short lease while thousands of its own
//! `try_acquire`s queue for its steps' connection keeps the lock (its renewals and heartbeats have
//! a connection of their own), and 10,000 leases renewed in one statement stay held. A test binary
//! of its own: the load must not share the machine with other tests'.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use lockcore::driver::BackendUrl;
use tokio::time::Instant;

/// Held by each test: one load at a time (a backlog of try_acquires must not wait behind the
/// other test's 10,000 acquires on the same server, or its calls time out).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_a_backlog_of_steps() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = common::PgHarness::plain().await;
    let ttl = Duration::from_millis(600);
    let url = format!("{}&ttl={}ms", harness.url, ttl.as_millis());
    let locker = backend_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let held = locker.lock("held").acquire().await.unwrap();

    // A backlog of steps on this locker's one steps' connection: each try_acquire is a step, and
    // the release of what it got another.
    let start = Instant::now();
    let mut backlog = tokio::task::JoinSet::new();
    for i in 0..3000 {
        let locker = locker.clone();
        backlog.spawn(async move {
            // A long lease: these releases wait behind the backlog too, and lockcore stops
            // renewing a lease once its release has begun.
            let lock = locker.lock(format!("other/{i}")).ttl(Duration::from_secs(60));
            let got = lock.try_acquire().await.unwrap();
            got.expect("nobody else takes these").release().await.unwrap();
        });
    }
    while let Some(done) = backlog.join_next().await {
        done.unwrap();
    }
    let took = start.elapsed();
    assert!(
        took > ttl * 3,
        "the backlog ({took:?}) must outlast the lease several times for this test to mean anything"
    );
    assert_eq!(
        held.lost_reason(),
        None,
        "the lock was lost during a backlog of {took:?}"
    );
    held.release().await.expect("still held after the backlog");
    locker.shutdown().await.unwrap();
}

/// 10,000 leases of one locker, renewed in one statement per tick: none is lost. (The statement
/// is prepared once per connection; matched with `id = ANY($3)`, its generic plan compared every
/// row with every id and took over a second for 10,000: most leases were lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_leases_stay_held() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const LOCKS: usize = 10_000;
    let harness = common::PgHarness::plain().await;
    let ttl = Duration::from_secs(2);
    let url = format!("{}&ttl=2s", harness.url);
    let locker = backend_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let mut taking = tokio::task::JoinSet::new();
    for i in 0..LOCKS {
        let locker = locker.clone();
        taking.spawn(async move { locker.lock(format!("soak/{i}")).acquire().await.unwrap() });
    }
    let mut held = Vec::with_capacity(LOCKS);
    while let Some(guard) = taking.join_next().await {
        held.push(guard.unwrap());
    }
    tokio::time::sleep(ttl * 3).await;
    let lost = held.iter().filter(|g| g.lost_reason().is_some()).count();
    let reason = held.iter().find_map(|g| g.lost_reason());
    assert_eq!(
        lost, 0,
        "{lost} of {LOCKS} leases lost while their locker renewed them: {reason:?}"
    );
    // Not `shutdown`: releasing 10,000 locks one transaction each takes longer than its budget;
    // the schema is this test's own.
}
