//! Leader election: three replicas of a service, exactly one runs the scheduler, and everyone
//! knows which.
//!
//! Each replica campaigns with its name and, once it leads, runs scheduler ticks stamped with its
//! term (its fencing token) until it steps down; the next replica in line takes over. An
//! observer prints every change of leader as the server pushes it.
//!
//! ```text
//! cargo run --example election                        # embedded backend, no server needed
//! LOCKSMITH_URL=redis://127.0.0.1:6379 cargo run --example election --features redis
//! ```

use std::time::Duration;

use locksmith::{LeaderGuard, LockError, Locker};

/// One replica: campaigns in `election` as `me`, runs `ticks` scheduler ticks while leading (or
/// until the leadership is lost), then resigns. Returns its term.
pub async fn replica(url: &str, election: &str, me: &str, ticks: u32) -> Result<u64, LockError> {
    let locker = locksmith::connect(url).await?;
    let term = lead(&locker, election, me, ticks).await;
    // Before returning: releases what an early `?` dropped (the leadership too) and ends the
    // session, so the next replica takes over at once rather than after the TTL.
    locker.shutdown().await?;
    term
}

/// Campaigns, leads for `ticks` ticks, resigns.
async fn lead(locker: &Locker, election: &str, me: &str, ticks: u32) -> Result<u64, LockError> {
    let leadership: LeaderGuard = locker
        .election(election)
        .campaign(me)
        .ttl(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .acquire()
        .await?;
    let term = leadership.term();
    let schedule = async {
        for _ in 0..ticks {
            // One scheduler tick. Work it starts elsewhere carries the term, so that a deposed
            // leader's late orders can be refused.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        reason = leadership.lost() => eprintln!("{me}: lost the leadership: {reason}"),
        () = schedule => {}
    }
    leadership.resign().await?;
    Ok(term)
}

/// Runs `replicas` replicas of `election` one after another in line, with an observer: returns
/// the leaders the observer saw, as `(value, term)`, in order.
pub async fn run_replicas(url: &str, election: &str, replicas: usize) -> Result<Vec<(String, u64)>, LockError> {
    let observer = locksmith::connect(url).await?;
    let seen = observe(&observer, url, election, replicas).await;
    observer.shutdown().await?; // the observer's session ends too, like each replica's
    seen
}

/// Starts the replicas and watches the leadership pass from one to the next.
async fn observe(
    observer: &Locker,
    url: &str,
    election: &str,
    replicas: usize,
) -> Result<Vec<(String, u64)>, LockError> {
    let mut watch = observer.election(election).observe().await?;
    let mut tasks = Vec::new();
    for i in 0..replicas {
        let (url, election, me) = (url.to_owned(), election.to_owned(), format!("replica-{i}"));
        tasks.push(tokio::spawn(async move { replica(&url, &election, &me, 5).await }));
    }
    let mut seen = Vec::new();
    let watching = async {
        while seen.len() < replicas {
            if let Some(leader) = watch.changed().await? {
                if seen.last().map(|(_, t)| *t) != Some(leader.term) {
                    println!("leader: {} (term {})", leader.value, leader.term);
                    seen.push((leader.value, leader.term));
                }
            }
        }
        Ok::<(), LockError>(())
    };
    let watched = tokio::time::timeout(Duration::from_secs(120), watching)
        .await
        .map_err(|_| LockError::Timeout(Duration::from_secs(120)));
    // Every replica runs to its end (and shuts its locker down) before an error is returned.
    let mut result = watched.and_then(|watched| watched);
    for task in tasks {
        let joined = task
            .await
            .map_err(|e| LockError::Protocol(format!("replica panicked: {e}")));
        result = result.and(joined.and_then(|term| term.map(drop)));
    }
    result.map(|()| seen)
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("LOCKSMITH_URL").unwrap_or_else(|_| "mem://".to_owned());
    println!("backend: {url}");
    let leaders = run_replicas(&url, "examples/scheduler", 3).await?;
    println!("{} leaders, one after another: {leaders:?}", leaders.len());
    Ok(())
}
