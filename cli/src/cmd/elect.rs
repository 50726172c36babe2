//! `locksmith elect NAME -- CMD ARGS…`: run a command while leading an election.

use locksmith::LockKind;

use crate::args::ElectArgs;
use crate::cmd::run::run_held;
use crate::exit::Failure;
use crate::session::Session;
use crate::signals::{self, Signals};

/// Campaigns in the election NAME with `--value` (default `<hostname>:<pid>`), waits (within
/// `--timeout`) until this candidate leads, then runs CMD with `LOCKSMITH_TERM`,
/// `LOCKSMITH_FENCING_TOKEN` (the same number) and `LOCKSMITH_ELECTION` set; resigns when CMD
/// exits (exit CMD's code). If the leadership is lost first, CMD is stopped as by `run` (exit 4).
pub async fn elect(session: &Session, args: &ElectArgs) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let locker = tokio::select! {
        locker = session.connect_waiting() => locker?,
        sig = signals.recv() => return Ok(signals::interrupted(sig)),
    };
    let value = args.value.clone().unwrap_or_else(default_value);
    let kind = LockKind::Leader { value: value.clone() };
    let guard = session.acquire(&locker, &args.name, kind, &mut signals).await?;
    let term = guard.fencing_token();
    session
        .out
        .status(format_args!("leading {:?} as {value:?} (term {term})", args.name));
    let env = [
        ("LOCKSMITH_TERM", term.to_string()),
        ("LOCKSMITH_FENCING_TOKEN", term.to_string()),
        ("LOCKSMITH_ELECTION", args.name.clone()),
        ("LOCKSMITH_LEADER_VALUE", value),
    ];
    run_held(
        session,
        guard,
        &args.name,
        &args.command,
        &env,
        args.grace,
        &mut signals,
    )
    .await
}

/// `<hostname>:<pid>`: what identifies this candidate when `--value` is not given.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}
