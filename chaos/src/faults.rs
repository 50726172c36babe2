//! Injecting one fault, timed from the holder's point of view: each is started while a worker
//! holds the lock (and that worker is its target where it has one), and healed after a while.

use std::time::Duration;

use anyhow::{Context, Result};
use lockcore::conformance::proxy::Mode;
use lockcore::conformance::servers::backends;
use serde::Serialize;

use crate::events::now_ns;
use crate::fleet::Fleet;
use crate::targets::{Fault, Target};

/// One injected fault.
#[derive(Clone, Debug, Serialize)]
pub struct Injected {
    /// Which.
    pub fault: &'static str,
    /// How (e.g. which proxy mode, which server).
    pub detail: String,
    /// When it started (monotonic ns).
    pub at: u64,
    /// When it was healed (monotonic ns).
    pub healed: u64,
    /// The worker that held the lock when it started.
    pub holder: usize,
}

/// Which way a partition cuts, by the number of the partition in a run.
fn partition_mode(n: usize) -> (Mode, &'static str) {
    match n % 4 {
        0 => (Mode::FREEZE, "traffic frozen both ways"),
        1 => (
            Mode::Freeze {
                to_server: true,
                to_client: false,
            },
            "client-to-server traffic frozen",
        ),
        2 => (
            Mode::Freeze {
                to_server: false,
                to_client: true,
            },
            "server-to-client traffic frozen",
        ),
        _ => (Mode::Cut, "connections cut and refused"),
    }
}

/// Runs `scripts/backends ARGS` off the async runtime.
async fn servers(args: &[&str]) -> Result<String> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        std::panic::catch_unwind(|| backends(&refs)).map_err(|_| anyhow::anyhow!("scripts/backends {args:?} failed"))
    })
    .await
    .context("scripts/backends task")?
}

/// Injects `fault` (the `n`-th of its kind in this run) while `holder` holds the lock, and heals
/// it. Returns when the fault is healed.
pub async fn inject(fleet: &mut Fleet, target: &Target, fault: Fault, holder: usize, n: usize) -> Result<Injected> {
    let ttl = target.ttl;
    let at = now_ns();
    let detail = match fault {
        Fault::None => String::new(),
        Fault::Pause => {
            let pause = ttl * 2 + ttl.mul_f64(rand::random::<f64>());
            fleet.signal(holder, libc::SIGSTOP);
            tokio::time::sleep(pause).await;
            fleet.signal(holder, libc::SIGCONT);
            format!("SIGSTOP for {} ms", pause.as_millis())
        }
        Fault::Kill => {
            fleet.kill(holder);
            fleet.spawn().await?; // a new worker takes its place
            "SIGKILL; a new worker started".into()
        }
        Fault::Partition => {
            let (mode, how) = partition_mode(n);
            fleet.cut(holder, mode);
            tokio::time::sleep(ttl * 2).await;
            fleet.cut(holder, Mode::Forward);
            format!("{how} for {} ms", (ttl * 2).as_millis())
        }
        Fault::Restart => {
            let id = target.restart.context("no server to restart")?;
            servers(&["stop", id]).await?;
            servers(&["start", id]).await?;
            format!("{id} stopped and started")
        }
        Fault::LeaderKill => {
            let group = target.group.context("no leader group")?;
            let leader = servers(&["leader", group]).await?;
            servers(&["kill", &leader]).await?;
            tokio::time::sleep(ttl).await;
            servers(&["start", &leader]).await?;
            format!(
                "{leader} (the leader) killed, started again {} ms later",
                ttl.as_millis()
            )
        }
        Fault::MinorityPartition => {
            let group = target.group.context("no leader group")?;
            let leader = servers(&["leader", group]).await?;
            let follower = target.members.iter().find(|m| **m != leader).context("no follower")?;
            servers(&["pause", follower]).await?;
            tokio::time::sleep(ttl * 2).await;
            servers(&["resume", follower]).await?;
            format!("{follower} (a follower) stopped for {} ms", (ttl * 2).as_millis())
        }
    };
    Ok(Injected {
        fault: fault.name(),
        detail,
        at,
        healed: now_ns(),
        holder,
    })
}

/// Puts every server of `target` back (started, resumed), whatever a failed run left behind.
pub async fn restore(target: &Target) {
    let mut ids: Vec<&str> = target.members.to_vec();
    ids.extend(target.restart);
    for id in ids {
        let _ = servers(&["resume", id]).await;
        let _ = servers(&["start", id]).await;
    }
}

/// A duration in ms, for reports.
pub fn ms(ns: u64) -> f64 {
    Duration::from_nanos(ns).as_secs_f64() * 1000.0
}
