//! The signals locksmith handles itself while it waits or holds a lock: SIGINT, SIGTERM, SIGHUP;
//! and while CMD runs, SIGTSTP ([`JobStop`]).
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

/// A handler for SIGTSTP (the terminal's Ctrl-Z when locksmith's group has the terminal, or a
/// `kill -TSTP`), installed while CMD runs: locksmith must not stop alone, since a stopped
/// locksmith renews nothing while CMD would run on in its own process group. Once installed,
/// SIGTSTP no longer stops locksmith by itself: see [`stop_self`].
pub struct JobStop(Signal);

impl JobStop {
    /// Installs the handler.
    pub fn install() -> Result<Self, Failure> {
        signal(SignalKind::from_raw(libc::SIGTSTP))
            .map(JobStop)
            .map_err(|e| Failure::new(UNAVAILABLE, format!("cannot install a signal handler: {e}")))
    }

    /// Waits for the next SIGTSTP.
    pub async fn recv(&mut self) {
        self.0.recv().await;
    }
}

/// Stops this process as SIGTSTP's default action would (SIGSTOP, which cannot be caught), and
/// returns once it is continued (`fg`, `bg`, SIGCONT).
pub fn stop_self() {
    let _ = std::io::Write::flush(&mut std::io::stderr());
    // SAFETY: raise(3) with a valid signal number; no memory is involved.
    unsafe { libc::raise(libc::SIGSTOP) };
}

/// The signal that ended locksmith's own wait or work ([`interrupted`]); 0 if none did.
static INTERRUPTED_BY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The exit code of locksmith ended by `sig` (128 + `sig`), which it remembers: after its
/// clean-up, a locksmith ended by SIGINT dies of it ([`crate::child::pass_on_interrupt`]), so that
/// a shell loop around it stops as it does for any command interrupted by Ctrl-C.
pub fn interrupted(sig: i32) -> u8 {
    INTERRUPTED_BY.store(sig, std::sync::atomic::Ordering::SeqCst);
    128 + sig as u8
}

/// The signal [`interrupted`] remembered, if any.
pub fn interrupted_by() -> Option<i32> {
    match INTERRUPTED_BY.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
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

/// The job-control signals that stop a process of a background group touching its terminal
/// (SIGTTIN, SIGTTOU), ignored by locksmith while CMD runs: CMD's group is then the terminal's
/// foreground group, so locksmith's own group is in the background, and another member of it
/// reading the terminal (`locksmith run N -- CMD | less`) would get the whole group stopped,
/// locksmith included, which would stop renewing the lock while CMD runs on. Ignored, these
/// signals are discarded; locksmith's own reads and writes of the terminal fail with EIO instead.
/// Their former dispositions come back on drop.
pub struct JobStopsIgnored {
    /// Each signal with its disposition before it was ignored.
    saved: Vec<(i32, libc::sigaction)>,
}

impl JobStopsIgnored {
    /// The signals ignored here.
    const SIGNALS: [i32; 2] = [libc::SIGTTIN, libc::SIGTTOU];

    /// Ignores SIGTTIN and SIGTTOU for the whole process (a signal that cannot be ignored is
    /// logged and left as it was).
    pub fn install() -> JobStopsIgnored {
        let mut saved = Vec::with_capacity(Self::SIGNALS.len());
        for sig in Self::SIGNALS {
            // SAFETY: sigaction(2) with valid, zero-initialised structures.
            unsafe {
                let mut ignore: libc::sigaction = std::mem::zeroed();
                ignore.sa_sigaction = libc::SIG_IGN;
                libc::sigemptyset(&mut ignore.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &ignore, &mut old) == 0 {
                    saved.push((sig, old));
                } else {
                    tracing::debug!(sig, error = %std::io::Error::last_os_error(), "cannot ignore a job-control signal");
                }
            }
        }
        JobStopsIgnored { saved }
    }

    /// The dispositions to give back, for [`restore_in_child`] (CMD must not inherit the ignored
    /// ones: an ignored signal stays ignored across exec).
    pub fn saved(&self) -> Vec<(i32, libc::sigaction)> {
        self.saved.clone()
    }
}

impl Drop for JobStopsIgnored {
    /// Gives the signals their former dispositions.
    fn drop(&mut self) {
        for (sig, old) in &self.saved {
            // SAFETY: restores a disposition sigaction(2) returned; `old` is a valid sigaction.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// In CMD's process, between fork and exec: gives the signals of `saved` back the dispositions
/// locksmith had before [`JobStopsIgnored::install`]. Calls only sigaction, which is
/// async-signal-safe.
pub fn restore_in_child(saved: &[(i32, libc::sigaction)]) {
    for (sig, old) in saved {
        // SAFETY: sigaction(2) with a valid structure; no allocation.
        unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
    }
}

/// Ends this process by `sig` with its default action (stdout and stderr flushed first): for a
/// parent that tells a child killed by a signal from one that exited. Returns if `sig` did not
/// end it.
pub fn die_of(sig: i32) {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let _ = std::io::Write::flush(&mut std::io::stderr());
    // SAFETY: sigaction(2), pthread_sigmask(3) and raise(3) with valid, zero-initialised structures.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut default.sa_mask);
        libc::sigaction(sig, &default, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}
