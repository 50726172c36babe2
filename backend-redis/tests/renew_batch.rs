//! Renewal is one script call per server per chunk of 500 leases, whatever the number of held
//! locks: 1100 locks (three chunks) in the default layout and 300 (one chunk) in the plain layout
//! are renewed with a handful of `EVALSHA`s per watchdog interval, counted on the server with
//! `INFO commandstats`. A lease taken away behind a holder's back is lost alone, the rest of its
//! batch is renewed; and renewal survives the server forgetting its scripts (`SCRIPT FLUSH`).
//!
//! Runs against redis-q2 used as a single server: only the quorum test (another test binary,
//! and cargo runs test binaries one at a time) uses it, so the count sees no other traffic.

mod common;

use std::time::{Duration, Instant};

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::{LockGuard, Locker};

const TTL: Duration = Duration::from_secs(3);
/// The watchdog renews every TTL/3.
const INTERVAL: Duration = Duration::from_secs(1);

async fn evalsha_calls(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    common::command_counts(admin).await.get("evalsha").copied().unwrap_or(0)
}

async fn hold(locker: &Locker, base: &str, n: usize) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        let guard = within(
            Duration::from_secs(30),
            "acquire",
            locker.lock(format!("{base}/{i}")).ttl(TTL).acquire(),
        )
        .await
        .expect("acquire");
        guards.push(guard);
    }
    guards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_is_one_script_call_per_chunk() {
    common::init_logs();
    let server = common::quorum_hosts().remove(1); // redis-q2
    let plain_url = common::with_options(&server, "layout=plain");
    let mut admin = common::admin(&server).await;
    let (default, plain) = (common::locker(&server).await, common::locker(&plain_url).await);
    let (base_d, base_p) = (unique_name("renew_batch"), unique_name("renew_batch_plain"));

    let mut held = hold(&default, &base_d, 1100).await;
    held.extend(hold(&plain, &base_p, 300).await);
    // Let the watchdogs' batches converge (a lease joins the next batch of its Locker).
    tokio::time::sleep(INTERVAL * 3 / 2).await;

    // Count over several intervals, longer than the TTL: every lease must have been renewed.
    let window = INTERVAL * 4;
    let before = evalsha_calls(&mut admin).await;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let calls = evalsha_calls(&mut admin).await - before;
    let elapsed = started.elapsed().as_secs_f64();
    let per_interval = calls as f64 / (elapsed / INTERVAL.as_secs_f64());
    eprintln!(
        "{} leases (1100 default + 300 plain): {calls} EVALSHA in {elapsed:.2} s = {per_interval:.1} per \
         renewal interval (4 expected: 3 chunks + 1)",
        held.len()
    );
    assert!(held.iter().all(|g| g.is_held()), "a lease was lost although renewed");
    assert!(calls >= 1, "no renewal reached the server");
    assert!(
        per_interval <= 10.0,
        "{calls} EVALSHA in {elapsed:.2} s for {} leases: renewal is not batched",
        held.len()
    );

    // One lease per layout taken away behind its holder's back: only those two are lost.
    let mut conn = admin.clone();
    let gone_default = held.remove(7);
    let keys = locksmith_redis::LockKeys::for_url(
        &locksmith_core::driver::BackendUrl::parse(&server).unwrap(),
        &locksmith_core::driver::LockName::new(gone_default.name()).unwrap(),
    )
    .unwrap();
    let deleted: i64 = redis::cmd("DEL")
        .arg(&keys.lock)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1);
    let gone_plain = held.remove(1100); // the first plain lease: its key is the raw name
    let _: () = redis::cmd("SET")
        .arg(gone_plain.name())
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .expect("SET");
    within(Duration::from_secs(30), "lost() (default layout)", gone_default.lost()).await;
    within(Duration::from_secs(30), "lost() (plain layout)", gone_plain.lost()).await;

    // The server forgets its scripts: the next renewal gets NOSCRIPT, loads RENEW_MANY, resends.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("SCRIPT FLUSH");
    tokio::time::sleep(TTL + INTERVAL).await;
    let lost: Vec<&str> = held.iter().filter(|g| !g.is_held()).map(|g| g.name()).collect();
    assert!(lost.is_empty(), "lost after SCRIPT FLUSH: {lost:?}");

    for g in held {
        g.release().await.expect("release");
    }
    let _: i64 = redis::cmd("DEL")
        .arg(gone_plain.name())
        .query_async(&mut conn)
        .await
        .expect("DEL");
    assert!(gone_default.release().await.is_err() && gone_plain.release().await.is_err());
}
