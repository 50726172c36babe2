//! One run: a fleet of workers on one target, one fault injected `repeats` times while they work,
//! then everything stopped, the leftovers looked for, and the run measured.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::check::{measure, Measured, Who};
use crate::events::{now_ns, Event};
use crate::faults::{inject, Injected};
use crate::fenced_log::{FencedLog, URL_VAR as FENCED_URL_VAR};
use crate::fleet::{Fleet, WorkerSpec};
use crate::primitive::Primitive;
use crate::register::Register;
use crate::targets::{Fault, Target};

/// How a run is sized.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Workers contending for the lock.
    pub workers: usize,
    /// How many times the fault is injected.
    pub repeats: usize,
    /// How many times a failover is injected on the Redis failover targets, whose figures are the
    /// point of their runs.
    pub failovers: usize,
}

/// What one run produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// `mem`, `etcd`, `zk`, `redis`.
    pub backend: &'static str,
    /// `single`, `cluster`, `ensemble`, `quorum`.
    pub topology: &'static str,
    /// The fault.
    pub fault: &'static str,
    /// What the workers contended for.
    pub primitive: Primitive,
    /// The lease TTL, in ms.
    pub ttl_ms: u128,
    /// What was measured.
    #[serde(flatten)]
    pub measured: Measured,
    /// Holders and waiters left on the server once the workers stopped and a TTL passed.
    pub leftovers: usize,
    /// The faults as injected.
    pub injected: Vec<Injected>,
    /// Where the workers wrote.
    pub writes: WriteMode,
}

/// Where a run's workers write their tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    /// The fenced register, checking tokens (the fault runs).
    Register,
    /// The register accepting every write, by workers that write blind (the self-check).
    UncheckedRegister,
    /// A log in the coordination store appended through guarded writes, by workers that write
    /// blind ([`crate::guarded_log`]).
    Guarded,
    /// A log in PostgreSQL written through `locksmith-fence`, by workers that write blind
    /// ([`crate::fenced_log`]).
    FencedStore,
}

/// Runs `fault` on `target`, the workers contending for a mutex.
pub async fn run(
    target: &Target,
    fault: Fault,
    shape: Shape,
    register_url: &str,
    writes: WriteMode,
) -> Result<RunResult> {
    run_on(target, Primitive::Mutex, fault, shape, register_url, writes).await
}

/// Runs `fault` on `target`, the workers contending for `primitive`.
pub async fn run_on(
    target: &Target,
    primitive: Primitive,
    fault: Fault,
    shape: Shape,
    register_url: &str,
    writes: WriteMode,
) -> Result<RunResult> {
    let name = match primitive {
        Primitive::Mutex => format!("chaos/{}/{}/{:08x}", target.id(), fault, rand::random::<u32>()),
        p => format!("chaos/{}/{p}/{}/{:08x}", target.id(), fault, rand::random::<u32>()),
    };
    let guarded_key = match writes {
        WriteMode::Guarded => Some(crate::guarded_log::key(target, &name)?),
        _ => None,
    };
    let fenced = match writes {
        WriteMode::FencedStore => {
            let url = std::env::var(FENCED_URL_VAR)
                .with_context(|| format!("{FENCED_URL_VAR} is not set (the fenced store's server)"))?;
            FencedLog::connect(&url).await?.create_tables().await?;
            Some(url)
        }
        _ => None,
    };
    let spec = WorkerSpec {
        name: name.clone(),
        primitive,
        register: register_url.to_owned(),
        unsafe_register: writes == WriteMode::UncheckedRegister,
        wait_only: false,
        hold_max: hold_max(target, fault),
        guarded_key: guarded_key.clone(),
        fenced_store: fenced.clone(),
    };
    let mut fleet = Fleet::new(target, spec);
    for _ in 0..shape.workers {
        fleet.spawn().await?;
    }
    let ready = |e: &Event| matches!(e, Event::Ready { .. });
    fleet
        .wait_for("workers ready", Duration::from_secs(60), shape.workers, ready)
        .await?;
    let enter = |e: &Event| matches!(e, Event::Enter { .. });
    fleet
        .wait_for("the first grants", Duration::from_secs(60), 3, enter)
        .await?;

    let mut injected = Vec::new();
    for n in 0..repeats(target, fault, shape) {
        let holder = fleet.wait_holder(Duration::from_secs(60)).await?;
        let done = inject(&mut fleet, target, fault, holder, n).await;
        let done = match done {
            Ok(d) => d,
            Err(e) => {
                crate::faults::restore(target).await;
                return Err(e.context(format!("injecting {fault} on {}", target.id())));
            }
        };
        injected.push(done);
        // Recovery: the lock must pass on and the workers settle before the next fault.
        let grants = fleet.events().iter().filter(|(_, e)| enter(e)).count();
        tokio::time::sleep(target.ttl * 2).await;
        let recovered = fleet
            .wait_for("grants after the fault", Duration::from_secs(60), grants + 2, enter)
            .await;
        if let Err(e) = recovered {
            let server = server_view(target, &name).await;
            return Err(e.context(format!("{} after {fault} ({server})", target.id())));
        }
    }
    if fault == Fault::None {
        tokio::time::sleep(target.ttl * 3).await;
    }
    let run_end = now_ns();
    fleet.stop(Duration::from_secs(15)).await?;

    let events = fleet.events();
    dump_events(&name, &events);
    let workers: Vec<Who> = fleet
        .workers
        .iter()
        .map(|w| Who {
            killed: w.killed_at,
            role: w.role,
            id: w.id.clone(),
        })
        .collect();
    let leftovers = leftovers(target, &name).await?;
    let log = match (&guarded_key, &fenced) {
        (Some(key), _) => crate::guarded_log::read(target, &name, key).await?,
        // A connection of its own: a fault may have restarted the store's server meanwhile
        // (postgres/single restart), closing one opened before the run.
        (None, Some(url)) => FencedLog::connect(url).await?.read(&name).await?,
        (None, None) => {
            let register = Register::connect(register_url, writes == WriteMode::Register).await?;
            register.log(&name).await?
        }
    };
    let measured = measure(&events, &workers, &log, &injected, run_end);
    Ok(RunResult {
        backend: target.backend,
        topology: target.topology,
        fault: fault.name(),
        primitive,
        ttl_ms: target.ttl.as_millis(),
        measured,
        leftovers,
        injected,
        writes,
    })
}

/// With `LOCKCHAOS_EVENTS=DIR`, every event of the run (its workers' reports, by worker, in
/// the order they arrived) in `DIR/<lock name with '/' as '_'>.jsonl`: what to read when a run
/// flags something. Best effort: a write that fails is logged, the run goes on.
fn dump_events(name: &str, events: &[(usize, Event)]) {
    let Some(dir) = std::env::var_os("LOCKCHAOS_EVENTS") else {
        return;
    };
    let path = std::path::Path::new(&dir).join(format!("{}.jsonl", name.replace('/', "_")));
    let lines: String = events
        .iter()
        .filter_map(|(w, e)| {
            Some(format!(
                "{{\"worker\":{w},\"event\":{}}}\n",
                serde_json::to_string(e).ok()?
            ))
        })
        .collect();
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, lines)) {
        tracing::warn!(path = %path.display(), error = %e, "could not write the run's events");
    }
}

/// The longest hold of a run: 300 ms, but 3 TTLs for partitions and clock jumps, so that a holder
/// cut off from its server (or whose lease a jump cut short) is often still at work when its
/// lease runs out (and must be told), and for Redis
/// failovers, so that the holder is still at work when the replica takes over (and its lease must
/// be there, or it must be told).
pub fn hold_max(target: &Target, fault: Fault) -> Duration {
    match fault {
        Fault::Partition | Fault::NetPartition | Fault::ClockJump => target.ttl * 3,
        f if f.fails_over() && target.replicated() => target.ttl * 3,
        _ => Duration::from_millis(300),
    }
}

/// How many times `fault` is injected in a run.
fn repeats(target: &Target, fault: Fault, shape: Shape) -> usize {
    match fault {
        f if f.fails_over() && target.replicated() => shape.failovers,
        _ => shape.repeats,
    }
}

/// What the server says of `name` (its holder and waiters), for a run that got stuck.
async fn server_view(target: &Target, name: &str) -> String {
    let info = async { locksmith::connect(&target.url).await?.inspect(name).await };
    match tokio::time::timeout(Duration::from_secs(10), info).await {
        Ok(Ok(info)) => format!("the server shows holder {:?} and {} waiters", info.holder, info.waiters),
        Ok(Err(e)) => format!("inspecting the lock failed: {e}"),
        Err(_) => "inspecting the lock took over 10 s".into(),
    }
}

/// Holders and waiters of `name` on the server after its last worker stopped, once they had a
/// TTL (plus the Redis waiters' own TTL) to expire.
pub async fn leftovers(target: &Target, name: &str) -> Result<usize> {
    let locker = locksmith::connect(&target.url).await?;
    // Every kind of the name (a mutex, a semaphore, a read-write lock, an election: each its own
    // keys), not only the mutex `inspect` shows.
    let left = || async {
        let listed = locker.list(name).await?;
        anyhow::Ok(
            listed
                .iter()
                .filter(|l| l.name == name)
                .map(|l| l.entries)
                .sum::<usize>(),
        )
    };
    if target.backend == "mem" {
        // The in-process store: the workers' releases are all there is.
        return left().await;
    }
    let deadline = tokio::time::Instant::now() + target.ttl * 2 + Duration::from_secs(5);
    loop {
        let count = left().await?;
        if count == 0 || tokio::time::Instant::now() > deadline {
            return Ok(count);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
