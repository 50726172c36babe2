//! Injecting one fault, timed from the holder's point of view: each is started while a worker
//! holds the lock (and that worker is its target where it has one), and healed after a while.

use std::time::Duration;

use anyhow::{Context, Result};
use locksmith_core::conformance::proxy::Mode;
use locksmith_core::conformance::servers::backends;
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
        // The panic message carries the script's stderr: it says why (it goes into the report).
        std::panic::catch_unwind(|| backends(&refs)).map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("scripts/backends failed");
            // Its last line is the script's own reason (`backends: ...`); the lines before it
            // are its progress log.
            let last = why.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(why);
            anyhow::anyhow!("scripts/backends {args:?} failed: {}", last.trim())
        })
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
        Fault::LeaderKill if target.fails_over => {
            // Redis Sentinel or Cluster: the master is killed, the replica takes over (the
            // sentinels or the cluster decide it), and the old master comes back as its replica.
            let (ask, old) = redis_leader(fleet, target).await?;
            let ask: Vec<&str> = ask.iter().map(String::as_str).collect();
            let killed = std::time::Instant::now();
            servers(&["kill", &old]).await?;
            let new = wait_for_new_leader(&ask, &old).await?;
            let failover_ms = killed.elapsed().as_millis();
            tokio::time::sleep(ttl.saturating_sub(killed.elapsed())).await;
            servers(&["start", &old]).await?;
            format!(
                "{old} (the master) killed; {new} took over after {failover_ms} ms; {old} started again as its replica"
            )
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
        Fault::Failover => {
            let group = target.group.context("no failover group")?;
            let took = std::time::Instant::now();
            let new = servers(&["failover", group]).await?;
            let ms = took.elapsed().as_millis();
            match group {
                "postgres-ha" => format!(
                    "the primary killed, {new} promoted, the old primary its synchronous standby again ({ms} ms)"
                ),
                "mysql-ha" => format!(
                    "the primary killed, {new} promoted, the old primary its semi-synchronous replica again ({ms} ms)"
                ),
                _ => format!("SENTINEL FAILOVER to {new} ({ms} ms)"),
            }
        }
        Fault::LagFailover if matches!(target.group, Some("postgres-ha" | "mysql-ha")) => {
            // The standby stopped while the holders renew: a synchronous standby (a
            // semi-synchronous replica) holds their commits up (unanswered renewals, not
            // unconfirmed ones). The failover kills the primary, then resumes and promotes the
            // standby.
            let group = target.group.context("no failover group")?;
            let primary = servers(&["leader", group]).await?;
            let standby = match primary.as_str() {
                "pg-ha1" => "pg-ha2",
                "pg-ha2" => "pg-ha1",
                "mysql-ha1" => "mysql-ha2",
                _ => "mysql-ha1",
            };
            servers(&["pause", standby]).await?;
            tokio::time::sleep(ttl * 5 / 8).await;
            let killed = std::time::Instant::now();
            let new = servers(&["failover", group]).await?;
            format!(
                "{standby} (the standby) stopped for {} ms, then {primary} (the primary) killed and {new} \
                 resumed and promoted ({} ms); {primary} its {} again",
                (ttl * 5 / 8).as_millis(),
                killed.elapsed().as_millis(),
                if group == "mysql-ha" {
                    "semi-synchronous replica"
                } else {
                    "synchronous standby"
                }
            )
        }
        Fault::LagFailover => {
            // The replica misses the renewals of 5/8 of a TTL (the master takes them alone), then
            // is promoted without them: unconfirmed, the holder believes in a lease its successor
            // never saw.
            let (_, old) = redis_leader(fleet, target).await?;
            let replica = redis_servers(target)
                .iter()
                .find(|s| **s != old)
                .context("no replica")?;
            servers(&["pause", replica]).await?;
            tokio::time::sleep(ttl * 5 / 8).await;
            let killed = std::time::Instant::now();
            servers(&["kill", &old]).await?;
            servers(&["resume", replica]).await?;
            let new = wait_for_new_leader(&["leader", "redis-sentinel"], &old).await?;
            let failover_ms = killed.elapsed().as_millis();
            servers(&["start", &old]).await?;
            format!(
                "{replica} (the replica) stopped for {} ms, then {old} (the master) killed; {new} took over \
                 after {failover_ms} ms; {old} started again as its replica",
                (ttl * 5 / 8).as_millis()
            )
        }
        Fault::NetPartition if target.fails_over => {
            // The Sentinel master alone on its side of a real partition, its clients still with
            // it: the sentinels promote the replica, the old master keeps answering its clients
            // (renewals unconfirmed by any replica) until the heal makes it the new one's replica.
            let (_, old) = redis_leader(fleet, target).await?;
            let cut = std::time::Instant::now();
            servers(&["isolate", &old]).await?;
            let new = wait_for_new_leader(&["leader", "redis-sentinel"], &old).await;
            let failover_ms = cut.elapsed().as_millis();
            if new.is_ok() {
                tokio::time::sleep(ttl).await;
            }
            let healed_after = cut.elapsed().as_millis();
            servers(&["heal", &old]).await?;
            format!(
                "{old} (the master) cut off from its replica and sentinels, its clients still reaching it; {} \
                 after {failover_ms} ms; healed after {healed_after} ms, {old} then a replica",
                new.map(|new| format!("{new} took over"))?
            )
        }
        Fault::NetPartition => {
            // A member alone on its side of a real partition, serving the clients that reach it:
            // the leader on even injections, a follower on odd ones.
            let group = target.group.context("no leader group")?;
            let leader = servers(&["leader", group]).await?;
            let (member, role) = if n.is_multiple_of(2) {
                (leader.as_str(), "the leader")
            } else {
                let follower = target.members.iter().find(|m| **m != leader).context("no follower")?;
                (*follower, "a follower")
            };
            servers(&["isolate", member]).await?;
            tokio::time::sleep(ttl * 2).await;
            servers(&["heal", member]).await?;
            format!(
                "{member} ({role}) cut off from the other members for {} ms, its clients still reaching it",
                (ttl * 2).as_millis()
            )
        }
        Fault::ClockJump => {
            // The server's wall clock steps while the lock is held, stays there for 2 TTLs, and
            // steps back to the true time (a second jump, the other way).
            let id = target.clock.context("no server under the clock shim")?;
            let (ms, what) = [
                (10_000, "+10 s"),
                (-10_000, "-10 s"),
                (3_600_000, "+1 h"),
                (-3_600_000, "-1 h"),
            ][n % 4];
            servers(&["clock", id, &ms.to_string()]).await?;
            tokio::time::sleep(ttl * 2).await;
            servers(&["clock", id, "0"]).await?;
            format!(
                "{id}'s wall clock stepped {what}, and back to the true time {} ms later",
                (ttl * 2).as_millis()
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

/// The `scripts/backends` command that names the master a Redis failover target's lock lives on
/// (`leader redis-sentinel`, or `slot-owner redis-cluster SLOT` of the lock's slot), and its
/// answer now.
async fn redis_leader(fleet: &Fleet, target: &Target) -> Result<(Vec<String>, String)> {
    let group = target.group.context("no leader group")?;
    let ask: Vec<String> = if group == "redis-cluster" {
        let url = locksmith::driver::BackendUrl::parse(&target.url)?;
        let name = locksmith::driver::LockName::new(fleet.lock_name())?;
        let key = locksmith::redis::LockKeys::for_url(&url, &name)?.lock;
        let slot = slot_of(&url.hosts[0].to_addr(6379), &key).await?;
        vec!["slot-owner".into(), group.into(), slot.to_string()]
    } else {
        vec!["leader".into(), group.into()]
    };
    let refs: Vec<&str> = ask.iter().map(String::as_str).collect();
    let leader = servers(&refs).await?;
    Ok((ask, leader))
}

/// `CLUSTER KEYSLOT key`, asked of the cluster node at `addr`.
async fn slot_of(addr: &str, key: &str) -> Result<i64> {
    let client = redis::Client::open(format!("redis://{addr}"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    Ok(redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await?)
}

/// Polls `scripts/backends ASK` (at most 30 s) until it names another server than `old`.
async fn wait_for_new_leader(ask: &[&str], old: &str) -> Result<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(now) = servers(ask).await {
            if !now.is_empty() && now != old {
                return Ok(now);
            }
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "no failover: `scripts/backends {}` still says {old} after 30 s",
                ask.join(" ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The data servers of a Redis failover target.
fn redis_servers(target: &Target) -> &'static [&'static str] {
    match target.group {
        Some("redis-sentinel") => &["sentinel-m", "sentinel-r"],
        Some("redis-cluster") => &[
            "cluster-1",
            "cluster-2",
            "cluster-3",
            "cluster-r1",
            "cluster-r2",
            "cluster-r3",
        ],
        _ => &[],
    }
}

/// Puts every server of `target` back (started, resumed), whatever a failed run left behind.
pub async fn restore(target: &Target) {
    let mut ids: Vec<&str> = target.members.to_vec();
    ids.extend(target.restart);
    ids.extend(redis_servers(target));
    if let Some(id) = target.clock {
        let _ = servers(&["clock", id, "0"]).await;
    }
    for id in ids {
        if target.has(Fault::NetPartition) {
            let _ = servers(&["heal", id]).await;
        }
        let _ = servers(&["resume", id]).await;
        let _ = servers(&["start", id]).await;
    }
}

/// A duration in ms, for reports.
pub fn ms(ns: u64) -> f64 {
    Duration::from_nanos(ns).as_secs_f64() * 1000.0
}
