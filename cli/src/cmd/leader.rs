//! `locksmith leader NAME [--follow]`: who leads an election.

use locksmith::Leader;
use serde_json::json;

use crate::args::LeaderArgs;
use crate::exit::{Failure, NOT_ACQUIRED, STDOUT_CLOSED};
use crate::session::Session;
use crate::signals::{self, Signals};

/// Prints the leader of NAME (value and term): exit 0, or exit 1 when nobody leads. With
/// `--follow`, prints the leader and then every change the server pushes, until a signal (exit
/// 128+signal), until `--timeout` runs out (exit 0), or until stdout's reader goes away (exit
/// 141, as if killed by SIGPIPE; nothing is held): noticed at once on a pipe or socket, else when
/// a line cannot be written.
pub async fn leader(session: &Session, args: &LeaderArgs) -> Result<u8, Failure> {
    session.reject_ttl("leader")?;
    let mut signals = Signals::install()?;
    let locker = tokio::select! {
        locker = session.connect() => locker?,
        sig = signals.recv() => return Ok(signals::interrupted(sig)),
    };
    let election = locker.election(&args.name);
    if !args.follow {
        let leader = session.within_timeout(election.leader()).await?;
        print(session, &args.name, leader.as_ref());
        return Ok(if leader.is_some() { 0 } else { NOT_ACQUIRED });
    }
    let mut watch = tokio::select! {
        watch = session.within_timeout(election.observe()) => watch?,
        sig = signals.recv() => return Ok(signals::interrupted(sig)),
    };
    if !print(session, &args.name, watch.leader().as_ref()) {
        return Ok(STDOUT_CLOSED);
    }
    let until = async {
        match session.deadline() {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until);
    let reader_gone = reader_gone();
    tokio::pin!(reader_gone);
    loop {
        tokio::select! {
            changed = watch.changed() => {
                if !print(session, &args.name, changed?.as_ref()) {
                    return Ok(STDOUT_CLOSED);
                }
            }
            sig = signals.recv() => return Ok(signals::interrupted(sig)),
            () = &mut until => return Ok(0),
            () = &mut reader_gone => return Ok(STDOUT_CLOSED),
        }
    }
}

/// Resolves when stdout is a pipe or a socket whose reader went away (`leader --follow | head -1`
/// once `head` has its line), without waiting for the next line to fail: the next change of
/// leader may be days away. Never resolves for another stdout (a terminal, a file). Watched on
/// a thread of its own with `poll(2)`, which reports `POLLERR`/`POLLHUP` whatever was asked.
async fn reader_gone() {
    // SAFETY: fstat(2) on fd 1 into a zeroed struct; a closed fd only makes it fail.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let kind = match unsafe { libc::fstat(1, &mut st) } {
        0 => st.st_mode & libc::S_IFMT,
        _ => return std::future::pending().await,
    };
    if kind != libc::S_IFIFO && kind != libc::S_IFSOCK {
        return std::future::pending().await;
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("stdout-reader".into())
        .spawn(move || loop {
            let mut fd = libc::pollfd {
                fd: 1,
                events: 0,
                revents: 0,
            };
            // SAFETY: poll(2) on one valid pollfd, no timeout.
            let ready = unsafe { libc::poll(&mut fd, 1, -1) };
            if ready > 0 && fd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                let _ = tx.send(());
                return;
            }
        });
    match spawned {
        Ok(_) => {
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        Err(_) => std::future::pending().await,
    }
}

/// One line: `VALUE (term N)` or `none`, or its JSON; whether it was written.
fn print(session: &Session, name: &str, leader: Option<&Leader>) -> bool {
    let text = leader.map_or_else(
        || "none".to_owned(),
        |l| format!("{} (term {})", crate::output::field(&l.value), l.term),
    );
    let value = json!({
        "name": name,
        "leader": leader.is_some(),
        "value": leader.map(|l| l.value.clone()),
        "term": leader.map(|l| l.term),
        "holder_id": leader.map(|l| l.holder_id.clone()),
    });
    session.out.result(text, value)
}
