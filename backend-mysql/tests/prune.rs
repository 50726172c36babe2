//! Nothing piles up: `Locker::prune` removes the rows of locks nobody holds, waits for or
//! observes, idle for the given time, never a row in use; a lock used again goes on with tokens
//! above its earlier ones (the high-water mark of pruned tokens, and the clock floor).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith_core::conformance::{unique_name, until_waiters, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;
use sqlx::Connection;

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

/// The rows of `locksmith_locks` of names that start with `prefix`.
async fn lock_rows(url: &str, prefix: &str) -> i64 {
    let prefix = locksmith_core::driver::LockName::new(prefix)
        .unwrap()
        .encoded()
        .to_owned();
    let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
    let n = sqlx::query_scalar("SELECT COUNT(*) FROM locksmith_locks WHERE segment LIKE CONCAT(?, '%')")
        .bind(&prefix)
        .fetch_one(&mut c)
        .await
        .unwrap();
    c.close().await.unwrap();
    n
}

async fn execute(url: &str, statement: &str) {
    let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
    sqlx::Executor::execute(&mut c, statement).await.unwrap();
    c.close().await.unwrap();
}

/// Takes and releases `name`, a mutex for an even `i`, a semaphore for an odd one (the full
/// step's queue, not the procedures'); its token.
async fn use_once(locker: &Locker, name: &str, i: usize) -> u64 {
    let guard = if i.is_multiple_of(2) {
        locker.lock(name).acquire().await.unwrap()
    } else {
        locker.semaphore(name, 2).acquire().await.unwrap()
    };
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    token
}

/// 40 names used once (mutexes and semaphores): a dry run counts their rows and removes none, a
/// prune of an hour's idleness leaves them, one of none removes them all; each name used again
/// hands out a token above its earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_removes_the_rows_of_names_used_once_and_tokens_go_on() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await;
    let prefix = unique_name("pruned");
    let mut tokens = HashMap::new();
    for i in 0..40 {
        let name = format!("{prefix}-{i}");
        let token = use_once(&locker, &name, i).await;
        tokens.insert(name, token);
    }
    assert_eq!(lock_rows(&harness.url, &prefix).await, 40);
    let dry = locker.prune(Duration::ZERO, true).await.unwrap();
    assert!(dry.dry_run && dry.locks >= 40, "{dry:?}");
    assert_eq!(lock_rows(&harness.url, &prefix).await, 40, "a dry run removed rows");
    let hour = locker.prune(Duration::from_secs(3600), false).await.unwrap();
    assert_eq!(
        hour.locks, 0,
        "rows used a moment ago went with an hour's idleness: {hour:?}"
    );
    let pruned = locker.prune(Duration::ZERO, false).await.unwrap();
    assert!(!pruned.dry_run && pruned.locks >= 40, "{pruned:?}");
    assert_eq!(lock_rows(&harness.url, &prefix).await, 0, "rows left after the prune");
    for i in 0..40 {
        let name = format!("{prefix}-{i}");
        assert!(
            use_once(&locker, &name, i).await > tokens[&name],
            "{name}: the token went back"
        );
    }
    locker.shutdown().await.unwrap();
}

/// A name pruned and used again starts above the high-water mark of pruned tokens, not merely
/// above the server's clock: here a lock handed out tokens far ahead of the clock (as after the
/// server's clock was set back), and its row was pruned once the clock passed them... which the
/// test stands in for by raising the mark itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_pruned_starts_above_the_mark_not_the_clock() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await;
    let name = unique_name("marked");
    let first = locker.lock(&name).acquire().await.unwrap();
    let ahead: u64 = first.fencing_token() + 1_000_000_000_000;
    first.release().await.unwrap();
    locker.prune(Duration::ZERO, false).await.unwrap();
    execute(
        &harness.url,
        &format!("UPDATE locksmith_locks SET token = {ahead} WHERE segment = '~pruned'"),
    )
    .await;
    let again = locker.lock(&name).acquire().await.unwrap();
    assert!(
        again.fencing_token() > ahead,
        "token {} is not above the mark {ahead}",
        again.fencing_token()
    );
    again.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A held lock, a lock with a waiter and an observed election keep their rows through a prune of
/// no idleness, and go on: the holder releases, the waiter takes the lock with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_never_touches_a_lock_in_use() {
    let harness = common::MyHarness::plain().await;
    let (a, b) = (connect(&harness.url).await, connect(&harness.url).await);
    let prefix = unique_name("in-use");
    let (held, waited, observed) = (
        format!("{prefix}-held"),
        format!("{prefix}-waited"),
        format!("{prefix}-observed"),
    );
    let holding = a.lock(&held).acquire().await.unwrap();
    let first = a.lock(&waited).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let (b, waited) = (b.clone(), waited.clone());
        async move { b.lock(&waited).acquire().await.unwrap() }
    });
    until_waiters(&a, &waited, 1, Duration::from_secs(10)).await;
    let watch = b.election(&observed).observe().await.unwrap();
    let pruned = a.prune(Duration::ZERO, false).await.unwrap();
    assert_eq!(
        lock_rows(&harness.url, &prefix).await,
        3,
        "a row in use went ({pruned:?})"
    );
    assert!(holding.is_held());
    holding.release().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    let next = within(Duration::from_secs(10), "the waiter's grant", waiter)
        .await
        .unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
    drop(watch);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Prunes of no idleness in a loop beside two lockers taking turns on three names: never two
/// holders at once, every name's tokens grow, and no step fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prunes_in_a_loop_beside_lockers_lose_nothing() {
    let harness = common::MyHarness::plain().await;
    let (a, b, pruner) = (
        connect(&harness.url).await,
        connect(&harness.url).await,
        connect(&harness.url).await,
    );
    let prefix = unique_name("busy");
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let holders: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let last: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let mut workers = Vec::new();
    for locker in [a.clone(), b.clone()] {
        let (stop, holders, last, names) = (stop.clone(), holders.clone(), last.clone(), names.clone());
        workers.push(tokio::spawn(async move {
            let mut turns = 0;
            while !stop.load(Ordering::Relaxed) {
                for (i, name) in names.iter().enumerate() {
                    let guard = locker.lock(name).acquire().await.unwrap();
                    assert_eq!(holders[i].fetch_add(1, Ordering::SeqCst), 0, "{name}: two holders");
                    {
                        let mut last = last.lock().unwrap();
                        let before = last.insert(name.clone(), guard.fencing_token()).unwrap_or(0);
                        assert!(
                            guard.fencing_token() > before,
                            "{name}: token {} after {before}",
                            guard.fencing_token()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    holders[i].fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    turns += 1;
                }
            }
            turns
        }));
    }
    let mut removed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < deadline {
        removed += pruner.prune(Duration::ZERO, false).await.unwrap().locks;
    }
    stop.store(true, Ordering::Relaxed);
    let mut turns = 0;
    for w in workers {
        turns += within(Duration::from_secs(30), "a worker to stop", w).await.unwrap();
    }
    assert!(turns > 6, "the lockers took {turns} turns");
    assert!(
        removed > 0,
        "no prune found an idle row between the turns ({turns} turns)"
    );
    for l in [a, b, pruner] {
        l.shutdown().await.unwrap();
    }
}

/// Every locker prunes by itself now and then (here every 200 ms, no idleness): rows of names
/// used once are gone within seconds, with no prune called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locker_prunes_by_itself() {
    let harness = common::MyHarness::plain().await;
    let backend = locksmith_mysql::MysqlBackend::connect(&BackendUrl::parse(&harness.url).unwrap())
        .await
        .unwrap();
    backend.keep_pruning(Duration::from_millis(200), Duration::ZERO);
    let locker = Locker::new(backend);
    let prefix = unique_name("auto");
    for i in 0..20 {
        let guard = locker.lock(format!("{prefix}-{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lock_rows(&harness.url, &prefix).await > 0 {
        assert!(tokio::time::Instant::now() < deadline, "rows left after 10 s of passes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    locker.shutdown().await.unwrap();
}

/// Bug: a locker's own passes began 5 to 10 minutes after it connected, so the rows of names used
/// only by short-lived processes (every `locksmith run`) stayed until someone ran `locksmith
/// prune`. A locker that connects when the last automatic pass began over ten minutes ago runs
/// the next at once, and records when it began (the row `~pruned-at`) so that the lockers after
/// it do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locker_connecting_when_a_pass_is_due_prunes_at_once() {
    let harness = common::MyHarness::plain().await;
    let locker = connect(&harness.url).await;
    let prefix = unique_name("due");
    for i in 0..3 {
        use_once(&locker, &format!("{prefix}-{i}"), 0).await;
    }
    locker.shutdown().await.unwrap();
    assert_eq!(lock_rows(&harness.url, &prefix).await, 3);
    // Their last tokens handed out two hours ago, and the last automatic pass eleven minutes ago.
    let encoded = locksmith_core::driver::LockName::new(&prefix)
        .unwrap()
        .encoded()
        .to_owned();
    execute(
        &harness.url,
        &format!("UPDATE locksmith_locks SET token = token - 7200000000 WHERE segment LIKE '{encoded}%'"),
    )
    .await;
    execute(
        &harness.url,
        "UPDATE locksmith_locks SET token = GREATEST(token, 660000000) - 660000000 WHERE segment = '~pruned-at'",
    )
    .await;
    let again = connect(&harness.url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lock_rows(&harness.url, &prefix).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "rows idle for two hours left 10 s after a locker connected when a pass was due"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut c = sqlx::MySqlConnection::connect(&harness.url).await.unwrap();
    let recent: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM locksmith_locks WHERE segment = '~pruned-at' \
         AND CAST(token AS SIGNED) > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) - 60000000",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    c.close().await.unwrap();
    assert_eq!(recent, 1, "the pass did not record when it began");
    again.shutdown().await.unwrap();
}
