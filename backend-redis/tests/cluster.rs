//! Redis Cluster (`LOCKSMITH_TEST_REDIS_CLUSTER`: three masters, each with a replica): locks
//! (mutexes, and the other kinds) spread over the masters and renewed in one batch per node; a
//! slot resharded while a lock in it is held; a master killed while a lock in its slots is held;
//! a master paused while locks on the others are held; the plain layout's keys in the slot of the
//! raw name.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{admin_for, backends, cluster_url, holds_through, wait_for_change, with_options, Admin, FAULTS};
use locksmith_core::conformance::servers::OnDrop;
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Family;
use locksmith_redis::{KindKeys, LockKeys};

async fn keyslot(admin: &mut Admin, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(admin)
        .await
        .expect("CLUSTER KEYSLOT")
}

fn lock_key(url: &str, name: &str) -> String {
    let parsed = BackendUrl::parse(url).expect("url");
    LockKeys::for_url(&parsed, &LockName::new(name).expect("name"))
        .expect("keys")
        .lock
}

/// The masters, as `(first slot, last slot, "host:port")`.
async fn masters(admin: &mut impl redis::aio::ConnectionLike) -> Vec<(i64, i64, String)> {
    let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(admin)
        .await
        .expect("CLUSTER SLOTS");
    ranges
        .into_iter()
        .map(|r| {
            let first: i64 = redis::from_redis_value_ref(&r[0]).expect("first");
            let last: i64 = redis::from_redis_value_ref(&r[1]).expect("last");
            let node: Vec<redis::Value> = redis::from_redis_value_ref(&r[2]).expect("node");
            let host: String = redis::from_redis_value_ref(&node[0]).expect("host");
            let port: i64 = redis::from_redis_value_ref(&node[1]).expect("port");
            (first, last, format!("{host}:{port}"))
        })
        .collect()
}

/// Script calls (`FCALL`, `EVALSHA` and `EVAL`) every master has run so far, summed.
async fn script_calls(addrs: &BTreeSet<String>) -> u64 {
    let mut total = 0;
    for addr in addrs {
        let mut conn = common::admin(&format!("redis://{addr}")).await;
        let counts = common::command_counts(&mut conn).await;
        total += ["fcall", "evalsha", "eval"]
            .iter()
            .map(|c| counts.get(*c).copied().unwrap_or(0))
            .sum::<u64>();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_the_masters_and_renew_in_one_call_per_node() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = cluster_url();
    let mut admin = admin_for(&url).await;
    let a = common::locker(&url).await;
    let ttl = Duration::from_millis(1500);
    let mut guards = Vec::new();
    for i in 0..60 {
        let name = unique_name(&format!("spread-{i}"));
        guards.push(a.lock(&name).ttl(ttl).acquire().await.expect("acquire"));
    }
    let ranges = masters(&mut admin).await;
    let mut used = BTreeSet::new();
    for g in &guards {
        let slot = keyslot(&mut admin, &lock_key(&url, g.name())).await;
        let (_, _, owner) = ranges
            .iter()
            .find(|(f, l, _)| (*f..=*l).contains(&slot))
            .expect("an owner");
        used.insert(owner.clone());
    }
    assert!(used.len() >= 2, "60 locks all on one master: {used:?}");

    // Renewals every ttl/3 = 500 ms for 3 s: 6 or 7 rounds. One call per node and round is at
    // most ~7 × 3; one call per lock would be ~7 × 60.
    let all: BTreeSet<String> = ranges.iter().map(|(_, _, a)| a.clone()).collect();
    let before = script_calls(&all).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = script_calls(&all).await - before;
    for g in &guards {
        assert!(g.is_held(), "{} lost: {:?}", g.name(), g.lost_reason());
    }
    assert!(
        calls <= 8 * all.len() as u64,
        "{calls} script calls on the masters in 3 s to renew 60 locks on {} masters: not grouped by node",
        all.len()
    );
    for g in guards {
        g.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_kinds_spread_over_the_masters_and_renew_in_one_call_per_node() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = cluster_url();
    let mut admin = admin_for(&url).await;
    let a = common::locker(&url).await;
    let ttl = Duration::from_millis(1500);
    let (mut guards, mut leads) = (Vec::new(), Vec::new());
    let mut holder_keys = Vec::new();
    let parsed = BackendUrl::parse(&url).expect("url");
    for i in 0..60 {
        let name = unique_name(&format!("spread-kinds-{i}"));
        let family = match i % 4 {
            0 => {
                guards.push(a.semaphore(&name, 3).ttl(ttl).acquire().await.expect("permit"));
                Family::Semaphore
            }
            1 => {
                guards.push(a.rwlock(&name).read().ttl(ttl).acquire().await.expect("read"));
                Family::RwLock
            }
            2 => {
                guards.push(a.rwlock(&name).write().ttl(ttl).acquire().await.expect("write"));
                Family::RwLock
            }
            _ => {
                leads.push(a.election(&name).campaign("a").ttl(ttl).acquire().await.expect("lead"));
                Family::Election
            }
        };
        let keys = KindKeys::for_url(&parsed, family, &LockName::new(&name).expect("name")).expect("keys");
        holder_keys.push(keys.holders);
    }
    let ranges = masters(&mut admin).await;
    let mut used = BTreeSet::new();
    for key in &holder_keys {
        let slot = keyslot(&mut admin, key).await;
        let (_, _, owner) = ranges
            .iter()
            .find(|(f, l, _)| (*f..=*l).contains(&slot))
            .expect("an owner");
        used.insert(owner.clone());
    }
    assert!(used.len() >= 2, "60 locks all on one master: {used:?}");

    // As for mutexes: renewals every 500 ms for 3 s, one call per node and round.
    let all: BTreeSet<String> = ranges.iter().map(|(_, _, a)| a.clone()).collect();
    let before = script_calls(&all).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = script_calls(&all).await - before;
    eprintln!(
        "60 semaphore, read-write lock and election leases on {} masters: {calls} script calls in 3 s",
        all.len()
    );
    for g in &guards {
        assert!(g.is_held(), "{} lost: {:?}", g.name(), g.lost_reason());
    }
    assert!(leads.iter().all(|l| l.is_leader()), "a leadership was lost");
    assert!(
        calls <= 8 * all.len() as u64,
        "{calls} script calls on the masters in 3 s to renew 60 leases on {} masters: not grouped by node",
        all.len()
    );
    for g in guards {
        g.release().await.expect("release");
    }
    for l in leads {
        l.resign().await.expect("resign");
    }
}

/// The slot of `name`'s keys on the cluster of `url`, as `scripts/backends` takes it.
async fn slot_of(url: &str, name: &str) -> String {
    let mut admin = admin_for(url).await;
    keyslot(&mut admin, &lock_key(url, name)).await.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_the_slot_of_a_held_lock() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = cluster_url();
    let at = url.clone();
    holds_through(&url, Duration::from_secs(2), |name| async move {
        let slot = slot_of(&at, &name).await;
        let from = backends(&["slot-owner", "redis-cluster", &slot]).await;
        let to = backends(&["reshard", "redis-cluster", &slot]).await;
        assert_ne!(from, to, "slot {slot} did not move");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_master_keeps_a_confirmed_lock() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    // Leases outlast the cluster's failover (node timeout 2 s, then an election) and the old
    // master's return as a replica (until then its shard cannot confirm renewals).
    // Confirmation is the default on a cluster (min_replicas=1): the URL sets nothing.
    let url = cluster_url();
    let at = url.clone();
    holds_through(&url, Duration::from_secs(14), |name| async move {
        let slot = slot_of(&at, &name).await;
        let owner = backends(&["slot-owner", "redis-cluster", &slot]).await;
        let _restart = OnDrop::start(&owner);
        backends(&["kill", &owner]).await;
        wait_for_change(&["slot-owner", "redis-cluster", &slot], &owner, Duration::from_secs(30)).await;
    })
    .await;
}

/// The masters, once every node of the test cluster (`scripts/backends`: ports 17001-17006)
/// that answers shows the same ones: after a failover, nodes agree only a while later.
async fn settled_masters() -> Vec<(i64, i64, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut views = Vec::new();
        for port in 17001..=17006 {
            let mut conn = common::admin(&format!("redis://127.0.0.1:{port}")).await;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            if !info.contains("cluster_state:ok") {
                views.clear();
                break;
            }
            let mut view = masters(&mut conn).await;
            view.sort();
            views.push(view);
        }
        if views.len() == 6 && views.windows(2).all(|w| w[0] == w[1]) {
            return views.swap_remove(0);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the test cluster did not settle"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `scripts/backends` id of the test cluster's node at `addr`.
fn node_id(addr: &str) -> String {
    let port: u16 = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
    match port {
        17001..=17003 => format!("cluster-{}", port - 17000),
        _ => format!("cluster-r{}", port - 17003),
    }
}

/// Bug: the cluster renewal failed as a whole when one master failed or hung: a master paused
/// for longer than a lease's validity made every lease of the process run out, those on healthy
/// masters too. Each master's leases now have their own outcome, all by a deadline within the
/// leases' validity. (Paused for less than the cluster's node timeout, so that it does not fail
/// over.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_costs_only_its_own_leases() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = cluster_url();
    let mut admin = admin_for(&url).await;
    let ranges = settled_masters().await;
    let owner = |slot: i64| {
        let (_, _, addr) = ranges
            .iter()
            .find(|(f, l, _)| (*f..=*l).contains(&slot))
            .expect("an owner");
        addr.clone()
    };
    let healthy = unique_name("paused-other");
    let healthy_owner = owner(keyslot(&mut admin, &lock_key(&url, &healthy)).await);
    let mut paused = None;
    for i in 0..200 {
        let name = unique_name(&format!("paused-{i}"));
        let at = owner(keyslot(&mut admin, &lock_key(&url, &name)).await);
        if at != healthy_owner {
            paused = Some((name, at));
            break;
        }
    }
    let (paused, paused_owner) = paused.expect("a name on another master");
    let a = common::locker(&url).await;
    // Valid for 1.35 s after each renewal sent (every 0.5 s); the master is paused for 1.8 s.
    // The lease on the paused master has the longer TTL, so that the renewals that include it
    // are bounded by the healthy lease's validity, not cut off by its own (which would take the
    // healthy lease's answer with it, and leave it a tight retry on a loaded machine).
    let ttl = Duration::from_millis(1500);
    let kept = a.lock(&healthy).ttl(ttl).acquire().await.expect("acquire");
    let frozen = a.lock(&paused).ttl(ttl * 2).acquire().await.expect("acquire");
    {
        let id = node_id(&paused_owner);
        let _resume = OnDrop::resume(&id);
        backends(&["pause", &id]).await;
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert!(
            kept.is_held(),
            "a lock on a healthy master was lost while another master was paused: {:?}",
            kept.lost_reason()
        );
    }
    drop(frozen);
    kept.release().await.expect("release");
    settled_masters().await;
}

/// A master that hangs (paused) until the cluster promotes its replica: the lease is renewed on
/// the promoted replica, which has it (replicated long before the pause), and is kept. A renewal
/// that runs out of its deadline marks the slot map stale, as one the client's response timeout
/// ends does. (This passed before that marking too: with this TTL the client's response timeout,
/// 3 s, ends the hung renewal first; with shorter TTLs the deadline comes first.) Without replica
/// confirmation: with it, the promoted replica, whose only replica is the paused master, cannot
/// confirm any renewal, and the lease is rightly lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_on_a_master_paused_until_its_replica_is_promoted_is_kept() {
    let _serial = FAULTS.lock().await;
    common::init_logs();
    let url = with_options(&cluster_url(), "min_replicas=0");
    let mut admin = admin_for(&url).await;
    let ranges = settled_masters().await;
    let name = unique_name("paused-failover");
    let slot = keyslot(&mut admin, &lock_key(&url, &name)).await;
    let (_, _, owner) = ranges
        .iter()
        .find(|(f, l, _)| (*f..=*l).contains(&slot))
        .expect("an owner");
    let a = common::locker(&url).await;
    // Renewals every 4 s; the first after the pause hangs until its deadline (3 s), and the next
    // try (1.2 s later) comes within the validity (10.8 s): the replica is promoted by then (node
    // timeout 2 s, then an election).
    let ttl = Duration::from_secs(12);
    let held = a.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    {
        let id = node_id(owner);
        let _resume = OnDrop::resume(&id);
        backends(&["pause", &id]).await;
        tokio::time::sleep(Duration::from_secs(14)).await;
        assert!(
            held.is_held(),
            "a confirmed lease was lost while its master hung and its replica was promoted: {:?}",
            held.lost_reason()
        );
    }
    held.release().await.expect("release");
    settled_masters().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_layout_keys_share_the_slot_of_the_raw_name() {
    common::init_logs();
    let url = with_options(&cluster_url(), "layout=plain");
    let mut admin = admin_for(&url).await;
    let name = format!("orders:{:x}", rand_suffix());
    // An old client's lock (redis-py's `Lock`: SET name token NX PX).
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("redis-py-token")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut admin)
        .await
        .expect("SET");
    let a = common::locker(&url).await;
    assert!(a.lock(&name).try_acquire().await.expect("try").is_none());
    let holder = a.inspect(&name).await.expect("inspect").holder.expect("a holder");
    assert_eq!(holder.holder_id, "redis-py-token");
    let keys = LockKeys::for_url(
        &BackendUrl::parse(&url).expect("url"),
        &LockName::new(&name).expect("name"),
    )
    .expect("keys");
    let slot = keyslot(&mut admin, &name).await;
    for key in [
        &keys.lock,
        &keys.fence,
        &keys.queue,
        &keys.alive,
        &keys.streak,
        &keys.gap,
    ] {
        assert_eq!(
            keyslot(&mut admin, key).await,
            slot,
            "{key} is not in the slot of {name}"
        );
    }
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut admin).await.expect("DEL");
    let g = a
        .lock(&name)
        .try_acquire()
        .await
        .expect("try")
        .expect("free after the old client let go");
    g.release().await.expect("release");
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
