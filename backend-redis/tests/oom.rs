//! A Redis server over `maxmemory` (with the default `noeviction` policy) refuses what needs
//! memory, a new grant among them, but a holder can still give its lock up: the scripts that
//! release or leave run out of memory too (`allow-oom` on their functions; a plain script runs
//! until a write that needs memory, which `DEL` and `ZREM` are not). Before that flag, a full
//! server kept every lock until its TTL. Its own test binary: it makes the shared test server
//! refuse writes for a moment (its tests one at a time, [`SERVER`]).
//!
//! The single test server is the one with `noeviction` (the policy locksmith insists on,
//! `tests/eviction.rs`), so it is the one that can run out of memory: what a full server does to
//! locks is tested here, on it, briefly, rather than on the evicting server of
//! `LOCKSMITH_TEST_REDIS_EVICTING`, whose policy is the point of its own tests.

mod common;

use std::time::{Duration, Instant};

use locksmith_core::conformance::unique_name;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::LockError;
use locksmith_redis::LockKeys;

/// The tests of this binary change the shared server's `maxmemory`: one at a time.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_out_of_memory_still_takes_releases() {
    let _alone = SERVER.lock().await;
    common::init_logs();
    let url = common::redis_url();
    let mut admin = common::admin(&url).await;
    let locker = common::locker(&url).await;
    let name = unique_name("oom");
    let held = locker.lock(&name).acquire().await.expect("acquire");
    let permit = locker.semaphore(&name, 2).acquire().await.expect("a permit");

    let before: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(&mut admin)
        .await
        .expect("CONFIG GET");
    let before = before.get(1).cloned().unwrap_or_else(|| "0".into());
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory");
    // Everything that must be checked runs before the limit is lifted again; the assertions after.
    let refused = locker.lock(unique_name("oom_other")).try_acquire().await;
    let released = held.release().await;
    let permit_released = permit.release().await;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(&before)
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory back");

    assert!(refused.is_err(), "a grant on a server out of memory: {refused:?}");
    released.expect("releasing on a server out of memory");
    permit_released.expect("releasing a permit on a server out of memory");
    // Given up for real: the lock is free at once.
    let again = locker.lock(&name).try_acquire().await.expect("try again");
    assert!(again.is_some(), "the released lock is still held");
    again.unwrap().release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
}

/// The server's `maxmemory` (as a string, for setting it back).
async fn maxmemory(admin: &mut redis::aio::MultiplexedConnection) -> String {
    let answer: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query_async(admin)
        .await
        .expect("CONFIG GET");
    answer.get(1).cloned().unwrap_or_else(|| "0".into())
}

/// A `noeviction` server filled to its `maxmemory` with other keys, while a lock is held: a new
/// grant fails at once with an error that names the cause (no panic, no hang, no grant), and the
/// held lock keeps its key through three TTLs (renewing needs no memory), or, if it could not be
/// kept, its holder is told (`lost()`) before the key is gone. Never a key gone while its holder
/// believes it holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refuses_grants_clearly_and_keeps_held_locks() {
    let _alone = SERVER.lock().await;
    common::init_logs();
    let url = common::redis_url();
    let mut admin = common::admin(&url).await;
    let policy: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut admin)
        .await
        .expect("CONFIG GET");
    assert_eq!(
        policy.get(1).map(String::as_str),
        Some("noeviction"),
        "the test needs noeviction"
    );
    let ttl = Duration::from_secs(1);
    let locker = common::locker(&url).await;
    let name = unique_name("full");
    let held = locker.lock(&name).ttl(ttl).acquire().await.expect("acquire");
    let keys = LockKeys::for_url(&BackendUrl::parse(&url).unwrap(), &LockName::new(&name).unwrap()).unwrap();

    let before = maxmemory(&mut admin).await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut admin)
        .await
        .expect("INFO");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg((used + (2 << 20)).to_string())
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory");
    // Other keys until the server refuses one: it is full.
    let filler = unique_name("filler");
    let value = "x".repeat(64 << 10);
    let mut written = 0;
    // At most 64 MB; whatever happens, the server is emptied and its maxmemory set back before
    // anything is asserted.
    let full = loop {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("{filler}:{written}"))
            .arg(&value)
            .query_async(&mut admin)
            .await;
        match set {
            Ok(()) => {
                written += 1;
                if written == 1000 {
                    break None;
                }
            }
            Err(e) => break Some(e),
        }
    };
    // Full, and kept full: once the refused value's query buffer is freed, the server is a few
    // kilobytes under its maxmemory again and would take a small write. Just under what it uses
    // now, it takes none that needs memory.
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut admin)
        .await
        .expect("INFO");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used.saturating_sub(256 << 10).max(1).to_string())
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory");

    // Everything that must be checked runs before the server is emptied again; the assertions after.
    let start = Instant::now();
    let refused = locker
        .lock(unique_name("full_other"))
        .ttl(ttl)
        .timeout(Duration::from_secs(2))
        .acquire()
        .await;
    let refused_in = start.elapsed();
    let tried = locker.lock(unique_name("full_try")).ttl(ttl).try_acquire().await;
    let mut checks = Vec::new();
    let watch_until = Instant::now() + 3 * ttl;
    while Instant::now() < watch_until {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&keys.lock)
            .query_async(&mut admin)
            .await
            .expect("PTTL");
        // Read the key first: `lost()` fires before the key can be gone, so a gone key with a
        // guard that still believes in it is a silent loss.
        checks.push((pttl, held.is_held()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let still_held = held.is_held();

    for i in 0..written {
        let _: () = redis::cmd("DEL")
            .arg(format!("{filler}:{i}"))
            .query_async(&mut admin)
            .await
            .expect("DEL");
    }
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(&before)
        .exec_async(&mut admin)
        .await
        .expect("CONFIG SET maxmemory back");

    let full = full.expect("64 MB written and the server is not full");
    assert_eq!(full.code(), Some("OOM"), "{full}");
    let e = refused.expect_err("a grant on a full server");
    assert!(
        refused_in < Duration::from_secs(5),
        "the refused acquire took {refused_in:?}"
    );
    let said = e.to_string();
    assert!(said.contains("OOM") || said.contains("maxmemory"), "{e:?}");
    assert!(!matches!(e, LockError::Timeout(_)), "{e:?}");
    assert!(tried.is_err(), "a try on a full server: {tried:?}");
    for (pttl, believed) in &checks {
        assert!(
            !believed || *pttl > 0,
            "the lock key was gone (PTTL {pttl}) while its holder held it: {checks:?}"
        );
    }
    assert!(
        still_held,
        "the held lock was lost on a full server that needs no memory to renew it"
    );
    held.release().await.expect("release");
    locker.shutdown().await.expect("shutdown");
}
