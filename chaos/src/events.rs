//! What a worker process reports, one JSON object per line on its stdout, and the clock the
//! reports are timed with.
//!
//! Every time is `CLOCK_MONOTONIC` in nanoseconds: one clock for the whole machine, so the times
//! reported by different processes (and the driver's fault times) can be compared directly.

use serde::{Deserialize, Serialize};

/// Nanoseconds on the machine-wide monotonic clock.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// One event of a worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// Connected; about to start its loop.
    Ready { t: u64 },
    /// Its `acquire` returned the lock: the critical section starts.
    Enter { t: u64, token: u64 },
    /// A write to the fenced register, sent at `sent`, answered at `t`.
    Write {
        sent: u64,
        t: u64,
        token: u64,
        accepted: bool,
    },
    /// Its guard's `lost()` fired while it held the lock.
    Lost { t: u64, reason: String },
    /// The critical section ended (held for the planned time, or cut short by `Lost`).
    Exit { t: u64 },
    /// `release` answered.
    Released { t: u64, ok: bool },
    /// Something failed (connecting, acquiring, the register); the loop goes on.
    Error { t: u64, what: String, error: String },
    /// The worker is stopping (it was asked to).
    Done { t: u64 },
}

impl Event {
    /// When it happened.
    pub fn t(&self) -> u64 {
        match self {
            Event::Ready { t }
            | Event::Enter { t, .. }
            | Event::Write { t, .. }
            | Event::Lost { t, .. }
            | Event::Exit { t }
            | Event::Released { t, .. }
            | Event::Error { t, .. }
            | Event::Done { t } => *t,
        }
    }
}
