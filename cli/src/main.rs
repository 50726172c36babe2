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
mod procs;
mod session;
mod signals;
mod terminal;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::args::{Cli, Command};
use crate::exit::{Failure, LOST, UNAVAILABLE, USAGE};

/// How long locksmith waits, before it exits, for the backend to confirm that nothing of this
/// process is left (`Locker::shutdown`).
const SHUTDOWN: Duration = Duration::from_secs(2);
/// The same after the backend did not answer or the lock was lost: a short look only.
const SHUTDOWN_UNREACHABLE: Duration = Duration::from_millis(200);
use crate::session::Session;

fn main() -> ExitCode {
    // Never a backtrace: an internal error is one line, like every other error.
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string().replace('\n', " ");
        crate::output::stderr_line(format_args!("locksmith: internal error: {message}"));
    }));
    let mut command = args::command();
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|matches| Cli::from_matches(&matches));
    // The parser's definition is not used again, and the process ends soon: dropping its
    // hundreds of strings cost 6% of the instructions of a whole `locksmith run` (callgrind).
    std::mem::forget(command);
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // Documentation of the command itself: no backend, no runtime.
    match &cli.command {
        Command::Completions(args) => return cmd::docs::completions(args.shell),
        Command::Man => return cmd::docs::man(),
        _ => {}
    }
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
        let result = match &cli.command {
            Command::Run(args) => cmd::run::run(&session, args).await,
            Command::Try(args) => cmd::try_once::try_once(&session, args).await,
            Command::Hold(args) => cmd::hold::hold(&session, args).await,
            Command::Inspect(arg) => cmd::inspect::inspect(&session, &arg.name).await,
            Command::Elect(args) => cmd::elect::elect(&session, args).await,
            Command::List(args) => cmd::list::list(&session, &args.prefix).await,
            Command::Leader(args) => cmd::leader::leader(&session, args).await,
            Command::Init(args) => cmd::init::init(&session, args).await,
            Command::Prune(args) => cmd::prune::prune(&session, args).await,
            // Answered above, before the runtime started.
            Command::Completions(_) | Command::Man => Ok(0),
        };
        // Whatever happened, nothing of this process outlives it on the server; but a backend
        // that did not answer (exit 3) or lost our lock (exit 4) gets no long wait: what it
        // holds of ours expires after its TTL.
        let code = match &result {
            Ok(code) => *code,
            Err(failure) => failure.code,
        };
        let limit = if matches!(code, UNAVAILABLE | LOST) {
            SHUTDOWN_UNREACHABLE
        } else {
            SHUTDOWN
        };
        if tokio::time::timeout(limit, session.shutdown()).await.is_err() {
            tracing::debug!(?limit, "the backend did not confirm the shutdown in time");
        }
        result
    });
    // Background tasks (connections, a stdin reader) must not keep us alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(code) => {
            child::pass_on_interrupt(code);
            ExitCode::from(code)
        }
        Err(failure) => {
            let code = failure.code;
            let exit = fail(failure, cli.verbose);
            child::pass_on_interrupt(code);
            exit
        }
    }
}

/// One line on stderr, with the innermost cause the client library gave; all it said underneath
/// with `-v`.
fn fail(failure: Failure, verbose: u8) -> ExitCode {
    crate::output::stderr_line(format_args!("locksmith: {}", failure.line(verbose > 0)));
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
            let reason = missing_double_dash(&e, std::env::args_os()).unwrap_or_else(|| one_line(&e));
            crate::output::stderr_line(format_args!("locksmith: {reason} (see locksmith --help)"));
            ExitCode::from(USAGE)
        }
    }
}

/// clap's error on one line: its first paragraph ("error: ..." and any indented lines under it)
/// and its tips ("a similar argument exists: '--permits'"), without the usage.
fn one_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut paragraphs = rendered
        .split("\n\n")
        .map(|p| p.lines().map(str::trim).filter(|l| !l.is_empty()));
    let mut parts: Vec<String> = paragraphs
        .next()
        .map(|first| first.collect::<Vec<_>>().join(" "))
        .into_iter()
        .collect();
    // Not "to pass '--permit' as a value, use '-- --permit'": CMD after `--` is the only
    // free-form value, so that tip misleads.
    let tips = paragraphs
        .flatten()
        .filter(|l| l.starts_with("tip:") && !l.starts_with("tip: to pass"));
    parts.extend(tips.map(str::to_owned));
    let line = parts.join("; ");
    line.trim_start_matches("error: ").to_owned()
}

/// For `run`/`elect` given CMD without `--` before it (`locksmith run x true`): a reason that
/// says so, instead of clap's "unexpected argument 'true' found".
fn missing_double_dash(e: &clap::Error, args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let Some(ContextValue::StyledStr(usage)) = e.get(ContextKind::Usage) else {
        return None;
    };
    let usage = usage.to_string();
    let takes_cmd = usage.contains("-- <CMD>");
    if arg.starts_with('-') || !takes_cmd || args.into_iter().any(|a| a == "--") {
        return None;
    }
    let command = ["run", "elect"]
        .into_iter()
        .find(|c| usage.contains(&format!("locksmith {c} ")))?;
    Some(format!(
        "`--` is missing before CMD ({arg:?}): write locksmith {command} NAME [OPTIONS] -- CMD [ARGS]..."
    ))
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
