//! Clock jumps on a real Redis server: a `redis-server` of this test's own, on a loopback port of
//! its own, runs under `scripts/backends.d/clockshift.c` (an `LD_PRELOAD` shim that shifts its
//! wall clock by an offset read from a file), and the test moves the offset while locks are held.
//! Redis keeps expiry times on that clock, so a step back lengthens every lease and a step
//! forward shortens it; what must hold either way: a dead holder's lock is free about one TTL
//! after a contender saw it, and fencing tokens never go backwards.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use locksmith_core::conformance::servers::ClockShift;
use locksmith_core::{Locker, LostReason};
use locksmith_redis::connect;

/// A `redis-server` whose wall clock the test moves.
struct ShiftedRedis {
    child: Child,
    dir: PathBuf,
    clock: ClockShift,
    port: u16,
}

impl ShiftedRedis {
    /// Builds the shim (`cc`) and starts the server on a free loopback port, unshifted.
    async fn start() -> ShiftedRedis {
        ShiftedRedis::start_at(0).await
    }

    /// Starts the server with its wall clock `ms` from the true time (a machine that booted with
    /// its clock ahead, before NTP stepped it).
    async fn start_at(ms: i64) -> ShiftedRedis {
        let dir = std::env::temp_dir().join(format!("locksmith-clock-{}-{:x}", std::process::id(), rand_u64()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let clock = ClockShift::new(&dir);
        clock.set(ms);
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .envs(clock.env())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting redis-server (scripts/backends installs it)");
        let server = ShiftedRedis {
            child,
            dir,
            clock,
            port,
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server under the clock shim did not start on port {port}");
    }

    /// Moves the server's wall clock to `ms` from the true time (the shim reads it within 20 ms).
    async fn shift(&self, ms: i64) {
        self.clock.set(ms);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    async fn locker(&self) -> Locker {
        // restart_delay=0: a fresh server without persistence would hold back its first grants.
        self.locker_with("restart_delay=0").await
    }

    async fn locker_with(&self, options: &str) -> Locker {
        let url = format!("redis://127.0.0.1:{}?{options}", self.port);
        connect(&locksmith_core::driver::BackendUrl::parse(&url).unwrap())
            .await
            .expect("connect")
    }
}

impl Drop for ShiftedRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_of_an_hour_frees_a_dead_holders_lock_within_its_ttl() {
    let server = ShiftedRedis::start().await;
    let (a, b) = (server.locker().await, server.locker().await);
    let ttl = Duration::from_secs(2);
    let mut offset = 0;
    for kind in ["mutex", "semaphore", "rwlock"] {
        let name = format!("clock-back/{kind}");
        let lock = |l: &Locker| match kind {
            "mutex" => l.lock(&name),
            "semaphore" => l.semaphore(&name, 1),
            _ => l.rwlock(&name).write(),
        };
        let crashed = lock(&a).ttl(ttl).acquire().await.expect("acquire");
        let token = crashed.fencing_token();
        let _lease = crashed.abandon();
        offset -= 3_600_000;
        server.shift(offset).await;
        // Before the bound this waited the hour; the timeout is the check (about one TTL after
        // the contender saw the lock, plus a waiter's re-check).
        let next = lock(&b)
            .ttl(ttl)
            .timeout(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{kind}: the dead holder's lock was not freed: {e}"));
        assert!(next.fencing_token() > token, "{kind}: a fencing token went backwards");
        next.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_past_a_lease_ends_it_early_with_tokens_still_increasing() {
    let server = ShiftedRedis::start().await;
    let (a, b) = (server.locker().await, server.locker().await);
    let ttl = Duration::from_secs(3);
    let held = a.lock("clock-forward").ttl(ttl).acquire().await.expect("acquire");
    let token = held.fencing_token();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lock("clock-forward")
                .ttl(ttl)
                .timeout(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Ten seconds forward: the holder's lease (3 s) ends on the server at once, before its
    // watchdog can know. What Redis cannot prevent; the fencing token is what protects.
    server.shift(10_000).await;
    let next = waiter.await.expect("task").expect("the waiter gets the lock");
    assert!(next.fencing_token() > token, "a fencing token went backwards");
    // The old holder is told at its next renewal.
    let reason = tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the overtaken holder is told");
    assert!(
        matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
        "{reason:?}"
    );
    next.release().await.expect("release");
}

/// A server started with its clock an hour ahead, then stepped back: its `uptime_in_seconds` is
/// negative for that hour. Every acquire failed at once ("INFO server shows no uptime_in_seconds")
/// until the clock caught up. The step is not a restart, but the server may have started moments
/// ago: the first grant of a lock without a counter still waits out `restart_delay`, once (from
/// its first sight), and then is granted as on a warm server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_uptime_after_a_step_back_serves_the_restart_delay_once() {
    let server = ShiftedRedis::start_at(3_600_000).await;
    server.shift(0).await;
    let delay = Duration::from_secs(2);
    let options = "restart_delay=2s&ttl=1s&waiter_ttl=1s";
    let (a, b) = (server.locker_with(options).await, server.locker_with(options).await);
    for kind in ["mutex", "semaphore"] {
        let name = format!("negative-uptime/{kind}");
        let lock = |l: &Locker| match kind {
            "mutex" => l.lock(&name),
            _ => l.semaphore(&name, 1),
        };
        // A try within the delay: not granted (a lease from before a data loss may be live).
        let early = lock(&a)
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("{kind}: try: {e}"));
        assert!(
            early.is_none(),
            "{kind}: granted within restart_delay of a possible restart"
        );
        let started = tokio::time::Instant::now();
        let held = lock(&b)
            .timeout(Duration::from_secs(15))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{kind}: acquire with a negative uptime: {e}"));
        let waited = started.elapsed();
        assert!(
            waited >= delay - Duration::from_millis(500) && waited < Duration::from_secs(10),
            "{kind}: granted after {waited:?}, not about restart_delay ({delay:?}) after it was first seen"
        );
        held.release().await.expect("release");
        // Served once: the next grant is at once.
        let again = lock(&a)
            .try_acquire()
            .await
            .expect("try")
            .expect("granted at once after the delay");
        again.release().await.expect("release");
    }
}

/// A waiter that died while the server's clock was an hour ahead left a liveness deadline an hour
/// ahead once the clock is stepped back. Contenders that only `try` kept it at the head for that
/// hour (a waiting contender bounded it); now a try bounds it too, to three waiter TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_from_before_a_step_back_does_not_stop_tries() {
    let server = ShiftedRedis::start_at(3_600_000).await;
    let url = format!("redis://127.0.0.1:{}?restart_delay=0&waiter_ttl=1s", server.port);
    let a = server.locker_with("restart_delay=0&waiter_ttl=1s").await;
    let name = "dead-waiter-step-back";
    let held = a.lock(name).acquire().await.expect("acquire");
    // The waiter's entry as a killed process leaves it: queued, live for one waiter TTL of the
    // server's (ahead) clock.
    common::plant_dead_waiter(&url, name, 1_000).await;
    held.release().await.expect("release");
    server.shift(0).await;
    let started = tokio::time::Instant::now();
    loop {
        if let Some(got) = a.lock(name).try_acquire().await.expect("try") {
            got.release().await.expect("release");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a dead waiter's entry from before the step back still stops every try"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
