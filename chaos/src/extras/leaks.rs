//! Leaks: waiters that went away mid-wait must leave nothing on the server.
//!
//! - **cancelled**: acquires on a held lock, from ten connections, cancelled at random points (the
//!   future dropped, or the builder's timeout), half of them while the request that queues them
//!   is in flight;
//! - **killed**: waiter processes killed (`SIGKILL`) while they wait.
//!
//! Then the holder releases, and once a TTL has passed the server must show no holder and no
//! waiter, and a fresh `try_acquire` must get the lock at once.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use locksmith::{LockError, Locker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::events::Event;
use crate::fleet::{Fleet, WorkerSpec};
use crate::run::leftovers;
use crate::targets::Target;

/// What one leak test left behind.
#[derive(Debug, Serialize, Deserialize)]
pub struct Leak {
    /// The backend.
    pub backend: String,
    /// `cancelled` or `killed`.
    pub kind: String,
    /// Waiters that went away.
    pub waiters: usize,
    /// Holder and waiter entries left on the server afterwards (must be 0).
    pub stray_entries: usize,
    /// Whether a fresh `try_acquire` got the lock at once afterwards.
    pub free_at_once: bool,
    /// Wall time of the test, in s.
    pub seconds: f64,
    /// Why it did not run, if it did not.
    pub error: Option<String>,
}

impl Leak {
    /// What this test broke, if anything.
    pub fn broken(&self) -> Vec<String> {
        let id = format!("leaks {} {}", self.backend, self.kind);
        match &self.error {
            Some(e) => vec![format!("{id}: {e}")],
            None if self.stray_entries > 0 || !self.free_at_once => vec![format!(
                "{id}: {} entries left, free at once: {}",
                self.stray_entries, self.free_at_once
            )],
            None => Vec::new(),
        }
    }
}

/// Both leak tests on every target (`killed` needs processes: not on `mem://`).
pub async fn leaks(targets: &[&Target], quick: bool, register: &str) -> Vec<Leak> {
    let mut out = Vec::new();
    for target in targets {
        let (cancelled, killed) = if quick { (300, 20) } else { (1000, 100) };
        out.push(one(target, "cancelled", cancelled, cancel(target, cancelled)).await);
        if target.backend != "mem" {
            out.push(one(target, "killed", killed, kill(target, killed, register)).await);
        }
    }
    out
}

async fn one(
    target: &Target,
    kind: &'static str,
    waiters: usize,
    test: impl std::future::Future<Output = Result<(usize, bool)>>,
) -> Leak {
    let start = Instant::now();
    tracing::info!(backend = target.backend, kind, waiters, "leaks");
    let (stray_entries, free_at_once, error) = match test.await {
        Ok((stray, free)) => (stray, free, None),
        Err(e) => (0, false, Some(format!("{e:#}"))),
    };
    Leak {
        backend: target.backend.into(),
        kind: kind.into(),
        waiters,
        stray_entries,
        free_at_once,
        seconds: start.elapsed().as_secs_f64(),
        error,
    }
}

/// After the holder released: what is left, and whether the lock is free at once.
async fn after(target: &Target, name: &str) -> Result<(usize, bool)> {
    let stray = leftovers(target, name).await?;
    let fresh = locksmith::connect(&target.url).await?;
    let free = match fresh.lock(name).ttl(target.ttl).try_acquire().await? {
        Some(guard) => {
            guard.release().await?;
            true
        }
        None => false,
    };
    Ok((stray, free))
}

async fn cancel(target: &Target, attempts: usize) -> Result<(usize, bool)> {
    let name = format!("chaos/leaks/cancelled/{:08x}", rand::random::<u32>());
    let holder = locksmith::connect(&target.url).await?;
    let held = holder.lock(&name).ttl(target.ttl).acquire().await?;
    let mut lockers = Vec::new();
    for _ in 0..10 {
        lockers.push(locksmith::connect(&target.url).await?);
    }
    let mut drivers = tokio::task::JoinSet::new();
    for (c, locker) in lockers.iter().enumerate() {
        let (locker, name, ttl) = (locker.clone(), name.clone(), target.ttl);
        drivers.spawn(async move {
            // A panic in an attempt fails the check (it would otherwise go unseen).
            let mut tasks = tokio::task::JoinSet::new();
            for i in (c..attempts).step_by(10) {
                if tasks.len() >= 10 {
                    if let Some(Err(e)) = tasks.join_next().await {
                        anyhow::bail!("a cancelled attempt panicked: {e}");
                    }
                }
                tasks.spawn(cancelled_attempt(locker.clone(), name.clone(), ttl, i));
            }
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done {
                    anyhow::bail!("a cancelled attempt panicked: {e}");
                }
            }
            anyhow::Ok(())
        });
    }
    tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(done) = drivers.join_next().await {
            done.context("a driver of cancelled attempts panicked")??;
        }
        anyhow::Ok(())
    })
    .await
    .context("the cancellations did not finish within 300 s")??;
    held.release().await?;
    after(target, &name).await
}

/// One acquire cancelled after a random delay: in the first 3 ms (even `i`) or 300 ms (odd),
/// by dropping the future (`i % 4 < 2`) or by the builder's timeout.
async fn cancelled_attempt(locker: Locker, name: String, ttl: Duration, i: usize) {
    let delay = if i.is_multiple_of(2) {
        Duration::from_micros(rand::random_range(0..3_000))
    } else {
        Duration::from_micros(rand::random_range(0..300_000))
    };
    let builder = locker.lock(&name).ttl(ttl);
    let result = if i % 4 < 2 {
        tokio::time::timeout(delay, builder.acquire()).await.ok()
    } else {
        Some(builder.timeout(delay).acquire().await)
    };
    match result {
        None | Some(Err(LockError::Timeout(_))) => {}
        Some(Ok(guard)) => {
            let _ = guard.release().await; // cannot happen while held; harmless if it does
        }
        Some(Err(e)) => tracing::warn!(error = %e, "a cancelled acquire failed"),
    }
}

async fn kill(target: &Target, waiters: usize, register: &str) -> Result<(usize, bool)> {
    let name = format!("chaos/leaks/killed/{:08x}", rand::random::<u32>());
    let holder = locksmith::connect(&target.url).await?;
    let held = holder.lock(&name).ttl(target.ttl).acquire().await?;
    let spec = WorkerSpec {
        primitive: crate::primitive::Primitive::Mutex,
        name: name.clone(),
        register: register.to_owned(),
        unsafe_register: false,
        wait_only: true,
        hold_max: Duration::from_millis(300),
        guarded_key: None,
        fenced_store: None,
    };
    let mut fleet = Fleet::new(target, spec);
    for _ in 0..waiters {
        fleet.spawn().await?;
    }
    let ready = |e: &Event| matches!(e, Event::Ready { .. });
    fleet
        .wait_for("waiters ready", Duration::from_secs(120), waiters, ready)
        .await?;
    // Every one queued on the server before they are killed.
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let queued = holder.inspect(&name).await?.waiters;
        if queued >= waiters {
            break;
        }
        // Else the kill below would test fewer leaks than it says.
        if Instant::now() > end {
            bail!("only {queued} of {waiters} waiters queued within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for w in 0..waiters {
        fleet.kill(w);
    }
    fleet.stop(Duration::from_secs(5)).await?;
    held.release().await?;
    after(target, &name).await
}
