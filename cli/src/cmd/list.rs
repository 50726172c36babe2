//! `locksmith list [PREFIX]`: the locks in use.

use serde_json::json;

use crate::exit::{Failure, UNAVAILABLE};
use crate::output::human;
use crate::session::Session;

/// Prints one line per lock in use whose name starts with `prefix`: `NAME  KIND  ENTRIES` (text)
/// or one JSON object per lock. `--timeout` bounds the whole command.
pub async fn list(session: &Session, prefix: &str) -> Result<u8, Failure> {
    session.reject_ttl("list")?;
    let locker = session.connect().await?;
    let locks = match session.time_left() {
        None => locker.list(prefix).await?,
        Some(left) => match tokio::time::timeout(left, locker.list(prefix)).await {
            Ok(locks) => locks?,
            Err(_) => {
                return Err(Failure::new(
                    UNAVAILABLE,
                    format!("backend unavailable: no answer within {} (--timeout)", human(left)),
                ))
            }
        },
    };
    for lock in &locks {
        let kind = lock.family.name();
        session.out.result(
            format!("{}\t{kind}\t{}", lock.name, lock.entries),
            json!({ "name": lock.name, "kind": kind, "entries": lock.entries }),
        );
    }
    if locks.is_empty() {
        session
            .out
            .status(format_args!("no lock in use starts with {prefix:?}"));
    }
    Ok(0)
}
