//! The signals locksmith handles itself while it waits or holds a lock: SIGINT, SIGTERM, SIGHUP;
//! and while CMD runs, SIGTSTP ([`JobStop`]).
//!
//! Once installed, these signals no longer terminate locksmith: every wait must race
//! [`Signals::recv`], and `run` forwards what it receives to CMD.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit::{Failure, UNAVAILABLE};

/// Handlers for the terminating signals. A signal that was ignored when locksmith started
/// (`nohup` ignores SIGHUP; a non-interactive shell's background job, SIGINT) stays ignored: no
/// handler is installed for it, so that it neither ends a wait nor is lost to CMD, which inherits
/// it ignored.
pub struct Signals {
    int: Option<Signal>,
    term: Option<Signal>,
    hup: Option<Signal>,
}

/// A handler for `sig` unless it is ignored now.
fn handler(sig: i32) -> Result<Option<Signal>, Failure> {
    if ignored(sig) {
        return Ok(None);
    }
    signal(SignalKind::from_raw(sig))
        .map(Some)
        .map_err(|e| Failure::new(UNAVAILABLE, format!("cannot install a signal handler: {e}")))
}

/// Whether `sig`'s disposition is "ignore" (what locksmith's caller set; never one of ours).
fn ignored(sig: i32) -> bool {
    // SAFETY: sigaction(2) that only reads the disposition into a zero-initialised structure.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
    }
}

/// Waits for the next delivery of `signal`; never, without a handler.
async fn next(signal: &mut Option<Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

impl Signals {
    /// Installs the handlers (not for a signal that is ignored).
    pub fn install() -> Result<Self, Failure> {
        Ok(Signals {
            int: handler(libc::SIGINT)?,
            term: handler(libc::SIGTERM)?,
            hup: handler(libc::SIGHUP)?,
        })
    }

    /// The number of the next signal received.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            () = next(&mut self.int) => libc::SIGINT,
            () = next(&mut self.term) => libc::SIGTERM,
            () = next(&mut self.hup) => libc::SIGHUP,
        }
    }
}

/// A handler for SIGTSTP (the terminal's Ctrl-Z when locksmith's group has the terminal, or a
/// `kill -TSTP`), installed while CMD runs: locksmith must not stop alone, since a stopped
/// locksmith renews nothing while CMD would run on in its own process group. Once installed,
/// SIGTSTP no longer stops locksmith by itself: see [`stop_self`]. Not installed if SIGTSTP was
/// ignored when locksmith started (CMD then inherits it ignored too).
pub struct JobStop(Option<Signal>);

impl JobStop {
    /// Installs the handler (unless SIGTSTP is ignored).
    pub fn install() -> Result<Self, Failure> {
        handler(libc::SIGTSTP).map(JobStop)
    }

    /// Waits for the next SIGTSTP.
    pub async fn recv(&mut self) {
        next(&mut self.0).await;
    }

    /// Forgets the SIGTSTPs received so far (a second Ctrl-Z that came before locksmith
    /// stopped, which would stop it again once continued).
    pub fn drain(&mut self) {
        let Some(signal) = self.0.as_mut() else { return };
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        while signal.poll_recv(&mut cx).is_ready() {}
    }
}

/// Stops this process as SIGTSTP's default action does, and returns once it is continued (`fg`,
/// `bg`, SIGCONT), or at once where the kernel discards a job stop: in an orphaned process group
/// (`setsid`, a parent shell gone), which nothing would ever continue. SIGTSTP is raised with its
/// default action for the moment, and the handler is put back after. (Nothing is written here:
/// stderr may be a full pipe whose reader is stopped too.)
pub fn stop_self() {
    if !raise_by_default(libc::SIGTSTP) {
        // SAFETY: raise(3) with a valid signal number; no memory is involved.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}

/// Raises `sig` on this thread with its default action (unblocked) for the moment, and puts
/// the disposition and the thread's signal mask back if the call returns (the signal did not end
/// the process, or it was continued after a stop). `false`, with nothing raised, if the default
/// action could not be set.
fn raise_by_default(sig: i32) -> bool {
    let Some(saved) = set_disposition(sig, libc::SIG_DFL) else {
        return false;
    };
    let old_mask = change_mask(libc::SIG_UNBLOCK, sig);
    // SAFETY: raise(3) and sigaction(2) with a valid signal and the disposition read above.
    unsafe {
        libc::raise(sig);
        restore_mask(&old_mask);
        libc::sigaction(sig, &saved, std::ptr::null_mut());
    }
    true
}

/// Sets `sig`'s disposition to `action` (`SIG_IGN`, `SIG_DFL`) for the whole process; returns the
/// one it replaced, or `None` (unchanged) if it cannot be set. Async-signal-safe (CMD's process
/// calls it between fork and exec).
pub fn set_disposition(sig: i32, action: libc::sighandler_t) -> Option<libc::sigaction> {
    // SAFETY: sigaction(2) with valid, zero-initialised structures.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = action;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(sig, &new, &mut old) == 0).then_some(old)
    }
}

/// Blocks or unblocks `sig` (`how`: `SIG_BLOCK`, `SIG_UNBLOCK`) for this thread; returns the
/// mask it replaced, for [`restore_mask`]. Async-signal-safe.
pub fn change_mask(how: i32, sig: i32) -> libc::sigset_t {
    // SAFETY: sigset and pthread_sigmask(3) calls on valid, zero-initialised structures.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(how, &set, &mut old);
        old
    }
}

/// Puts back a signal mask that [`change_mask`] replaced. Async-signal-safe.
pub fn restore_mask(old: &libc::sigset_t) {
    // SAFETY: pthread_sigmask(3) with a mask it returned before.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
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
            match set_disposition(sig, libc::SIG_IGN) {
                Some(old) => saved.push((sig, old)),
                None => {
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
    raise_by_default(sig);
}
