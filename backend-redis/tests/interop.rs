//! Plain layout against clients that know nothing of locksmith: a holder that took the lock with
//! a raw `SET name token NX PX ttl` (redis-py's `Lock`, redsync, node-redlock) blocks locksmith,
//! and locksmith's holder blocks such a `SET NX`.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use locksmith_core::LockError;

/// What redis-py's `Lock.release()` / redsync's unlock run: delete only if the value is ours.
const RAW_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

async fn raw_set_nx(conn: &mut redis::aio::MultiplexedConnection, name: &str, token: &str, ttl_ms: u64) -> bool {
    let reply: Option<String> = redis::cmd("SET")
        .arg(name)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await
        .expect("SET");
    reply.as_deref() == Some("OK")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_holder_blocks_locksmith_until_it_releases() {
    let url = common::with_options(&common::redis_url(), "layout=plain");
    let mut raw = common::admin(&url).await;
    let locker = common::locker(&url).await;
    let name = unique_name("interop_raw_holder");

    assert!(
        raw_set_nx(&mut raw, &name, "redis-py-token", 30_000).await,
        "the raw client takes the free lock"
    );
    assert!(
        locker.lock(&name).try_acquire().await.expect("try").is_none(),
        "locksmith took a raw holder's lock"
    );
    let timed_out = locker.lock(&name).timeout(Duration::from_millis(300)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");

    // inspect shows the foreign holder as it is.
    let info = locker
        .backend()
        .inspect(&LockName::new(&name).unwrap())
        .await
        .expect("inspect");
    let holder = info.holder.expect("a holder");
    assert_eq!(holder.holder_id, "redis-py-token");
    assert_eq!(holder.fencing_token, None);

    // A locksmith waiter queues; the raw client releases early (it publishes nothing): the head
    // waiter's backoff re-check notices within about a second, long before the 30 s TTL.
    let waiter = tokio::spawn({
        let (locker, name) = (locker.clone(), name.clone());
        async move { locker.lock(&name).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deleted: i64 = redis::Script::new(RAW_RELEASE)
        .key(&name)
        .arg("redis-py-token")
        .invoke_async(&mut raw)
        .await
        .expect("raw release");
    assert_eq!(deleted, 1);
    let guard = within(Duration::from_secs(10), "locksmith after the raw release", waiter)
        .await
        .unwrap()
        .expect("acquire");
    guard.release().await.expect("release");
}

/// A foreign holder whose token is raw bytes, not text (rslock stores 20 random bytes): locksmith
/// is kept out as by any holder, and `inspect` shows the token in hex instead of failing (it
/// answered an error: the value was read as a UTF-8 string).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_holder_with_a_binary_token_is_shown_in_hex() {
    let url = common::with_options(&common::redis_url(), "layout=plain");
    let mut raw = common::admin(&url).await;
    let locker = common::locker(&url).await;
    let name = unique_name("interop_binary_token");
    let token: Vec<u8> = vec![0xff, 0xfe, 0x00, 0x41];
    let reply: Option<String> = redis::cmd("SET")
        .arg(&name)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut raw)
        .await
        .expect("SET");
    assert_eq!(reply.as_deref(), Some("OK"));
    assert!(locker.lock(&name).try_acquire().await.expect("try").is_none());
    let info = locker
        .backend()
        .inspect(&LockName::new(&name).unwrap())
        .await
        .expect("inspect a binary token");
    assert_eq!(info.holder.expect("a holder").holder_id, "hex:fffe0041");
    let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.expect("DEL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_holder_blocks_raw_set_nx() {
    let url = common::with_options(&common::redis_url(), "layout=plain");
    let mut raw = common::admin(&url).await;
    let locker = common::locker(&url).await;
    let name = unique_name("interop_locksmith_holder");

    let guard = locker.lock(&name).acquire().await.expect("acquire");
    assert!(
        !raw_set_nx(&mut raw, &name, "redsync-token", 10_000).await,
        "a raw SET NX took a locksmith lock"
    );
    // The key is exactly the name; its value starts with the holder's token.
    let value: String = redis::cmd("GET").arg(&name).query_async(&mut raw).await.expect("GET");
    assert!(value.starts_with(&guard.lease().holder_id), "{value}");
    // A raw compare-and-delete with another token does not remove it.
    let deleted: i64 = redis::Script::new(RAW_RELEASE)
        .key(&name)
        .arg("redsync-token")
        .invoke_async(&mut raw)
        .await
        .expect("raw release");
    assert_eq!(deleted, 0);
    guard.release().await.expect("release");
    assert!(
        raw_set_nx(&mut raw, &name, "redsync-token", 10_000).await,
        "the raw client takes the released lock"
    );
    let _: i64 = redis::Script::new(RAW_RELEASE)
        .key(&name)
        .arg("redsync-token")
        .invoke_async(&mut raw)
        .await
        .expect("raw release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_holder_that_expires_hands_over_at_its_ttl() {
    let url = common::with_options(&common::redis_url(), "layout=plain");
    let mut raw = common::admin(&url).await;
    let locker = common::locker(&url).await;
    let name = unique_name("interop_raw_expiry");
    assert!(raw_set_nx(&mut raw, &name, "crashed-old-client", 700).await);
    let start = tokio::time::Instant::now();
    let guard = within(
        Duration::from_secs(10),
        "acquire after the raw holder expired",
        locker.lock(&name).acquire(),
    )
    .await
    .expect("acquire");
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "took the lock long before the raw holder's TTL"
    );
    guard.release().await.expect("release");
}

/// With `poller_gap`, locksmith clients that keep handing the lock to each other leave it free
/// for a moment every `max_pass_over`, so that an old client which polls with `SET NX` (redis-py
/// sleeps 0.1 s between tries) gets it within about `max_pass_over + poller_gap + its interval`.
/// (Without it such a poller can be passed over for as long as locksmith waiters keep coming:
/// they hand over in about a millisecond.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_client_is_passed_over_for_at_most_max_pass_over() {
    let url = common::with_options(
        &common::redis_url(),
        "layout=plain&poller_gap=150ms&max_pass_over=500ms",
    );
    let name = unique_name("interop_poller");
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let rounds = std::sync::Arc::new(AtomicU32::new(0));
    let mut lockers = Vec::new();
    for _ in 0..4 {
        lockers.push(common::locker(&url).await);
    }
    let mut workers = Vec::new();
    for locker in lockers {
        let (name, stop, rounds) = (name.clone(), stop.clone(), rounds.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let guard = locker.lock(&name).acquire().await.expect("acquire");
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await.expect("release");
                rounds.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // The poller comes only once the locksmith clients are handing the lock to each other (a
    // count, not a sleep: on a loaded machine a fixed sleep may end before they have started).
    within(Duration::from_secs(30), "the locksmith clients get busy", async {
        while rounds.load(Ordering::SeqCst) < 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let mut raw = common::admin(&url).await;
    let start = tokio::time::Instant::now();
    let waited = within(Duration::from_secs(30), "the polling client", async {
        loop {
            if raw_set_nx(&mut raw, &name, "redis-py-poller", 5_000).await {
                return start.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let _: i64 = redis::Script::new(RAW_RELEASE)
        .key(&name)
        .arg("redis-py-poller")
        .invoke_async(&mut raw)
        .await
        .expect("raw release");
    let before = rounds.load(Ordering::SeqCst);
    // The locksmith clients go on after the poller has had its turn.
    within(
        Duration::from_secs(30),
        "the locksmith clients after the poller",
        async {
            while rounds.load(Ordering::SeqCst) < before + 5 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        within(Duration::from_secs(30), "a locksmith worker", w)
            .await
            .expect("worker");
    }
    let rounds = rounds.load(Ordering::SeqCst);
    eprintln!("the poller waited {waited:?}; locksmith clients took the lock {rounds} times");
    assert!(
        waited <= Duration::from_millis(500 + 150 + 100) + Duration::from_secs(2),
        "the polling client was passed over for {waited:?}"
    );
}
