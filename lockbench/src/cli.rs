//! Command-line arguments and the sizes of each workload (`--quick` or full).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Comparative benchmarks of locksmith's backends against the raw client floor and peer libraries.
///
/// Starts no server: give the backend URLs (defaults: the `LOCKSMITH_TEST_*` variables printed by
/// `eval "$(scripts/backends up)"`). A backend whose Cargo feature is off or whose URL is unset or
/// unreachable is skipped with a note.
#[derive(Parser, Debug)]
#[command(name = "lockbench", version)]
pub struct Args {
    /// Small sizes: the whole suite in under two minutes (CI smoke).
    #[arg(long)]
    pub quick: bool,
    /// Backends to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "mem,file,etcd,zk,redis,postgres,mysql")]
    pub backends: Vec<String>,
    /// Workloads to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "uncontended,handover,contended,herd,takeover,scale,guarded,semaphore,rwlock,election,cli"
    )]
    pub workloads: Vec<String>,
    /// Skip the reference rows (raw floor and peer libraries).
    #[arg(long)]
    pub no_reference: bool,
    /// Only these systems' rows in the `uncontended` workload (e.g. `floor` or `locksmith`, as
    /// the rows name them), comma-separated: to profile one row alone, e.g. under callgrind.
    /// Default: every system.
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// Install a tracing subscriber (fmt at INFO, written to nowhere) and a metrics recorder
    /// (metrics-util's debugging recorder) first: the cost of locksmith's spans and metrics when
    /// an application collects them (scripts/instructions --observed).
    #[arg(long)]
    pub observed: bool,
    /// Write locksmith's logs to stderr at this level (`error`, `warn`, `info`, `debug`, `trace`):
    /// to see why a workload is slow or fails (each acquire's wait and round trips, a backend's
    /// retries). Not with `--observed`, whose subscriber writes to nowhere. The timings then
    /// include the logging.
    #[arg(long, conflicts_with = "observed")]
    pub log: Option<tracing::Level>,
    /// URL of the in-process backend.
    #[arg(long, default_value = "mem://lockbench")]
    pub mem: String,
    /// URL of the lock-file backend (a directory of the machine; no server).
    #[arg(long, default_value = "file:///tmp/lockbench-file")]
    pub file: String,
    /// etcd URL.
    #[arg(long, env = "LOCKSMITH_TEST_ETCD")]
    pub etcd: Option<String>,
    /// ZooKeeper URL.
    #[arg(long, env = "LOCKSMITH_TEST_ZK")]
    pub zk: Option<String>,
    /// Redis URL.
    #[arg(long, env = "LOCKSMITH_TEST_REDIS")]
    pub redis: Option<String>,
    /// PostgreSQL URL.
    #[arg(long, env = "LOCKSMITH_TEST_POSTGRES")]
    pub postgres: Option<String>,
    /// MySQL or MariaDB URL.
    #[arg(long, env = "LOCKSMITH_TEST_MYSQL")]
    pub mysql: Option<String>,
    /// Write the results as JSON (schema `lockbench/1`).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the comparison document (markdown).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write the SVG charts into this directory.
    #[arg(long)]
    pub charts: Option<PathBuf>,
    /// How the markdown refers to the charts directory (default: relative to the markdown file).
    #[arg(long)]
    pub charts_href: Option<String>,
    /// A note about the machine, written into the report.
    #[arg(long, default_value = "")]
    pub note: String,
    /// Internal subcommands (child processes of the takeover and scale workloads).
    #[command(subcommand)]
    pub child: Option<Child>,
}

/// Child processes started by lockbench itself.
#[derive(Subcommand, Debug)]
pub enum Child {
    /// Hold one lock until killed (takeover workload).
    #[command(name = "__hold", hide = true)]
    Hold {
        /// Backend URL.
        url: String,
        /// Lock name.
        name: String,
        /// TTL in milliseconds.
        ttl_ms: u64,
    },
    /// Lead one election until killed (election workload).
    #[command(name = "__lead", hide = true)]
    Lead {
        /// Backend URL.
        url: String,
        /// Election name.
        name: String,
        /// TTL in milliseconds.
        ttl_ms: u64,
    },
    /// Hold many locks and measure renewal traffic and memory (scale workload).
    #[command(name = "__scale", hide = true)]
    Scale {
        /// Backend name (mem, etcd, zk, redis).
        backend: String,
        /// Backend URL.
        url: String,
        /// How many locks to hold.
        locks: usize,
        /// Measurement window in seconds.
        window_s: u64,
        /// TTL in milliseconds.
        ttl_ms: u64,
    },
}

/// How big each workload is.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Warm-up cycles before measuring latency.
    pub warmup: usize,
    /// Measured acquire+release cycles (uncontended).
    pub uncontended_ops: usize,
    /// How long the waiter is blocked before the release (handover).
    pub blocked: Vec<Duration>,
    /// Handovers measured per blocked time.
    pub handover_ops: usize,
    /// Client counts (contended).
    pub clients: Vec<usize>,
    /// Duration of each contended point.
    pub contended_for: Duration,
    /// Waiters queued in the herd.
    pub herd_waiters: usize,
    /// Handovers counted in the herd.
    pub herd_handovers: usize,
    /// Lease TTL of the takeover workload.
    pub takeover_ttl: Duration,
    /// Takeovers measured.
    pub takeover_ops: usize,
    /// Held-lock counts of the scale workload (renewal traffic must not grow with it).
    pub scale_locks: Vec<usize>,
    /// Measurement window of each scale point.
    pub scale_window: Duration,
    /// Lease TTL of the scale workload.
    pub scale_ttl: Duration,
    /// Runs of each command of the `cli` workload (`file://`).
    pub cli_ops: usize,
}

impl Sizes {
    /// The sizes for `--quick` or a full run.
    pub fn new(quick: bool) -> Self {
        let ms = Duration::from_millis;
        if quick {
            Sizes {
                warmup: 10,
                uncontended_ops: 200,
                blocked: vec![ms(5), ms(20), ms(150)],
                handover_ops: 8,
                clients: vec![1, 2, 4, 8, 16],
                contended_for: ms(600),
                herd_waiters: 100,
                herd_handovers: 50,
                takeover_ttl: Duration::from_secs(1),
                takeover_ops: 1,
                scale_locks: vec![100, 1000],
                scale_window: Duration::from_secs(3),
                scale_ttl: Duration::from_secs(3),
                cli_ops: 10,
            }
        } else {
            Sizes {
                warmup: 50,
                uncontended_ops: 2000,
                blocked: vec![ms(5), ms(20), ms(150)],
                handover_ops: 50,
                clients: vec![1, 2, 4, 8, 16],
                contended_for: Duration::from_secs(5),
                herd_waiters: 100,
                herd_handovers: 50,
                takeover_ttl: Duration::from_secs(2),
                takeover_ops: 3,
                scale_locks: vec![100, 10_000],
                scale_window: Duration::from_secs(60),
                scale_ttl: Duration::from_secs(3),
                cli_ops: 100,
            }
        }
    }
}
