//! Leader failover in a 3-node ensemble (`LOCKSMITH_TEST_ZK_ENSEMBLE`): while a lock is held with
//! waiters queued, the leader is killed. No two holders are ever inside the critical section at
//! once (an in-critical flag), fencing tokens only grow (a fenced "storage"), every holder either
//! keeps its lock or is told it is lost, and every waiter gets the lock in the end.
//!
//! Two locks run the scenario at once: on lock A everyone uses the whole ensemble (the holder's
//! session normally survives the failover: it keeps the lock); on lock B the holder can reach only
//! the leader, so it cannot reconnect anywhere and must be told its lock is lost before its
//! session expires and a waiter takes over.
//!
//! The killed server is started again at the end, also when an assertion fails.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{LockGuard, Locker, LostReason};
use tokio::sync::watch;

const SESSION: Duration = Duration::from_secs(4);
const WAITERS: usize = 3;

/// What the lock protects: a flag "someone is inside" and a store that accepts only growing tokens.
#[derive(Default)]
struct Fenced {
    inside: AtomicBool,
    last_token: Mutex<u64>,
    entries: AtomicUsize,
}

impl Fenced {
    fn enter(&self, who: &str, token: u64) {
        assert!(
            !self.inside.swap(true, Ordering::SeqCst),
            "{who} entered while another holder was inside"
        );
        let mut last = self.last_token.lock().unwrap();
        assert!(
            token > *last,
            "{who}: fencing token {token} not above the last accepted {}",
            *last
        );
        *last = token;
        self.entries.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
    }
}

enum Outcome {
    Kept,
    Lost(LostReason),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Kept => f.write_str("kept the lock"),
            Outcome::Lost(reason) => write!(f, "told the lock is lost: {reason}"),
        }
    }
}

/// Works inside the lock until `done` resolves or the lock is lost, then leaves and releases.
async fn critical(
    guard: LockGuard,
    fenced: &Fenced,
    who: &str,
    done: impl std::future::Future<Output = ()>,
) -> Outcome {
    fenced.enter(who, guard.fencing_token());
    let outcome = tokio::select! {
        reason = guard.lost() => Outcome::Lost(reason),
        _ = done => Outcome::Kept,
    };
    fenced.leave();
    let release = guard.release().await;
    println!("{who}: {outcome:?}, release: {release:?}");
    if matches!(outcome, Outcome::Lost(_)) {
        assert!(release.is_err(), "{who}: releasing a lost lock succeeded");
    }
    outcome
}

/// Acquires, retrying while the ensemble is electing a leader.
async fn acquire_retrying(locker: &Locker, name: &str, who: &str) -> LockGuard {
    loop {
        match locker.lock(name).acquire().await {
            Ok(guard) => return guard,
            Err(e) => {
                println!("{who}: acquire failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

struct Scenario {
    name: String,
    fenced: Arc<Fenced>,
    holder: tokio::task::JoinHandle<Outcome>,
    waiters: Vec<tokio::task::JoinHandle<Outcome>>,
}

/// The holder (connected through `holder_base`) takes the lock, then `WAITERS` waiters on the whole
/// ensemble queue behind it.
async fn start(
    label: &str,
    holder_base: &str,
    ensemble: &str,
    admin: &zookeeper_client::Client,
    stop: &watch::Receiver<bool>,
) -> Scenario {
    let options = format!("session_timeout={}ms", SESSION.as_millis());
    let name = unique_name(&format!("ensemble_{label}"));
    let lock_name = LockName::new(&name).unwrap();
    let fenced = Arc::new(Fenced::default());
    let holder_locker = common::locker(holder_base, &options).await;
    let guard = holder_locker.lock(&name).acquire().await.expect("holder acquires");
    let holder = tokio::spawn({
        let (fenced, mut stop, who) = (fenced.clone(), stop.clone(), format!("{label}/holder"));
        async move {
            let _keep = holder_locker;
            critical(guard, &fenced, &who, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
        }
    });
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let locker = common::locker(ensemble, &options).await;
        let (fenced, name, who) = (fenced.clone(), name.clone(), format!("{label}/waiter-{i}"));
        waiters.push(tokio::spawn(async move {
            let guard = acquire_retrying(&locker, &name, &who).await;
            critical(guard, &fenced, &who, tokio::time::sleep(Duration::from_millis(100))).await
        }));
        within(Duration::from_secs(30), "a waiter queueing", async {
            while common::contenders(admin, &lock_name).await.len() != i + 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
    Scenario {
        name,
        fenced,
        holder,
        waiters,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_failover_never_gives_a_lock_to_two_holders() {
    let ensemble = common::env_url("LOCKSMITH_TEST_ZK_ENSEMBLE");
    let hosts = BackendUrl::parse(&ensemble).expect("ensemble URL").hosts;
    let admin = common::admin(&ensemble).await;
    let leader = backends(&["leader", "zk-ensemble"]);
    let member: usize = leader
        .strip_prefix("zk-")
        .and_then(|n| n.parse().ok())
        .expect("leader id like zk-2");
    let leader_addr = hosts[member - 1].to_addr(2181);
    println!("leader: {leader} at {leader_addr}");

    let (stop_tx, stop_rx) = watch::channel(false);
    let a = start("a", &ensemble, &ensemble, &admin, &stop_rx).await;
    let b = start("b", &format!("zk://{leader_addr}"), &ensemble, &admin, &stop_rx).await;

    let restart = OnDrop::start(&leader);
    backends(&["kill", &leader]);
    println!("killed {leader}");

    // Let the ensemble elect a new leader and lock B's holder's session expire.
    tokio::time::sleep(SESSION * 3).await;
    stop_tx.send(true).expect("holders listening");

    let mut outcomes = Vec::new();
    for (label, scenario) in [("a", a), ("b", b)] {
        let holder = within(Duration::from_secs(60), "the holder finishing", scenario.holder)
            .await
            .expect("holder task");
        println!("lock {label} ({}): holder {holder:?}", scenario.name);
        for waiter in scenario.waiters {
            within(Duration::from_secs(120), "a waiter getting the lock", waiter)
                .await
                .expect("waiter task");
        }
        assert_eq!(
            scenario.fenced.entries.load(Ordering::SeqCst),
            1 + WAITERS,
            "lock {label}: not everyone got the lock"
        );
        let lock_name = LockName::new(&scenario.name).unwrap();
        within(Duration::from_secs(60), "the lock's nodes going away", async {
            while !common::contenders(&admin, &lock_name).await.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        outcomes.push(holder);
    }
    // Lock B's holder could reach no server at all: it must have been told.
    assert!(
        matches!(outcomes[1], Outcome::Lost(_)),
        "the cut-off holder was not told: {:?}",
        outcomes[1]
    );

    drop(restart);
}
