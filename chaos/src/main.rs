//! `lockchaos`: locksmith's fault suite. `scripts/chaos` runs it; see `docs/reliability.md` for
//! what it does and what it found.
//!
//! - `lockchaos run [--quick]`: the driver. For every backend and topology that
//!   `scripts/backends` starts, it runs real worker processes that take a lock, write their fencing
//!   token to a fenced register, hold, release — and injects faults into them and into the
//!   servers: the holder paused or killed, cut off from the server, the server restarted, the
//!   cluster's leader killed, a follower cut off. The same faults with workers that take a
//!   semaphore's permits, a read-write lock's sides or an election's leadership instead
//!   (`primitive.rs`; section `primitives`). The same faults again with workers that write
//!   blind through guarded writes (`guarded_log.rs`) and through a fenced store
//!   (`fenced_log.rs`). Then leaks, load, soak, bad input and operator faults
//!   (`extras/operator.rs`: misconfiguration, servers out of space, connections or memory). It
//!   writes the figures as JSON (`lockchaos/1`) and as the Markdown page, and exits 1 when a promise was
//!   broken (a stale write accepted, a token that went backwards, an overlap without a fault, a
//!   leftover, a panic).
//! - `lockchaos worker ...`: one worker process (started by the driver).
//! - `lockchaos merge PART.json... --json --markdown`: one report and page out of runs of parts
//!   of the suite (`run --sections ... --json PART.json`), for a full run made in parts.

mod check;
mod events;
mod extras;
mod faults;
mod fenced_log;
mod fleet;
mod guarded_log;
mod merge;
mod primitive;
mod register;
mod report;
mod run;
mod targets;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

/// locksmith's fault suite.
#[derive(Debug, Parser)]
#[command(name = "lockchaos")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the suite (the driver).
    Run(RunArgs),
    /// One worker process (started by the driver).
    Worker(worker::WorkerArgs),
    /// One report and page out of runs of parts of the suite (each `run --sections ... --json`).
    Merge(MergeArgs),
}

/// `merge`'s options.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The parts' JSON files, in the order their rows should appear.
    #[arg(required = true)]
    pub parts: Vec<PathBuf>,
    /// Write the merged results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the merged Markdown page here.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

/// The driver's options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// About 20 minutes instead of about five hours: each fault once, short soak, fewer waiters.
    #[arg(long)]
    pub quick: bool,
    /// Only these targets (`backend/topology`, comma-separated; e.g. `redis/single,etcd/cluster`).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only these faults (comma-separated names, e.g. `pause,kill`).
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Only these sections (`faults`, `primitives`, `guarded`, `fenced`, `self-check`, `leaks`, `load`, `soak`,
    /// `bad-input`, `operator-faults`).
    #[arg(long, value_delimiter = ',')]
    pub sections: Vec<String>,
    /// Inject each fault this many times (failovers on Redis Sentinel and Cluster too) instead
    /// of the mode's count (4, failovers 10; `--quick`: 1).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the Markdown page here.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

impl RunArgs {
    fn wants(&self, section: &str) -> bool {
        self.sections.is_empty() || self.sections.iter().any(|s| s == section)
    }
}

fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,redis=error,lockchaos=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockchaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => drive(args).await,
            Command::Worker(args) => worker::run(args).await.map(|()| true),
            Command::Merge(args) => merged(&args),
        }
    });
    runtime.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lockchaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The whole suite; `Ok(false)` when a promise was broken.
async fn drive(args: RunArgs) -> Result<bool> {
    let report = report::Report::collect(&args).await;
    // The file:// target's lock files go with the run, whatever its outcome (each run left ~40 MB).
    if let Err(e) = std::fs::remove_dir_all(targets::file_dir()) {
        tracing::debug!(error = %e, "the file:// target's directory was not removed");
    }
    publish(&report?, args.json.as_deref(), args.markdown.as_deref())
}

/// The parts merged; `Ok(false)` when a promise was broken in one of them.
fn merged(args: &MergeArgs) -> Result<bool> {
    let parts = args.parts.iter().map(|p| merge::read(p)).collect::<Result<Vec<_>>>()?;
    let report = merge::merge(parts)?;
    publish(&report, args.json.as_deref(), args.markdown.as_deref())
}

/// Writes the JSON and the page where asked and lists the broken promises; `Ok(false)` when one was.
fn publish(report: &report::Report, json: Option<&Path>, markdown: Option<&Path>) -> Result<bool> {
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(report)?)?;
        eprintln!("lockchaos: wrote {}", path.display());
    }
    if let Some(path) = markdown {
        std::fs::write(path, extras::markdown::page(report))?;
        eprintln!("lockchaos: wrote {}", path.display());
    }
    let broken = report.broken_promises();
    for b in &broken {
        eprintln!("lockchaos: BROKEN: {b}");
    }
    if broken.is_empty() {
        eprintln!("lockchaos: every promise held");
    }
    Ok(broken.is_empty())
}
