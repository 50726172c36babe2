//! Guarded writes ([`locksmith_core::Guarded`]): one `multi` whose first operation checks that the
//! holder's node still exists (any version), so the write commits only while the lock is held:
//! not after a release, a session expiry (the node is ephemeral), a deletion behind the holder's
//! back or a reaping of a lock nobody renewed. Contender nodes carry a random uuid in their name,
//! so a path that exists is the holder's own node, never a later one of the same name.
//! [`add_owner_check`] puts the same check into a `multi` of the application's own.
//!
//! Keys are absolute paths; missing parents are created (persistent, empty, with the session's
//! ACL) before a create, as `mkdir -p` would, each under the same check: a parent is not data,
//! and a refused write leaves none behind.

use locksmith_core::driver::{data_key_under, refuse_if_inside, GuardedWrite, Lease, LockName};
use locksmith_core::{Family, LockError, Result};
use zookeeper_client as zk;

use crate::conn::session::Session;
use crate::conn::sessions::Sessions;
use crate::error::to_lock_error;
use crate::layout;

/// How often a write that raced with another writer of its key is tried again.
const RACES: usize = 5;

/// Adds "`lease` still holds its lock" to a `multi` of the application's own: its first
/// operation should be this check, so that the `multi` commits only while the lock is held (the
/// write then fails with the check's `NoNode`).
///
/// # Errors
///
/// The client's error for a path it refuses (a lease of another backend).
pub fn add_owner_check(writer: &mut zk::MultiWriter<'_>, lease: &Lease) -> std::result::Result<(), zk::Error> {
    writer.add_check_version(&lease.holder_id, -1)
}

/// What one `multi` of the check and a write answered.
enum Outcome {
    Done,
    /// The write failed with this error (the lock was held).
    Failed(zk::Error),
}

/// Applies `write` if `lease` still holds (see the module docs).
pub(crate) async fn write(sessions: &Sessions, lease: &Lease, write: &GuardedWrite) -> Result<bool> {
    let session = held_session(sessions, lease).await?;
    let key = checked_path(&sessions.config.namespace, write.key())?;
    match write {
        GuardedWrite::Put { value, .. } => {
            for _ in 0..RACES {
                match commit(sessions, &session, lease, |w| w.add_set_data(key, value, None)).await? {
                    Outcome::Done => return Ok(true),
                    Outcome::Failed(zk::Error::NoNode) => {}
                    Outcome::Failed(e) => return Err(to_lock_error("a guarded write", e)),
                }
                if create(sessions, &session, lease, key, value).await? {
                    return Ok(true);
                }
            }
            Err(raced(key))
        }
        GuardedWrite::Delete { .. } => match commit(sessions, &session, lease, |w| w.add_delete(key, None)).await? {
            Outcome::Done => Ok(true),
            Outcome::Failed(zk::Error::NoNode) => Ok(false),
            Outcome::Failed(zk::Error::NotEmpty) => Err(LockError::InvalidOption(format!(
                "the guarded key {key:?} has children: ZooKeeper deletes only leaves"
            ))),
            Outcome::Failed(e) => Err(to_lock_error("a guarded delete", e)),
        },
        GuardedWrite::CompareAndSet { expected, value, .. } => {
            for _ in 0..RACES {
                let now = match sessions.bounded(session.client.get_data(key)).await {
                    Ok((data, stat)) => Some((data, stat.version)),
                    Err(zk::Error::NoNode) => None,
                    Err(e) => return Err(to_lock_error("reading a guarded key", e)),
                };
                let swapped = match (expected, now) {
                    (None, None) => create(sessions, &session, lease, key, value).await?,
                    (Some(expected), Some((data, version))) if *expected == data => {
                        let set = |w: &mut zk::MultiWriter<'_>| w.add_set_data(key, value, Some(version));
                        match commit(sessions, &session, lease, set).await? {
                            Outcome::Done => true,
                            Outcome::Failed(zk::Error::NoNode | zk::Error::BadVersion) => false,
                            Outcome::Failed(e) => return Err(to_lock_error("a guarded compare-and-set", e)),
                        }
                    }
                    _ => {
                        // The value differs: the answer, once the lock is known to be held.
                        commit(sessions, &session, lease, |_| Ok(())).await?;
                        return Ok(false);
                    }
                };
                if swapped {
                    return Ok(true);
                }
            }
            Err(raced(key))
        }
        _ => Err(LockError::InvalidOption(format!("ZooKeeper cannot apply {write:?}"))),
    }
}

/// Reads `key` (a plain read).
pub(crate) async fn read(sessions: &Sessions, key: &str) -> Result<Option<Vec<u8>>> {
    let key = checked_path(&sessions.config.namespace, key)?;
    let session = sessions.session().await?;
    match sessions.bounded(session.client.get_data(key)).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(to_lock_error("reading a guarded key", e)),
    }
}

/// The session that holds `lease`, if it still does: a lease its session forgot (released, its
/// node gone, reaped) or of an ended session is not held, whatever the server still has.
async fn held_session(sessions: &Sessions, lease: &Lease) -> Result<std::sync::Arc<Session>> {
    let session = sessions.current().await;
    let ours = session
        .held_czxid(&lease.holder_id)
        .is_some_and(|czxid| czxid as u64 == lease.fencing_token);
    if session.is_terminated() || !ours {
        return Err(LockError::not_held(lease.name.as_str()));
    }
    Ok(session)
}

/// Creates `key` with `value` under the check, its parents first; false if it exists already.
async fn create(sessions: &Sessions, session: &Session, lease: &Lease, key: &str, value: &[u8]) -> Result<bool> {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acl));
    let parents = layout::ancestors_and_self(key);
    for parent in &parents[..parents.len() - 1] {
        // Under the check too: a refused write leaves no parent behind.
        match commit(sessions, session, lease, |w| w.add_create(parent, &[], &options)).await? {
            Outcome::Done | Outcome::Failed(zk::Error::NodeExists) => {}
            // ZooKeeper checks CREATE on the parent's parent before it looks whether the parent
            // exists: one that exists under a node this identity may only read answers NoAuth.
            Outcome::Failed(zk::Error::NoAuth) if exists(sessions, session, parent).await? => {}
            Outcome::Failed(e) => return Err(to_lock_error("creating a guarded key's parent", e)),
        }
    }
    match commit(sessions, session, lease, |w| w.add_create(key, value, &options)).await? {
        Outcome::Done => Ok(true),
        Outcome::Failed(zk::Error::NodeExists | zk::Error::NoNode) => Ok(false),
        Outcome::Failed(e) => Err(to_lock_error("a guarded create", e)),
    }
}

/// Whether `path` exists.
async fn exists(sessions: &Sessions, session: &Session, path: &str) -> Result<bool> {
    match sessions.bounded(session.client.check_stat(path)).await {
        Ok(stat) => Ok(stat.is_some()),
        Err(e) => Err(to_lock_error("looking for a guarded key's parent", e)),
    }
}

/// Sends the check of `lease` and the operations `add` puts after it, in one `multi`.
async fn commit(
    sessions: &Sessions,
    session: &Session,
    lease: &Lease,
    add: impl FnOnce(&mut zk::MultiWriter<'_>) -> std::result::Result<(), zk::Error>,
) -> Result<Outcome> {
    let mut writer = session.client.new_multi_writer();
    add_owner_check(&mut writer, lease).map_err(|e| to_lock_error("checking the holder", e))?;
    add(&mut writer).map_err(|e| match e {
        zk::Error::BadArguments(why) => LockError::InvalidName(format!("not a ZooKeeper path: {why}")),
        e => to_lock_error("a guarded write", e),
    })?;
    match sessions.bounded_multi(writer.commit()).await {
        Ok(_) => Ok(Outcome::Done),
        Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => Err(LockError::not_held(lease.name.as_str())),
        Err(zk::MultiWriteError::OperationFailed { source, .. }) => Ok(Outcome::Failed(source)),
        Err(zk::MultiWriteError::RequestFailed { source }) => Err(to_lock_error("a guarded write", source)),
    }
}

/// The key `suffix` of lock `lock` ([`locksmith_core::driver::LockBackend::data_key`]): a node beside
/// the lock namespace, `<namespace>.data/<segment>/<suffix>` (under the same parent, so the
/// same ACLs can cover both).
pub(crate) fn data_key(namespace: &str, family: Family, lock: &LockName, suffix: &str) -> Result<String> {
    let key = data_key_under(&format!("{namespace}.data"), family, lock, suffix)?;
    checked_path(namespace, &key)?;
    Ok(key)
}

/// `key` if it is an absolute path outside locksmith's namespace.
fn checked_path<'a>(namespace: &str, key: &'a str) -> Result<&'a str> {
    if !key.starts_with('/') || key.ends_with('/') || key.contains("//") {
        return Err(LockError::InvalidName(format!(
            "the guarded key {key:?} is not a ZooKeeper path: absolute, no empty segment, no trailing '/'"
        )));
    }
    if let Some(why) = not_a_zookeeper_path(key) {
        return Err(LockError::InvalidName(format!(
            "the guarded key {key:?} is not a ZooKeeper path: {why}"
        )));
    }
    if key == namespace {
        return Err(LockError::InvalidName(format!(
            "the guarded key {key:?} is locksmith's namespace: lock nodes are not data"
        )));
    }
    refuse_if_inside(key, &format!("{namespace}/"))?;
    Ok(key)
}

/// What breaks ZooKeeper's own path rules in `key` (absolute, checked before): a `.` or `..`
/// segment, or a character the server refuses (controls, and private-use and special ranges).
fn not_a_zookeeper_path(key: &str) -> Option<&'static str> {
    if key.split('/').any(|segment| segment == "." || segment == "..") {
        return Some("no . or .. segment");
    }
    // (Above U+FFFF: a surrogate pair in Java's UTF-16, which ZooKeeper refuses too.)
    let refused =
        |c: char| matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..);
    key.chars()
        .any(refused)
        .then_some("no control, private-use or special character")
}

fn raced(key: &str) -> LockError {
    LockError::Unavailable {
        message: format!("the guarded key {key:?} kept changing under the write ({RACES} tries)"),
        source: None,
    }
}
