//! `locksmith run NAME -- CMD ARGS…`: run a command while holding a lock (or a semaphore permit,
//! or a side of a read-write lock); and what `elect` shares with it: running CMD under a guard.

use std::ffi::OsString;
use std::time::Duration;

use locksmith::LockGuard;

use crate::args::RunArgs;
use crate::child::Cmd;
use crate::exit::{Failure, LOST};
use crate::output::human;
use crate::session::Session;
use crate::signals::{self, JobStop, Signals};

/// How `run` ended.
enum End {
    /// CMD exited by itself with this code.
    Exited(u8),
    /// The lock was lost while CMD ran.
    Lost(String),
}

/// Acquires NAME (`--permits`, `--read`, `--write`: a permit or a side of it), runs CMD with
/// `LOCKSMITH_FENCING_TOKEN` and `LOCKSMITH_LOCK_NAME` set, and releases when CMD exits: exit
/// CMD's code. If the lock is lost first, CMD's process group gets SIGTERM, SIGKILL after the
/// grace period, and the exit code is 4.
pub async fn run(session: &Session, args: &RunArgs) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let locker = tokio::select! {
        locker = session.connect_waiting() => locker?,
        sig = signals.recv() => return Ok(signals::interrupted(sig)),
    };
    let guard = session
        .acquire(&locker, &args.name, args.kind.kind(), &mut signals)
        .await?;
    let token = guard.fencing_token();
    session
        .out
        .status(format_args!("acquired {:?} (fencing token {token})", args.name));
    let env = [
        ("LOCKSMITH_FENCING_TOKEN", token.to_string()),
        ("LOCKSMITH_LOCK_NAME", args.name.clone()),
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

/// Runs CMD with `env` while `guard` is held, and gives the guard up when CMD exits: CMD's exit
/// code. If the guard is lost first, CMD's process group gets SIGTERM, SIGKILL after `grace`, and
/// the exit code is 4.
pub async fn run_held(
    session: &Session,
    guard: LockGuard,
    name: &str,
    command: &[OsString],
    env: &[(&str, String)],
    grace: Duration,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    // Before CMD starts: a SIGTSTP from now on stops CMD's group with locksmith.
    let mut job_stop = JobStop::install()?;
    // A lease that ran out before CMD starts (locksmith was stopped after the grant, or the
    // backend stopped answering): CMD must not start without the lock.
    if !guard.is_held() {
        return Err(Failure::new(
            LOST,
            format!("lost {name:?} before CMD could start: {}", why_lost(&guard)),
        ));
    }
    let mut cmd = match Cmd::spawn(command, env, grace) {
        Ok(cmd) => cmd,
        Err(failure) => {
            let _ = guard.release().await;
            return Err(failure);
        }
    };

    let lost = guard.lost();
    tokio::pin!(lost);
    // A SIGINT or SIGTERM forwarded to CMD gives it `grace` to exit; then, or at a second one,
    // its group gets SIGKILL (as timeout(1) does with --kill-after).
    let kill_at = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(kill_at);
    let mut stopping: Option<i32> = None;
    let end = loop {
        tokio::select! {
            // A loss seen at the same moment as CMD's exit counts as a loss: CMD may have run
            // its last steps without the lock.
            biased;
            reason = &mut lost => break End::Lost(reason.to_string()),
            code = cmd.wait() => break End::Exited(code?),
            () = job_stop.recv() => {
                // Nothing is written before the stop: stderr may be a full pipe whose reader
                // (`| less`) was stopped by the same Ctrl-Z.
                let held = cmd.stop_together(|| guard.is_held());
                job_stop.drain();
                if !held {
                    break End::Lost(format!("{} while locksmith was stopped", why_lost(&guard)));
                }
                session.out.status(format_args!("continued after SIGTSTP (CMD's process group was stopped too)"));
            }
            () = &mut kill_at, if stopping.is_some() => {
                let sig = stopping.take().map(signals::name).unwrap_or_default();
                session.out.status(format_args!(
                    "CMD still running {} after {sig}; sending SIGKILL",
                    human(grace)
                ));
                cmd.signal(libc::SIGKILL);
            }
            sig = signals.recv() => match (stopping, signals::stops(sig)) {
                (Some(_), true) => {
                    session.out.status(format_args!(
                        "second {}: sending SIGKILL to CMD",
                        signals::name(sig)
                    ));
                    cmd.signal(libc::SIGKILL);
                }
                (None, true) => {
                    session.out.status(format_args!(
                        "forwarding {} to CMD (SIGKILL after {} or at a second signal)",
                        signals::name(sig),
                        human(grace)
                    ));
                    cmd.forward(sig);
                    stopping = Some(sig);
                    kill_at.as_mut().reset(tokio::time::Instant::now() + grace);
                }
                (_, false) => {
                    session.out.status(format_args!("forwarding {} to CMD", signals::name(sig)));
                    cmd.forward(sig);
                }
            },
        }
    };

    if let (End::Exited(_), Some(sig)) = (&end, stopping) {
        // CMD exited after a forwarded signal: what it started in its group (and ignores the
        // signal) gets SIGKILL at the same time as CMD would have, before the lock is released.
        finish_group(session, &mut cmd, signals, kill_at.deadline(), sig).await;
    }
    match end {
        End::Exited(code) => match guard.release().await {
            Ok(()) => Ok(code),
            Err(e) if e.is_not_held() => Err(Failure::new(
                LOST,
                format!("CMD exited with {code}, but {name:?} was lost before it could be released"),
            )),
            Err(e) => {
                // CMD ran under the lock; the lease expires by itself after its TTL.
                session.out.status(format_args!(
                    "releasing {name:?} failed (it expires after its TTL): {e}"
                ));
                Ok(code)
            }
        },
        End::Lost(reason) => {
            session
                .out
                .status(format_args!("lost {name:?}: {reason}; sending SIGTERM to CMD"));
            cmd.signal(libc::SIGTERM);
            // A group stopped with locksmith (SIGTSTP) gets the SIGTERM once continued.
            cmd.signal(libc::SIGCONT);
            stop(session, &mut cmd, signals, grace).await;
            drop(guard); // no waiting for a release: the lock is gone already
            Err(Failure::new(
                LOST,
                format!("lost {name:?} while CMD was running: {reason}"),
            ))
        }
    }
}

/// Why `guard` is no longer held, for a message: the loss it was told of, else its lease ran out
/// (seen before the watchdog could say so).
fn why_lost(guard: &LockGuard) -> String {
    guard
        .lost_reason()
        .map_or_else(|| "its lease ran out".to_owned(), |r| r.to_string())
}

/// Waits up to `grace` for CMD's process group to exit after SIGTERM, then sends it SIGKILL and
/// reaps CMD. A SIGINT or SIGTERM received meanwhile sends SIGKILL at once; a SIGHUP is forwarded.
/// CMD exiting in time is not enough: the rest of its group has until the same deadline.
async fn stop(session: &Session, cmd: &mut Cmd, signals: &mut Signals, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    let kill_at = tokio::time::sleep_until(deadline);
    tokio::pin!(kill_at);
    loop {
        tokio::select! {
            _ = cmd.wait() => {
                finish_group(session, cmd, signals, deadline, libc::SIGTERM).await;
                return;
            }
            () = &mut kill_at => {
                session.out.status(format_args!(
                    "CMD still running {} after SIGTERM; sending SIGKILL",
                    human(grace)
                ));
                break;
            }
            sig = signals.recv() => {
                if signals::stops(sig) {
                    session.out.status(format_args!("{}: sending SIGKILL to CMD", signals::name(sig)));
                    break;
                }
                cmd.forward(sig);
            }
        }
    }
    cmd.signal(libc::SIGKILL);
    let _ = cmd.wait().await;
}

/// How often [`finish_group`] looks whether CMD's process group is empty.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// After CMD (the group's leader) exited following `sig`, sent to its whole process group: waits
/// until the rest of the group has exited too, and sends the group SIGKILL at `deadline` if not
/// (at once at a SIGINT or SIGTERM; a SIGHUP is forwarded). Otherwise what CMD started and that
/// ignores `sig` would run on without the lock.
async fn finish_group(
    session: &Session,
    cmd: &mut Cmd,
    signals: &mut Signals,
    deadline: tokio::time::Instant,
    sig: i32,
) {
    let kill_at = tokio::time::sleep_until(deadline);
    tokio::pin!(kill_at);
    let mut poll = tokio::time::interval(GROUP_POLL);
    while cmd.group_alive() {
        tokio::select! {
            _ = poll.tick() => {}
            () = &mut kill_at => {
                session.out.status(format_args!(
                    "CMD exited, but processes of its group still run after {}; sending SIGKILL",
                    signals::name(sig)
                ));
                break;
            }
            got = signals.recv() => {
                if signals::stops(got) {
                    session.out.status(format_args!(
                        "{}: sending SIGKILL to CMD's process group",
                        signals::name(got)
                    ));
                    break;
                }
                cmd.forward(got);
            }
        }
    }
    if cmd.group_alive() {
        cmd.signal(libc::SIGKILL);
    }
}
