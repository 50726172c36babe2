//! The terminal locksmith runs on, lent to CMD's process group while CMD runs.
//!
//! CMD runs in a process group of its own (so that a lost lock can stop it and everything it
//! started). On a terminal that group is in the background: its first read from the terminal
//! would stop it (SIGTTIN) while the lock stays held. So, as a shell does for a foreground job,
//! locksmith makes CMD's group the terminal's foreground group while CMD runs, and takes the
//! terminal back when CMD exits. Both CMD (before it execs) and locksmith (after the spawn) make
//! the switch, so that CMD never reads before it has the terminal. Only when locksmith itself is
//! in the foreground, and alone there: a locksmith started in the background leaves the terminal
//! alone, and so does one that shares its group with processes other than its ancestors (a
//! pipeline such as `locksmith run N -- git log | less`: lent to CMD, the terminal would be
//! taken from the pager, whose reads would then stop it or fail). A script's own background jobs
//! share that group too (`spinner &`, the `tee` of `exec > >(tee log)` without job control): with
//! them CMD stays in the background, and a CMD that reads the terminal is stopped there.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::procs::Stat;
use crate::signals;

/// A terminal whose foreground process group is locksmith's own, and that can be lent to CMD.
pub struct Terminal {
    /// The terminal's file descriptor: stdin, or the controlling terminal opened anew.
    fd: RawFd,
    /// The controlling terminal opened anew (when stdin is not a terminal), closed on drop.
    _opened: Option<OwnedFd>,
    /// locksmith's own process group: the terminal's foreground group when found.
    own_group: libc::pid_t,
    /// SIGTTOU's disposition before it was ignored to lend the terminal (`Some` while lent).
    saved_ttou: Option<libc::sigaction>,
}

impl Terminal {
    /// The terminal on stdin (or else the controlling terminal, `/dev/tty`) if locksmith's process
    /// group is its foreground group and no process but locksmith and its ancestors is in that
    /// group; `None` without a terminal, in the background, or in a pipeline.
    pub fn foreground() -> Option<Terminal> {
        // SAFETY: plain system calls on file descriptors and our own process; no memory shared.
        let own_group = unsafe { libc::getpgrp() };
        // (Looked for last: `/proc` is read only on a terminal locksmith has.)
        let alone = || !shares_group_with_others(own_group);
        let in_foreground = |fd: RawFd| unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == own_group };
        if in_foreground(libc::STDIN_FILENO) {
            if !alone() {
                return None;
            }
            return Some(Terminal {
                fd: libc::STDIN_FILENO,
                _opened: None,
                own_group,
                saved_ttou: None,
            });
        }
        // O_NOCTTY: never make it a controlling terminal (it already is ours, or we have none).
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open("/dev/tty")
            .ok()?;
        let opened = OwnedFd::from(tty);
        (in_foreground(opened.as_raw_fd()) && alone()).then(|| Terminal {
            fd: opened.as_raw_fd(),
            _opened: Some(opened),
            own_group,
            saved_ttou: None,
        })
    }

    /// The terminal's file descriptor, for [`take_in_child`] (it stays open in the child until it
    /// execs: the descriptor of `/dev/tty` is close-on-exec).
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Makes `group` the terminal's foreground group. locksmith's own group is then in the
    /// background: SIGTTOU is ignored until [`Terminal::reclaim`], so that neither taking the
    /// terminal back nor a status line written meanwhile (with `stty tostop`) stops locksmith.
    pub fn lend(&mut self, group: libc::pid_t) {
        if self.saved_ttou.is_none() {
            self.saved_ttou = ignore_ttou();
        }
        // SAFETY: tcsetpgrp(3) on a descriptor we hold open; no memory is involved.
        if unsafe { libc::tcsetpgrp(self.fd, group) } != 0 {
            // CMD may have exited already: its group is gone.
            tracing::debug!(group, error = %io::Error::last_os_error(), "giving CMD the terminal failed");
        }
    }

    /// Lends the terminal to `group` again if it was lent and locksmith's own group has it back
    /// (after locksmith was stopped and then continued in the foreground, `fg`: the shell gave
    /// the terminal to locksmith's group); not after `bg`, where the shell keeps it.
    pub fn lend_again(&mut self, group: libc::pid_t) {
        // SAFETY: tcgetpgrp(3) on a descriptor we hold open.
        if self.saved_ttou.is_some() && unsafe { libc::tcgetpgrp(self.fd) } == self.own_group {
            self.lend(group);
        }
    }

    /// Gives the terminal back to locksmith's own process group (after CMD exited), and SIGTTOU
    /// its former disposition.
    pub fn reclaim(&mut self) {
        let Some(saved) = self.saved_ttou.take() else { return };
        // SAFETY: as in `lend`; SIGTTOU is still ignored here, so this cannot stop us.
        if unsafe { libc::tcsetpgrp(self.fd, self.own_group) } != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "taking the terminal back failed");
        }
        // SAFETY: restores the disposition `ignore_ttou` read; `saved` is a valid sigaction.
        unsafe { libc::sigaction(libc::SIGTTOU, &saved, std::ptr::null_mut()) };
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.reclaim();
    }
}

/// Whether a live process other than this one and its ancestors is in process group `group`
/// (from `/proc`; false where it cannot be read): another member of a pipeline, which may read
/// the terminal. A script's shell that started locksmith is an ancestor, waiting for it.
fn shares_group_with_others(group: libc::pid_t) -> bool {
    // Up to init, which is an ancestor too (a container's `sh -c` entrypoint is pid 1).
    let mut ancestors = vec![std::process::id() as libc::pid_t];
    while let Some(parent) = ancestors.last().and_then(|&pid| Stat::of(pid)).map(|s| s.parent) {
        if parent <= 0 || ancestors.contains(&parent) {
            break;
        }
        ancestors.push(parent);
    }
    crate::procs::all()
        .is_some_and(|mut procs| procs.any(|p| p.group == group && p.alive() && !ancestors.contains(&p.pid)))
}

/// Ignores SIGTTOU for the whole process; returns its former disposition (`None`: unchanged).
fn ignore_ttou() -> Option<libc::sigaction> {
    let saved = signals::set_disposition(libc::SIGTTOU, libc::SIG_IGN);
    if saved.is_none() {
        tracing::debug!(error = %io::Error::last_os_error(), "cannot ignore SIGTTOU");
    }
    saved
}

/// In CMD's process, between fork and exec (already the leader of its own group): makes that
/// group the foreground group of the terminal `fd`, with SIGTTOU blocked meanwhile (the group is
/// in the background until then). Calls only async-signal-safe functions.
pub fn take_in_child(fd: RawFd) {
    let old_mask = signals::change_mask(libc::SIG_BLOCK, libc::SIGTTOU);
    // SAFETY: tcsetpgrp(3) on a descriptor the parent keeps open until we exec; async-signal-safe.
    unsafe { libc::tcsetpgrp(fd, libc::getpgrp()) };
    signals::restore_mask(&old_mask);
}
