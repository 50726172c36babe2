//! `locksmith hold NAME [--for DURATION]`: hold a lock for a while, e.g. for maintenance.

use std::io::Read;

use tokio::sync::oneshot;

use crate::args::HoldArgs;
use crate::exit::{Failure, LOST};
use crate::output::human;
use crate::session::Session;
use crate::signals::{self, JobStopsIgnored, Signals};

/// Acquires NAME, prints the fencing token, holds it until `--for` passes, stdin closes (only a
/// pipe, socket or terminal is watched, see [`stdin_can_close`]) or a signal arrives, then
/// releases. Exit 4 if the lock is lost meanwhile.
pub async fn hold(session: &Session, args: &HoldArgs) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    // A read of the terminal (the stdin watch) or a status line written to it from the
    // background (`&` in an interactive shell, or after `bg`) must not stop the process: it would
    // renew nothing while it says it holds. Ignored, those reads and writes fail with EIO.
    let _stops_ignored = JobStopsIgnored::install();
    let locker = tokio::select! {
        locker = session.connect_waiting() => locker?,
        sig = signals.recv() => return Ok(signals::interrupted(sig)),
    };
    let guard = session
        .acquire(&locker, &args.name, args.kind.kind(), &mut signals)
        .await?;
    let _ = session.out.acquired(&guard); // a lock is held: carry on regardless
    let watch_stdin = !args.ignore_stdin && stdin_can_close();
    let until = match (args.hold_for, watch_stdin) {
        (Some(d), _) => format!("for {}", human(d)),
        (None, true) => "until stdin closes or SIGINT/SIGTERM".to_owned(),
        (None, false) => "until SIGINT/SIGTERM".to_owned(),
    };
    session.out.status(format_args!(
        "holding {:?} (fencing token {}) {until}",
        args.name,
        guard.fencing_token()
    ));

    let stdin_closed = if watch_stdin { stdin_closed() } else { None };
    let wait_stdin = async {
        match stdin_closed {
            Some(rx) => rx.await.unwrap_or(()),
            None => std::future::pending().await,
        }
    };
    let wait_for = async {
        match args.hold_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let why = tokio::select! {
        reason = guard.lost() => {
            // Exit at once: the lock is gone, and a release could only wait for a server that
            // may not answer (the watchdog already asked it to let go of whatever is left).
            drop(guard);
            return Err(Failure::new(LOST, format!("lost {:?} while holding it: {reason}", args.name)));
        }
        () = wait_for => "the hold time passed".to_owned(),
        () = wait_stdin => "stdin closed".to_owned(),
        sig = signals.recv() => format!("received {}", signals::name(sig)),
    };
    session.out.status(format_args!("{why}; releasing {:?}", args.name));
    guard.release().await?;
    Ok(0)
}

/// Whether stdin is a terminal.
fn stdin_is_a_terminal() -> bool {
    // SAFETY: isatty(3) on fd 0 reads nothing.
    unsafe { libc::isatty(0) == 1 }
}

/// Whether stdin is something whose closing says "stop": a pipe, a socket or a terminal. A
/// stdin that is `/dev/null` or a file is at its end at once, and a closed one cannot be read:
/// that is what a job started by cron, with `&` in a script or under nohup gets, and watching it
/// released the lock as soon as it was taken.
fn stdin_can_close() -> bool {
    // SAFETY: fstat(2) on fd 0 into a zeroed struct; a closed fd only makes it fail.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0 {
        return false;
    }
    let kind = st.st_mode & libc::S_IFMT;
    kind == libc::S_IFIFO || kind == libc::S_IFSOCK || stdin_is_a_terminal()
}

/// Resolves when stdin reaches end of file (or fails). Read on a thread of its own: a blocking
/// read must not keep the runtime from shutting down. A terminal read from the background of
/// its session fails with EIO (SIGTTIN is ignored): that is no end, and the terminal is read
/// again a second later, until the process is in the foreground again.
fn stdin_closed() -> Option<oneshot::Receiver<()>> {
    let (tx, rx) = oneshot::channel();
    let spawned = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EIO) && stdin_is_a_terminal() => {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(());
    });
    match spawned {
        Ok(_) => Some(rx),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch stdin; holding until the time passes or a signal arrives");
            None
        }
    }
}
