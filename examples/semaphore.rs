//! A semaphore: at most three workers call a rate-limited API at once, across processes.
//!
//! Eight workers (each with its own connection, as separate processes would have) take a permit
//! of the semaphore `api-quota` (3 permits) before each call; the fourth waits, in FIFO order,
//! until a permit is given back. Each permit has its own fencing token.
//!
//! ```text
//! cargo run --example semaphore                       # embedded backend, no server needed
//! LOCKSMITH_URL=etcd://127.0.0.1:2379 cargo run --example semaphore --features etcd
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith::LockError;

/// What a run of the workers saw.
#[derive(Debug)]
pub struct Report {
    /// The most calls in flight at once.
    pub most_at_once: usize,
    /// Calls made in all.
    pub calls: usize,
    /// Every permit's fencing token, in the order the calls started.
    pub tokens: Vec<u64>,
}

/// `workers` workers make `calls_each` calls each, holding a permit of `name` (which has
/// `permits` permits) during each call.
pub async fn call_api(
    url: &str,
    name: &str,
    workers: usize,
    calls_each: usize,
    permits: u32,
) -> Result<Report, LockError> {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (url, name, in_flight, most, tokens) = (
            url.to_owned(),
            name.to_owned(),
            in_flight.clone(),
            most.clone(),
            tokens.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let locker = locksmith::connect(&url).await?;
            let calls = async {
                for _ in 0..calls_each {
                    let permit = locker
                        .semaphore(&name, permits)
                        .ttl(Duration::from_secs(10))
                        .timeout(Duration::from_secs(60))
                        .acquire()
                        .await?;
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(permit.fencing_token());
                    // The API call. A real one would send the permit's fencing token along, and
                    // stop if `permit.lost()` fires.
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await?;
                }
                Ok::<(), LockError>(())
            };
            let result = calls.await;
            // Before the worker ends: releases what an early `?` dropped and ends the session, so
            // the permit is free at once rather than after its TTL.
            locker.shutdown().await?;
            result
        }));
    }
    // Every worker runs to its end (and shuts its locker down) before an error is returned.
    let mut result = Ok(());
    for task in tasks {
        let joined = task
            .await
            .map_err(|e| LockError::Protocol(format!("worker panicked: {e}")));
        result = result.and(joined.and_then(|worker| worker));
    }
    result?;
    let tokens = tokens.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Report {
        most_at_once: most.load(Ordering::SeqCst),
        calls: tokens.len(),
        tokens,
    })
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    println!("backend: {url}");
    let report = call_api(&url, "examples/api-quota", 8, 3, 3).await?;
    println!(
        "{} calls, at most {} at once (3 permits); fencing tokens {:?}",
        report.calls, report.most_at_once, report.tokens
    );
    Ok(())
}
