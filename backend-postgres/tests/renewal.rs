//! Renewals keep up: a locker that holds a lock with a short lease while thousands of its own
//! `try_acquire`s queue for its steps' connection keeps the lock (its renewals and heartbeats have
//! a connection of their own), 10,000 leases renewed in one statement stay held, and renewals
//! rewrite their rows in place (the table does not grow). A test binary of its own: the load must
//! not share the machine with other tests'.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use tokio::time::Instant;

/// Held by each test: one load at a time (a backlog of try_acquires must not wait behind the
/// other test's 10,000 acquires on the same server, or its calls time out).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_a_backlog_of_steps() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = common::PgHarness::plain().await;
    let ttl = Duration::from_millis(600);
    // The backlog's calls wait in a line seconds long (as long as the machine is slow): a request
    // timeout far above it, so that what this test checks is the held lock, not the machine's
    // speed (in one CI run the default 5 s cut two backlog calls off). A renewal's own bound is
    // the lease: the watchdog counts one that outlasts it as lost whatever this timeout.
    let url = format!("{}&ttl={}ms&request_timeout=30s", harness.url, ttl.as_millis());
    let locker = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let held = locker.lock("held").acquire().await.unwrap();

    // A backlog of steps on this locker's one steps' connection: each try_acquire is a step, and
    // the release of what it got another. Kept 3,000 deep for four leases, however fast each step
    // is (3,000 at once outlasted the lease three times until an uncontended cycle became two
    // one-row updates; then they took 1.7 s, under three leases of 0.6 s).
    let start = Instant::now();
    let mut backlog = tokio::task::JoinSet::new();
    let mut spawned = 0;
    while start.elapsed() < ttl * 4 {
        while backlog.len() < 3000 {
            let locker = locker.clone();
            let i = spawned;
            spawned += 1;
            backlog.spawn(async move {
                // A long lease: these releases wait behind the backlog too, and locksmith-core
                // stops renewing a lease once its release has begun.
                let lock = locker.lock(format!("other/{i}")).ttl(Duration::from_secs(60));
                let got = lock.try_acquire().await.unwrap();
                got.expect("nobody else takes these").release().await.unwrap();
            });
        }
        backlog.join_next().await.expect("a step in the backlog").unwrap();
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
    let locker = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
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

/// Renewals rewrite the leases in place (HOT updates on pages with room): the tables do not
/// grow while its leases are renewed, autovacuum or not (the test server runs without it). On
/// full pages every renewal was a new row version and three index entries: 10,000 leases grew
/// the table by 2 MB a second, their renewal slowed with it, and CI's soak lost them all.
/// (Seen failing before `fillfactor = 50`: the table grew about 20-fold in 40 rounds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_do_not_grow_the_table() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const LOCKS: usize = 500;
    let harness = common::PgHarness::plain().await;
    let schema = harness.schema.clone();
    let ttl = Duration::from_millis(600);
    let url = format!("{}&ttl={}ms", harness.url, ttl.as_millis());
    let locker = locksmith_postgres::connect(&BackendUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let mut held = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        held.push(locker.lock(format!("grow/{i}")).acquire().await.unwrap());
    }
    // Holders nobody waited for are kept in their locks' rows: both tables count.
    let size = |schema: String| async move {
        let sql = format!("SELECT pg_relation_size('\"{schema}\".entries') + pg_relation_size('\"{schema}\".locks')");
        common::query_as_owner(&sql).await[0].parse::<u64>().unwrap()
    };
    let renewed = |schema: String| async move {
        let sql = format!(
            "SELECT greatest((SELECT max(expires_at) FROM \"{schema}\".entries), \
             (SELECT max(holder_expires) FROM \"{schema}\".locks))"
        );
        common::query_as_owner(&sql).await[0].clone()
    };
    let before = size(schema.clone()).await;
    let first = renewed(schema.clone()).await;
    // About 40 rounds (a renewal every third of the TTL).
    tokio::time::sleep(ttl * 13).await;
    let after = size(schema.clone()).await;
    assert_ne!(renewed(schema.clone()).await, first, "no renewal happened");
    let lost = held.iter().filter(|g| g.lost_reason().is_some()).count();
    assert_eq!(lost, 0, "leases lost while their locker renewed them");
    assert!(
        after <= before * 3,
        "renewing {LOCKS} leases grew their table from {before} to {after} bytes"
    );
    for guard in held {
        guard.release().await.unwrap();
    }
    locker.shutdown().await.unwrap();
}
