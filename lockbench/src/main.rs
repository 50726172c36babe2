//! `lockbench`: the comparative benchmark suite behind `docs/comparison.md`.
//!
//! Runs the same workloads (uncontended, handover, contended, herd, takeover, scale, the cost of
//! a guarded write; and for the semaphore, the read-write lock and the election) on every backend it is given, beside the raw client floor and the peer libraries, and writes JSON
//! (schema `lockbench/1`), a markdown comparison and SVG charts. See `lockbench --help`.

mod cli;
mod counters;
mod model;
mod monitor;
mod output;
mod reference;
mod stats;
mod suite;
mod system;
mod workloads;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;

use cli::{Args, Child};

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(level) = args.log {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .init();
    }
    if args.observed {
        tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .with_max_level(tracing::Level::INFO)
            .init();
        if metrics::set_global_recorder(metrics_util::debugging::DebuggingRecorder::new()).is_err() {
            eprintln!("lockbench: a metrics recorder was already installed");
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockbench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match &args.child {
            Some(Child::Hold { url, name, ttl_ms }) => workloads::takeover::hold(url, name, *ttl_ms).await,
            Some(Child::Lead { url, name, ttl_ms }) => workloads::election::lead(url, name, *ttl_ms).await,
            Some(Child::Scale {
                backend,
                url,
                locks,
                window_s,
                ttl_ms,
            }) => {
                workloads::scale::child(
                    backend,
                    url,
                    *locks,
                    Duration::from_secs(*window_s),
                    Duration::from_millis(*ttl_ms),
                )
                .await
            }
            None => run(&args).await,
        }
    });
    // Do not wait for background tasks (watchdogs, cleanup of cancelled waiters) beyond a moment.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<()> {
    let report = suite::run(args).await?;
    if let Some(path) = &args.json {
        output::write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    let charts = match &args.charts {
        Some(dir) => {
            let charts = output::charts::write_all(dir, &report)?;
            eprintln!("wrote {} charts to {}", charts.len(), dir.display());
            charts
        }
        None => Vec::new(),
    };
    if let Some(path) = &args.markdown {
        let href = args
            .charts_href
            .clone()
            .unwrap_or_else(|| charts_href(path, args.charts.as_deref()));
        let text = output::markdown::render(&report, &charts, &href, args.quick);
        output::create_parent(path)?;
        std::fs::write(path, text)?;
        eprintln!("wrote {}", path.display());
    }
    for t in output::targets::check(&report) {
        eprintln!("target: {}", t.line());
    }
    Ok(())
}

/// The charts directory as seen from the markdown file (relative when it is below the file's
/// directory, as `docs/charts` is for `docs/comparison.md`).
fn charts_href(markdown: &Path, charts: Option<&Path>) -> String {
    let Some(charts) = charts else { return "charts".into() };
    let base = markdown.parent().unwrap_or(Path::new(""));
    charts
        .strip_prefix(base)
        .unwrap_or(charts)
        .to_string_lossy()
        .into_owned()
}
