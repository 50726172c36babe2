//! One function, every backend: the locking code does not change when the backend does — only
//! the URL and a Cargo feature.
//!
//! `contend` below is written once against the locksmith API. `main` runs it on `mem://`, on
//! `file://` (a temporary directory: no server) with the feature `file`, and on every server
//! backend compiled in (features `etcd`, `zk`, `redis`, `postgres`, `mysql`), at the URLs of the
//! test servers (`LOCKSMITH_TEST_ETCD`, `LOCKSMITH_TEST_ZK`, `LOCKSMITH_TEST_REDIS`,
//! `LOCKSMITH_TEST_POSTGRES`, `LOCKSMITH_TEST_MYSQL`, as printed by
//! `scripts/backends up`), or only on `LOCKSMITH_URL` when that is set.
//!
//! ```text
//! cargo run --example swap_backend --features file
//! eval "$(scripts/backends up)"; cargo run --example swap_backend --features file,etcd,zk,redis,postgres
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith::LockError;

/// What [`contend`] saw.
#[derive(Debug)]
pub struct Summary {
    /// The backend's short name (`mem`, `etcd`, `zk`, `redis`).
    pub backend: &'static str,
    /// Every fencing token handed out, in the order the critical sections ran.
    pub tokens: Vec<u64>,
    /// The most workers ever inside the critical section at once (1 if the lock works).
    pub max_inside: usize,
    /// The lease time the backend enforces for the requested 5 s.
    pub effective_ttl: Duration,
}

/// `workers` workers, each with its own connection (as separate processes would have), take
/// the lock `name` `rounds` times each and count how many are inside the critical section at once.
pub async fn contend(url: &str, name: &str, workers: usize, rounds: usize) -> Result<Summary, LockError> {
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (url, inside, max_inside, tokens, name) = (
            url.to_owned(),
            inside.clone(),
            max_inside.clone(),
            tokens.clone(),
            name.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let locker = locksmith::connect(&url).await?;
            let work = async {
                let mut ttl = Duration::ZERO;
                for _ in 0..rounds {
                    let guard = locker
                        .lock(&name)
                        .ttl(Duration::from_secs(5))
                        .timeout(Duration::from_secs(60))
                        .acquire()
                        .await?;
                    ttl = guard.ttl();
                    let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now_inside, Ordering::SeqCst);
                    tokens
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(5)).await; // the guarded work
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await?;
                }
                Ok::<_, LockError>((locker.backend().kind(), ttl))
            };
            let result = work.await;
            // Before the worker ends: releases what an early `?` dropped and ends the session, so
            // the lock is free at once rather than after its TTL.
            locker.shutdown().await?;
            result
        }));
    }
    // Every worker runs to its end (and shuts its locker down) before an error is returned.
    let mut backend = "";
    let mut effective_ttl = Duration::ZERO;
    let mut result = Ok(());
    for task in tasks {
        let joined = task
            .await
            .map_err(|e| LockError::Protocol(format!("worker panicked: {e}")));
        match joined.and_then(|worker| worker) {
            Ok(seen) => (backend, effective_ttl) = seen,
            Err(e) => result = result.and(Err(e)),
        }
    }
    result?;
    let tokens = std::mem::take(&mut *tokens.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Summary {
        backend,
        tokens,
        max_inside: max_inside.load(Ordering::SeqCst),
        effective_ttl,
    })
}

/// The backends to run on: `LOCKSMITH_URL` alone if set, else `mem://` and every backend compiled
/// in, with its test server's URL (`None` when its variable is unset).
pub fn backends() -> Vec<(&'static str, Option<String>)> {
    if let Ok(url) = std::env::var("LOCKSMITH_URL") {
        return vec![("LOCKSMITH_URL", Some(url))];
    }
    let mut list = vec![("mem", Some("mem://".to_owned()))];
    if cfg!(feature = "file") {
        let dir = std::env::temp_dir().join("locksmith-swap-backend");
        list.push(("file", Some(format!("file://{}", dir.display()))));
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if cfg!(feature = "etcd") {
        list.push(("etcd", var("LOCKSMITH_TEST_ETCD")));
    }
    if cfg!(feature = "zk") {
        list.push(("zk", var("LOCKSMITH_TEST_ZK")));
    }
    if cfg!(feature = "redis") {
        list.push(("redis", var("LOCKSMITH_TEST_REDIS")));
    }
    if cfg!(feature = "postgres") {
        list.push(("postgres", var("LOCKSMITH_TEST_POSTGRES")));
    }
    if cfg!(feature = "mysql") {
        list.push(("mysql", var("LOCKSMITH_TEST_MYSQL")));
    }
    list
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    for (backend, url) in backends() {
        let Some(url) = url else {
            println!(
                "{backend}: skipped (set LOCKSMITH_TEST_{} or run `eval \"$(scripts/backends up)\"`)",
                backend.to_uppercase()
            );
            continue;
        };
        let name = format!("swap_backend/{}", std::process::id());
        let s = contend(&url, &name, 3, 3).await?;
        println!(
            "{backend} ({url}): {} critical sections, at most {} inside at once, tokens {:?}, effective TTL {:?}",
            s.tokens.len(),
            s.max_inside,
            s.tokens,
            s.effective_ttl
        );
    }
    Ok(())
}
