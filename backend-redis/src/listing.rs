//! `list` and `inspect`.
//!
//! `list`: the locks of this backend's key prefix that have holders or waiters, found with
//! `SCAN` (never `KEYS`: a big keyspace is walked in steps, not in one blocking call) on every
//! server (every master of a cluster), then counted in one pipeline per step.
//!
//! Counted per lock: the mutex's holder key (1) and queue (`ZCARD`); a semaphore's, read-write
//! lock's or election's unexpired holders (`ZCOUNT` from the server's `TIME`) and queue. The
//! plain layout cannot list: its holder keys are the bare names, like any other key. With
//! independent masters (the quorum mode), a lock's count is the highest one master reports.

use std::collections::BTreeMap;
use std::time::Duration;

use locksmith_core::driver::LockName;
use locksmith_core::{HolderInfo, ListedLock, LockError, LockInfo, Result};
use redis::{RedisResult, Value};

use crate::config::Layout;
use crate::conn::fanout::{counts, fan_out};
use crate::conn::inner::Inner;
use crate::conn::link::Link;
use crate::protocol::mutex;

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
            .bounded("listing the locks", || tally(&node.link, key_prefix))
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
    Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
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

/// Who holds the mutex `name`, and how many wait: the holder is whoever holds the key on a
/// quorum of the servers (on all of one).
pub(crate) async fn inspect(inner: &Inner, name: &LockName) -> Result<LockInfo> {
    let keys = inner.keys(name);
    let quorum = inner.config.quorum();
    let answers = fan_out(
        &inner.nodes,
        |_, n| mutex::inspect(n, &keys),
        // Done once the holder is decided: some holder on a majority, or no holder able to
        // reach one with the answers still missing (a majority of answers is not enough: a
        // master that has not seen the latest acquire yet must not hide the holder).
        |answers| {
            let (answered, ok) = counts(answers);
            let missing = answers.len() - answered;
            let mut ids: Vec<String> = answers
                .iter()
                .filter_map(|a| match a {
                    Some(Ok(info)) => info.value.as_deref().map(|v| parse_value(v).0),
                    _ => None,
                })
                .collect();
            ids.sort_unstable();
            let best = ids.chunk_by(|a, b| a == b).map(<[String]>::len).max().unwrap_or(0);
            missing == 0 || ok + missing < quorum || best >= quorum || (ok >= quorum && best + missing < quorum)
        },
    )
    .await;
    let answers = answers.into_iter().flatten();
    let mut infos = Vec::new();
    let mut first_error = None;
    for a in answers {
        match a {
            Ok(info) => infos.push(info),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if infos.len() < inner.config.quorum() {
        return Err(first_error.unwrap_or_else(|| LockError::Protocol("no inspect answer".into())));
    }
    let waiters = infos.iter().map(|i| i.waiters).max().unwrap_or(0);
    // The holder is whoever holds the key on a quorum of the servers (on all of one).
    let holders: Vec<(String, Option<u64>, i64)> = infos
        .iter()
        .filter_map(|i| i.value.as_deref().map(|v| (parse_value(v), i.pttl_ms)))
        .map(|((id, fence), pttl)| (id, fence, pttl))
        .collect();
    let holder = holders.iter().find_map(|(id, _, _)| {
        let same: Vec<_> = holders.iter().filter(|(other, _, _)| other == id).collect();
        (same.len() >= inner.config.quorum()).then(|| HolderInfo {
            holder_id: id.clone(),
            fencing_token: same.iter().filter_map(|(_, f, _)| *f).max(),
            ttl_remaining: same
                .iter()
                .filter(|(_, _, p)| *p >= 0)
                .map(|(_, _, p)| Duration::from_millis(p.unsigned_abs()))
                .min(),
        })
    });
    Ok(LockInfo { holder, waiters })
}

/// Splits a lock value into the holder id and the fencing token: `<32 hex>:<fence>:<ttl ms>`
/// (`<32 hex>:<fence>` from versions before 0.1.0's clock bound) is a locksmith holder; anything
/// else (another client's token in the plain layout) is shown whole.
fn parse_value(v: &str) -> (String, Option<u64>) {
    if let Some((token, rest)) = v.split_once(':') {
        if token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()) {
            let fence = rest
                .split_once(':')
                .filter(|(_, ttl)| ttl.parse::<u64>().is_ok())
                .map_or(rest, |(fence, _)| fence);
            if let Ok(fence) = fence.parse() {
                return (token.to_owned(), Some(fence));
            }
        }
    }
    (v.to_owned(), None)
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

    #[test]
    fn lock_values() {
        let t = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_value(&format!("{t}:42:10000")), (t.to_owned(), Some(42)));
        assert_eq!(parse_value(&format!("{t}:42")), (t.to_owned(), Some(42)));
        let odd = format!("{t}:42:x");
        assert_eq!(parse_value(&odd), (odd.clone(), None));
        assert_eq!(
            parse_value("some-redis-py-uuid"),
            ("some-redis-py-uuid".to_owned(), None)
        );
        assert_eq!(parse_value("short:1"), ("short:1".to_owned(), None));
    }
}
