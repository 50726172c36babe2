//! Waiters are woken by the server, never by a poll: with a heartbeat of 30 s (the wait
//! connection's `SLEEP` then lasts that long), a hand-over still takes milliseconds, since the
//! releaser's `KILL QUERY` ends the waiting locker's `SLEEP` at once.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

/// The server's counter `name` (`SHOW GLOBAL STATUS`).
async fn global_status(admin: &mut sqlx::MySqlConnection, name: &str) -> u64 {
    use sqlx::Row;
    let row = sqlx::query(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .fetch_one(admin)
        .await
        .unwrap();
    row.get::<String, _>(1).parse().unwrap()
}

/// `rounds` hand-overs of `name` between lockers `a` and `b`, starting from `held` (taken by
/// `a`): each time the other locker waits, then the holder releases and the waiter must hold
/// within 2 s, with a greater token and a live lease. Answers the last guard.
async fn hand_overs(
    a: &Locker,
    b: &Locker,
    name: &str,
    mut held: locksmith_core::LockGuard,
    rounds: u64,
) -> locksmith_core::LockGuard {
    let mut last = held.fencing_token();
    for round in 0..rounds {
        let next = if round % 2 == 0 { b.clone() } else { a.clone() };
        let waiter = tokio::spawn({
            let name = name.to_owned();
            async move { next.lock(&name).acquire().await.unwrap() }
        });
        until_waiters(a, name, 1, Duration::from_secs(5)).await;
        held.release().await.unwrap();
        held = within(Duration::from_secs(2), "the woken waiter's grant", waiter)
            .await
            .unwrap();
        assert!(held.fencing_token() > last, "tokens grow");
        assert_eq!(held.lost_reason(), None, "a granted lease is live");
        last = held.fencing_token();
    }
    held
}

/// Twenty hand-overs between two lockers, each waiting for the other's release, well within one
/// heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiters_long_before_the_heartbeat() {
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("woken");
    within(Duration::from_secs(20), "twenty hand-overs", async {
        let held = a.lock(&name).acquire().await.unwrap();
        hand_overs(&a, &b, &name, held, 20).await.release().await.unwrap();
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// An observer of an election sees the leader resign and the next candidate lead at once, not
/// at its next heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_are_woken_by_a_resignation() {
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let (a, b, watcher) = (connect(&url).await, connect(&url).await, connect(&url).await);
    let name = unique_name("observed");
    let first = a.election(&name).campaign("a").acquire().await.unwrap();
    let mut watch = watcher.election(&name).observe().await.unwrap();
    assert_eq!(watch.leader().map(|l| l.value), Some("a".to_owned()));
    let second = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.election(&name).campaign("b").acquire().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.resign().await.unwrap();
    within(Duration::from_secs(3), "the observer to see b lead", async {
        loop {
            if watch.leader().is_some_and(|l| l.value == "b") {
                break;
            }
            watch.changed().await.unwrap();
        }
    })
    .await;
    second.await.unwrap().resign().await.unwrap();
    drop(watch);
    for locker in [a, b, watcher] {
        locker.shutdown().await.unwrap();
    }
}

/// Eight lockers churn a 4-permit semaphore (lockbench's `semaphore` workload): releases wake
/// waiters of other lockers all the time, several at once. No `KILL QUERY` of a wait may stall:
/// the server is watched for one that runs over half a second. With the wait connections in
/// `SLEEP`, MariaDB's `KILL QUERY`s stalled each other and their victims for 2 s (a `trylock` loop
/// on the mutex every `SLEEP` shares): 8 grants per second, and releases past their 5 s deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_of_many_lockers_at_once_never_stall() {
    use sqlx::{Connection, Row};
    let harness = common::MyHarness::plain().await;
    let mut lockers = Vec::new();
    for _ in 0..8 {
        lockers.push(connect(&harness.url).await);
    }
    let name = unique_name("many_wakes");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut watcher = sqlx::MySqlConnection::connect(&common::server_url()).await.unwrap();
    let watch = tokio::spawn({
        let stop = stop.clone();
        async move {
            let (mut slowest, mut kills_seen) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let rows = sqlx::query(
                    "SELECT CAST(TIME_MS AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'KILL QUERY %'",
                )
                .fetch_all(&mut watcher)
                .await
                .unwrap();
                kills_seen += rows.len() as u64;
                for row in rows {
                    slowest = slowest.max(row.get::<u64, _>(0));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (slowest, kills_seen)
        }
    });
    let churn_until = tokio::time::Instant::now() + Duration::from_secs(3);
    let tasks: Vec<_> = lockers
        .iter()
        .map(|locker| {
            let (locker, name) = (locker.clone(), name.clone());
            tokio::spawn(async move {
                let mut rounds = 0u64;
                while tokio::time::Instant::now() < churn_until {
                    let permit = locker.semaphore(&name, 4).acquire().await.expect("acquire a permit");
                    tokio::task::yield_now().await;
                    permit.release().await.expect("release a permit");
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let rounds = within(Duration::from_secs(60), "the churning lockers", async {
        let mut rounds = 0;
        for t in tasks {
            rounds += t.await.unwrap();
        }
        rounds
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (slowest_kill_ms, kills_seen) = watch.await.unwrap();
    eprintln!("{rounds} rounds; {kills_seen} KILL QUERYs seen running, the slowest for {slowest_kill_ms} ms");
    assert!(
        slowest_kill_ms < 500,
        "a KILL QUERY ran for {slowest_kill_ms} ms: wake-ups stalled ({rounds} rounds in 3 s)"
    );
    for locker in lockers {
        locker.shutdown().await.unwrap();
    }
}

/// The wait connection waits on a name its locker's steps' connection holds. With that connection
/// gone (killed here), the wait takes the name, gives it back and sleeps instead: a release still
/// wakes it well within the heartbeat (30 s), and the next steps' connection holds the name again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_steps_connection_died_is_still_woken() {
    use sqlx::{Connection, Row};
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("steps_gone");
    let held = a.lock(&name).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await.unwrap() }
    });
    until_waiters(&a, &name, 1, Duration::from_secs(5)).await;
    // Each locker's name, and which connection holds it: kill b's steps' connection (the owner
    // of the waiting entry).
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let holders =
        "SELECT CAST(IS_USED_LOCK(CONCAT('locksmith-wait-', LPAD(LOWER(HEX(o.id)), 16, '0'))) AS UNSIGNED), o.conn_id, o.id \
                   FROM locksmith_owners o JOIN locksmith_entries e ON e.owner = o.id WHERE e.held = 0";
    let row = sqlx::query(holders).fetch_one(&mut admin).await.unwrap();
    let (steps, wait, owner): (Option<u64>, u64, u64) = (row.get(0), row.get(1), row.get(2));
    let steps = steps.expect("the waiting locker's steps' connection holds its wait name");
    assert_ne!(steps, wait, "the wait connection holds its own name");
    sqlx::Executor::execute(&mut admin, format!("KILL CONNECTION {steps}").as_str())
        .await
        .unwrap();
    // The wait takes the free name, gives it back and sleeps.
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let got = within(
        Duration::from_secs(5),
        "the grant after the steps' connection died",
        waiter,
    )
    .await
    .unwrap();
    // The grant came with the mailbox row; the release is b's next step, on a new steps'
    // connection, which takes the name again.
    got.release().await.unwrap();
    let row = sqlx::query(
        "SELECT CAST(IS_USED_LOCK(CONCAT('locksmith-wait-', LPAD(LOWER(HEX(id)), 16, '0'))) AS UNSIGNED), conn_id \
         FROM locksmith_owners WHERE id = ?",
    )
    .bind(owner)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    let (steps_again, wait_again): (Option<u64>, u64) = (row.get(0), row.get(1));
    let steps_again = steps_again.expect("the new steps' connection holds the wait name");
    assert_ne!(steps_again, steps, "the name is held by the connection that was killed");
    assert_ne!(steps_again, wait_again, "the wait connection kept the name");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A writer's release lets eight readers (of eight lockers) in: it writes their eight mailbox rows,
/// and a reader that takes its grant wakes nobody else (their turn came with the release, not with
/// its grant). Each reader's step used to wake every reader not yet granted again: 8 + 7 + … + 1
/// mailbox rows for one hand-over, and the `KILL QUERY`s with them. Counted with the server's
/// `Com_insert` (this package's tests run one at a time; nothing else inserts meanwhile). The
/// release grants the eight readers in its own transaction, and each holds on the grant its
/// locker's mailbox read brings: two transactions in all here (`Com_begin`, which counts the
/// procedures' too), where each reader took its grant with a step of its own (eighteen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_let_in_together_are_woken_once_each() {
    use sqlx::Connection;
    const READERS: usize = 8;
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let writer = connect(&url).await;
    let name = unique_name("readers_once");
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(connect(&url).await);
    }
    let held = writer.rwlock(&name).write().acquire().await.unwrap();
    let waits: Vec<_> = readers
        .iter()
        .map(|r| {
            let (r, name) = (r.clone(), name.clone());
            tokio::spawn(async move { r.rwlock(&name).read().acquire().await.unwrap() })
        })
        .collect();
    let key = locksmith_core::driver::LockName::new(&name).unwrap();
    within(Duration::from_secs(10), "the readers to queue", async {
        while harness
            .look
            .entries(locksmith_core::Family::RwLock, &key)
            .await
            .unwrap()
            .len()
            < READERS + 1
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let before = global_status(&mut admin, "Com_insert").await;
    let begun = global_status(&mut admin, "Com_begin").await;
    held.release().await.unwrap();
    let mut guards = Vec::new();
    for w in waits {
        guards.push(within(Duration::from_secs(10), "a reader's grant", w).await.unwrap());
    }
    let written = global_status(&mut admin, "Com_insert").await - before;
    let steps = global_status(&mut admin, "Com_begin").await - begun;
    eprintln!("{steps} transactions to let {READERS} readers in");
    assert!(
        steps <= 2,
        "{steps} transactions to let {READERS} readers in: the writer's release grants them all, \
         and none needs a step of its own"
    );
    eprintln!("{written} rows inserted to let {READERS} readers in");
    assert!(
        written < 2 * READERS as u64,
        "{written} rows inserted to let {READERS} readers in (their mailbox rows, one each, and the \
         odd wait connection registering again)"
    );
    for g in guards {
        g.release().await.unwrap();
    }
    writer.shutdown().await.unwrap();
    for r in readers {
        r.shutdown().await.unwrap();
    }
}

/// A wake-up reads no process list: the waker knows the waiting locker's wait connection by its
/// mark (a named lock it holds, `layout::mark_prefix`), where it read
/// `information_schema.PROCESSLIST` before each `KILL QUERY` (0.5–2 ms of the server's time, most
/// of a hand-over). Ten hand-overs between two lockers, by the one-call release and by the full
/// step (`procedures=off`), counted with the server's `Created_tmp_tables`: every read of an
/// `information_schema` table makes one (so does each `SHOW GLOBAL STATUS`), the lockers'
/// statements none. This package's tests run one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_read_no_process_list() {
    use sqlx::Connection;
    const HAND_OVERS: u64 = 10;
    let harness = common::MyHarness::plain().await;
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    for options in ["heartbeat=30s&ttl=30s", "heartbeat=30s&ttl=30s&procedures=off"] {
        let url = harness.url_with(options);
        let (a, b) = (connect(&url).await, connect(&url).await);
        let name = unique_name("no_process_list");
        let held = a.lock(&name).acquire().await.unwrap();
        // The wait connections' first beat and sweep are behind them (a heartbeat of 30 s).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = global_status(&mut admin, "Created_tmp_tables").await;
        let held = hand_overs(&a, &b, &name, held, HAND_OVERS).await;
        // The two `SHOW GLOBAL STATUS`, and `until_waiters`'s reads of the queue (none of
        // `information_schema`).
        let made = global_status(&mut admin, "Created_tmp_tables").await - before;
        eprintln!("{options}: {made} temporary tables in {HAND_OVERS} hand-overs");
        assert!(
            made < HAND_OVERS / 2,
            "{options}: {made} temporary tables made in {HAND_OVERS} hand-overs: the wakers read the process list"
        );
        held.release().await.unwrap();
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}

/// A release by the one-call procedure grants the first waiter in its own transaction, and the
/// waiter's locker reads the grant with the mailbox row: the waiter holds without a `CALL` of its
/// own. Ten hand-overs between two lockers are two `CALL`s each (the waiter's join, the holder's
/// release), counted with the server's `Com_call_procedure`; three before (the woken waiter took
/// its grant with one more). The tokens still grow, and each holder's lease is live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_granted_by_a_release_holds_without_a_call_of_its_own() {
    use sqlx::Connection;
    const HAND_OVERS: u64 = 10;
    let harness = common::MyHarness::plain().await;
    let url = harness.url_with("heartbeat=30s&ttl=30s");
    let (a, b) = (connect(&url).await, connect(&url).await);
    let name = unique_name("granted");
    let mut admin = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let held = a.lock(&name).acquire().await.unwrap();
    let before = global_status(&mut admin, "Com_call_procedure").await;
    let held = hand_overs(&a, &b, &name, held, HAND_OVERS).await;
    let made = global_status(&mut admin, "Com_call_procedure").await - before;
    eprintln!("{made} calls in {HAND_OVERS} hand-overs");
    assert!(
        made <= 2 * HAND_OVERS + 2,
        "{made} procedure calls in {HAND_OVERS} hand-overs: the woken waiters called to take their grants"
    );
    // The server's holder is the last waiter, with its token and a fresh lease.
    let holder = a.inspect(&name).await.unwrap().holder.expect("a holder");
    assert_eq!(holder.holder_id, held.lease().holder_id);
    assert_eq!(holder.fencing_token, Some(held.fencing_token()));
    assert!(holder.ttl_remaining.is_some_and(|left| left > Duration::from_secs(20)));
    held.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
