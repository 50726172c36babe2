//! `election`: how fast leadership moves on (locksmith only).
//!
//! - **resign**: the leader resigns at t0; the next candidate, campaigning on another
//!   connection, leads at t1.
//! - **failover**: a child process (lockbench re-executed with the hidden `__lead` subcommand)
//!   leads and is SIGKILLed at t0; a candidate in this process leads at t1. Bounded below by the
//!   lease TTL the server enforces (the dead leader cannot resign), as in `takeover`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::{connect, connect_with_ttl, unique_name};

/// The lease of the resign rows (see `contended`).
const TTL: Duration = locksmith::DEFAULT_TTL;

/// The resign row and the failover row.
pub async fn run(backend: &str, url: &str, sizes: &Sizes) -> Result<Vec<Record>> {
    let mut rows = vec![resign(backend, url, sizes.handover_ops).await?];
    if backend == "mem" {
        // The in-process store cannot be shared with a child process (see `takeover`).
        return Ok(rows);
    }
    rows.push(failover(backend, url, sizes).await?);
    Ok(rows)
}

async fn resign(backend: &str, url: &str, ops: usize) -> Result<Record> {
    let name = unique_name("election", "locksmith");
    let (leader, next) = (connect(url).await?.election(&name), connect(url).await?.election(&name));
    let mut samples = Samples::with_capacity(ops);
    for _ in 0..ops {
        let lead = leader.campaign("first").ttl(TTL).acquire().await?;
        let campaign = next.campaign("second").ttl(TTL);
        let wait = tokio::spawn(async move {
            let got = campaign.acquire().await;
            (Instant::now(), got)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = Instant::now();
        lead.resign().await?;
        let (t1, got) = tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .map_err(|_| anyhow!("no new leader 60 s after a resignation"))??;
        samples.push(t1.saturating_duration_since(t0));
        got?.resign().await?;
    }
    let mut r = Record::new("locksmith", backend, "election-resign").param("blocked_ms", 20u64);
    r.ops = Some(samples.len() as u64);
    r.p50_us = samples.quantile(0.5);
    r.p99_us = samples.quantile(0.99);
    r.samples_us = samples.sorted();
    Ok(r)
}

async fn failover(backend: &str, url: &str, sizes: &Sizes) -> Result<Record> {
    let ttl = sizes.takeover_ttl;
    let candidate = connect(url).await?;
    let mut samples = Samples::with_capacity(sizes.takeover_ops);
    for _ in 0..sizes.takeover_ops {
        let name = unique_name("election-failover", "locksmith");
        let exe = std::env::current_exe().context("finding lockbench's own executable")?;
        let mut child = Command::new(exe)
            .args(["__lead", url, &name, &ttl.as_millis().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the leader process")?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from the leader"))?;
        let line = tokio::time::timeout(Duration::from_secs(30), BufReader::new(stdout).lines().next_line())
            .await
            .map_err(|_| anyhow!("the leader did not report leading within 30 s"))??
            .ok_or_else(|| anyhow!("the leader exited before leading"))?;
        if !line.starts_with("LEADING") {
            bail!("unexpected line from the leader: {line:?}");
        }
        let campaign = candidate
            .election(&name)
            .campaign("candidate")
            .ttl(ttl)
            .timeout(Duration::from_secs(120));
        let wait = tokio::spawn(async move {
            let got = campaign.acquire().await;
            (Instant::now(), got)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        if wait.is_finished() {
            bail!("the candidate led while the leader was alive");
        }
        let t0 = Instant::now();
        child.start_kill().context("SIGKILL of the leader")?;
        let (t1, got) = wait.await?;
        samples.push(t1.saturating_duration_since(t0));
        got.context("campaigning after the leader was killed")?.resign().await?;
        let _ = child.wait().await;
    }
    let mut r = Record::new("locksmith", backend, "election-failover").param("ttl_ms", ttl.as_millis() as u64);
    r.ops = Some(samples.len() as u64);
    r.takeover_ms = samples.quantile(0.5).map(|us| round3(us / 1000.0));
    r.samples_us = samples.sorted();
    Ok(r)
}

/// The child: leads `name` until killed, after printing `LEADING <term>`.
pub async fn lead(url: &str, name: &str, ttl_ms: u64) -> Result<()> {
    let ttl = Duration::from_millis(ttl_ms);
    let locker = connect_with_ttl(url, ttl).await?;
    let lead = locker
        .election(name)
        .campaign("doomed")
        .ttl(ttl)
        .timeout(Duration::from_secs(30))
        .acquire()
        .await?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "LEADING {}", lead.term())?;
        out.flush()?;
    }
    tokio::time::sleep(Duration::from_secs(600)).await;
    lead.resign().await?;
    Ok(())
}
