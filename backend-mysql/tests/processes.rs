//! The MySQL backend between real processes: this test binary runs itself as the other
//! processes (the test `child`, which does nothing unless
//! `locksmith_core::conformance::process::child_task` says what to do).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::process::{child_task, say, ChildProcess};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;
use sqlx::{Connection, Row};

use common::MyHarness;

/// The tests of this file one at a time: the crowd test counts the server's connections.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a child does ([`child_task`]): `hold <url> <name>` (hold until killed; say when it was
/// told the lock was lost), `wait <url> <name>` (wait for the lock, say when held, then as
/// `hold`).
#[test]
fn child() {
    let Some(args) = child_task() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let locker = connect(&args[1]).await;
        match args[0].as_str() {
            "hold" | "wait" => {
                let guard = locker.lock(&args[2]).acquire().await.unwrap();
                say(format!("held {}", guard.fencing_token()));
                let reason = guard.lost().await;
                say(format!("lost {reason}"));
                std::future::pending::<()>().await;
            }
            other => panic!("unknown child task {other}"),
        }
    });
}

async fn connect(url: &str) -> Locker {
    locksmith_mysql::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A holder stopped with SIGSTOP keeps its TCP connections open, and the server sees nothing
/// wrong with them: its lease still runs out after its TTL by the server's clock, and the next
/// waiter gets the lock with a greater token. Once the holder runs again, it is told it lost
/// the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_loses_the_lock_after_its_ttl() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = MyHarness::plain().await;
    let url = harness.url_with("ttl=1s");
    let name = unique_name("paused");
    let mut holder = ChildProcess::spawn(&format!("hold {url} {name}"));
    let first: u64 = holder.says(secs(30)).await["held ".len()..].parse().unwrap();

    holder.pause();
    let me = connect(&url).await;
    let started = tokio::time::Instant::now();
    let guard = within(secs(10), "the lock of a paused holder", me.lock(&name).acquire())
        .await
        .expect("the waiter got the lock of the paused holder");
    assert!(guard.fencing_token() > first);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "granted at once ({took:?}): the holder was not holding"
    );

    holder.resume();
    let told = holder.says(secs(10)).await;
    assert!(told.starts_with("lost"), "{told}");
    guard.release().await.unwrap();
    holder.kill().await;
    me.shutdown().await.unwrap();
}

/// The holder and the first waiter die together: the live waiter behind them gets the lock
/// (the lockers' heartbeat sweeps find the dead waiter's entry once its heartbeat ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_waiter_does_not_hold_up_the_queue() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = MyHarness::plain().await;
    let url = harness.url_with("ttl=1s");
    let name = unique_name("dead-first");
    let observer = connect(&url).await;

    let mut holder = ChildProcess::spawn(&format!("hold {url} {name}"));
    let first: u64 = holder.says(secs(30)).await["held ".len()..].parse().unwrap();
    let mut waiter = ChildProcess::spawn(&format!("wait {url} {name}"));
    locksmith_core::conformance::until_waiters(&observer, &name, 1, secs(30)).await;
    let me = connect(&url).await;
    let mine = tokio::spawn({
        let (me, name) = (me.clone(), name.clone());
        async move { me.lock(&name).acquire().await }
    });
    locksmith_core::conformance::until_waiters(&observer, &name, 2, secs(30)).await;

    holder.kill().await;
    waiter.kill().await;
    let guard = within(secs(20), "the live waiter behind a dead one", mine)
        .await
        .unwrap()
        .expect("the live waiter behind a dead one got the lock");
    assert!(guard.fencing_token() > first);
    guard.release().await.unwrap();
    me.shutdown().await.unwrap();
    observer.shutdown().await.unwrap();
}

/// How many connections the server has to `database`.
async fn connections(admin: &mut sqlx::MySqlConnection, database: &str) -> i64 {
    let row = sqlx::query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ?")
        .bind(database)
        .fetch_one(&mut *admin)
        .await
        .unwrap();
    row.get::<i64, _>(0)
}

/// One locker with 1,000 waiters on one lock keeps two connections (its steps' and its wait
/// connection), and every waiter is served in turn, each with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_on_one_locker_use_two_connections() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const WAITERS: usize = 1000;
    let harness = MyHarness::plain().await;
    let url = harness.url_with("ttl=30s");
    let name = unique_name("crowd");
    let locker = connect(&url).await;
    let mut admin = sqlx::MySqlConnection::connect(&common::server_url()).await.unwrap();
    // The harness's own backend keeps two, and the locker two: its wait connection is opened by
    // a task of its own, which may not have run yet (under load it had not, one run in many).
    let deadline = tokio::time::Instant::now() + secs(10);
    let mut before = connections(&mut admin, &harness.database).await;
    while before < 4 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        before = connections(&mut admin, &harness.database).await;
    }

    let held = locker.lock(&name).acquire().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WAITERS {
        let (locker, name) = (locker.clone(), name.clone());
        tasks.spawn(async move {
            let guard = locker.lock(&name).timeout(secs(300)).acquire().await.unwrap();
            let token = guard.fencing_token();
            guard.release().await.unwrap();
            token
        });
    }
    locksmith_core::conformance::until_waiters(&locker, &name, WAITERS, secs(120)).await;
    let during = connections(&mut admin, &harness.database).await;
    assert!(
        during <= before,
        "{during} connections to the database with {WAITERS} waiters queued, {before} before"
    );
    let first = held.fencing_token();
    held.release().await.unwrap();
    let mut tokens = Vec::new();
    while let Some(done) = tasks.join_next().await {
        tokens.push(done.unwrap());
    }
    assert_eq!(tokens.len(), WAITERS);
    assert!(tokens.iter().all(|t| *t > first));
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), WAITERS, "every grant has a token of its own");
    locker.shutdown().await.unwrap();
}
