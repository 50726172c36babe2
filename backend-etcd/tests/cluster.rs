//! A 3-member etcd cluster (`LOCKSMITH_TEST_ETCD_CLUSTER`) loses its leader (SIGKILL) while a
//! lock is held and waiters are queued: never two holders (a fenced storage and a
//! critical-section flag check every holder), the holder either keeps the lock or is told by
//! `lost()`, and every waiter still gets the lock. The killed member is started again at the
//! end, whatever happened.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Locker;
use tokio::time::Instant;

const PATIENCE: Duration = Duration::from_secs(90);
const WAITERS: usize = 3;

/// Storage that accepts a write only with a fencing token at least as large as the last one
/// it saw, and tracks who is inside the critical section.
#[derive(Default)]
struct Fenced {
    state: Mutex<FencedState>,
}

#[derive(Default)]
struct FencedState {
    last_token: u64,
    inside: Option<u64>,
    writes: u64,
    violations: Vec<String>,
}

impl Fenced {
    fn enter(&self, token: u64) {
        let mut s = self.state.lock().unwrap();
        if let Some(other) = s.inside {
            s.violations.push(format!("{token} entered while {other} was inside"));
        }
        let last = s.last_token;
        if token <= last {
            s.violations
                .push(format!("new holder's token {token} is not above {last}"));
        }
        s.inside = Some(token);
        s.last_token = s.last_token.max(token);
    }

    fn write(&self, token: u64) {
        let mut s = self.state.lock().unwrap();
        let last = s.last_token;
        if token < last {
            s.violations
                .push(format!("write with stale token {token} after {last}"));
        } else {
            s.last_token = token;
            s.writes += 1;
        }
    }

    fn leave(&self, token: u64) {
        let mut s = self.state.lock().unwrap();
        if s.inside == Some(token) {
            s.inside = None;
        }
    }
}

async fn connect(url: &BackendUrl) -> Locker {
    within(PATIENCE, "connect", locksmith_etcd::connect(url))
        .await
        .expect("connect to the cluster")
}

/// Run twice: with a TTL well above the election time the holder usually keeps its lock through
/// the failover; with the cluster's minimum TTL (2 s, about the time an election takes) it
/// usually loses it, and `lost()` says so before anyone else can get it. Either outcome is
/// correct; exclusion must hold in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_while_held_with_waiters() {
    common::init_tracing();
    let base = common::env_url("LOCKSMITH_TEST_ETCD_CLUSTER");
    for ttl in ["6s", "2s"] {
        eprintln!("--- session ttl {ttl}");
        failover(&base, ttl).await;
    }
}

async fn failover(base: &str, ttl: &str) {
    let url = BackendUrl::parse(&common::with_query(base, &format!("ttl={ttl}&request_timeout=2s"))).expect("url");
    let name = unique_name("cluster_failover");
    let lock_name = LockName::new(&name).unwrap();
    let storage = Arc::new(Fenced::default());

    let holder = connect(&url).await;
    let guard = holder.lock(&name).acquire().await.expect("acquire");
    let token = guard.fencing_token();
    storage.enter(token);
    storage.write(token);

    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let locker = connect(&url).await;
        let (name, storage) = (name.clone(), storage.clone());
        waiters.push(tokio::spawn(async move {
            let g = locker
                .lock(&name)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            let t = g.fencing_token();
            if !g.is_held() {
                eprintln!(
                    "waiter {i}: lost the lock right after getting it: {:?}",
                    g.lost_reason()
                );
                return;
            }
            storage.enter(t);
            storage.write(t);
            // A holder stops working the moment it is told it lost the lock.
            tokio::select! {
                reason = g.lost() => eprintln!("waiter {i}: lost the lock while working: {reason}"),
                _ = tokio::time::sleep(Duration::from_millis(50)) => storage.write(t),
            }
            storage.leave(t);
            if let Err(e) = g.release().await {
                eprintln!("waiter {i}: release: {e}");
            }
        }));
        within(PATIENCE, "waiter queued", async {
            while holder
                .backend()
                .inspect(&lock_name)
                .await
                .map(|i| i.waiters)
                .unwrap_or(0)
                < i + 1
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    let leader = backends(&["leader", "etcd-cluster"]);
    assert!(leader.starts_with("etcd-"), "no leader found: {leader:?}");
    let _restart = OnDrop::start(&leader);
    backends(&["kill", &leader]);
    eprintln!("killed the leader {leader}");

    // The holder goes on working while it holds the lock, and stops the moment it is told.
    let until = Instant::now() + guard.ttl() * 2;
    let mut lost = None;
    while Instant::now() < until {
        tokio::select! {
            reason = guard.lost() => {
                storage.leave(token);
                lost = Some(reason);
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => storage.write(token),
        }
    }
    storage.leave(token);
    match &lost {
        None => {
            assert!(guard.is_held());
            eprintln!("the holder kept its lock through the failover");
            within(PATIENCE, "release after the failover", guard.release())
                .await
                .expect("release");
        }
        Some(reason) => {
            eprintln!("the holder was told it lost the lock: {reason}");
            let _ = within(PATIENCE, "release after loss", guard.release()).await;
        }
    }

    within(PATIENCE, "every waiter served", async {
        for w in waiters {
            w.await.expect("waiter panicked");
        }
    })
    .await;

    // A locker connected while a member is down works too (the client fails over).
    let late = connect(&url).await;
    let g = within(PATIENCE, "acquire with a member down", late.lock(&name).acquire())
        .await
        .expect("acquire");
    storage.enter(g.fencing_token());
    storage.leave(g.fencing_token());
    g.release().await.expect("release");

    let s = storage.state.lock().unwrap();
    assert!(s.violations.is_empty(), "mutual exclusion violated: {:?}", s.violations);
    assert!(s.writes > 0);
}
