//! `scale`: one process holds many locks (10,000 in a full run) for a window; the server's own
//! request counter gives the renewal requests per second, and `/proc/self/statm` the resident
//! memory per held lock. Each point runs in a child process (lockbench re-executed with the hidden
//! `__scale` subcommand) so that its memory is not mixed with the rest of the run.

use std::process::Stdio;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use locksmith::LockGuard;
use tokio::process::Command;
use tokio::task::JoinSet;

use crate::cli::Sizes;
use crate::counters::{Counter, Counting};
use crate::model::{round3, Record};
use crate::system::{connect_with_ttl, unique_name};

/// Acquisitions in flight while taking the locks.
const IN_FLIGHT: usize = 64;
/// Linux page size on the platforms lockbench runs on.
const PAGE: u64 = 4096;

/// Runs one child per held-lock count and collects their rows.
pub async fn run(backend: &str, url: &str, sizes: &Sizes) -> Result<Vec<Record>> {
    let pb = super::bar(sizes.scale_locks.len() as u64, format!("{backend} locksmith scale"));
    let mut rows = Vec::new();
    for &locks in &sizes.scale_locks {
        // The largest count gets the full window; smaller ones (the baseline) at most 20 s.
        let largest = sizes.scale_locks.iter().max() == Some(&locks);
        let window = if largest {
            sizes.scale_window
        } else {
            sizes.scale_window.min(Duration::from_secs(20))
        };
        pb.set_message(format!("{locks} locks, {} s", window.as_secs()));
        let exe = std::env::current_exe().context("finding lockbench's own executable")?;
        let args = [
            "__scale".to_string(),
            backend.to_string(),
            url.to_string(),
            locks.to_string(),
            window.as_secs().to_string(),
            sizes.scale_ttl.as_millis().to_string(),
        ];
        let limit = window + Duration::from_secs(300);
        let child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(limit, child)
            .await
            .map_err(|_| anyhow!("the scale child ran longer than {limit:?}"))??;
        if !out.status.success() {
            return Err(anyhow!("the scale child failed ({})", out.status));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .last()
            .ok_or_else(|| anyhow!("the scale child printed nothing"))?;
        rows.push(serde_json::from_str(line).context("reading the scale child's result")?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(rows)
}

/// The child: holds `locks` locks for `window`, prints one JSON [`Record`] line.
pub async fn child(backend: &str, url: &str, locks: usize, window: Duration, ttl: Duration) -> Result<()> {
    let plain = connect_with_ttl(url, ttl).await?;
    // Calls into the backend are counted on every backend (the watchdog's renew_many calls show
    // the client-side batching); the server's own counter is the figure reported where there is one.
    let calls = Arc::new(AtomicU64::new(0));
    let locker = Counting::wrap(&plain, calls.clone());
    let client_side = Counter::Calls(calls);
    let counter = Counter::for_url(url).await?.unwrap_or_else(|| client_side.clone());
    let rss_before = rss_bytes()?;
    let prefix = unique_name("scale", "locksmith");
    let mut guards: Vec<LockGuard> = Vec::with_capacity(locks);
    let mut tasks = JoinSet::new();
    for i in 0..locks {
        if tasks.len() >= IN_FLIGHT {
            if let Some(g) = tasks.join_next().await {
                guards.push(g??);
            }
        }
        let (l, name) = (locker.clone(), format!("{prefix}/{i}"));
        tasks.spawn(async move { l.lock(name).ttl(ttl).timeout(Duration::from_secs(60)).acquire().await });
    }
    while let Some(g) = tasks.join_next().await {
        guards.push(g??);
    }
    // One renewal interval for the acquisitions' tail to settle, then measure.
    let interval = locker.backend().renew_interval(ttl);
    tokio::time::sleep(interval).await;
    let rss_held = rss_bytes()?;
    let (server_window, calls_before) = (counter.start().await?, client_side.read().await?);
    tokio::time::sleep(window).await;
    let calls_after = client_side.read().await?;
    let count = server_window.finish().await?;
    let lost = guards.iter().filter(|g| !g.is_held()).count();

    let mut r = Record::new("locksmith", backend, "scale")
        .param("locks", locks as u64)
        .param("ttl_ms", ttl.as_millis() as u64)
        .param("window_s", window.as_secs());
    r.params.insert(
        "measured_renew_ticks_per_s".into(),
        round3(1.0 / interval.as_secs_f64()).into(),
    );
    r.params.insert("measured_counter".into(), counter.describe().into());
    count.annotate(&mut r.params);
    r.params.insert("measured_lost".into(), (lost as u64).into());
    let calls_per_s = calls_after.saturating_sub(calls_before) as f64 / window.as_secs_f64();
    r.params
        .insert("measured_backend_calls_per_s".into(), round3(calls_per_s).into());
    r.ops = Some(locks as u64);
    r.renewal_requests_per_s = Some(round3(count.requests as f64 / window.as_secs_f64()));
    r.rss_bytes_per_lock = Some(round3(rss_held.saturating_sub(rss_before) as f64 / locks.max(1) as f64));
    println!("{}", serde_json::to_string(&r)?);

    let mut releases = JoinSet::new();
    for g in guards {
        if releases.len() >= IN_FLIGHT {
            releases.join_next().await;
        }
        releases.spawn(g.release());
    }
    while releases.join_next().await.is_some() {}
    Ok(())
}

/// Resident memory of this process.
fn rss_bytes() -> Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").context("reading /proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("bad /proc/self/statm"))?;
    Ok(pages * PAGE)
}
