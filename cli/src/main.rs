//! `locksmith`: take a distributed lock from the shell — `run` a command under it (or under a
//! semaphore permit, or a side of a read-write lock), `try` it, `hold` it, `inspect` it, `elect`
//! a leader that runs a command, or show the `leader` — on etcd, ZooKeeper, Redis or the
//! in-process store.
//!
//! Exit codes are listed in `locksmith --help` ([`exit::EXIT_CODES_HELP`]).

#![warn(missing_docs)]

mod args;
mod child;
mod cmd;
mod exit;
mod output;
mod session;
mod signals;
mod terminal;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::{Failure, UNAVAILABLE, USAGE};
use crate::session::Session;

fn main() -> ExitCode {
    // Never a backtrace: an internal error is one line, like every other error.
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string().replace('\n', " ");
        eprintln!("locksmith: internal error: {message}");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    init_logging(cli.verbose);
    let session = Session::new(&cli);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                Failure::new(UNAVAILABLE, format!("cannot start the async runtime: {e}")),
                cli.verbose,
            )
        }
    };
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => cmd::run::run(&session, args).await,
            Command::Try(args) => cmd::try_once::try_once(&session, args).await,
            Command::Hold(args) => cmd::hold::hold(&session, args).await,
            Command::Inspect(arg) => cmd::inspect::inspect(&session, &arg.name).await,
            Command::Elect(args) => cmd::elect::elect(&session, args).await,
            Command::List(args) => cmd::list::list(&session, &args.prefix).await,
            Command::Leader(args) => cmd::leader::leader(&session, args).await,
        }
    });
    // Background tasks (connections, a stdin reader) must not keep us alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => fail(failure, cli.verbose),
    }
}

/// One line on stderr; what the client library said underneath only with `-v`.
fn fail(failure: Failure, verbose: u8) -> ExitCode {
    match (&failure.detail, verbose) {
        (Some(detail), 1..) => eprintln!("locksmith: {}: {detail}", failure.message),
        _ => eprintln!("locksmith: {}", failure.message),
    }
    ExitCode::from(failure.code)
}

/// Help and version go to stdout with exit 0; a usage error is one line on stderr and exit 2.
fn usage_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(USAGE)
        }
        _ => {
            // clap's first paragraph, on one line: "error: ..." and any indented lines under it.
            let rendered = e.render().to_string();
            let paragraph: Vec<&str> = rendered
                .lines()
                .skip_while(|l| l.trim().is_empty())
                .take_while(|l| !l.trim().is_empty())
                .collect();
            let reason = paragraph.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            let reason = reason.trim_start_matches("error: ");
            eprintln!("locksmith: {reason} (see locksmith --help)");
            ExitCode::from(USAGE)
        }
    }
}

/// Logs of the lock library on stderr: warnings by default (e.g. renewal retries), more with -v.
/// The Redis client's own warnings (each node of a cluster it failed to reach, before the error
/// that says so) only from -v on.
fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn,redis=error",
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .with_target(false)
        .try_init();
}

/// Colour codes only on a terminal, and never when `NO_COLOR` is set (<https://no-color.org>).
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
