//! `locksmith list [PREFIX]`: the locks in use.

use serde_json::json;

use crate::cmd::inspect::split;
use crate::exit::Failure;
use crate::session::Session;

/// The header of the text output (tab-separated, like its lines).
pub const HEADER: &str = "NAME\tKIND\tHOLDERS\tWAITERS";

/// Prints one line per lock in use whose name starts with `prefix`, under a header: `NAME  KIND
/// HOLDERS  WAITERS` (see [`columns`]), or one JSON object per lock (`holders` and `waiters`
/// null where they are not known, and always `entries`: both together). `--timeout` bounds the
/// whole command.
pub async fn list(session: &Session, prefix: &str) -> Result<u8, Failure> {
    session.reject_ttl("list")?;
    let locker = session.connect().await?;
    let locks = session.within_timeout(locker.list(prefix)).await?;
    if !locks.is_empty() && !session.out.json {
        session.out.result(HEADER, json!(null));
    }
    for lock in &locks {
        let kind = lock.family.name();
        let (holders, waiters) = columns(lock.family, lock.entries);
        let counts = split(lock.family, lock.entries);
        session.out.result(
            format!("{}\t{kind}\t{holders}\t{waiters}", crate::output::field(&lock.name)),
            json!({
                "name": lock.name,
                "kind": kind,
                "holders": counts.map(|(h, _)| h),
                "waiters": counts.map(|(_, w)| w),
                "entries": lock.entries,
            }),
        );
    }
    if locks.is_empty() {
        session
            .out
            .status(format_args!("no lock in use starts with {prefix:?}"));
    }
    Ok(0)
}

/// The HOLDERS and WAITERS columns of a lock with `entries`: the counts where they are known
/// ([`split`]); else (a semaphore or a read-write lock with several entries, which the library
/// counts without telling holders from waiters) the ranges they lie in: `1-N` holders (the first
/// entry of a queue holds) and `0-(N-1)` waiters.
pub fn columns(family: locksmith::Family, entries: usize) -> (String, String) {
    match split(family, entries) {
        Some((holders, waiters)) => (holders.to_string(), waiters.to_string()),
        None => (
            format!("{}-{entries}", entries.min(1)),
            format!("0-{}", entries.saturating_sub(1)),
        ),
    }
}
