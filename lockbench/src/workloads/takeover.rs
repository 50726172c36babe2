//! `takeover`: a child process (lockbench re-executed with the hidden `__hold` subcommand) holds
//! the lock and is SIGKILLed at t0; a waiter in this process gets the lock at t1. Reports t1−t0,
//! which is bounded below by the lease TTL the server enforces (the holder cannot release). On
//! etcd and ZooKeeper the lease is the holder's session, so its TTL goes into the holder's URL.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::cli::Sizes;
use crate::model::{round3, Record};
use crate::stats::Samples;
use crate::system::{connect, connect_with_ttl, unique_name};

/// Runs the takeover on locksmith's `backend` at `url`.
pub async fn run(backend: &str, url: &str, sizes: &Sizes) -> Result<Record> {
    let ttl = sizes.takeover_ttl;
    let waiter = connect(url).await?;
    let pb = super::bar(sizes.takeover_ops as u64, format!("{backend} locksmith takeover"));
    let mut samples = Samples::with_capacity(sizes.takeover_ops);
    let mut effective_ttl_ms = 0;
    for _ in 0..sizes.takeover_ops {
        let name = unique_name("takeover", "locksmith");
        let exe = std::env::current_exe().context("finding lockbench's own executable")?;
        let mut child = Command::new(exe)
            .args(["__hold", url, &name, &ttl.as_millis().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the holder process")?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from the holder"))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| anyhow!("the holder did not report holding the lock within 30 s"))??
            .ok_or_else(|| anyhow!("the holder exited before holding the lock"))?;
        effective_ttl_ms = line
            .strip_prefix("HELD ")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| anyhow!("unexpected line from the holder: {line:?}"))?;

        let (w, n) = (waiter.clone(), name.clone());
        let wait = tokio::spawn(async move {
            let g = w.lock(&n).ttl(ttl).timeout(Duration::from_secs(120)).acquire().await;
            (Instant::now(), g)
        });
        // Let the waiter queue up behind the holder before the holder dies.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if wait.is_finished() {
            bail!("the waiter got the lock while the holder was alive");
        }
        let t0 = Instant::now();
        child.start_kill().context("SIGKILL of the holder")?;
        let (t1, guard) = wait.await?;
        let guard = guard.context("waiting for the lock of the killed holder")?;
        samples.push(t1.saturating_duration_since(t0));
        guard.release().await?;
        let _ = child.wait().await;
        pb.inc(1);
    }
    pb.finish_and_clear();
    let mut r = Record::new("locksmith", backend, "takeover").param("ttl_ms", ttl.as_millis() as u64);
    r.params
        .insert("measured_effective_ttl_ms".into(), effective_ttl_ms.into());
    r.ops = Some(samples.len() as u64);
    r.takeover_ms = samples.quantile(0.5).map(|us| round3(us / 1000.0));
    r.samples_us = samples.sorted();
    Ok(r)
}

/// The child: holds `name` until killed, after printing `HELD <effective ttl ms>`.
pub async fn hold(url: &str, name: &str, ttl_ms: u64) -> Result<()> {
    let locker = connect_with_ttl(url, Duration::from_millis(ttl_ms)).await?;
    let guard = locker
        .lock(name)
        .ttl(Duration::from_millis(ttl_ms))
        .timeout(Duration::from_secs(30))
        .acquire()
        .await?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "HELD {}", guard.ttl().as_millis())?;
        out.flush()?;
    }
    // Keep renewing until SIGKILLed; give up after ten minutes in case the parent died.
    tokio::time::sleep(Duration::from_secs(600)).await;
    guard.release().await?;
    Ok(())
}
