//! The PostgreSQL backend between real processes: this test binary runs itself as the other
//! processes (the test `child`, which does nothing unless `locksmith_core::conformance::process::child_task` says what to do).

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::time::Duration;

use locksmith_core::conformance::process::{child_task, say, ChildProcess};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

use common::PgHarness;

/// The tests of this file one at a time: a_thousand_waiters_in_ten_processes counts the server's
/// locksmith connections, which the others' would add to (it once counted 31 for a bound of 30).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a child does ([`child_task`]): `hold <url> <name>` (hold until killed; say
/// when it was told the lock was lost), `wait <url> <name>` (wait for the lock, say when held,
/// then as `hold`), `waiters <url>
/// <name> <n>` (`n` waiters on one locker, each takes the lock and releases it at once; say how
/// many were served and shut down), `campaign <url> <name> <ttl ms>` (campaign in election
/// `name`, say when leading, lead until killed).
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
            "waiters" => {
                let n: usize = args[3].parse().unwrap();
                let mut tasks = tokio::task::JoinSet::new();
                for _ in 0..n {
                    let (locker, name) = (locker.clone(), args[2].clone());
                    tasks.spawn(async move {
                        let guard = locker
                            .lock(&name)
                            .timeout(Duration::from_secs(300))
                            .acquire()
                            .await
                            .unwrap();
                        guard.release().await.unwrap();
                    });
                }
                let mut served = 0;
                while let Some(done) = tasks.join_next().await {
                    done.unwrap();
                    served += 1;
                }
                say(format!("served {served}"));
                locker.shutdown().await.unwrap();
            }
            "campaign" => {
                let ttl = Duration::from_millis(args[3].parse().unwrap());
                let lead = locker
                    .election(&args[2])
                    .campaign("child")
                    .ttl(ttl)
                    .acquire()
                    .await
                    .unwrap();
                say(format!("leads {}", lead.term()));
                std::future::pending::<()>().await;
            }
            other => panic!("unknown child task {other}"),
        }
    });
}

async fn connect(url: &str) -> Locker {
    locksmith_postgres::connect(&BackendUrl::parse(url).unwrap())
        .await
        .unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Waits until `name` has `n` waiters.
async fn until_waiters(observer: &Locker, name: &str, n: usize, secs: u64) {
    locksmith_core::conformance::until_waiters(observer, name, n, Duration::from_secs(secs)).await;
}

/// Only the first waiter of a queue watches the holder's lease; when that waiter's process is
/// dead too, the live waiters behind it still get the lock: their locker's heartbeat finds the
/// dead waiter and a step drops it (`sql/sweep.sql`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_waiter_does_not_hold_up_the_queue() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = PgHarness::plain().await;
    let url = format!("{}&ttl=1s", harness.url);
    let name = unique_name("dead-first");
    let observer = connect(&url).await;

    let mut holder = ChildProcess::spawn(&format!("hold {url} {name}"));
    let first: u64 = holder.says(secs(30)).await["held ".len()..].parse().unwrap();
    let mut waiter = ChildProcess::spawn(&format!("wait {url} {name}"));
    until_waiters(&observer, &name, 1, 30).await;
    let me = connect(&url).await;
    let mine = tokio::spawn({
        let (me, name) = (me.clone(), name.clone());
        // No deadline of its own (its last step at a deadline would find the lock free): only
        // the sweep can hand it the lock.
        async move { me.lock(&name).acquire().await }
    });
    until_waiters(&observer, &name, 2, 30).await;

    // Both die at once: the holder's lease and the first waiter's heartbeat run out together.
    holder.kill().await;
    waiter.kill().await;
    let guard = within(Duration::from_secs(20), "the live waiter behind a dead one", mine)
        .await
        .unwrap()
        .expect("the live waiter behind a dead one got the lock");
    assert!(guard.fencing_token() > first);
    guard.release().await.unwrap();
    me.shutdown().await.unwrap();
}

/// `layout=advisory`, a holder paused (SIGSTOP) past its TTL: its grant in the tables expires,
/// but its session keeps the advisory lock, so nobody else gets the lock while it is paused (a
/// session-lifetime lock, as the programs sharing it know them). Once it runs again its renewal
/// fails, it is told, and only then is its session closed and the next waiter served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_a_paused_holder_keeps_its_session_lock_until_it_is_told() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = PgHarness::plain().await;
    let url = format!("{}&ttl=1s&layout=advisory", harness.url);
    let key = (rand::random::<u32>() >> 2).to_string();
    let mut holder = ChildProcess::spawn(&format!("hold {url} {key}"));
    let first: u64 = holder.says(secs(30)).await["held ".len()..].parse().unwrap();

    holder.pause();
    let me = connect(&url).await;
    // Three TTLs: its grant expired long ago; its session still holds the advisory lock.
    let paused = me.lock(&key).timeout(Duration::from_secs(3)).acquire().await;
    assert!(
        matches!(paused, Err(locksmith_core::LockError::Timeout(_))),
        "granted while the paused holder's session held the advisory lock: {paused:?}"
    );
    let waiter = tokio::spawn({
        let (me, key) = (me.clone(), key.clone());
        async move { me.lock(&key).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());

    holder.resume();
    let told = holder.says(secs(10)).await;
    assert!(told.starts_with("lost"), "{told}");
    let guard = within(
        Duration::from_secs(10),
        "the waiter after the paused holder was told",
        waiter,
    )
    .await
    .unwrap()
    .expect("the waiter got the lock");
    assert!(guard.fencing_token() > first);
    guard.release().await.unwrap();
    holder.kill().await;
    me.shutdown().await.unwrap();
}

/// 1,000 waiters in 10 processes on one lock: each process uses one connection whatever its
/// number of waiters (steps, renewals, heartbeats and LISTEN share it; it used three), and every
/// waiter is served, each grant with its own fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_in_ten_processes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const PROCESSES: usize = 10;
    const EACH: usize = 100;
    let harness = PgHarness::plain().await;
    let url = format!("{}&ttl=10s", harness.url);
    let name = unique_name("thousand");
    let (admin, connection) = tokio_postgres::connect(&common::server_url(), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(connection);
    let connections = || async {
        let row = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'locksmith' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let observer = connect(&url).await;
    let holder = connect(&url).await;
    let held = holder.lock(&name).acquire().await.unwrap();
    let before = connections().await;

    let children: Vec<_> = (0..PROCESSES)
        .map(|_| ChildProcess::spawn(&format!("waiters {url} {name} {EACH}")))
        .collect();
    until_waiters(&observer, &name, PROCESSES * EACH, 120).await;
    let used = connections().await - before;
    assert!(
        used <= PROCESSES as i64,
        "{PROCESSES} processes with {EACH} waiters each use {used} connections"
    );

    let first = held.fencing_token();
    held.release().await.unwrap();
    for mut child in children {
        assert_eq!(child.says(secs(300)).await, format!("served {EACH}"));
        assert!(child.wait(secs(60)).await.success());
    }
    let last = holder
        .lock(&name)
        .try_acquire()
        .await
        .unwrap()
        .expect("free at the end");
    // Tokens have the server clock's floor (microseconds), so they grow by more than one per
    // grant: every waiter was served (above) and the tokens went on growing.
    assert!(
        last.fencing_token() > first + (PROCESSES * EACH) as u64,
        "token {} after {first} and {} grants",
        last.fencing_token(),
        PROCESSES * EACH
    );
    last.release().await.unwrap();
}

/// An observer of an election whose leader's lease runs out while the first candidate in line is
/// dead too (its process killed while it waited; its locker's heartbeat still counts it live for
/// a while) reports nobody once that candidate's heartbeat has run out as well. Before, it kept
/// the dead leader (a hand-over seemed under way) until a change was notified, which nobody
/// alive would make: for up to a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_nobody_once_the_leader_and_the_next_candidate_are_dead() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let harness = PgHarness::plain().await;
    let name = unique_name("dead-candidate");
    let leader = connect(&format!("{}&ttl=1s", harness.url)).await;
    let lead = leader.election(&name).campaign("leader").acquire().await.unwrap();
    // The candidate's TTL keeps its locker's heartbeat (its owner row) alive past the leader's
    // lease.
    let mut candidate = ChildProcess::spawn(&format!("campaign {} {name} 6000", harness.url));
    let observer = connect(&harness.url).await;
    within(Duration::from_secs(30), "the candidate to queue", async {
        let key = locksmith_core::driver::LockName::new(&name).unwrap();
        while harness
            .look
            .entries(locksmith_core::Family::Election, &key)
            .await
            .unwrap()
            .len()
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let mut watch = observer.election(&name).observe().await.unwrap();
    assert_eq!(watch.leader().map(|l| l.value), Some("leader".to_owned()));

    candidate.kill().await;
    let _lease = lead.abandon(); // the leader's lease runs out after 1 s, as if it had died
    within(Duration::from_secs(20), "the observer to see nobody lead", async {
        while watch.leader().is_some() {
            watch.changed().await.unwrap();
        }
    })
    .await;
    assert_eq!(observer.election(&name).leader().await.unwrap(), None);
}
