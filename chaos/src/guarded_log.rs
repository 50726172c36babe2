//! The guarded mode's storage: instead of the fenced register, each worker appends
//! `<token> <writer>` to one key of the coordination store through its guard's guarded writes
//! (`guard.guarded()`: a compare-and-set that the server commits only while the lease holds).
//! The key's value is then the log of accepted writes in the order the store accepted them,
//! which the checker reads as it reads the register's.
//!
//! The workers of this mode write blind (after their whole hold, whether or not `lost()` fired,
//! as the self-check's do): every write a paused holder makes after its lease ran out is one the
//! store must refuse.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use locksmith::driver::{BackendUrl, LockName};
use locksmith::{LockError, LockGuard};

use crate::register::Accepted;
use crate::targets::Target;

/// How many compare-and-sets an append tries before it reports an error (each failed one means
/// the value changed between its read and its write).
const APPEND_ATTEMPTS: u32 = 10;

/// Whether `target` has guarded writes (every target but a Redis quorum, which has no single
/// store to write to; `file://` keeps them in its lock directory's `.data/`).
pub fn supported(target: &Target) -> bool {
    target.topology != "quorum"
}

/// The key of lock `name`'s log on `target`: in the lock's hash slot on Redis (its lock key's
/// hash tag), an absolute path elsewhere (ZooKeeper's form; any key for the others).
pub fn key(target: &Target, name: &str) -> Result<String> {
    if target.backend != "redis" {
        return Ok(format!("/chaos-guarded/{name}"));
    }
    let url = BackendUrl::parse(&target.url).context("the target's URL")?;
    let lock = LockName::new(name).context("the lock name")?;
    let keys = locksmith::redis::LockKeys::for_url(&url, &lock).context("the lock's keys")?;
    let tag = match (keys.lock.find('{'), keys.lock.find('}')) {
        (Some(open), Some(close)) if close > open + 1 => &keys.lock[open + 1..close],
        _ => keys.lock.as_str(),
    };
    Ok(format!("chaos-guarded:{{{tag}}}"))
}

/// Appends `token writer` to the log at `key` while `guard` holds its lock; `Ok(false)` if the
/// store refused (the lock was no longer held: nothing written).
pub async fn append(guard: &LockGuard, key: &str, token: u64, writer: &str) -> Result<bool> {
    let store = guard.guarded();
    for _ in 0..APPEND_ATTEMPTS {
        let current = store.get(key).await.context("reading the guarded log")?;
        let mut next = current.clone().unwrap_or_default();
        next.extend_from_slice(format!("{token} {writer}\n").as_bytes());
        match store.compare_and_set(key, current.as_deref(), next).await {
            Ok(true) => return Ok(true),
            Ok(false) => continue,
            Err(LockError::NotHeld { .. }) => return Ok(false),
            Err(e) => return Err(e).context("the guarded write"),
        }
    }
    bail!("the guarded log changed under {APPEND_ATTEMPTS} compare-and-sets in a row")
}

/// The log of lock `name` at `key` on `target`, read (and removed) under the lock once every
/// worker has stopped.
pub async fn read(target: &Target, name: &str, key: &str) -> Result<Vec<Accepted>> {
    let locker = locksmith::connect(&target.url).await?;
    let guard = locker
        .lock(name)
        .ttl(target.ttl)
        .timeout(Duration::from_secs(30))
        .acquire()
        .await
        .context("taking the lock to read the guarded log")?;
    let value = guard.guarded().get(key).await?.unwrap_or_default();
    guard.guarded().delete(key).await?;
    guard.release().await?;
    Ok(parse(&value))
}

/// `<token> <writer>` lines.
fn parse(value: &[u8]) -> Vec<Accepted> {
    String::from_utf8_lossy(value)
        .lines()
        .filter_map(Accepted::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_log_in_order() {
        let log = parse(b"5 w1\n7 w0\nnot a line\n6 w2\n");
        let tokens: Vec<(u64, &str)> = log.iter().map(|a| (a.token, a.writer.as_str())).collect();
        assert_eq!(tokens, [(5, "w1"), (7, "w0"), (6, "w2")]);
    }
}
