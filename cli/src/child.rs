//! The command `run` starts: spawned in a process group of its own, signalled as a group, given
//! the terminal while it runs (when locksmith has it), and its exit status turned into an exit
//! code.

use std::ffi::OsString;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, ChildStdin, Command};

use crate::exit::{Failure, CANNOT_EXECUTE, NOT_FOUND};
use crate::signals::{self, JobStopsIgnored};
use crate::terminal::{self, Terminal};

/// A running CMD.
pub struct Cmd {
    child: Child,
    /// The process group id (= CMD's pid); the group outlives CMD while what CMD started stays in
    /// it.
    group: Option<i32>,
    /// The group's [`Sentinel`], told when this is dropped that locksmith ended in order
    /// (whatever CMD left running in its group then stays).
    _sentinel: Option<Sentinel>,
    /// The terminal lent to CMD's group while CMD runs (taken back when CMD exits or this is
    /// dropped).
    terminal: Option<Terminal>,
    /// SIGTTIN and SIGTTOU ignored by locksmith while CMD runs (restored last, after the
    /// terminal was taken back).
    _stops_ignored: JobStopsIgnored,
}

/// A small `sh` watching for locksmith's death, to stop CMD's whole process group then: the
/// death signal the kernel sends on locksmith's death (`PR_SET_PDEATHSIG`) reaches CMD only, and
/// whatever CMD started would run on without the lock. The sentinel reads a pipe that only
/// locksmith writes: a line means locksmith ended in order (the sentinel exits); end of file
/// without one means locksmith died (SIGKILL, a crash), and the sentinel sends the group SIGTERM,
/// then SIGKILL after the grace period. It runs in a process group of its own and ignores the
/// terminal's signals, so that it outlives locksmith.
struct Sentinel {
    _process: Child,
    pipe: Option<ChildStdin>,
}

/// The sentinel's script: `$0` the group to stop, `$1` the grace period in seconds
/// ([`grace_seconds`]).
const SENTINEL: &str = r#"trap '' INT TERM HUP QUIT
if read -r _; then exit 0; fi
kill -TERM "-$0" 2>/dev/null || exit 0
sleep "$1"
kill -KILL "-$0" 2>/dev/null
exit 0"#;

impl Sentinel {
    fn start(group: i32, grace: Duration) -> io::Result<Sentinel> {
        let mut process = Command::new("/bin/sh")
            .args(["-c", SENTINEL])
            .arg(group.to_string())
            .arg(grace_seconds(grace))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(false)
            .spawn()?;
        let pipe = process.stdin.take();
        Ok(Sentinel {
            _process: process,
            pipe,
        })
    }
}

/// `grace` as `sleep` takes it: seconds, to the millisecond (coreutils' and busybox's `sleep`
/// take fractions). (It was whole seconds, at least one: `--grace 1900ms` gave CMD's group 1 s
/// before SIGKILL when locksmith died, and `--grace 0` gave it 1 s.)
fn grace_seconds(grace: Duration) -> String {
    format!("{}.{:03}", grace.as_secs(), grace.subsec_millis())
}

impl Drop for Sentinel {
    /// Tells the sentinel that locksmith ended in order: it exits without signalling anyone.
    /// Not while a panic unwinds: the lock's guard is dropped by the same unwinding, and its
    /// release, spawned on a runtime that the panic ends, may never run; the pipe closes as this
    /// is dropped, and the sentinel stops the group as at any other death.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(Ok(fd)) = self.pipe.take().map(ChildStdin::into_owned_fd) {
            // One byte into an empty pipe: the write cannot block.
            let _ = io::Write::write_all(&mut std::fs::File::from(fd), b"\n");
        }
    }
}

impl Cmd {
    /// Starts `argv` with `env` added to our environment, in a new process group, so that a lost
    /// lock can stop CMD *and* everything it started. On Linux CMD also gets SIGTERM if locksmith
    /// itself dies (even by SIGKILL), so that it never runs on without a holder renewing the lock.
    /// Whatever CMD started in its group gets SIGTERM too (SIGKILL after `grace`) when
    /// locksmith dies without ending in order. When locksmith is in the foreground of a terminal,
    /// CMD's group is made the terminal's foreground group until CMD exits, so that CMD can read
    /// from it (a background group would be stopped by SIGTTIN). locksmith ignores SIGTTIN and
    /// SIGTTOU meanwhile (CMD gets them as locksmith had them), so that a job-control stop aimed
    /// at its own group cannot stop it renewing the lock.
    pub fn spawn(argv: &[OsString], env: &[(&str, String)], grace: Duration) -> Result<Cmd, Failure> {
        let Some((program, args)) = argv.split_first() else {
            return Err(Failure::new(crate::exit::USAGE, "no command given after --"));
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .kill_on_drop(false);
        // Before the terminal is lent (which saves SIGTTOU's disposition and restores it on
        // reclaim) and before the fork (the child gives the saved dispositions back).
        let stops_ignored = JobStopsIgnored::install();
        let saved = stops_ignored.saved();
        let mut terminal = Terminal::foreground();
        let tty = terminal.as_ref().map(Terminal::fd);
        // SAFETY: the closure runs in the forked child before exec (after it made its own process
        // group) and calls only async-signal-safe functions (prctl, getppid, kill, sigprocmask,
        // tcsetpgrp, sigaction); `saved` was allocated before the fork.
        #[cfg(target_os = "linux")]
        let parent = std::process::id();
        unsafe {
            command.pre_exec(move || {
                #[cfg(target_os = "linux")]
                {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    // The parent may have died before prctl: then nobody would tell us.
                    if libc::getppid() as u32 != parent {
                        libc::kill(libc::getpid(), libc::SIGTERM);
                    }
                }
                if let Some(fd) = tty {
                    terminal::take_in_child(fd);
                }
                signals::restore_in_child(&saved);
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            let program = program.to_string_lossy();
            match e.kind() {
                io::ErrorKind::NotFound => Failure::new(NOT_FOUND, format!("{program}: command not found")),
                _ => Failure::new(CANNOT_EXECUTE, format!("{program}: cannot execute: {e}")),
            }
        })?;
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
        let sentinel = group.and_then(|group| match Sentinel::start(group, grace) {
            Ok(sentinel) => Some(sentinel),
            Err(e) => {
                tracing::warn!(error = %e, "no sentinel for CMD's process group: if locksmith dies, only CMD is told");
                None
            }
        });
        // CMD took the terminal itself before exec; doing it here too (as shells do) leaves no
        // doubt, and sets locksmith up to be in the background meanwhile.
        if let (Some(terminal), Some(group)) = (terminal.as_mut(), group) {
            terminal.lend(group);
        }
        Ok(Cmd {
            child,
            group,
            _sentinel: sentinel,
            terminal,
            _stops_ignored: stops_ignored,
        })
    }

    /// Sends `sig` to CMD's process group (CMD and whatever it started that is still in it).
    pub fn signal(&self, sig: i32) {
        let Some(group) = self.group else { return };
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
        let rc = unsafe { libc::kill(-group, sig) };
        if rc != 0 {
            tracing::debug!(group, sig, error = %io::Error::last_os_error(), "signalling CMD's process group failed");
        }
    }

    /// Forwards `sig` to CMD's process group, then SIGCONT, as a shell's `kill` does to a stopped
    /// job: a CMD stopped meanwhile (Ctrl-Z on its terminal, or SIGTTIN at a read of the terminal
    /// it was not given) handles the signal now rather than when someone continues it (a
    /// forwarded SIGTERM waited for `--grace` and ended in SIGKILL).
    pub fn forward(&self, sig: i32) {
        self.signal(sig);
        self.signal(libc::SIGCONT);
    }

    /// Stops CMD's process group (SIGTSTP, then SIGSTOP, which nothing in it can ignore), then
    /// locksmith itself, as a job's SIGTSTP would stop a pipeline; returns once locksmith is
    /// continued, or at once in an orphaned process group, where the kernel discards job stops
    /// (see [`signals::stop_self`]). Then, if
    /// `still_held()`, continues the group (and lends it the terminal again if it had it and
    /// locksmith's group got it back) and returns true; if not (the lease ran out meanwhile: a
    /// stopped locksmith renews nothing), leaves the group stopped and returns false.
    pub fn stop_together(&mut self, still_held: impl FnOnce() -> bool) -> bool {
        // SIGTSTP first, for what passes a stop on to work outside the group (sudo's pty, a
        // pager restoring the terminal), then SIGSTOP, which nothing can ignore.
        self.signal(libc::SIGTSTP);
        self.signal(libc::SIGSTOP);
        signals::stop_self();
        if !still_held() {
            return false;
        }
        if let (Some(terminal), Some(group)) = (self.terminal.as_mut(), self.group) {
            terminal.lend_again(group);
        }
        self.signal(libc::SIGCONT);
        true
    }

    /// Whether CMD's process group still has members that run (CMD, or what it started and
    /// left in the group after it exited). Zombies do not count: they run nothing, and under a
    /// parent that never reaps them (locksmith as PID 1 of a container) they would keep the group
    /// "alive" until `--grace`. The members that are locksmith's own children are reaped here.
    pub fn group_alive(&self) -> bool {
        let Some(group) = self.group else { return false };
        // SAFETY: waitpid(2) with WNOHANG on the group's children of ours: reaps zombies only.
        while unsafe { libc::waitpid(-group, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        // SAFETY: kill(2) with signal 0 only checks that the group exists; nothing is sent.
        if unsafe { libc::kill(-group, 0) } != 0 {
            return false;
        }
        running_members(group).unwrap_or(true)
    }

    /// Waits for CMD to exit and takes the terminal back; returns its exit code.
    /// Cancellation-safe.
    pub async fn wait(&mut self) -> Result<u8, Failure> {
        let status = self.child.wait().await;
        // CMD is gone: locksmith's group is the terminal's foreground group again.
        self.terminal = None;
        let status =
            status.map_err(|e| Failure::new(crate::exit::UNAVAILABLE, format!("waiting for CMD failed: {e}")))?;
        Ok(exit_code(status))
    }
}

/// Set when CMD died of SIGINT: locksmith then dies of it too, once it released the lock
/// ([`pass_on_interrupt`]).
static CMD_INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Ends locksmith by SIGINT if CMD died of it, or locksmith's own wait or work was ended by it
/// ([`signals::interrupted`]), and locksmith's exit code says so (`code`, 130: the lock was
/// released, or nothing was taken): on a terminal Ctrl-C reaches CMD's group alone, and a
/// calling shell stops its loop or script only for a child that died of SIGINT (an exit with
/// 130 lets it go on). Returns if not (or if the signal did not end us).
pub fn pass_on_interrupt(code: u8) {
    let interrupted =
        CMD_INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) || signals::interrupted_by() == Some(libc::SIGINT);
    if code != 128 + libc::SIGINT as u8 || !interrupted {
        return;
    }
    crate::signals::die_of(libc::SIGINT);
}

/// CMD's exit code, or 128+signal if a signal ended it.
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if status.signal() == Some(libc::SIGINT) {
        CMD_INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Whether process group `group` has a member that is not a zombie, from `/proc` (`None` where
/// `/proc` cannot be read).
fn running_members(group: i32) -> Option<bool> {
    Some(crate::procs::all()?.any(|p| p.group == group && p.alive()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentinel_waits_the_grace_period_to_the_millisecond() {
        for (grace, arg) in [
            (Duration::ZERO, "0.000"),
            (Duration::from_millis(1900), "1.900"),
            (Duration::from_secs(3), "3.000"),
            (Duration::from_micros(2_500_999), "2.500"),
        ] {
            assert_eq!(grace_seconds(grace), arg);
        }
    }

    /// A bug that panics while CMD runs unwinds through `run` and drops the sentinel with
    /// everything else: the sentinel must take that for a death, not for an end in order.
    #[test]
    fn a_panic_is_no_end_in_order() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        use std::os::unix::process::CommandExt;
        let mut member = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = member.id() as i32;
        let sentinel = runtime
            .block_on(async { Sentinel::start(group, Duration::from_millis(100)) })
            .unwrap();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _sentinel = sentinel;
            panic!("a bug while CMD runs");
        }));
        assert!(unwound.is_err());
        let until = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = member.try_wait().unwrap() {
                break Some(status);
            }
            if std::time::Instant::now() > until {
                let _ = member.kill();
                let _ = member.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let status = status.expect("the group ran on after locksmith panicked");
        // SIGKILL after the grace where the test runs with SIGTERM ignored.
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        assert!(matches!(signal, Some(libc::SIGTERM | libc::SIGKILL)), "{status:?}");
    }
}
