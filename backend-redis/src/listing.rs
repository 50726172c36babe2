//! `list`: the locks of this backend's key prefix that have holders or waiters, found with
//! `SCAN` (never `KEYS`: a big keyspace is walked in steps, not in one blocking call) on every
//! server (every master of a cluster), then counted in one pipeline per step.
//!
//! Counted per lock: the mutex's holder key (1) and queue (`ZCARD`); a semaphore's, read-write
//! lock's or election's unexpired holders (`ZCOUNT` from the server's `TIME`) and queue. The
//! plain layout cannot list: its holder keys are the bare names, like any other key. With
//! independent masters (the quorum mode), a lock's count is the highest one master reports.

use std::collections::BTreeMap;

use lockcore::{ListedLock, LockError, Result};
use redis::{RedisResult, Value};

use crate::config::Layout;
use crate::inner::Inner;
use crate::link::Link;
use crate::session::Resend;

/// Keys looked at per `SCAN` step.
const STEP: usize = 1000;

/// The locks whose names start with `prefix`, with their holders and waiters.
pub(crate) async fn list(inner: &Inner, prefix: &str) -> Result<Vec<ListedLock>> {
    if inner.config.layout == Layout::Plain {
        return Err(LockError::InvalidOption(
            "layout=plain cannot list its locks (their keys are the bare lock names)".into(),
        ));
    }
    let key_prefix = inner.config.prefix.as_str();
    let mut most: BTreeMap<String, usize> = BTreeMap::new();
    let mut first_error = None;
    let mut answered = false;
    for node in &inner.nodes {
        match node
            .bounded("listing the locks", Resend::IfDropped, || tally(&node.link, key_prefix))
            .await
        {
            Ok(counts) => {
                answered = true;
                for (segment, n) in counts {
                    let seen = most.entry(segment).or_default();
                    *seen = (*seen).max(n);
                }
            }
            Err(e) => {
                tracing::debug!(addr = %node.addr, error = %e, "a redis server did not answer the listing");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if !answered => Err(e),
        _ => Ok(ListedLock::from_segments(
            prefix,
            most.iter().map(|(s, n)| (s.as_str(), *n)),
        )),
    }
}

/// One logical server's locks: segment → holders and waiters.
async fn tally(link: &Link, key_prefix: &str) -> RedisResult<BTreeMap<String, usize>> {
    let mut conn = link.conn().await?;
    let servers: Vec<(String, u16)> = if link.is_cluster() {
        let mut masters: Vec<(String, u16)> = link
            .slot_owners()
            .await?
            .into_iter()
            .map(|(_, _, host, port)| (host, port))
            .collect();
        masters.sort();
        masters.dedup();
        masters
    } else {
        vec![(String::new(), 0)] // the connection's own server
    };
    let pattern = format!("{}{{*}}:*", glob_escape(key_prefix));
    let mut counts = BTreeMap::new();
    for server in &servers {
        let mut time = redis::pipe();
        time.cmd("TIME");
        let now_ms = server_ms(conn.pipeline_to(&time, server).await?)?;
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::pipe();
            scan.cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(STEP);
            let reply = conn.pipeline_to(&scan, server).await?;
            let (next, keys): (u64, Vec<String>) = redis::from_redis_value(first(reply))?;
            let mut count = redis::pipe();
            let mut counted = Vec::new();
            for key in &keys {
                let Some((segment, role)) = split_key(key, key_prefix) else {
                    continue;
                };
                match role {
                    "lock" => *counts.entry(segment.to_owned()).or_insert(0) += 1,
                    "queue" => {
                        count.cmd("ZCARD").arg(key);
                        counted.push(segment.to_owned());
                    }
                    "holders" => {
                        count.cmd("ZCOUNT").arg(key).arg(now_ms).arg("+inf");
                        counted.push(segment.to_owned());
                    }
                    _ => {}
                }
            }
            if !counted.is_empty() {
                let numbers: Vec<usize> =
                    redis::from_redis_value(Value::Array(conn.pipeline_to(&count, server).await?))?;
                for (segment, n) in counted.into_iter().zip(numbers) {
                    *counts.entry(segment).or_insert(0) += n;
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(counts)
}

/// `<key prefix>{<segment>}:<role>` → (segment, role).
fn split_key<'a>(key: &'a str, key_prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(key_prefix)?.strip_prefix('{')?;
    let (segment, role) = rest.split_once("}:")?;
    Some((segment, role))
}

/// The server time in ms from a `TIME` reply.
fn server_ms(reply: Vec<Value>) -> RedisResult<u64> {
    let (secs, micros): (u64, u64) = redis::from_redis_value(first(reply))?;
    Ok(secs * 1000 + micros / 1000)
}

fn first(reply: Vec<Value>) -> Value {
    reply.into_iter().next().unwrap_or(Value::Nil)
}

/// `s` as a `SCAN MATCH` pattern that matches only itself.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_into_segment_and_role() {
        assert_eq!(
            split_key("ls:{orders%2F42.sem}:holders", "ls:"),
            Some(("orders%2F42.sem", "holders"))
        );
        assert_eq!(split_key("ls:{a}:lock", "ls:"), Some(("a", "lock")));
        assert_eq!(split_key("other:{a}:lock", "ls:"), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
