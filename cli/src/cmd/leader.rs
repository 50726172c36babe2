//! `locksmith leader NAME [--follow]`: who leads an election.

use locksmith::Leader;
use serde_json::json;

use crate::args::LeaderArgs;
use crate::exit::{Failure, NOT_ACQUIRED, STDOUT_CLOSED};
use crate::session::Session;
use crate::signals::Signals;

/// Prints the leader of NAME (value and term): exit 0, or exit 1 when nobody leads. With
/// `--follow`, prints the leader and then every change the server pushes, until a signal (exit
/// 128+signal), until `--timeout` runs out (exit 0), or until a line cannot be written because
/// stdout's reader went away (exit 141, as if killed by SIGPIPE; nothing is held).
pub async fn leader(session: &Session, args: &LeaderArgs) -> Result<u8, Failure> {
    session.reject_ttl("leader")?;
    let mut signals = Signals::install()?;
    let locker = tokio::select! {
        locker = session.connect() => locker?,
        sig = signals.recv() => return Ok(128 + sig as u8),
    };
    let election = locker.election(&args.name);
    if !args.follow {
        let leader = session.within_timeout(election.leader()).await?;
        print(session, &args.name, leader.as_ref());
        return Ok(if leader.is_some() { 0 } else { NOT_ACQUIRED });
    }
    let mut watch = election.observe().await?;
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
    loop {
        tokio::select! {
            changed = watch.changed() => {
                if !print(session, &args.name, changed?.as_ref()) {
                    return Ok(STDOUT_CLOSED);
                }
            }
            sig = signals.recv() => return Ok(128 + sig as u8),
            () = &mut until => return Ok(0),
        }
    }
}

/// One line: `VALUE (term N)` or `none`, or its JSON; whether it was written.
fn print(session: &Session, name: &str, leader: Option<&Leader>) -> bool {
    let text = leader.map_or_else(|| "none".to_owned(), |l| format!("{} (term {})", l.value, l.term));
    let value = json!({
        "name": name,
        "leader": leader.is_some(),
        "value": leader.map(|l| l.value.clone()),
        "term": leader.map(|l| l.term),
        "holder_id": leader.map(|l| l.holder_id.clone()),
    });
    session.out.result(text, value)
}
