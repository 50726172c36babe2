//! A waiting `acquire` starts its attempt over when its node vanishes (an expired session, an
//! operator), and rides out such restarts however far apart they come (`LOCKSMITH_TEST_ZK`).

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;

/// The waiter's session timeout: its attempt rides out failures for twice that.
const WAITER_SESSION: Duration = Duration::from_secs(2);

/// The contender nodes of `name` once there are `n` of them.
async fn queued(admin: &zookeeper_client::Client, name: &LockName, n: usize) -> Vec<String> {
    within(Duration::from_secs(10), "the waiter's node in the queue", async {
        loop {
            let nodes = common::contenders(admin, name).await;
            if nodes.len() == n {
                return nodes;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Two restarts of a waiting attempt, further apart than its outage budget (twice its session
/// timeout), are two short incidents, not one long outage: the waiter stays queued and gets the
/// lock. The first restart used to start the outage clock and nothing stopped it, so the second
/// ended the acquire with `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_restarts_far_apart() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let holder = common::locker(&base, "session_timeout=10s").await;
    let waiter = common::locker(&base, &format!("session_timeout={}ms", WAITER_SESSION.as_millis())).await;
    let admin = common::admin(&base).await;
    let name = unique_name("restarts");
    let lock_name = LockName::new(&name).unwrap();
    let held = holder.lock(&name).acquire().await.expect("the holder acquires");
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { waiter.lock(&name).acquire().await })
    };
    for round in 1..=2 {
        let nodes = queued(&admin, &lock_name, 2).await;
        // The waiter's node goes; a write to the holder's node fires the waiter's watch, and its
        // listing finds its node gone: the attempt starts over.
        admin.delete(&nodes[1], None).await.expect("delete the waiter's node");
        admin
            .set_data(&nodes[0], b"poke", None)
            .await
            .expect("poke the holder's node");
        let requeued = within(Duration::from_secs(10), "the waiter queued again", async {
            while common::contenders(&admin, &lock_name).await.len() < 2 && !waiting.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        requeued.await;
        if waiting.is_finished() {
            let ended = waiting.await.expect("the waiter's task");
            panic!("the acquire ended after restart {round}: {ended:?}");
        }
        tokio::time::sleep(WAITER_SESSION * 3).await;
    }
    assert!(!waiting.is_finished(), "the acquire ended while the lock was held");
    held.release().await.expect("release");
    let guard = within(Duration::from_secs(10), "the waiter's grant", waiting)
        .await
        .expect("the waiter's task")
        .expect("the waiter acquires after two restarts");
    guard.release().await.expect("release");
}
