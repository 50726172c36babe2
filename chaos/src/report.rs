//! Running every section and putting the figures together: the JSON (`lockchaos/1`), the
//! figures of the Markdown page (written by `extras::markdown`), and the list of broken promises
//! that fails the suite.

use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::extras::{self, BadInput, Leak, Load, OperatorFault, Soak};
use crate::primitive::Primitive;
use crate::run::{self, RunResult, Shape, WriteMode};
use crate::targets::{self, env_url, Fault, Target};
use crate::RunArgs;

/// Everything one `lockchaos run` found.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// `lockchaos/1`.
    pub schema: String,
    /// Where and how it ran.
    pub machine: Machine,
    /// One row per backend × topology × fault.
    pub results: Vec<Row>,
    /// The other primitives (semaphore, read-write lock, election) under the faults: one row
    /// per primitive × backend × topology × fault.
    pub primitives: Vec<Row>,
    /// The guarded mode: the same faults, workers that write blind through guarded writes to
    /// the coordination store instead of the register.
    pub guarded: Vec<Row>,
    /// The fenced-store mode: the same faults, workers that write blind through
    /// `locksmith-fence` to a PostgreSQL table outside the lock service.
    pub fenced: Vec<Row>,
    /// The suite run against a deliberately broken setup, which it must flag.
    pub self_check: Option<SelfCheck>,
    /// Waiter entries left behind by cancelled and killed waiters.
    pub leaks: Vec<Leak>,
    /// Many waiters on one lock.
    pub load: Vec<Load>,
    /// Many locks held for a long time.
    pub soak: Vec<Soak>,
    /// Every bad input tried, with the error it got.
    pub bad_input: Vec<BadInput>,
    /// What operators do to servers: misconfiguration, and servers out of space, connections or
    /// memory (absent from reports made before this section existed).
    #[serde(default)]
    pub operator_faults: Vec<OperatorFault>,
    /// Targets or sections that did not run, and why.
    pub notes: Vec<String>,
}

impl Report {
    /// A report of `machine` with no rows yet.
    pub fn empty(machine: Machine) -> Report {
        Report {
            schema: "lockchaos/1".into(),
            machine,
            results: Vec::new(),
            primitives: Vec::new(),
            guarded: Vec::new(),
            fenced: Vec::new(),
            self_check: None,
            leaks: Vec::new(),
            load: Vec::new(),
            soak: Vec::new(),
            bad_input: Vec::new(),
            operator_faults: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// The machine and the run's settings.
#[derive(Debug, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// `uname -sr`.
    pub os: String,
    /// Server versions, as they report them.
    pub servers: Vec<String>,
    /// `--quick` or not.
    pub quick: bool,
    /// The lease TTL of single servers, in ms (clusters: at least 2000).
    pub ttl_ms: u128,
    /// Workers per run.
    pub workers: usize,
    /// Injections per fault.
    pub repeats: usize,
    /// Injections of `leader-kill` and `failover` on Redis Sentinel and Cluster.
    pub failovers: usize,
    /// Wall time of the whole run, in s (of a merged report: its parts' times added).
    pub seconds: f64,
    /// The sections that ran (every one of [`SECTIONS`] when the run was not limited).
    #[serde(default)]
    pub sections: Vec<String>,
    /// The commit the suite was built from (`git describe --always --dirty`), when known.
    #[serde(default)]
    pub commit: Option<String>,
    /// A report merged from runs of parts of the suite (`lockchaos merge`): each part, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    /// The version of the checks it was judged by ([`CHECKS`]; 0 before it was recorded).
    #[serde(default)]
    pub checks: u32,
}

/// One run of a merged report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Part {
    /// The sections it ran.
    pub sections: Vec<String>,
    /// The commit it was built from, when known.
    pub commit: Option<String>,
    /// Its wall time, in s.
    pub seconds: f64,
}

/// The version of the checks a run makes: raised whenever a check is added or tightened, so that
/// `merge` refuses a part whose rows were judged by fewer checks (a missing count reads as 0, a
/// check that never ran as one that passed). 2: holders told late, and told first on every fault
/// a running holder can be told of.
pub const CHECKS: u32 = 2;

/// Every section of the suite, in the order a run takes them.
pub const SECTIONS: [&str; 10] = [
    "faults",
    "primitives",
    "guarded",
    "fenced",
    "self-check",
    "leaks",
    "load",
    "soak",
    "bad-input",
    "operator-faults",
];

/// One backend × topology × fault (the contract's field names).
#[derive(Debug, Serialize, Deserialize)]
pub struct Row {
    /// `mem`, `etcd`, `zk`, `redis`.
    pub backend: String,
    /// `single`, `cluster`, `ensemble`, `quorum`, `ha` (PostgreSQL primary and standby), `sentinel`,
    /// `sentinel+confirm`, `cluster+confirm`.
    pub topology: String,
    /// The fault.
    pub fault: String,
    /// `mutex`, `semaphore`, `rwlock`, `election`.
    pub primitive: String,
    /// Injections of the fault.
    pub runs: usize,
    /// Grants.
    pub acquisitions: usize,
    /// Pairs of critical sections that overlapped.
    pub overlaps: usize,
    /// The longest overlap, in ms.
    pub overlap_ms_max: f64,
    /// Writes of stale holders accepted after a newer holder's (must be 0).
    pub stale_writes_accepted: usize,
    /// Writes the register rejected.
    pub stale_writes_rejected: usize,
    /// Faults whose holder was told (`lost()` fired).
    pub lost_signalled: usize,
    /// Faults whose holder was overtaken and never told.
    pub lost_not_signalled: usize,
    /// Of the holders told, those told only after another holder entered their lock.
    #[serde(default)]
    pub lost_late: usize,
    /// Median time from the fault to the holder's `lost()`, in ms.
    pub lost_ms_p50: Option<f64>,
    /// Median time from the fault to the next holder, in ms.
    pub takeover_ms_p50: Option<f64>,
    /// The lease TTL, in ms.
    pub ttl_ms: u128,
    /// Grants whose token was below an earlier grant's.
    pub token_regressions: usize,
    /// Holders and waiters left on the server after the workers stopped and a TTL passed.
    pub leftovers: usize,
    /// Errors the workers reported.
    pub errors: usize,
    /// How the faults were injected.
    pub detail: Vec<String>,
}

/// The broken setup and what the suite saw.
#[derive(Debug, Serialize, Deserialize)]
pub struct SelfCheck {
    /// What was broken.
    pub variant: String,
    /// Its row.
    pub row: Row,
    /// Whether the suite flagged it (it must).
    pub caught: bool,
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

impl Row {
    fn from(r: RunResult) -> Row {
        let m = r.measured;
        Row {
            backend: r.backend.into(),
            topology: r.topology.into(),
            fault: r.fault.into(),
            primitive: r.primitive.name().into(),
            runs: r.injected.len().max(1),
            acquisitions: m.acquisitions,
            overlaps: m.overlaps,
            overlap_ms_max: m.overlap_ms_max,
            stale_writes_accepted: m.stale_writes_accepted,
            stale_writes_rejected: m.stale_writes_rejected,
            lost_signalled: m.lost_signalled,
            lost_not_signalled: m.lost_not_signalled,
            lost_late: m.lost_late,
            lost_ms_p50: median(&m.lost_ms),
            takeover_ms_p50: median(&m.takeover_ms),
            ttl_ms: r.ttl_ms,
            token_regressions: m.token_regressions,
            leftovers: r.leftovers,
            errors: m.errors,
            detail: r.injected.into_iter().map(|i| i.detail).collect(),
        }
    }

    /// What this row breaks, if anything.
    fn broken(&self) -> Vec<String> {
        let id = match self.primitive.as_str() {
            "mutex" => format!("{}/{} {}", self.backend, self.topology, self.fault),
            p => format!("{}/{} {p} {}", self.backend, self.topology, self.fault),
        };
        let mut out = Vec::new();
        if self.stale_writes_accepted > 0 {
            out.push(format!("{id}: {} stale writes accepted", self.stale_writes_accepted));
        }
        if self.token_regressions > 0 {
            out.push(format!(
                "{id}: {} fencing tokens went backwards",
                self.token_regressions
            ));
        }
        let must_tell = Fault::parse(&self.fault).is_ok_and(|f| must_tell(f, &self.backend, &self.topology));
        if must_tell && self.lost_not_signalled > 0 {
            out.push(format!(
                "{id}: {} holders overtaken without being told",
                self.lost_not_signalled
            ));
        }
        if must_tell && self.lost_late > 0 {
            out.push(format!(
                "{id}: {} holders told only after another holder entered their lock",
                self.lost_late
            ));
        }
        if self.fault == "none" && self.overlaps > 0 {
            out.push(format!("{id}: {} overlaps without any fault", self.overlaps));
        }
        // A server clock stepped and stepped back moves the expiry of what the server wrote
        // meanwhile by the step (up to an hour in the full run): an entry left then expires that
        // much later, which is no leak. (Counted over every kind since checks version 2, which
        // first showed it.)
        if self.leftovers > 0 && self.fault != Fault::ClockJump.name() {
            out.push(format!("{id}: {} holders/waiters left on the server", self.leftovers));
        }
        out
    }
}

/// Whether a holder must be told (`lost()`) before anyone else is granted its lock under `fault`
/// on `backend`/`topology`: whenever it can still run, except through a failover that may lose
/// grants by design (Redis Sentinel and Cluster without replica confirmation, PostgreSQL with
/// `replication=async`: fencing alone covers those) and a server clock step (the lease's expiry
/// on the server moves with its clock). A paused holder cannot run; a killed one is gone.
fn must_tell(fault: Fault, backend: &str, topology: &str) -> bool {
    let unconfirmed =
        (backend == "redis" && matches!(topology, "sentinel" | "cluster")) || topology.ends_with("+async");
    match fault {
        Fault::Pause | Fault::Kill | Fault::ClockJump => false,
        f if f.fails_over() => !unconfirmed,
        _ => true,
    }
}

/// `uname -sr`, or `unknown`.
/// `git describe --always --dirty` of the working directory, if git answers.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()?;
    let described = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !described.is_empty()).then_some(described)
}

fn os() -> String {
    std::process::Command::new("uname")
        .arg("-sr")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

/// The first line each server binary prints of its version.
fn server_versions() -> Vec<String> {
    let first_line = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_owned))
    };
    let mut out: Vec<String> = [
        first_line("etcd", &["--version"]),
        first_line("redis-server", &["--version"]),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Ok(entries) = std::fs::read_dir("/usr/share/java") {
        let zk = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find(|n| n.starts_with("zookeeper-3") && n.ends_with(".jar"));
        out.extend(zk.map(|z| {
            format!(
                "ZooKeeper {}",
                z.trim_start_matches("zookeeper-").trim_end_matches(".jar")
            )
        }));
    }
    out
}

impl Report {
    /// Runs the sections `args` asks for.
    pub async fn collect(args: &RunArgs) -> Result<Report> {
        let started = std::time::Instant::now();
        let ttl = if args.quick {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(2)
        };
        let shape = Shape {
            workers: 4,
            repeats: args.repeats.unwrap_or(if args.quick { 1 } else { 4 }),
            failovers: args.repeats.unwrap_or(if args.quick { 1 } else { 10 }),
        };
        // A name that matches nothing would filter everything out, and an empty run passes.
        if let Some(unknown) = args.sections.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
            bail!("--sections {unknown:?}: expected one of {}", SECTIONS.join(", "));
        }
        let all = targets::all(ttl)?;
        if let Some(unknown) = args.only.iter().find(|o| !all.iter().any(|t| &t.id() == *o)) {
            let known: Vec<String> = all.iter().map(Target::id).collect();
            bail!("--only {unknown:?}: expected targets among {}", known.join(", "));
        }
        let targets: Vec<Target> = all
            .into_iter()
            .filter(|t| args.only.is_empty() || args.only.contains(&t.id()))
            .collect();
        let faults: Vec<Fault> = if args.faults.is_empty() {
            Fault::ALL.to_vec()
        } else {
            args.faults.iter().map(|f| Fault::parse(f)).collect::<Result<_>>()?
        };
        let register = env_url("LOCKSMITH_TEST_REGISTER")?;
        let mut report = Report::empty(Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            os: os(),
            servers: server_versions(),
            quick: args.quick,
            ttl_ms: ttl.as_millis(),
            workers: shape.workers,
            repeats: shape.repeats,
            failovers: shape.failovers,
            seconds: 0.0,
            sections: SECTIONS
                .iter()
                .filter(|s| args.wants(s))
                .map(|s| (*s).to_owned())
                .collect(),
            commit: commit(),
            parts: Vec::new(),
            checks: CHECKS,
        });
        if args.wants("faults") {
            // A fault the servers were not started for leaves its rows out: the page must say so.
            let asked = |f: Fault| faults.contains(&f);
            if asked(Fault::NetPartition) && !std::env::var("LOCKSMITH_TEST_NETNS").is_ok_and(|v| v == "1") {
                report.notes.push(
                    "net-partition did not run: the servers were not started in network namespaces \
                     (LOCKSMITH_BACKENDS_NETNS=1, as root)"
                        .into(),
                );
            }
            if asked(Fault::ClockJump) && !std::env::var("LOCKSMITH_TEST_CLOCKS").is_ok_and(|v| v == "1") {
                report.notes.push(
                    "clock-jump did not run: the servers were not started under the clock shim \
                     (LOCKSMITH_BACKENDS_CLOCKS=1)"
                        .into(),
                );
            }
            for target in &targets {
                let applies = |f: &Fault| {
                    if args.quick {
                        target.has_quick(*f)
                    } else {
                        target.has(*f)
                    }
                };
                for fault in faults.iter().copied().filter(applies) {
                    let run = run::run(target, fault, shape, &register, WriteMode::Register);
                    let label = format!("{} {fault}", target.id());
                    keep_row(label, run, &mut report.results, &mut report.notes).await;
                }
            }
        }
        if args.wants("primitives") {
            report.primitives = primitives(&targets, &faults, shape, args.quick, &register, &mut report.notes).await;
        }
        if args.wants("guarded") {
            report.guarded = guarded(&targets, &faults, shape, args.quick, &register, &mut report.notes).await;
        }
        if args.wants("fenced") {
            report.fenced = fenced(&targets, &faults, shape, args.quick, &register, &mut report.notes).await;
        }
        if args.wants("self-check") {
            report.self_check = self_check(&targets, ttl, &register, &mut report.notes).await;
        }
        let singles: Vec<&Target> = targets.iter().filter(|t| t.topology == "single").collect();
        if args.wants("leaks") {
            report.leaks = extras::leaks(&singles, args.quick, &register).await;
        }
        if args.wants("load") {
            report.load = extras::load(&singles, args.quick).await;
        }
        if args.wants("soak") {
            // The same servers, with the soak's TTL in their URLs (etcd's and ZooKeeper's session).
            let soak_targets: Vec<Target> = targets::all(extras::SOAK_TTL)?
                .into_iter()
                .filter(|t| singles.iter().any(|s| s.id() == t.id()))
                .collect();
            report.soak = extras::soak(&soak_targets.iter().collect::<Vec<_>>(), args.quick).await;
        }
        if args.wants("bad-input") {
            report.bad_input = extras::bad_input(&singles).await;
        }
        if args.wants("operator-faults") {
            report.operator_faults = extras::operator_faults().await;
        }
        report.machine.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Every broken promise: what fails the suite.
    pub fn broken_promises(&self) -> Vec<String> {
        let mut out: Vec<String> = self.results.iter().flat_map(Row::broken).collect();
        out.extend(self.primitives.iter().flat_map(Row::broken));
        out.extend(
            self.guarded
                .iter()
                .flat_map(Row::broken)
                .map(|b| format!("guarded writes: {b}")),
        );
        out.extend(
            self.fenced
                .iter()
                .flat_map(Row::broken)
                .map(|b| format!("fenced store: {b}")),
        );
        if let Some(s) = &self.self_check {
            if !s.caught {
                out.push(format!("self-check: the suite did not flag {}", s.variant));
            }
        }
        out.extend(self.notes.iter().filter(|n| n.contains("run failed")).cloned());
        out.extend(self.leaks.iter().flat_map(Leak::broken));
        out.extend(self.load.iter().flat_map(Load::broken));
        out.extend(self.soak.iter().flat_map(Soak::broken));
        out.extend(self.bad_input.iter().flat_map(BadInput::broken));
        out.extend(self.operator_faults.iter().flat_map(OperatorFault::broken));
        out
    }
}

/// Runs one fault run (`label`: its target, primitive, fault, mode) and keeps its row, or a note
/// that it failed, which [`Report::broken_promises`] counts as broken (by "run failed").
async fn keep_row(
    label: String,
    run: impl std::future::Future<Output = Result<RunResult>>,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    tracing::info!(run = label, "run");
    match run.await {
        Ok(r) => rows.push(Row::from(r)),
        Err(e) => {
            tracing::error!(run = label, error = %format!("{e:#}"), "run failed");
            notes.push(format!("{label}: the run failed: {e:#}"));
        }
    }
}

/// The targets and faults of the primitives' quick run: one primitive per backend, so that each
/// primitive and each server-backed backend's kinds meet a pause in every run of `scripts/test`.
const QUICK_PRIMITIVES: [(&str, Primitive); 3] = [
    ("redis/single", Primitive::Semaphore),
    ("etcd/single", Primitive::Rwlock),
    ("zk/single", Primitive::Election),
];

/// The other primitives under faults, workers writing to the register (each part's rule, see
/// `register.rs`): every target that serves them (not the Redis quorum, which serves mutexes
/// only; Redis Sentinel and Cluster with replica confirmation, their default) with every fault
/// it has, each injected at most twice (the failovers' own figures are the mutex's: this is
/// about each primitive's rules); the quick run: [`QUICK_PRIMITIVES`] with a pause.
async fn primitives(
    targets: &[Target],
    faults: &[Fault],
    shape: Shape,
    quick: bool,
    register: &str,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let shape = Shape {
        repeats: shape.repeats.min(2),
        failovers: shape.repeats.min(2),
        ..shape
    };
    let serves = |t: &&Target| t.topology != "quorum" && !t.unconfirmed();
    let mut rows = Vec::new();
    for target in targets.iter().filter(serves) {
        for primitive in Primitive::OTHERS {
            if quick && !QUICK_PRIMITIVES.contains(&(target.id().as_str(), primitive)) {
                continue;
            }
            let applies = |f: &Fault| target.has(*f) && (!quick || *f == Fault::Pause);
            for fault in faults.iter().copied().filter(applies) {
                let run = run::run_on(target, primitive, fault, shape, register, WriteMode::Register);
                let label = format!("{} {primitive} {fault}", target.id());
                keep_row(label, run, &mut rows, notes).await;
            }
        }
    }
    rows
}

/// The guarded mode on every target with guarded writes: the faults of the fault runs (the
/// quick run: pause, the fault that makes stale writes, and on two failover topologies the
/// leader kill), workers writing blind through
/// guarded writes to a log in the coordination store.
async fn guarded(
    targets: &[Target],
    faults: &[Fault],
    shape: Shape,
    quick: bool,
    register: &str,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let targets: Vec<&Target> = targets.iter().filter(|t| crate::guarded_log::supported(t)).collect();
    blind_runs(&targets, faults, shape, quick, register, WriteMode::Guarded, notes).await
}

/// The fenced-store mode: workers writing blind through `locksmith-fence` to PostgreSQL, on
/// every target (the fence needs the token alone: `file://` and the Redis quorum too) but the
/// in-process `mem://`, whose workers cannot be paused; the quick run: the single-server
/// targets and the quorum, with pauses.
async fn fenced(
    targets: &[Target],
    faults: &[Fault],
    shape: Shape,
    quick: bool,
    register: &str,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let targets: Vec<&Target> = targets
        .iter()
        .filter(|t| t.backend != "mem" && (!quick || matches!(t.topology, "single" | "quorum")))
        .collect();
    blind_runs(&targets, faults, shape, quick, register, WriteMode::FencedStore, notes).await
}

/// The failover topologies of the blind writers' quick run (with a leader kill): each Redis
/// topology once and each replica mode once (the full run has all four).
const QUICK_BLIND_FAILOVERS: [&str; 2] = ["redis/sentinel", "redis/cluster+confirm"];

/// The runs of a mode whose workers write blind (`writes`) on `targets`: every fault of each
/// target, or in the quick run the pause (the fault that makes stale writes) and, on the
/// failover topologies of [`QUICK_BLIND_FAILOVERS`], the leader kill.
async fn blind_runs(
    targets: &[&Target],
    faults: &[Fault],
    shape: Shape,
    quick: bool,
    register: &str,
    writes: WriteMode,
    notes: &mut Vec<String>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for target in targets {
        let applies = |f: &Fault| {
            if !quick {
                target.has(*f)
            } else if target.fails_over {
                *f == Fault::LeaderKill && target.has(*f) && QUICK_BLIND_FAILOVERS.contains(&target.id().as_str())
            } else {
                *f == Fault::Pause && target.has(*f)
            }
        };
        for fault in faults.iter().copied().filter(applies) {
            let run = run::run(target, fault, shape, register, writes);
            keep_row(format!("{} {fault} ({writes:?})", target.id()), run, &mut rows, notes).await;
        }
    }
    rows
}

/// The suite against a register that does not check tokens and workers that write after losing
/// their lock (as a holder paused between checking `lost()` and writing would), on the first
/// networked single target, with pauses: each paused holder's write lands after the new holder's
/// and must be flagged. (Workers that heed `lost()` usually hear of the loss first when they
/// wake, which left the check to a race it sometimes lost.)
async fn self_check(targets: &[Target], ttl: Duration, register: &str, notes: &mut Vec<String>) -> Option<SelfCheck> {
    let target = targets
        .iter()
        .find(|t| t.backend == "redis" && t.topology == "single")
        .or_else(|| targets.iter().find(|t| t.backend != "mem" && t.topology == "single"))?
        .clone();
    let shape = Shape {
        workers: 4,
        repeats: 5,
        failovers: 5,
    };
    let _ = ttl;
    match run::run(&target, Fault::Pause, shape, register, WriteMode::UncheckedRegister).await {
        Ok(r) => {
            let row = Row::from(r);
            Some(SelfCheck {
                variant: format!(
                    "a register that accepts every write (no token check) and holders that write \
                     after losing their lock, {} with 5 pauses",
                    target.id()
                ),
                // Flagged for what it plants: stale writes (not for a leftover or another row's
                // promise, which would pass a suite that misses stale writes).
                caught: row.stale_writes_accepted > 0,
                row,
            })
        }
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "self-check failed to run");
            // Counted as broken ("run failed"): without it nothing shows that the suite can see
            // a stale write at all.
            notes.push(format!("self-check on {}: the run failed: {e:#}", target.id()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder that can still run must be told before anyone else gets its lock on every fault
    /// but a pause, a kill, a server clock step and an unconfirmed failover (before, only under a
    /// real partition and a confirmed failover: a holder told late under the proxy's partition, a
    /// restart or an etcd leader's kill passed).
    #[test]
    fn a_running_holder_must_be_told_first_on_every_fault_it_can_be_told_of() {
        for fault in [Fault::Partition, Fault::Restart, Fault::MinorityPartition, Fault::None] {
            for (backend, topology) in [
                ("etcd", "single"),
                ("zk", "ensemble"),
                ("redis", "single"),
                ("postgres", "single"),
            ] {
                assert!(must_tell(fault, backend, topology), "{fault:?} on {backend}/{topology}");
            }
        }
        assert!(must_tell(Fault::LeaderKill, "etcd", "cluster"));
        assert!(must_tell(Fault::NetPartition, "zk", "ensemble"));
        assert!(must_tell(Fault::LeaderKill, "redis", "cluster+confirm"));
        assert!(must_tell(Fault::Failover, "postgres", "ha"));
        for fault in [Fault::Pause, Fault::Kill, Fault::ClockJump] {
            assert!(!must_tell(fault, "redis", "single"), "{fault:?}");
        }
        assert!(!must_tell(Fault::NetPartition, "redis", "sentinel"));
        assert!(!must_tell(Fault::LeaderKill, "redis", "cluster"));
        assert!(!must_tell(Fault::LagFailover, "postgres", "ha+async"));
    }
}
