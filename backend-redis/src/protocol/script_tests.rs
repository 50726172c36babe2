//! Every script's behaviour on a real server (`LOCKSMITH_TEST_REDIS`, started by
//! `scripts/backends`), called with raw KEYS and ARGV as the backend sends them: what each one
//! answers and what it leaves in the keys. The backend's own tests cover the same scripts
//! through the API; these pin the scripts' contract (the reply shapes the Rust side parses).

use futures_util::StreamExt;
use locksmith_core::conformance::{env_url, unique_name};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::Family;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, FromRedisValue, Script, Value};

use crate::config::Layout;
use crate::conn::call::{ScriptCall, ScriptMode};
use crate::layout::{KindKeys, LockKeys};
use crate::protocol::library::LuaScript;
use crate::protocol::scripts::{LockScripts, SCRIPTS};

const PREFIX: &str = "locksmith-scripts:";
const TTL: &str = "10000";
const WAITER_TTL: &str = "30000";
/// Holder tokens as the backend makes them (128 bits in hex: a holder with another value is a
/// foreign client's, which the mutex's waiters poll).
const A: &str = "000000000000000000000000000000aa";
const B: &str = "000000000000000000000000000000bb";
const C: &str = "000000000000000000000000000000cc";
const W: &str = "000000000000000000000000000000dd";

async fn connect() -> MultiplexedConnection {
    let url = BackendUrl::parse(&env_url("LOCKSMITH_TEST_REDIS")).expect("url");
    let client = redis::Client::open(format!("redis://{}/", url.hosts[0].to_addr(6379))).expect("client");
    client.get_multiplexed_async_connection().await.expect("connect")
}

/// Restart delay off (the server may have just started), fences from the clock, no poller gap.
fn scripts() -> LockScripts {
    LockScripts::new("time", 0, 0, 0, true)
}

fn name(test: &str) -> LockName {
    LockName::new(&unique_name(test)).expect("name")
}

async fn run<T: FromRedisValue>(
    conn: &mut MultiplexedConnection,
    script: &LuaScript,
    keys: &[&str],
    args: &[&str],
) -> T {
    let mode = ScriptMode::default();
    let mut call = ScriptCall::new(script, keys, &mode, "test");
    for arg in args {
        call.arg(*arg);
    }
    call.invoke(conn).await.expect("script")
}

/// Runs `script`, a plain script (the watchdog's batches), on `keys` and `args`.
async fn run_plain<T: FromRedisValue>(
    conn: &mut MultiplexedConnection,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> T {
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    for arg in args {
        call.arg(*arg);
    }
    call.invoke_async(conn).await.expect("script")
}

#[tokio::test]
async fn mutex_scripts_grant_queue_hand_over_and_release_by_token_only() {
    let mut c = connect().await;
    // Releases that only wake the head (as with several masters or `min_replicas`); the hand-over
    // has a test of its own below.
    let s = LockScripts::new("time", 0, 0, 0, false);
    let k = LockKeys::new(PREFIX, Layout::Default, &name("mutex"));
    let take = k.lock_script_keys();
    let take = &take[..4];
    let leave = k.leave_script_keys();
    let leave = &leave[..];
    let wake = k.wake.as_str();

    // A free lock: granted, stored as `<token>:<fence>:<ttl>` with the TTL.
    let [granted, f1]: [i64; 2] = run::<Vec<i64>>(&mut c, &s.mutex.try_acquire, take, &[A, TTL, wake])
        .await
        .try_into()
        .expect("two fields");
    assert_eq!(granted, 1);
    assert!(f1 > 0);
    assert_eq!(c.get::<_, String>(&k.lock).await.unwrap(), format!("{A}:{f1}:{TTL}"));
    let pttl: i64 = c.pttl(&k.lock).await.unwrap();
    assert!(pttl > 0 && pttl <= 10_000, "{pttl}");
    // Taken: busy, with the holder's PTTL; an attempt queues nothing.
    let busy: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[B, TTL, wake]).await;
    assert!(busy[0] == 0 && busy[1] > 0, "{busy:?}");
    assert!(!c.exists::<_, bool>(&k.queue).await.unwrap());
    // A waiter's step queues it: head, the holder's PTTL, a locksmith holder (not foreign).
    let step: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[B, TTL, wake, WAITER_TTL]).await;
    assert!(
        step.len() == 5 && step[0] == 0 && step[1] == 1 && step[2] > 0 && step[3] == 0 && step[4] > 0,
        "{step:?}"
    );
    assert!(c.zscore::<_, _, Option<f64>>(&k.queue, B).await.unwrap().is_some());
    // Only the holder's token releases.
    assert_eq!(run::<i64>(&mut c, &s.mutex.release, take, &[B, wake]).await, 0);
    assert_eq!(c.get::<_, String>(&k.lock).await.unwrap(), format!("{A}:{f1}:{TTL}"));
    assert_eq!(run::<i64>(&mut c, &s.mutex.release, take, &[A, wake]).await, 1);
    assert!(!c.exists::<_, bool>(&k.lock).await.unwrap());
    // Freed with a waiter queued: an attempt by another is refused (FIFO), the head's step takes it
    // with a larger fence and leaves the queue.
    let barged: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[C, TTL, wake]).await;
    assert_eq!(barged[0], 0, "{barged:?}");
    let step: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[B, TTL, wake, WAITER_TTL]).await;
    assert!(step[0] == 1 && step[1] > f1, "{step:?}");
    assert!(c.zscore::<_, _, Option<f64>>(&k.queue, B).await.unwrap().is_none());
    // Run again (a resend after a dropped connection): the same answer.
    let again: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[B, TTL, wake, WAITER_TTL]).await;
    assert_eq!(again, step);
    // LEAVE of a waiter that was granted gives the lock back.
    assert_eq!(run::<i64>(&mut c, &s.mutex.leave, leave, &[B, wake]).await, 1);
    assert!(!c.exists::<_, bool>(&k.lock).await.unwrap());
    assert_eq!(run::<i64>(&mut c, &s.mutex.leave, leave, &[B, wake]).await, 0);
}

/// A release hands the lock to the live head of the queue itself: the head's TTL from its last
/// step, a larger fencing token, the head out of the queue, and one message that names the token
/// and the deadline that step set. A head that left no TTL (an older version's waiter) is only
/// woken, and the lock stays free for its step.
#[tokio::test]
async fn a_release_hands_the_lock_to_the_live_head() {
    let url = BackendUrl::parse(&env_url("LOCKSMITH_TEST_REDIS")).expect("url");
    let client = redis::Client::open(format!("redis://{}/", url.hosts[0].to_addr(6379))).expect("client");
    let mut c = client.get_multiplexed_async_connection().await.expect("connect");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    let s = scripts();
    let k = LockKeys::new(PREFIX, Layout::Default, &name("mutex_hand_over"));
    let take = k.lock_script_keys();
    let take = &take[..4];
    let wake = k.wake.as_str();
    pubsub.subscribe(k.channel(B)).await.expect("subscribe");
    let mut messages = pubsub.into_on_message();

    let granted: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[A, TTL, wake]).await;
    let step: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[B, "2500", wake, WAITER_TTL]).await;
    assert!(step.len() == 5 && step[0] == 0, "{step:?}");
    let deadline = step[4];
    assert_eq!(run::<i64>(&mut c, &s.mutex.release, take, &[A, wake]).await, 1);
    let message: String = messages.next().await.expect("a message").get_payload().unwrap();
    let value: String = c.get(&k.lock).await.unwrap();
    let fence: i64 = value.split(':').nth(1).unwrap().parse().unwrap();
    assert!(fence > granted[1], "{fence} after {}", granted[1]);
    assert_eq!(value, format!("{B}:{fence}:2500"));
    assert_eq!(message, format!("grant:{fence}:{deadline}"));
    let pttl: i64 = c.pttl(&k.lock).await.unwrap();
    assert!(pttl > 0 && pttl <= 2500, "{pttl}");
    assert!(c.zscore::<_, _, Option<f64>>(&k.queue, B).await.unwrap().is_none());
    assert!(c.hkeys::<_, Vec<String>>(&k.alive).await.unwrap().is_empty());
    // The head's step, had it come first or been sent again, finds the lock its own.
    let again: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[B, TTL, wake, WAITER_TTL]).await;
    assert_eq!(again, [1, fence]);

    // A head with no TTL beside its deadline is woken, not granted.
    let step: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[A, TTL, wake, WAITER_TTL]).await;
    assert_eq!(step[0], 0);
    let _: i64 = c.hdel(&k.alive, format!("{A}/ttl")).await.unwrap();
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(k.channel(A)).await.expect("subscribe");
    let mut messages = pubsub.into_on_message();
    assert_eq!(run::<i64>(&mut c, &s.mutex.release, take, &[B, wake]).await, 1);
    let message: String = messages.next().await.expect("a message").get_payload().unwrap();
    assert_eq!(message, "wake");
    assert!(!c.exists::<_, bool>(&k.lock).await.unwrap());
    let _: i64 = run(&mut c, &s.mutex.leave, &k.leave_script_keys(), &[A, wake]).await;
    let _: () = c.del(&[&k.lock, &k.queue, &k.alive, &k.fence]).await.unwrap();
}

/// A server clock stepped back by an hour gives every key an hour more (Redis keeps absolute
/// expiry times): a dead holder's 2 s lock would stay held for an hour. The next contender's
/// attempt or step cuts a key with more time left than its holder was granted back to that TTL.
#[tokio::test]
async fn a_lock_that_outlived_its_granted_ttl_is_cut_back_by_the_next_contender() {
    let mut c = connect().await;
    let s = scripts();
    let k = LockKeys::new(PREFIX, Layout::Default, &name("mutex_clock_back"));
    let take = k.lock_script_keys();
    let take = &take[..4];
    let wake = k.wake.as_str();
    let granted: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[A, "2000", wake]).await;
    assert_eq!(granted[0], 1);
    // What a backward step of one hour does to the key; its holder is gone (renews no more).
    let hour_more = || redis::cmd("PEXPIRE").arg(&k.lock).arg(3_600_000).clone();
    let _: i64 = hour_more().query_async(&mut c).await.unwrap();
    let busy: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[B, TTL, wake]).await;
    assert!(busy[0] == 0 && (1..=2000).contains(&busy[1]), "{busy:?}");
    let pttl: i64 = c.pttl(&k.lock).await.unwrap();
    assert!((1..=2000).contains(&pttl), "the key keeps {pttl} ms");
    // A waiter's step bounds it the same way, and says how long to wait.
    let _: i64 = hour_more().query_async(&mut c).await.unwrap();
    let step: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[W, TTL, wake, WAITER_TTL]).await;
    assert!(step[0] == 0 && (1..=2000).contains(&step[2]), "{step:?}");
    assert!((1..=2000).contains(&c.pttl::<_, i64>(&k.lock).await.unwrap()));
    // The holder still holds, and its renewal gives it its TTL again.
    let flags: Vec<i64> = run_plain(&mut c, &SCRIPTS.renew_mutexes, &[&k.lock], &[A, "2000"]).await;
    assert_eq!(flags, [1]);
    // A value without a TTL (another client's, an older version's) is left as it is.
    for foreign in ["some-redis-py-uuid".to_owned(), format!("{A}:7")] {
        let _: () = c
            .set_options(
                &k.lock,
                &foreign,
                redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(3_600_000)),
            )
            .await
            .unwrap();
        let busy: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[B, TTL, wake]).await;
        assert!(busy[0] == 0 && busy[1] > 3_000_000, "{foreign}: {busy:?}");
    }
    let _: () = c.del(&[&k.lock, &k.queue, &k.alive, &k.fence]).await.unwrap();
}

#[tokio::test]
async fn mutex_renewal_raise_fence_and_inspect_act_only_for_the_holder() {
    let mut c = connect().await;
    let s = scripts();
    let k = LockKeys::new(PREFIX, Layout::Default, &name("mutex_renew"));
    let take = k.lock_script_keys();
    let wake = k.wake.as_str();
    let granted: Vec<i64> = run(&mut c, &s.mutex.try_acquire, &take[..4], &[A, "1000", wake]).await;
    assert_eq!(granted[0], 1);
    // RENEW_MANY: one flag per lease, extended only where the token holds.
    let flags: Vec<i64> = run_plain(
        &mut c,
        &SCRIPTS.renew_mutexes,
        &[&k.lock, &k.lock],
        &[A, "60000", B, "60000"],
    )
    .await;
    assert_eq!(flags, [1, 0]);
    let pttl: i64 = c.pttl(&k.lock).await.unwrap();
    assert!(pttl > 1000, "{pttl}");
    // RAISE_FENCE: only for the holder, and the counter goes up to the value.
    let target = (granted[1] + 100).to_string();
    assert_eq!(
        run::<i64>(&mut c, &SCRIPTS.raise_fence, &[&k.lock, &k.fence], &[B, &target]).await,
        0
    );
    assert_eq!(
        run::<i64>(&mut c, &SCRIPTS.raise_fence, &[&k.lock, &k.fence], &[A, &target]).await,
        1
    );
    assert_eq!(c.get::<_, i64>(&k.fence).await.unwrap(), granted[1] + 100);
    // INSPECT: the value, its PTTL and the live waiters.
    run::<Vec<i64>>(&mut c, &s.mutex.wait_step, &take[..4], &[W, TTL, wake, WAITER_TTL]).await;
    let (value, pttl, waiters): (Option<String>, i64, usize) =
        run(&mut c, &SCRIPTS.inspect, &[&k.lock, &k.queue, &k.alive], &[]).await;
    assert_eq!(value, Some(format!("{A}:{}:1000", granted[1])));
    assert!(pttl > 0 && waiters == 1, "{pttl} {waiters}");
    let _: i64 = run(&mut c, &s.mutex.release, &take[..4], &[A, wake]).await;
    let _: i64 = run(&mut c, &s.mutex.leave, &k.leave_script_keys(), &[W, wake]).await;
}

/// The server's clock in microseconds.
async fn server_us(c: &mut MultiplexedConnection) -> i64 {
    let t: Vec<String> = redis::cmd("TIME").query_async(c).await.unwrap();
    t[0].parse::<i64>().unwrap() * 1_000_000 + t[1].parse::<i64>().unwrap()
}

/// A fencing counter with the time floor expires (an hour after its lease) and starts again at
/// the server's clock. One raised above that clock (a quorum's token from a master whose clock is
/// ahead: RAISE_FENCE; or counted on past a clock set back: the grant's `next_fence`) must not
/// expire before the clock has passed it, or the next token comes out below it. (Before, both
/// kept the counter's expiry as it was.)
#[tokio::test]
async fn a_fencing_counter_ahead_of_the_clock_outlives_it() {
    let mut c = connect().await;
    let s = scripts();
    let k = LockKeys::new(PREFIX, Layout::Default, &name("fence_ahead"));
    let take = k.lock_script_keys();
    let wake = k.wake.as_str();
    // A counter near its expiry, as an hour of use leaves it.
    let near_expiry = |value: i64| {
        redis::cmd("SET")
            .arg(&k.fence)
            .arg(value.to_string())
            .arg("PX")
            .arg(5000)
            .clone()
    };
    let now = server_us(&mut c).await;
    let _: () = near_expiry(now).query_async(&mut c).await.unwrap();
    let granted: Vec<i64> = run(&mut c, &s.mutex.try_acquire, &take[..4], &[A, "1000", wake]).await;
    assert_eq!(granted[0], 1);
    let ahead = now + 60_000_000;
    assert_eq!(
        run::<i64>(
            &mut c,
            &SCRIPTS.raise_fence,
            &[&k.lock, &k.fence],
            &[A, &ahead.to_string()]
        )
        .await,
        1
    );
    let pttl: i64 = c.pttl(&k.fence).await.unwrap();
    assert!(
        pttl > 60_000,
        "raised 60 s ahead of the clock, the counter expires in {pttl} ms"
    );
    let _: i64 = run(&mut c, &s.mutex.release, &take[..4], &[A, wake]).await;

    let now = server_us(&mut c).await;
    let ahead = now + 60_000_000;
    let _: () = near_expiry(ahead).query_async(&mut c).await.unwrap();
    let granted: Vec<i64> = run(&mut c, &s.mutex.try_acquire, &take[..4], &[B, "1000", wake]).await;
    assert_eq!(granted, [1, ahead + 1]);
    let pttl: i64 = c.pttl(&k.fence).await.unwrap();
    assert!(
        pttl > 60_000,
        "counted on 60 s ahead of the clock, the counter expires in {pttl} ms"
    );
    let _: i64 = run(&mut c, &s.mutex.release, &take[..4], &[B, wake]).await;

    // A counter at the clock keeps its expiry (no write for nothing).
    let now = server_us(&mut c).await;
    let _: () = near_expiry(now).query_async(&mut c).await.unwrap();
    let granted: Vec<i64> = run(&mut c, &s.mutex.try_acquire, &take[..4], &[C, "1000", wake]).await;
    assert_eq!(granted[0], 1);
    let pttl: i64 = c.pttl(&k.fence).await.unwrap();
    assert!((0..=5000).contains(&pttl), "{pttl}");
    let _: i64 = run(&mut c, &s.mutex.release, &take[..4], &[C, wake]).await;
    let _: () = c.del(&[&k.lock, &k.queue, &k.alive, &k.fence]).await.unwrap();
}

/// The ARGV of a lock script of the other kinds: entry, TTL, wake prefix, waiter TTL, leader
/// channel, campaign value.
fn kind_args<'a>(k: &'a KindKeys, entry: &'a str, value: &'a str) -> [&'a str; 6] {
    [entry, TTL, &k.wake, WAITER_TTL, k.announce(), value]
}

#[tokio::test]
async fn semaphore_scripts_grant_n_permits_in_order_and_refuse_another_count() {
    let mut c = connect().await;
    let s = scripts();
    let k = KindKeys::new(PREFIX, Family::Semaphore, &name("semaphore"));
    let keys = k.script_keys();
    let call = |entry: &'static str| kind_args(&k, entry, "");
    let mut fences = Vec::new();
    for entry in ["P2:a", "P2:b"] {
        let granted: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &call(entry)).await;
        assert_eq!(granted[0], 1, "{entry}: {granted:?}");
        fences.push(granted[1]);
    }
    assert!(fences[1] > fences[0]);
    assert_eq!(c.zcard::<_, usize>(&k.holders).await.unwrap(), 2);
    let full: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &call("P2:c")).await;
    assert_eq!(full[0], 0, "{full:?}");
    // Another permit count: refused with the semaphore's count.
    let other: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &call("P3:d")).await;
    assert_eq!(other, [-1, 2]);
    // A waiter queues, is granted when a permit is released, and the release answers once.
    let waiting: Vec<i64> = run(&mut c, &s.kinds.wait_step, &keys, &call("P2:c")).await;
    assert_eq!(waiting[0], 0, "{waiting:?}");
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call("P2:a")).await, 1);
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call("P2:a")).await, 0);
    let granted: Vec<i64> = run(&mut c, &s.kinds.wait_step, &keys, &call("P2:c")).await;
    assert!(granted[0] == 1 && granted[1] > fences[1], "{granted:?}");
    // RENEW_MANY of the kinds: holders set and holder data of each; a released entry is gone.
    let flags: Vec<i64> = run_plain(
        &mut c,
        &SCRIPTS.renew_kinds,
        &[&k.holders, &k.info, &k.holders, &k.info],
        &["P2:c", "60000", "P2:a", "60000"],
    )
    .await;
    assert_eq!(flags, [1, 0]);
    // LEAVE of a granted entry gives the permit back.
    assert_eq!(run::<i64>(&mut c, &s.kinds.leave, &keys, &call("P2:c")).await, 1);
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call("P2:b")).await, 1);
    assert_eq!(c.zcard::<_, usize>(&k.holders).await.unwrap(), 0);
}

/// The other kinds and the waiters under a server clock stepped back by an hour: a dead holder's
/// deadline (a score on the server's clock) is cut back to the longest TTL a holder was granted,
/// a dead waiter's liveness to three waiter TTLs, by the next call that prunes.
#[tokio::test]
async fn deadlines_further_than_anything_granted_are_cut_back() {
    let mut c = connect().await;
    let s = scripts();
    let k = KindKeys::new(PREFIX, Family::Semaphore, &name("kinds_clock_back"));
    let keys = k.script_keys();
    let call = |entry: &'static str| kind_args(&k, entry, "");
    let granted: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &call("P1:a")).await;
    assert_eq!(granted[0], 1);
    let waiting: Vec<i64> = run(&mut c, &s.kinds.wait_step, &keys, &call("P1:b")).await;
    assert_eq!(waiting[0], 0);
    // What a step back of one hour does to both; their processes are gone.
    let hour = 3_600_000.0;
    let _: f64 = c.zincr(&k.holders, "P1:a", hour).await.unwrap();
    let _: f64 = c.zincr(&k.alive, "P1:b", hour).await.unwrap();
    let full: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &call("P1:c")).await;
    assert_eq!(full[0], 0, "{full:?}");
    let now = server_ms(&mut c).await;
    let holder: f64 = c.zscore(&k.holders, "P1:a").await.unwrap();
    assert!(
        holder as i64 <= now + 10_000,
        "the holder keeps {} ms",
        holder as i64 - now
    );
    let waiter: f64 = c.zscore(&k.alive, "P1:b").await.unwrap();
    assert!(
        waiter as i64 <= now + 90_000,
        "the waiter keeps {} ms",
        waiter as i64 - now
    );
    // The last holder gone, its record of TTLs goes too.
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call("P1:a")).await, 1);
    assert_eq!(run::<i64>(&mut c, &s.kinds.leave, &keys, &call("P1:b")).await, 0);
    assert!(!c.exists::<_, bool>(&k.info).await.unwrap());

    // The mutex's head waiter the same way (its holder's key: see the test above).
    let m = LockKeys::new(PREFIX, Layout::Default, &name("mutex_waiter_clock_back"));
    let take = m.lock_script_keys();
    let take = &take[..4];
    let wake = m.wake.as_str();
    let _: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[A, TTL, wake]).await;
    let _: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[W, TTL, wake, WAITER_TTL]).await;
    let far = server_ms(&mut c).await + 3_600_000;
    let _: () = c.hset(&m.alive, W, far).await.unwrap();
    let _: Vec<i64> = run(&mut c, &s.mutex.wait_step, take, &[B, TTL, wake, WAITER_TTL]).await;
    let now = server_ms(&mut c).await;
    let head: i64 = c.hget(&m.alive, W).await.unwrap();
    assert!(head <= now + 90_000, "the head waiter keeps {} ms", head - now);
    let _: () = c.del(&[&m.lock, &m.queue, &m.alive, &m.fence]).await.unwrap();
}

/// A grant found again (a resend, or a step after a grant that was not confirmed in time and was
/// then replicated to the promoted replica) starts its lease again: the caller counts the lease
/// from this call. It answered with the old lease's remainder before, which a chaos run caught: a
/// holder whose acquire returned with 0.4 s of a 4 s lease left, overlapped by the next holder.
#[tokio::test]
async fn a_grant_found_again_starts_its_lease_again() {
    let mut c = connect().await;
    let s = scripts();
    let m = LockKeys::new(PREFIX, Layout::Default, &name("mutex_found_again"));
    let take = m.lock_script_keys();
    let take = &take[..4];
    let wake = m.wake.as_str();
    let first: Vec<i64> = run(&mut c, &s.mutex.try_acquire, take, &[A, TTL, wake]).await;
    for script in [&s.mutex.try_acquire, &s.mutex.wait_step] {
        let _: () = c.pexpire(&m.lock, 300).await.unwrap();
        let again: Vec<i64> = run(&mut c, script, take, &[A, TTL, wake, WAITER_TTL]).await;
        assert_eq!(&again[..2], &first[..], "the same grant");
        let pttl: i64 = c.pttl(&m.lock).await.unwrap();
        assert!(pttl > 9_000, "the lease found again has {pttl} ms left");
    }
    let _: () = c.del(&[&m.lock, &m.queue, &m.alive, &m.fence]).await.unwrap();

    let k = KindKeys::new(PREFIX, Family::Semaphore, &name("kinds_found_again"));
    let keys = k.script_keys();
    let args = kind_args(&k, "P1:a", "");
    let first: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &args).await;
    for script in [&s.kinds.try_acquire, &s.kinds.wait_step] {
        let soon = server_ms(&mut c).await + 300;
        let _: () = c.zadd(&k.holders, "P1:a", soon).await.unwrap();
        let again: Vec<i64> = run(&mut c, script, &keys, &args).await;
        assert_eq!(again, first, "the same grant");
        let left = c.zscore::<_, _, f64>(&k.holders, "P1:a").await.unwrap() as i64 - server_ms(&mut c).await;
        assert!(left > 9_000, "the permit found again has {left} ms left");
    }
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &args).await, 1);
}

/// The server's clock in ms.
async fn server_ms(c: &mut MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(c).await.expect("TIME");
    secs * 1000 + micros / 1000
}

#[tokio::test]
async fn rwlock_scripts_queue_readers_behind_a_waiting_writer() {
    let mut c = connect().await;
    let s = scripts();
    let k = KindKeys::new(PREFIX, Family::RwLock, &name("rwlock"));
    let keys = k.script_keys();
    let call = |entry: &'static str| kind_args(&k, entry, "");
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.try_acquire, &keys, &call("S:a1")).await[0],
        1
    );
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.try_acquire, &keys, &call("S:a2")).await[0],
        1
    );
    // A writer waits for the readers; a reader after it waits for the writer.
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.wait_step, &keys, &call("X:b0")).await[0],
        0
    );
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.try_acquire, &keys, &call("S:a3")).await[0],
        0
    );
    for reader in ["S:a1", "S:a2"] {
        assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call(reader)).await, 1);
    }
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.wait_step, &keys, &call("X:b0")).await[0],
        1
    );
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.try_acquire, &keys, &call("S:a3")).await[0],
        0
    );
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call("X:b0")).await, 1);
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.try_acquire, &keys, &call("S:a3")).await[0],
        1
    );
    assert_eq!(run::<i64>(&mut c, &s.kinds.release, &keys, &call("S:a3")).await, 1);
}

#[tokio::test]
async fn election_scripts_store_the_leaders_value_and_term() {
    let mut c = connect().await;
    let s = scripts();
    let k = KindKeys::new(PREFIX, Family::Election, &name("election"));
    let keys = k.script_keys();
    let read = [k.holders.as_str(), &k.info, &k.alive];
    let leader =
        |mut c: MultiplexedConnection| async move { run::<Vec<Value>>(&mut c, &SCRIPTS.leader, &read, &[]).await };
    assert!(leader(c.clone()).await.is_empty(), "nobody leads, nobody waits");
    let granted: Vec<i64> = run(&mut c, &s.kinds.try_acquire, &keys, &kind_args(&k, "X:a", "host a")).await;
    assert_eq!(granted[0], 1);
    let read = leader(c.clone()).await;
    let (entry, info, left): (String, String, i64) = (
        redis::from_redis_value_ref(&read[0]).unwrap(),
        redis::from_redis_value_ref(&read[1]).unwrap(),
        redis::from_redis_value_ref(&read[2]).unwrap(),
    );
    assert_eq!((entry.as_str(), info), ("X:a", format!("{}:host a", granted[1])));
    assert!(left > 0, "{left}");
    // A candidate in line while the leader resigns: "pending" (one field), then its term.
    assert_eq!(
        run::<Vec<i64>>(&mut c, &s.kinds.wait_step, &keys, &kind_args(&k, "X:b", "host b")).await[0],
        0
    );
    assert_eq!(
        run::<i64>(&mut c, &s.kinds.release, &keys, &kind_args(&k, "X:a", "")).await,
        1
    );
    assert_eq!(leader(c.clone()).await.len(), 1, "a live candidate is about to lead");
    let next: Vec<i64> = run(&mut c, &s.kinds.wait_step, &keys, &kind_args(&k, "X:b", "host b")).await;
    assert!(next[0] == 1 && next[1] > granted[1], "{next:?}");
    assert_eq!(
        run::<i64>(&mut c, &s.kinds.release, &keys, &kind_args(&k, "X:b", "")).await,
        1
    );
    assert!(leader(c.clone()).await.is_empty());
}
