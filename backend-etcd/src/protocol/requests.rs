//! The requests of the lock protocol, each one round trip: join the queue, try to take a free
//! lock, look at one's place, leave, and inspect.
//!
//! A lock is the set of keys under its prefix; their create revisions order the queue (FIFO),
//! the first is the holder, and its create revision is the fencing token.

use std::sync::atomic::Ordering;

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use locksmith_core::{LockError, Result};

use crate::conn::Conn;
use crate::error::request;

/// A key in a lock's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueKey {
    pub key: Vec<u8>,
    pub create_rev: i64,
    pub lease: i64,
}

impl Place {
    /// The key this place waits behind, if it waits.
    pub fn ahead(&self) -> Option<&QueueKey> {
        match self {
            Place::Behind(k) | Place::Next(k) => Some(k),
            Place::First | Place::Gone => None,
        }
    }
}

/// The place of a waiting key, from the keys created before it, newest first (two are enough).
fn behind<'a>(mut older: impl Iterator<Item = &'a etcd_client::KeyValue>) -> Place {
    match (older.next(), older.next()) {
        (None, _) => Place::First,
        (Some(pred), None) => Place::Next(QueueKey::from_kv(pred)),
        (Some(pred), Some(_)) => Place::Behind(QueueKey::from_kv(pred)),
    }
}

impl QueueKey {
    pub fn from_kv(kv: &etcd_client::KeyValue) -> Self {
        QueueKey {
            key: kv.key().to_vec(),
            create_rev: kv.create_revision(),
            lease: kv.lease(),
        }
    }

    /// The key as text, for holder ids and logs.
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

/// Where a key stands in its queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// The key is first: it holds the lock.
    First,
    /// The key waits; this is the key right before it (the newest older one), and others are
    /// before that one.
    Behind(QueueKey),
    /// The key waits behind this key alone (the oldest: the holder). Keys are created with ever
    /// larger revisions, so none can come between: once this one is deleted, the key holds, for
    /// as long as its lease lives.
    Next(QueueKey),
    /// The key no longer exists (deleted, or its lease expired).
    Gone,
}

fn newest_first() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
}

pub(crate) fn oldest_first() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

pub(crate) fn gets(resp: &TxnResponse) -> Vec<GetResponse> {
    resp.op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect()
}

/// Sends one transaction (again, if it certainly did not reach etcd; see [`request`]).
pub(crate) async fn run(conn: &Conn, what: &str, txn: Txn) -> Result<TxnResponse> {
    request(what, conn.limit, || {
        conn.stats.txns.fetch_add(1, Ordering::Relaxed);
        let (mut kv, txn) = (conn.client.kv_client(), txn.clone());
        async move { kv.txn(txn).await }
    })
    .await
}

pub(crate) fn revision(resp: &TxnResponse) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| LockError::Protocol("etcd sent a response without header".into()))
}

/// Joins the queue in one transaction: creates `key` with the lease and `value` unless it
/// exists, and reads the three newest keys of the queue: the new key, its predecessor, if any
/// (none: the new key is the oldest, it holds), and whether another is before that one. Returns
/// the key's create revision and its place, when that one read tells it (a created key always; otherwise ask [`place`]). A key that exists
/// already (the Go layout: created by another client with our lease id) is taken as ours, and the
/// queue's oldest key is read instead; if `value` is not empty it is written into it, as the Go
/// `Election` proclaims its value on a key it finds.
pub(crate) async fn join(
    conn: &Conn,
    prefix: &str,
    key: &str,
    lease: i64,
    value: &str,
) -> Result<(i64, Option<Place>)> {
    let mut found = vec![
        TxnOp::get(key, None),
        TxnOp::get(prefix, Some(oldest_first().with_limit(1))),
    ];
    if !value.is_empty() {
        found.insert(0, TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))));
    }
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix, Some(newest_first().with_limit(3))),
        ])
        .or_else(found);
    let resp = run(conn, "joining the lock queue", txn).await?;
    let gets = gets(&resp);
    if resp.succeeded() {
        let my_rev = revision(&resp)?;
        // The new key is the newest; the one after it in the newest-first list is its
        // predecessor. With none, nothing was queued before it.
        let newest = gets.first().map(|g| g.kvs()).unwrap_or_default();
        let older = newest
            .iter()
            .filter(|kv| kv.key() != key.as_bytes() && kv.create_revision() < my_rev);
        return Ok((my_rev, Some(behind(older))));
    }
    // Only the Go layout can find its key already there (created by another client with our
    // lease id); like the Go Mutex, take it as ours.
    let first_kv = |i: usize| gets.get(i).and_then(|g| g.kvs().first());
    let existing = first_kv(0).ok_or_else(|| LockError::Protocol("the queue key vanished in a transaction".into()))?;
    if first_kv(1).is_some_and(|o| o.key() == key.as_bytes()) {
        return Ok((existing.create_revision(), Some(Place::First)));
    }
    Ok((existing.create_revision(), None))
}

/// The place of `key` (created at `rev`) in the queue of `prefix`: one transaction that checks
/// the key still exists and reads the two newest keys created before it.
pub(crate) async fn place(conn: &Conn, prefix: &str, key: &str, rev: i64) -> Result<Place> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, rev)])
        .and_then([TxnOp::get(
            prefix,
            Some(
                newest_first()
                    .with_max_create_revision(rev.saturating_sub(1))
                    .with_limit(2),
            ),
        )]);
    let resp = run(conn, "looking at the lock queue", txn).await?;
    if !resp.succeeded() {
        return Ok(Place::Gone);
    }
    Ok(behind(gets(&resp).first().map(|g| g.kvs()).unwrap_or_default().iter()))
}

/// Takes the lock only if nobody holds or waits for it: creates `key` with `value` if the prefix
/// is empty, in one transaction. On failure nothing was written. Returns the key's create
/// revision.
pub(crate) async fn take_if_free(conn: &Conn, prefix: &str, key: &str, lease: i64, value: &str) -> Result<Option<i64>> {
    // A compare over a range holds only if it holds for every key in it; over an empty range
    // it compares a missing key, whose create revision is 0. So this is "no key under prefix".
    let txn = Txn::new()
        .when([Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()])
        .and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))]);
    let resp = run(conn, "trying to take the lock", txn).await?;
    if resp.succeeded() {
        Ok(Some(revision(&resp)?))
    } else {
        Ok(None)
    }
}

/// Deletes `key` if it still has create revision `rev` (any version of it when `None`).
/// Returns whether something was deleted.
pub(crate) async fn delete(conn: &Conn, key: &str, rev: Option<i64>) -> Result<bool> {
    let compares = match rev {
        Some(rev) => vec![Compare::create_revision(key, CompareOp::Equal, rev)],
        None => vec![Compare::create_revision(key, CompareOp::Greater, 0)],
    };
    let txn = Txn::new().when(compares).and_then([TxnOp::delete(key, None)]);
    let resp = run(conn, "deleting a lock key", txn).await?;
    Ok(resp.succeeded())
}

/// One read of `key` (its count only): whether etcd answers at all.
pub(crate) async fn ping(conn: &Conn, key: &str) -> Result<()> {
    let txn = Txn::new().and_then([TxnOp::get(key, Some(GetOptions::new().with_count_only()))]);
    run(conn, "asking etcd whether it answers", txn).await.map(drop)
}

/// The holder (oldest key) of `prefix` and the number of keys under it, in one read.
pub(crate) async fn holder_and_count(conn: &Conn, prefix: &str) -> Result<(Option<QueueKey>, usize)> {
    let txn = Txn::new().and_then([
        TxnOp::get(prefix, Some(oldest_first().with_limit(1))),
        TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_count_only())),
    ]);
    let resp = run(conn, "inspecting a lock", txn).await?;
    let gets = gets(&resp);
    let holder = gets.first().and_then(|g| g.kvs().first()).map(QueueKey::from_kv);
    let count = gets
        .get(1)
        .map_or(0, |g| usize::try_from(g.count()).unwrap_or(usize::MAX));
    Ok((holder, count))
}

/// Every key under `namespace/`, keys only, tallied by the segment after the namespace (one lock
/// per segment in the default layout): what `list` reports.
pub(crate) async fn segments(conn: &Conn, namespace: &str) -> Result<Vec<(String, usize)>> {
    let root = format!("{namespace}/");
    let txn = Txn::new().and_then([TxnOp::get(
        root.as_str(),
        Some(GetOptions::new().with_prefix().with_keys_only()),
    )]);
    let resp = run(conn, "listing the locks", txn).await?;
    let mut tally: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for get in gets(&resp) {
        for kv in get.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if let Some((segment, _entry)) = key.strip_prefix(&root).and_then(|rest| rest.split_once('/')) {
                *tally.entry(segment.to_owned()).or_default() += 1;
            }
        }
    }
    Ok(tally.into_iter().collect())
}
