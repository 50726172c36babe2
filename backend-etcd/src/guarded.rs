//! Guarded writes ([`locksmith_core::Guarded`]): one transaction whose condition is the holder's key
//! with the create revision it was granted at (its fencing token), so the write commits only while
//! that key exists: not after a release, an expiry of the session lease, a deletion behind the
//! holder's back, or a reaping of a lock nobody renewed. [`owner_compare`] gives the same
//! condition for a transaction of the application's own (Go's `Mutex.IsOwner()`).

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use locksmith_core::driver::{data_key_under, refuse_if_inside, GuardedWrite, Lease, LockName};
use locksmith_core::{Family, LockError, Result};

use crate::conn::Conn;
use crate::layout::Layout;
use crate::protocol::requests;

/// The condition "`lease` still holds its lock", for a transaction of the application's own:
/// `Txn::new().when([owner_compare(guard.lease()), ...]).and_then([...])` commits only while the
/// lock is held (as Go's `Mutex.IsOwner()`). A lease of another backend never matches.
pub fn owner_compare(lease: &Lease) -> Compare {
    let rev = i64::try_from(lease.fencing_token).unwrap_or(i64::MAX);
    Compare::create_revision(lease.holder_id.as_str(), CompareOp::Equal, rev)
}

/// The key `suffix` of lock `lock` ([`locksmith_core::driver::LockBackend::data_key`]): beside the
/// lock namespace, `<namespace>.data/<segment>/<suffix>` (a prefix that etcd's RBAC grants can
/// give together with the namespace's).
pub(crate) fn data_key(layout: &Layout, family: Family, lock: &LockName, suffix: &str) -> Result<String> {
    let base = format!("{}.data", namespace(layout).trim_end_matches('/'));
    let key = data_key_under(&base, family, lock, suffix)?;
    refuse_lock_keys(layout, &key)?;
    Ok(key)
}

/// Applies `write` if `lease` still holds, in one transaction (see the module docs).
pub(crate) async fn write(conn: &Conn, layout: &Layout, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
    refuse_lock_keys(layout, write.key())?;
    let op = match write {
        GuardedWrite::Put { key, value } => TxnOp::put(key.as_str(), value.as_slice(), None),
        GuardedWrite::Delete { key } => TxnOp::delete(key.as_str(), None),
        GuardedWrite::CompareAndSet { key, expected, value } => {
            let matches = match expected {
                Some(expected) => Compare::value(key.as_str(), CompareOp::Equal, expected.as_slice()),
                None => Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            };
            TxnOp::txn(
                Txn::new()
                    .when([matches])
                    .and_then([TxnOp::put(key.as_str(), value.as_slice(), None)]),
            )
        }
        _ => return Err(LockError::InvalidOption(format!("etcd cannot apply {write:?}"))),
    };
    let txn = Txn::new().when([owner_compare(lease)]).and_then([op]);
    let resp = requests::run(conn, "a guarded write", txn).await?;
    if !resp.succeeded() {
        return Err(LockError::not_held(lease.name.as_str()));
    }
    Ok(match resp.op_responses().first() {
        Some(TxnOpResponse::Delete(d)) => d.deleted() > 0,
        Some(TxnOpResponse::Txn(t)) => t.succeeded(),
        _ => true,
    })
}

/// Reads `key` (a plain read).
pub(crate) async fn read(conn: &Conn, layout: &Layout, key: &str) -> Result<Option<Vec<u8>>> {
    refuse_lock_keys(layout, key)?;
    let resp = requests::run(
        conn,
        "reading a guarded key",
        Txn::new().and_then([TxnOp::get(key, None)]),
    )
    .await?;
    Ok(requests::gets(&resp)
        .first()
        .and_then(|g| g.kvs().first())
        .map(|kv| kv.value().to_vec()))
}

/// Refuses `key` where it may be a lock's key, or lie in a lock's queue (a key there would queue
/// as a contender that never leaves: a put under `NAME/` blocks lock `NAME` for every client). In
/// the Go layout without a URL path a lock's queue is `NAME/` for any name, so any key with a `/`
/// may lie in one: refused, but for the data keys (`.data/…`, see [`data_key`]).
fn refuse_lock_keys(layout: &Layout, key: &str) -> Result<()> {
    if matches!(layout, Layout::GoMutex { prefix } if prefix.is_empty())
        && key.contains('/')
        && !key.starts_with(".data/")
    {
        return Err(LockError::InvalidName(format!(
            "the guarded key {key:?} may lie in a lock's queue: with layout=go-mutex and no URL path, \
             every NAME/ is one (etcdctl lock NAME puts its key there). Use a key without '/', \
             guard.data_key(), or a URL path for the locks (etcd://host/locks?layout=go-mutex)"
        )));
    }
    refuse_if_inside(key, &namespace(layout))
}

/// Where this layout's lock keys live: guarded keys may not start with it.
fn namespace(layout: &Layout) -> String {
    match layout {
        Layout::Default { namespace } => format!("{namespace}/"),
        Layout::GoMutex { prefix } => prefix.clone(),
    }
}
