//! The command `run` starts: spawned in a process group of its own, signalled as a group, given
//! the terminal while it runs (when locksmith has it), and its exit status turned into an exit
//! code.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};

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

/// A process watching for locksmith's death, to stop CMD's whole process group then: the
/// death signal the kernel sends on locksmith's death (`PR_SET_PDEATHSIG`) reaches CMD only, and
/// whatever CMD started would run on without the lock. The sentinel reads a pipe that only
/// locksmith writes: a byte means locksmith ended in order (the sentinel exits); end of file
/// without one means locksmith died (SIGKILL, a crash), and the sentinel sends the group SIGTERM,
/// then SIGKILL after the grace period. It runs in a process group of its own and ignores the
/// terminal's signals, so that it outlives locksmith.
///
/// It is forked before CMD, and CMD's process tells it its group (its pid) between fork and
/// exec, through a second pipe ([`Sentinel::start`]): a sentinel forked after CMD left a window
/// in which locksmith could die before the sentinel existed, with CMD already running and
/// starting children that then ran on (seen under load, `run_cmds_group_is_stopped_when_locksmith_is_killed`).
///
/// It is a fork of locksmith that never executes another program (it was `sh -c` with a
/// script: an exec of the shell, and its start-up, in every `locksmith run`, about a third of
/// the time locksmith's own work took): between the fork and its exit it makes system calls
/// only (async-signal-safe in a process forked from a threaded one), with every descriptor but
/// the pipes closed (locksmith's liveness file among them: its `flock` must end with locksmith).
struct Sentinel {
    /// The write end of the pipe the sentinel reads.
    pipe: Option<std::os::fd::OwnedFd>,
    /// The sentinel's pid, which is also its process group.
    #[cfg_attr(not(test), allow(dead_code))]
    pid: libc::pid_t,
}

/// The write end of the pipe through which CMD's process, between fork and exec, tells the
/// sentinel its process group ([`GroupTeller::tell_in_child`]). Closed by exec (and dropped by
/// locksmith once CMD is spawned): a sentinel that reads end of file before a group was told
/// (CMD could not be started, or locksmith died first) has nobody to stop and exits.
struct GroupTeller(std::os::fd::OwnedFd);

impl Sentinel {
    /// Forks the sentinel; returns it with the [`GroupTeller`] that CMD's process must use.
    fn start(grace: Duration) -> io::Result<(Sentinel, GroupTeller)> {
        use std::os::fd::AsRawFd;
        let (ended_read, ended_write) = cloexec_pipe()?;
        let (group_read, group_write) = cloexec_pipe()?;
        let grace = libc::timespec {
            tv_sec: libc::time_t::try_from(grace.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits a 32-bit `c_long` too.
            tv_nsec: grace.subsec_nanos() as libc::c_long,
        };
        // SAFETY: fork(2); the child runs `watch`, which makes async-signal-safe system calls
        // only (no allocation, no lock) and never returns.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe { watch(ended_read.as_raw_fd(), group_read.as_raw_fd(), grace) },
            pid => {
                // The sentinel leaves our process group itself, but only once it runs: until
                // then `Terminal::foreground`, called next, would find it in our group, take it
                // for another reader of the terminal (a pipeline's), and not lend the terminal
                // to CMD, whose first read then stopped it for good (SIGTTIN; seen under load,
                // `cmd_reads_from_the_terminal`). Shells do both calls for the same reason;
                // whichever comes first wins.
                // SAFETY: setpgid(2) on our own child, which has not exec'd (it never does).
                unsafe { libc::setpgid(pid, pid) };
                Ok((
                    Sentinel {
                        pipe: Some(ended_write),
                        pid,
                    },
                    GroupTeller(group_write),
                ))
            }
        }
    }
}

impl GroupTeller {
    /// In CMD's process, between fork and exec, once it leads its own process group: writes its
    /// pid (= the group) for the sentinel. Async-signal-safe (getpid, write).
    fn tell_in_child(fd: i32) {
        // SAFETY: getpid(2) and write(2) of 4 bytes from a local: no memory is shared; a pipe
        // write of under PIPE_BUF bytes is atomic.
        unsafe {
            let pid: libc::pid_t = libc::getpid();
            libc::write(
                fd,
                (&pid as *const libc::pid_t).cast(),
                std::mem::size_of::<libc::pid_t>(),
            );
        }
    }
}

/// A pipe whose two ends close on exec.
fn cloexec_pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The sentinel's life, in the forked child: stdin is the pipe `ended`, stdout and stderr
/// `/dev/null`, descriptor 3 the pipe `told`, every other descriptor closed; INT, TERM, HUP and
/// QUIT ignored, in a process group of its own. It reads CMD's group from `told` (end of file
/// first: nothing to watch, it exits); then a byte on `ended` ends it, and end of file stops the
/// group (SIGTERM, SIGKILL after `grace`).
///
/// # Safety
///
/// Only in a child just forked: it calls async-signal-safe functions only, and `_exit`s.
unsafe fn watch(ended: i32, told: i32, grace: libc::timespec) -> ! {
    unsafe {
        libc::setpgid(0, 0);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // `told` out of the way first: either pipe may sit on 0 to 3 itself.
        let told = libc::fcntl(told, libc::F_DUPFD, 10);
        if told < 0 {
            libc::_exit(0);
        }
        libc::dup2(ended, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
        }
        libc::dup2(told, 3);
        #[cfg(target_os = "linux")]
        let closed = libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) == 0;
        #[cfg(not(target_os = "linux"))]
        let closed = false;
        if !closed {
            for fd in 4..65_536 {
                libc::close(fd);
            }
        }
        let mut group: libc::pid_t = 0;
        let size = std::mem::size_of::<libc::pid_t>();
        loop {
            match libc::read(3, (&mut group as *mut libc::pid_t).cast(), size) {
                -1 if *libc::__errno_location() == libc::EINTR => continue,
                n if n == size as isize => break,
                _ => libc::_exit(0),
            }
        }
        libc::close(3);
        // Never 0 or 1 (`kill(-0)` is our own group, `kill(-1)` every process we may signal).
        if group <= 1 {
            libc::_exit(0);
        }
        let mut byte = 0u8;
        loop {
            match libc::read(0, (&mut byte as *mut u8).cast(), 1) {
                1 => libc::_exit(0),
                -1 if *libc::__errno_location() == libc::EINTR => continue,
                _ => break,
            }
        }
        if libc::kill(-group, libc::SIGTERM) != 0 {
            libc::_exit(0);
        }
        let mut left = grace;
        while libc::nanosleep(&left, &mut left) != 0 && *libc::__errno_location() == libc::EINTR {}
        libc::kill(-group, libc::SIGKILL);
        libc::_exit(0)
    }
}

impl Drop for Sentinel {
    /// Tells the sentinel that locksmith ended in order: it exits without signalling anyone.
    /// Not while a panic unwinds: the lock's guard is dropped by the same unwinding, and its
    /// release, spawned on a runtime that the panic ends, may never run; the pipe closes as this
    /// is dropped, and the sentinel stops the group as at any other death. (The sentinel is not
    /// waited for: it ends at once, and is reaped once locksmith exits.)
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(fd) = self.pipe.take() {
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
        // Forked before CMD: see [`Sentinel`].
        let (sentinel, teller) = match Sentinel::start(grace) {
            Ok((sentinel, teller)) => (Some(sentinel), Some(teller)),
            Err(e) => {
                tracing::warn!(error = %e, "no sentinel for CMD's process group: if locksmith dies, only CMD is told");
                (None, None)
            }
        };
        let tell = teller.as_ref().map(|teller| std::os::fd::AsRawFd::as_raw_fd(&teller.0));
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
        // tcsetpgrp, sigaction, getpid, write); `saved` was allocated before the fork.
        #[cfg(target_os = "linux")]
        let parent = std::process::id();
        unsafe {
            command.pre_exec(move || {
                if let Some(fd) = tell {
                    GroupTeller::tell_in_child(fd);
                }
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
        // CMD's process told the sentinel its group before exec; only it may write there.
        drop(teller);
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
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

    /// Bug: the sentinel left locksmith's process group only once it ran, and locksmith looked
    /// for other members of its group (readers of the terminal) right after the fork: under load
    /// it found the sentinel there, lent CMD no terminal, and CMD's read of it stopped CMD for
    /// good. The sentinel is in a group of its own as soon as `start` returns.
    #[test]
    fn the_sentinel_has_left_our_group_when_start_returns() {
        for _ in 0..20 {
            let (sentinel, teller) = Sentinel::start(Duration::from_millis(100)).unwrap();
            let pid = sentinel.pid;
            // SAFETY: getpgid(2) of our own child, not reaped yet.
            let group = unsafe { libc::getpgid(pid) };
            // An end in order, then the sentinel reaped.
            drop(teller);
            drop(sentinel);
            let mut status = 0;
            // SAFETY: waitpid(2) on our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(group, pid, "the sentinel was still in our process group");
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
        let (sentinel, teller) = runtime
            .block_on(async { Sentinel::start(Duration::from_millis(100)) })
            .unwrap();
        let mut teller = std::fs::File::from(teller.0);
        std::io::Write::write_all(&mut teller, &group.to_ne_bytes()).unwrap();
        drop(teller);
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
