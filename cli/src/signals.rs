//! The signals locksmith handles itself while it waits or holds a lock: SIGINT, SIGTERM, SIGHUP.
//!
//! Once installed, these signals no longer terminate locksmith: every wait must race
//! [`Signals::recv`], and `run` forwards what it receives to CMD.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit::{Failure, UNAVAILABLE};

/// Handlers for the terminating signals.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Result<Self, Failure> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::new(UNAVAILABLE, format!("cannot install a signal handler: {e}")))
        };
        Ok(Signals {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The number of the next signal received.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// Whether `sig` asks CMD to stop (SIGINT, SIGTERM): forwarded once, then escalated to SIGKILL
/// (SIGHUP is only forwarded).
pub fn stops(sig: i32) -> bool {
    matches!(sig, libc::SIGINT | libc::SIGTERM)
}

/// The name of a signal for messages.
pub fn name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        n => format!("signal {n}"),
    }
}
