//! `locksmith try NAME`: one attempt, no waiting.

use std::time::Duration;

use serde_json::json;

use crate::args::TryArgs;
use crate::exit::{Failure, NOT_ACQUIRED, STDOUT_CLOSED};
use crate::session::Session;
use crate::signals::{self, Signals};

/// Acquires NAME (or one of its permits, or a side of it) if it is free, prints the fencing token
/// and releases (exit 0; 141 if stdout was closed and the token could not be printed); exit 1 if
/// held. `--timeout` bounds the attempt: a backend that does not
/// answer within it is exit 3, after the attempt's clean-up (half a second more at most), so that
/// the command leaves nothing held.
///
/// SIGINT, SIGTERM and SIGHUP (`timeout 1 locksmith try …`) do not end it at once: an attempt in
/// flight is given up (its clean-up, which the locker's shutdown waits for, removes whatever it
/// took), a release in flight is finished, and then the exit code is 128 + the signal.
pub async fn try_once(session: &Session, args: &TryArgs) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let name = args.name.as_str();
    let locker = tokio::select! {
        locker = session.connect() => locker?,
        sig = signals.recv() => return Ok(signals::interrupted(sig)),
    };
    let mut builder = session.request(&locker, name, args.kind.kind());
    if let Some(left) = session.time_left() {
        builder = builder.timeout(left.max(Duration::from_millis(1)));
    }
    let attempt = tokio::select! {
        attempt = builder.try_acquire() => attempt?,
        sig = signals.recv() => {
            session.out.status(format_args!("{}: giving the attempt up", signals::name(sig)));
            return Ok(signals::interrupted(sig));
        }
    };
    match attempt {
        Some(guard) => {
            let printed = session.out.acquired(&guard);
            let release = guard.release();
            tokio::pin!(release);
            let mut interrupted = None;
            loop {
                tokio::select! {
                    released = &mut release => {
                        released?;
                        break;
                    }
                    sig = signals.recv() => {
                        interrupted.get_or_insert(sig);
                    }
                }
            }
            match interrupted {
                Some(sig) => Ok(signals::interrupted(sig)),
                // Released, but the token reached nobody: no success to report.
                None if !printed => Ok(STDOUT_CLOSED),
                None => Ok(0),
            }
        }
        None => {
            session.out.status(format_args!("{name:?} is held by another holder"));
            if session.out.json {
                session.out.result("", json!({ "name": name, "acquired": false }));
            }
            Ok(NOT_ACQUIRED)
        }
    }
}
