//! Moving an application off hand-rolled Redis locks, one deploy at a time, without a moment in
//! which two processes can hold the same lock. See `docs/migration.md` for the walk-through.
//!
//! The "old" processes here lock the way redis-py's `Lock`, redsync and most hand-written code
//! do: `SET name token NX PX ttl` to acquire, a compare-and-delete script to release. Each step
//! runs old and new workers at the same time against the same lock and checks that no two of
//! them are ever inside the critical section together:
//!
//! 1. **drop-in** — new processes use locksmith's Redis backend with `?layout=plain` (the lock
//!    key is the raw name, as the old code has it): old and new exclude each other;
//! 2. **dual** — new processes hold the lock in Redis (plain) *and* in the new backend, with
//!    `Dual`: they exclude the old processes through Redis and each other through both;
//! 3. **new only** — once no old process is left, new processes use the new backend alone; the
//!    processes still on step 2 exclude them through the new backend.
//!
//! ```text
//! # Redis from OLD_REDIS_URL (else LOCKSMITH_TEST_REDIS, else redis://127.0.0.1:6379);
//! # the new backend from LOCKSMITH_URL (else an in-process store).
//! cargo run --example migrate_off_redis --features redis
//! LOCKSMITH_URL=etcd://127.0.0.1:2379 cargo run --example migrate_off_redis --features redis,etcd
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use locksmith::{Dual, LockError, Locker};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Errors of this example: lock errors, the old client's Redis errors, a failed check.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The old application's lock: exactly what redis-py's `Lock` and redsync send.
pub struct OldRedisLock {
    con: redis::aio::MultiplexedConnection,
}

/// The compare-and-delete release of redis-py, redsync and the Redis docs.
const RELEASE: &str =
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

impl OldRedisLock {
    /// Connects to Redis at `url` (`redis://host:port[/db]`).
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = redis::Client::open(url)?;
        Ok(OldRedisLock {
            con: client.get_multiplexed_async_connection().await?,
        })
    }

    /// Polls `SET name token NX PX ttl` every 20 ms until it succeeds or `timeout` passes;
    /// returns the random token that proves ownership.
    pub async fn acquire(&mut self, name: &str, ttl: Duration, timeout: Duration) -> Result<Option<String>, Error> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let token = format!(
            "old-{}-{nanos:x}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let deadline = Instant::now() + timeout;
        loop {
            let set: Option<String> = redis::cmd("SET")
                .arg(name)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .query_async(&mut self.con)
                .await?;
            if set.is_some() {
                return Ok(Some(token));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Deletes the key if it still holds `token`; false if it did not (the lock had expired).
    pub async fn release(&mut self, name: &str, token: &str) -> Result<bool, Error> {
        let deleted: i64 = redis::cmd("EVAL")
            .arg(RELEASE)
            .arg(1)
            .arg(name)
            .arg(token)
            .query_async(&mut self.con)
            .await?;
        Ok(deleted == 1)
    }
}

/// A critical section that counts who is inside: more than one at a time is a violation.
#[derive(Debug, Default)]
pub struct Section {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    entries: Mutex<BTreeMap<&'static str, usize>>,
}

impl Section {
    /// Runs the guarded work as `who`.
    pub async fn work(&self, who: &'static str) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(now, Ordering::SeqCst);
        *self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(who)
            .or_default() += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// What happened, for the report.
    pub fn report(&self) -> StepReport {
        StepReport {
            max_inside: self.max_inside.load(Ordering::SeqCst),
            entries: self.entries.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// The outcome of one step.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// The most workers ever inside the critical section at once: 1 if exclusion held.
    pub max_inside: usize,
    /// How many critical sections each kind of worker ran.
    pub entries: BTreeMap<&'static str, usize>,
}

const TTL: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(120);

/// The URL of locksmith's Redis backend in the plain layout on the old Redis.
pub fn plain_url(redis_url: &str) -> String {
    let sep = if redis_url.contains('?') { '&' } else { '?' };
    format!("{redis_url}{sep}layout=plain")
}

/// An old process: `rounds` critical sections with the raw `SET NX` lock.
fn old_worker(redis_url: String, name: String, rounds: usize, section: Arc<Section>) -> JoinHandle<Result<(), Error>> {
    tokio::spawn(async move {
        let mut old = OldRedisLock::connect(&redis_url).await?;
        for _ in 0..rounds {
            let token = old
                .acquire(&name, TTL, WAIT)
                .await?
                .ok_or("old worker: timed out waiting for the lock")?;
            section.work("old SET NX").await;
            old.release(&name, &token).await?;
        }
        Ok(())
    })
}

/// A migrated process: `rounds` critical sections with `locker`, then its shutdown.
fn new_worker(
    locker: Locker,
    who: &'static str,
    name: String,
    rounds: usize,
    section: Arc<Section>,
) -> JoinHandle<Result<(), Error>> {
    tokio::spawn(async move {
        let work = async {
            for _ in 0..rounds {
                let guard = locker.lock(&name).ttl(TTL).timeout(WAIT).acquire().await?;
                section.work(who).await;
                guard.release().await?;
            }
            Ok::<(), Error>(())
        };
        let result = work.await;
        // Before the process ends: releases what an early `?` dropped and ends the session (a
        // `Dual` locker ends both backends' sessions), so the lock is free at once rather than
        // after its TTL.
        locker.shutdown().await?;
        result
    })
}

/// Waits for every worker to end (each new one shuts its locker down), then returns the first
/// error, if any.
async fn join(workers: Vec<JoinHandle<Result<(), Error>>>, section: &Section) -> Result<StepReport, Error> {
    let mut result = Ok(());
    for worker in workers {
        let joined = worker.await.map_err(Error::from);
        result = result.and(joined.and_then(|worker| worker));
    }
    result.map(|()| section.report())
}

/// Step 1: the code of a migrated process — the same Redis, the same key, locksmith's client.
pub async fn drop_in_locker(redis_url: &str) -> Result<Locker, LockError> {
    locksmith::connect(&plain_url(redis_url)).await
}

/// Step 2: the code of a migrated process — the lock in the old Redis (plain layout) first,
/// then in the new backend; the fencing token is the new backend's. Shutting the returned locker
/// down ends the sessions of both backends too.
pub async fn dual_locker(redis_url: &str, new_url: &str) -> Result<Locker, LockError> {
    let old = locksmith::connect(&plain_url(redis_url)).await?;
    let new = locksmith::connect(new_url).await?;
    Ok(Dual::locker(&old, &new))
}

/// Step 3: the code of a migrated process — the new backend only.
pub async fn new_only_locker(new_url: &str) -> Result<Locker, LockError> {
    locksmith::connect(new_url).await
}

/// Step 1 running: two old processes and two drop-in processes share the lock `name`.
pub async fn step1(redis_url: &str, name: &str, rounds: usize) -> Result<StepReport, Error> {
    let drop_ins = [drop_in_locker(redis_url).await?, drop_in_locker(redis_url).await?];
    let section = Arc::new(Section::default());
    let mut workers = Vec::new();
    for locker in drop_ins {
        workers.push(old_worker(redis_url.into(), name.into(), rounds, section.clone()));
        workers.push(new_worker(
            locker,
            "drop-in (plain)",
            name.into(),
            rounds,
            section.clone(),
        ));
    }
    join(workers, &section).await
}

/// Step 2 running: an old process, a step-1 process and two dual processes share `name`.
pub async fn step2(redis_url: &str, new_url: &str, name: &str, rounds: usize) -> Result<StepReport, Error> {
    let drop_in = drop_in_locker(redis_url).await?;
    let duals = [
        dual_locker(redis_url, new_url).await?,
        dual_locker(redis_url, new_url).await?,
    ];
    let section = Arc::new(Section::default());
    let mut workers = vec![
        old_worker(redis_url.into(), name.into(), rounds, section.clone()),
        new_worker(drop_in, "drop-in (plain)", name.into(), rounds, section.clone()),
    ];
    for locker in duals {
        workers.push(new_worker(locker, "dual", name.into(), rounds, section.clone()));
    }
    join(workers, &section).await
}

/// Step 3 running: no old process is left; a dual process not yet redeployed and two new-only
/// processes share `name` through the new backend.
pub async fn step3(redis_url: &str, new_url: &str, name: &str, rounds: usize) -> Result<StepReport, Error> {
    let dual = dual_locker(redis_url, new_url).await?;
    let new_only = [new_only_locker(new_url).await?, new_only_locker(new_url).await?];
    let section = Arc::new(Section::default());
    let mut workers = vec![new_worker(dual, "dual", name.into(), rounds, section.clone())];
    for locker in new_only {
        workers.push(new_worker(locker, "new only", name.into(), rounds, section.clone()));
    }
    join(workers, &section).await
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let redis_url = var("OLD_REDIS_URL")
        .or_else(|| var("LOCKSMITH_TEST_REDIS"))
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let new_url = var("LOCKSMITH_URL").unwrap_or_else(|| "mem://migration-new".to_owned());
    println!("old: {redis_url}, new: {new_url}");
    let name = format!("migrate_off_redis/{}", std::process::id());
    for (step, report) in [
        ("1 drop-in", step1(&redis_url, &name, 5).await?),
        ("2 dual", step2(&redis_url, &new_url, &name, 5).await?),
        ("3 new only", step3(&redis_url, &new_url, &name, 5).await?),
    ] {
        println!(
            "step {step}: {:?}; at most {} inside at once",
            report.entries, report.max_inside
        );
        if report.max_inside > 1 {
            return Err(format!("step {step}: mutual exclusion violated").into());
        }
    }
    Ok(())
}
