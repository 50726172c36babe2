//! Uncontended acquire+release latency of this backend next to the raw floor (the bare `redis`
//! crate: `SET NX PX`, then one compare-and-delete script), in one run on the same server; and the
//! handover latency (release → the blocked waiter's acquire returns) next to its floor on the bare
//! crate (one script call that publishes, a push, one script call by the waiter).
//!
//! ```text
//! eval "$(scripts/backends up)"
//! cargo run --release -p locksmith-redis --example redis_uncontended [-- OPS]
//! ```
//!
//! With `LOCKSMITH_TEST_REDIS_QUORUM` set, it also times a quorum acquire+release.

use std::time::{Duration, Instant};

use locksmith_core::driver::BackendUrl;
use locksmith_core::Locker;

const TTL: Duration = Duration::from_secs(30);
const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

type Error = Box<dyn std::error::Error>;

fn quantiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e6;
    (q(0.5), q(0.99))
}

async fn floor(url: &str, ops: usize) -> Result<Vec<Duration>, Error> {
    let host = url
        .trim_start_matches("redis://")
        .split([',', '/', '?'])
        .next()
        .unwrap_or_default();
    let client = redis::Client::open(format!("redis://{host}/"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let release = redis::Script::new(RELEASE);
    let mut samples = Vec::with_capacity(ops);
    for i in 0..ops + ops / 10 {
        let t = Instant::now();
        let token = format!("{:032x}", rand::random::<u128>());
        let set: Option<String> = redis::cmd("SET")
            .arg("uncontended-floor")
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        if set.is_none() {
            return Err("floor: key held".into());
        }
        let n: i64 = release
            .key("uncontended-floor")
            .arg(&token)
            .invoke_async(&mut conn)
            .await?;
        if n != 1 {
            return Err("floor: not released".into());
        }
        if i >= ops / 10 {
            samples.push(t.elapsed());
        }
    }
    Ok(samples)
}

async fn locksmith(locker: &Locker, name: &str, ops: usize, timeout: bool) -> Result<Vec<Duration>, Error> {
    let mut samples = Vec::with_capacity(ops);
    for i in 0..ops + ops / 10 {
        let t = Instant::now();
        let mut b = locker.lock(name).ttl(TTL);
        if timeout {
            b = b.timeout(Duration::from_secs(60));
        }
        b.acquire().await?.release().await?;
        if i >= ops / 10 {
            samples.push(t.elapsed());
        }
    }
    Ok(samples)
}

/// The backend alone, without the Locker (its watchdog registration and tracing spans).
async fn direct(locker: &Locker, name: &str, ops: usize) -> Result<Vec<Duration>, Error> {
    let backend = locker.backend();
    let req = locksmith_core::driver::LockRequest::mutex(locksmith_core::driver::LockName::new(name)?, TTL);
    let mut samples = Vec::with_capacity(ops);
    for i in 0..ops + ops / 10 {
        let t = Instant::now();
        let lease = backend.acquire(&req, None).await?;
        backend.release(&lease).await?;
        if i >= ops / 10 {
            samples.push(t.elapsed());
        }
    }
    Ok(samples)
}

async fn handover(url: &str, ops: usize, blocked: Duration) -> Result<Vec<Duration>, Error> {
    let holder = locksmith_redis::connect(&BackendUrl::parse(url)?).await?;
    let waiter = locksmith_redis::connect(&BackendUrl::parse(url)?).await?;
    let name = format!("handover-{:x}", rand::random::<u32>());
    let mut samples = Vec::with_capacity(ops);
    for _ in 0..ops {
        let held = holder.lock(&name).ttl(TTL).acquire().await?;
        let w = waiter.clone();
        let n = name.clone();
        let task = tokio::spawn(async move {
            let g = w.lock(&n).ttl(TTL).acquire().await;
            (Instant::now(), g)
        });
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        held.release().await?;
        let (t1, g) = tokio::time::timeout(Duration::from_secs(30), task).await??;
        samples.push(t1.saturating_duration_since(t0));
        g?.release().await?;
    }
    Ok(samples)
}

/// The floor of a handover with this protocol, on the bare `redis` crate: the holder's one
/// script call publishes a wake-up, the waiter (blocked on a RESP3 push connection for `blocked`)
/// then runs one script call. Two round trips and one push, no locksmith code.
async fn handover_floor(url: &str, ops: usize, blocked: Duration) -> Result<Vec<Duration>, Error> {
    let host = url
        .trim_start_matches("redis://")
        .split([',', '/', '?'])
        .next()
        .unwrap_or_default();
    let client = redis::Client::open(format!("redis://{host}/"))?;
    let push_client = redis::Client::open(format!("redis://{host}/?protocol=resp3"))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
    let config = redis::AsyncConnectionConfig::new().set_push_sender(move |p: redis::PushInfo| {
        if p.kind == redis::PushKind::Message {
            let _ = tx.send(());
        }
        Ok::<(), ()>(())
    });
    let mut push = push_client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let channel = format!("handover-floor-{:x}", rand::random::<u32>());
    push.subscribe(&channel).await?;
    let mut holder = client.get_multiplexed_async_connection().await?;
    let waiter = client.get_multiplexed_async_connection().await?;
    let publish = redis::Script::new("return redis.call('publish', KEYS[1], 'x')");
    let step = redis::Script::new(RELEASE);
    let mut samples = Vec::with_capacity(ops);
    for _ in 0..ops {
        let (mut w, step, rx) = (waiter.clone(), step.clone(), rx.clone());
        let task = tokio::spawn(async move {
            rx.lock().await.recv().await;
            let r: redis::RedisResult<i64> = step.key("handover-floor").arg("x").invoke_async(&mut w).await;
            (Instant::now(), r)
        });
        tokio::time::sleep(blocked).await;
        let t0 = Instant::now();
        let _: i64 = publish.key(&channel).invoke_async(&mut holder).await?;
        let (t1, r) = tokio::time::timeout(Duration::from_secs(30), task).await??;
        r?;
        samples.push(t1.saturating_duration_since(t0));
    }
    Ok(samples)
}

fn print(label: &str, samples: Vec<Duration>, floor_p50: Option<f64>) {
    let (p50, p99) = quantiles(samples);
    match floor_p50 {
        Some(f) => println!(
            "{label:<44} p50 {p50:>8.1} µs  p99 {p99:>8.1} µs  × floor {:.2}",
            p50 / f
        ),
        None => println!("{label:<44} p50 {p50:>8.1} µs  p99 {p99:>8.1} µs"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let ops: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5000);
    let url = std::env::var("LOCKSMITH_TEST_REDIS")
        .map_err(|_| "LOCKSMITH_TEST_REDIS is unset: run eval \"$(scripts/backends up)\"")?;
    let locker = locksmith_redis::connect(&BackendUrl::parse(&url)?).await?;
    let name = format!("uncontended-{:x}", rand::random::<u32>());
    // Interleave the rows so that machine noise hits them alike.
    let (mut f, mut l, mut lt, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        f.extend(floor(&url, ops / 5).await?);
        l.extend(locksmith(&locker, &name, ops / 5, false).await?);
        lt.extend(locksmith(&locker, &name, ops / 5, true).await?);
        d.extend(direct(&locker, &name, ops / 5).await?);
    }
    let (fp50, _) = quantiles(f.clone());
    print("floor (SET NX PX + compare-and-delete)", f, None);
    print("locksmith acquire()+release()", l, Some(fp50));
    print("locksmith acquire() with timeout + release()", lt, Some(fp50));
    print("RedisBackend::acquire + release (no Locker)", d, Some(fp50));
    for blocked in [5, 20, 150] {
        let blocked_for = Duration::from_millis(blocked);
        // Interleaved, so that machine noise hits both alike.
        let (mut h, mut hf) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            h.extend(handover(&url, 10, blocked_for).await?);
            hf.extend(handover_floor(&url, 10, blocked_for).await?);
        }
        let (hf_p50, _) = quantiles(hf.clone());
        print(&format!("handover floor (bare redis), blocked {blocked} ms"), hf, None);
        print(&format!("handover, waiter blocked {blocked} ms"), h, Some(hf_p50));
    }
    if let Ok(q) = std::env::var("LOCKSMITH_TEST_REDIS_QUORUM") {
        let quorum = locksmith_redis::connect(&BackendUrl::parse(&q)?).await?;
        print(
            "quorum acquire()+release()",
            locksmith(&quorum, &name, ops / 5, false).await?,
            None,
        );
    }
    Ok(())
}
