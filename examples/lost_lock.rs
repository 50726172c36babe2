//! Cancelling the guarded work when the lock is lost.
//!
//! A job runs step by step while holding a lock. The job races [`LockGuard::lost`]: when the lock
//! is lost — deleted on the server by an operator, renewal failing for longer than the lease, or
//! `max_hold` reached — the work future is dropped at its next await point and the job stops.
//!
//! ```text
//! cargo run --example lost_lock                       # embedded backend, no server needed
//! LOCKSMITH_URL=etcd://127.0.0.1:2379 cargo run --example lost_lock --features etcd
//! ```
//!
//! [`LockGuard::lost`]: locksmith::LockGuard::lost

use std::time::Duration;

use locksmith::driver::{BackendUrl, LockName};
use locksmith::{LockError, LockGuard, Locker, LostReason, MemoryBackend};

/// How the guarded work ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every step ran while the lock was held.
    Finished {
        /// Steps done.
        steps: u32,
    },
    /// The lock was lost; the work stopped after `steps_done` steps.
    Cancelled {
        /// Steps completed before the loss.
        steps_done: u32,
        /// Why the lock was lost.
        reason: LostReason,
    },
}

/// Runs `steps` steps of `step_time` each, and stops at once when the lock is lost.
pub async fn guarded_work(guard: &LockGuard, steps: u32, step_time: Duration) -> Outcome {
    let mut done = 0;
    let work = async {
        for _ in 0..steps {
            // One step of the real work (a batch written, a file processed). Each step should be
            // short, or cancellable itself: cancellation happens at await points.
            tokio::time::sleep(step_time).await;
            done += 1;
        }
    };
    tokio::select! {
        reason = guard.lost() => Outcome::Cancelled { steps_done: done, reason },
        () = work => Outcome::Finished { steps: done },
    }
}

/// The job with a `max_hold` budget: on every backend, the watchdog declares the lock lost once
/// `max_hold` has passed, and the work stops.
pub async fn with_max_hold(url: &str, name: &str, max_hold: Duration) -> Result<Outcome, LockError> {
    let locker = locksmith::connect(url).await?;
    let outcome = max_hold_job(&locker, name, max_hold).await;
    // Before returning: releases what an early `?` dropped and ends the session, so the lock is
    // free at once rather than after its TTL.
    locker.shutdown().await?;
    outcome
}

/// The job of [`with_max_hold`], on `locker`.
async fn max_hold_job(locker: &Locker, name: &str, max_hold: Duration) -> Result<Outcome, LockError> {
    let guard = locker
        .lock(name)
        .ttl(Duration::from_secs(5))
        .max_hold(max_hold)
        .acquire()
        .await?;
    let outcome = guarded_work(&guard, 1000, Duration::from_millis(20)).await;
    // After a loss there is nothing left to release: NotHeld is expected.
    match guard.release().await {
        Ok(()) | Err(LockError::NotHeld { .. }) => Ok(outcome),
        Err(e) => Err(e),
    }
}

/// The job on the in-process store of a `mem://` URL, with an "operator" removing the lock
/// behind the holder's back after `after`.
pub async fn removed_behind_back(mem_url: &str, name: &str, after: Duration) -> Result<Outcome, LockError> {
    let parsed = BackendUrl::parse(mem_url)?;
    let store = MemoryBackend::shared(parsed.hosts.first().map_or("", |h| h.host.as_str()));
    let locker = locksmith::connect(mem_url).await?;
    let outcome = removed_job(&locker, store, name, after).await;
    locker.shutdown().await?; // as in `with_max_hold`
    outcome
}

/// The job of [`removed_behind_back`], on `locker`, with the operator removing it from `store`.
async fn removed_job(locker: &Locker, store: MemoryBackend, name: &str, after: Duration) -> Result<Outcome, LockError> {
    let guard = locker.lock(name).ttl(Duration::from_secs(5)).acquire().await?;
    let lock_name = LockName::new(name)?;
    let operator = tokio::spawn(async move {
        tokio::time::sleep(after).await;
        store.force_remove(&lock_name)
    });
    let outcome = guarded_work(&guard, 1000, Duration::from_millis(20)).await;
    let _ = operator.await;
    let _ = guard.release().await;
    Ok(outcome)
}

fn show(what: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Finished { steps } => println!("{what}: finished all {steps} steps"),
        Outcome::Cancelled { steps_done, reason } => {
            println!("{what}: stopped after {steps_done} steps: {reason}")
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    println!("backend: {url}");
    let outcome = with_max_hold(&url, "lost_lock/max_hold", Duration::from_millis(500)).await?;
    show("max_hold of 500ms", &outcome);
    if BackendUrl::parse(&url)?.scheme == "mem" {
        let outcome = removed_behind_back(&url, "lost_lock/removed", Duration::from_millis(300)).await?;
        show("removed by an operator after 300ms", &outcome);
    } else {
        println!("(on a server, delete the lock's key to see the same: redis-cli DEL, etcdctl del, zkCli delete)");
    }
    Ok(())
}
