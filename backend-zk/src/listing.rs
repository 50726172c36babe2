//! The read-only looks of operators, read from the tree: [`inspect`] (a mutex's holder and
//! waiters) and [`list`] (the locks of the namespace that have contenders: one listing of the
//! namespace, then one per lock whose name matches, two for a semaphore). Reads only: nothing
//! here writes.

use locksmith_core::driver::LockName;
use locksmith_core::{Family, HolderInfo, ListedLock, LockError, LockInfo, Result};
use zookeeper_client as zk;

use crate::conn::sessions::Sessions;
use crate::error::to_lock_error;
use crate::layout;

/// The holder of the mutex `name` under `namespace` (its first contender, whose czxid is the
/// fencing token) and the number of contenders behind it: one listing and one stat, again if the
/// holder left in between.
pub(crate) async fn inspect(sessions: &Sessions, namespace: &str, name: &LockName) -> Result<LockInfo> {
    let session = sessions.session().await?;
    let lock_path = layout::lock_path(namespace, name);
    for _ in 0..10 {
        let children = match sessions.bounded(session.client.list_children(&lock_path)).await {
            Ok(children) => layout::sorted(children),
            Err(zk::Error::NoNode) => return Ok(LockInfo::default()),
            Err(e) => return Err(to_lock_error("listing the lock's contenders", e)),
        };
        let Some(first) = children.first() else {
            return Ok(LockInfo::default());
        };
        let holder_id = layout::child_path(&lock_path, first);
        match sessions.bounded(session.client.check_stat(&holder_id)).await {
            Ok(Some(stat)) => {
                let holder = HolderInfo {
                    holder_id,
                    fencing_token: u64::try_from(stat.czxid).ok(),
                    ttl_remaining: None,
                };
                return Ok(LockInfo {
                    holder: Some(holder),
                    waiters: children.len() - 1,
                });
            }
            Ok(None) => continue, // the holder just left; look again
            Err(e) => return Err(to_lock_error("reading the holder's node", e)),
        }
    }
    Err(LockError::Protocol(format!(
        "the holder of {lock_path} kept changing while inspecting"
    )))
}

/// The locks under `namespace` whose names start with `prefix`, with their contenders.
pub(crate) async fn list(sessions: &Sessions, namespace: &str, prefix: &str) -> Result<Vec<ListedLock>> {
    let session = sessions.session().await?;
    let client = &session.client;
    let segments = match sessions.bounded(client.list_children(namespace)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => return Err(to_lock_error("listing the namespace", e)),
    };
    let mut found = Vec::new();
    for segment in segments {
        let Some((name, family)) = Family::parse_segment(&segment) else {
            continue; // not a lock of ours
        };
        if !name.as_str().starts_with(prefix) {
            continue;
        }
        let path = format!("{namespace}/{segment}");
        let entries = if family == Family::Semaphore {
            let locks = children(sessions, client, &format!("{path}/{}", layout::SEMAPHORE_LOCKS)).await?;
            let leases = children(sessions, client, &format!("{path}/{}", layout::SEMAPHORE_LEASES)).await?;
            layout::contenders(locks.iter().chain(&leases))
        } else {
            children(sessions, client, &path).await?.len()
        };
        found.push((segment, entries));
    }
    Ok(ListedLock::from_segments(
        prefix,
        found.iter().map(|(segment, n)| (segment.as_str(), *n)),
    ))
}

/// The children of `path`; none if it is gone (a lock released meanwhile).
async fn children(sessions: &Sessions, client: &zk::Client, path: &str) -> Result<Vec<String>> {
    match sessions.bounded(client.list_children(path)).await {
        Ok(children) => Ok(children),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(to_lock_error("listing a lock's contenders", e)),
    }
}
