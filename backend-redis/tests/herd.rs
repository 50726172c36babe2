//! No thundering herd: with 50 waiters queued, one release and the hand-over to the next waiter
//! cost a constant number of server commands, counted with `INFO commandstats` on a server of
//! its own (redis-q3), so parallel tests do not pollute the count.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use tokio::sync::{mpsc, watch};

const WAITERS: usize = 50;

/// The Redis keys of lock `name` at `url`.
fn keys(url: &str, name: &str) -> locksmith_redis::LockKeys {
    locksmith_redis::LockKeys::for_url(
        &locksmith_core::driver::BackendUrl::parse(url).unwrap(),
        &locksmith_core::driver::LockName::new(name).unwrap(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_with_50_waiters_costs_constant_commands() {
    let server = common::quorum_hosts().remove(2); // redis-q3, used by no other concurrent test
                                                   // Heartbeats every 20 s, so none falls into the measured window.
    let url = common::with_options(&server, "waiter_ttl=60s");
    let mut admin = common::admin(&url).await;
    let name = unique_name("herd");
    let queue_key = keys(&url, &name).queue;

    let holder = common::locker(&url).await.lock(&name).acquire().await.expect("acquire");
    let (go_tx, go_rx) = watch::channel(false);
    let (got_tx, mut got_rx) = mpsc::unbounded_channel();
    let go_tx = Arc::new(go_tx);
    let mut tasks = Vec::new();
    let first_queued = std::time::Instant::now();
    for i in 0..WAITERS {
        let locker = common::locker(&url).await;
        let (name, mut go, got) = (name.clone(), go_rx.clone(), got_tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locker.lock(&name).acquire().await.expect("acquire");
            got.send(i).expect("report");
            let _ = go.wait_for(|g| *g).await; // hold until the measurement is over
            guard.release().await.expect("release");
        }));
        // Queue them one by one so the FIFO order is known.
        within(Duration::from_secs(30), "waiter queued", async {
            loop {
                let n: usize = redis::cmd("ZCARD")
                    .arg(&queue_key)
                    .query_async(&mut admin)
                    .await
                    .expect("ZCARD");
                if n == i + 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    // The head's lease counts from its first step (sent when it queued), so its first renewal is
    // due a third of the default TTL (5 s) after that: the window must end before.
    let queued_for = first_queued.elapsed();
    let before = common::command_counts(&mut admin).await;
    holder.release().await.expect("release");
    let first = within(Duration::from_secs(30), "the first waiter takes over", got_rx.recv()).await;
    assert_eq!(first, Some(0), "the head waiter must be first");
    // Give a herd (if there were one) time to show up in the counts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = common::command_counts(&mut admin).await;

    let mut delta: BTreeMap<&str, u64> = BTreeMap::new();
    for (cmd, calls) in &after {
        let d = calls - before.get(cmd).copied().unwrap_or(0);
        if d > 0 && cmd != "info" {
            delta.insert(cmd, d);
        }
    }
    assert!(
        queued_for < Duration::from_secs(3),
        "queueing took {queued_for:?}: a renewal may fall into the window"
    );
    let total: u64 = delta.values().sum();
    eprintln!("commands for one release + hand-over with {WAITERS} waiters: {total} {delta:?}");
    // One release script, which hands the lock to the head and publishes that, the new holder's
    // UNSUBSCRIBE, and the step of the waiter behind it (first now: woken by the release, it
    // steps once to watch the new holder's lease), whatever the number of waiters: a herd (every
    // waiter re-checking) costs at least one command per waiter. The budget is exact, since
    // these commands are the server's part of a handover: the release runs GET, DEL, ZRANGE,
    // TIME, HGET (the head's deadline), HGET (its TTL), GET (the counter), ZREM, HDEL, TIME, SET
    // (the counter), SET (the lock), PUBLISH, then ZRANGE, TIME, HGET (the next waiter's
    // deadline) and PUBLISH; the next waiter's step TIME, GET, ZSCORE, ZRANGE, HSET, PTTL,
    // PEXPIRE (twice), PTTL; with the two FCALLs and the UNSUBSCRIBE, 29. (18 in two script calls
    // before the release handed the lock over: the release only woke the head, whose step took
    // the lock; 15 after, until the release also woke the waiter behind: before that, nothing
    // told it that it was first, and it learnt that the new holder died only at its heartbeat.)
    assert!(
        total <= 29,
        "a release cost {total} commands with {WAITERS} waiters: {delta:?}"
    );
    let scripts = ["fcall", "evalsha"].map(|c| delta.get(c).copied().unwrap_or(0));
    assert_eq!(
        scripts.iter().sum::<u64>(),
        2,
        "one script call per hand-over, and one step of the waiter behind: {delta:?}"
    );
    assert!(delta.get("publish").copied().unwrap_or(0) <= 2, "{delta:?}");

    // Let everybody through, in FIFO order.
    go_tx.send_replace(true);
    let mut order = vec![0];
    while order.len() < WAITERS {
        let next = within(Duration::from_secs(60), "the other waiters", got_rx.recv())
            .await
            .expect("a waiter");
        order.push(next);
    }
    for t in tasks {
        t.await.expect("waiter task");
    }
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "not FIFO");
}

/// A release hands the lock to the head with a message naming the liveness deadline the head's
/// last step set; a head whose deadline is another (here moved by a millisecond behind its back,
/// as another waiter's step cutting it would) does not take the message as its grant: it takes
/// the lock with a step of its own, a second script call (counted on redis-q2, which no other
/// test of this file uses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_names_another_deadline_is_only_a_wake_up() {
    let server = common::quorum_hosts().remove(1);
    let url = common::with_options(&server, "waiter_ttl=60s");
    let mut admin = common::admin(&url).await;
    let name = unique_name("stale_grant");
    let keys = keys(&url, &name);

    for moved in [false, true] {
        let holder = common::locker(&url).await.lock(&name).acquire().await.expect("acquire");
        let waiter = common::locker(&url).await;
        let task = {
            let name = name.clone();
            tokio::spawn(async move { waiter.lock(&name).acquire().await })
        };
        // Queued, and its step answered: its deadline is in the liveness hash.
        let token = within(Duration::from_secs(30), "the waiter queues", async {
            loop {
                let fields: Vec<String> = redis::cmd("HKEYS")
                    .arg(&keys.alive)
                    .query_async(&mut admin)
                    .await
                    .expect("HKEYS");
                if let Some(t) = fields.into_iter().find(|f| !f.contains('/')) {
                    break t;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        // Let the step's answer reach the waiter before its deadline is moved.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if moved {
            let _: i64 = redis::cmd("HINCRBY")
                .arg(&keys.alive)
                .arg(&token)
                .arg(1)
                .query_async(&mut admin)
                .await
                .expect("HINCRBY");
        }
        let before = common::command_counts(&mut admin).await;
        holder.release().await.expect("release");
        let guard = within(Duration::from_secs(30), "the hand-over", task)
            .await
            .expect("waiter task")
            .expect("the waiter acquires");
        let after = common::command_counts(&mut admin).await;
        let calls =
            |counts: &BTreeMap<String, u64>| counts.get("fcall").or(counts.get("evalsha")).copied().unwrap_or(0);
        let scripts = calls(&after) - calls(&before);
        let value: String = redis::cmd("GET")
            .arg(&keys.lock)
            .query_async(&mut admin)
            .await
            .expect("GET");
        assert_eq!(
            value.split(':').nth(1).and_then(|f| f.parse::<u64>().ok()),
            Some(guard.fencing_token()),
            "the waiter holds the grant the release made: {value}"
        );
        let expected = if moved { 2 } else { 1 };
        assert_eq!(
            scripts, expected,
            "deadline moved: {moved}; script calls from the release to the grant"
        );
        guard.release().await.expect("release");
    }
}
