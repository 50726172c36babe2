//! `list`: the locks of the namespace that have contenders, read from the tree (one listing of
//! the namespace, then one per lock whose name matches: two for a semaphore).

use lockcore::{Family, ListedLock, Result};
use zookeeper_client as zk;

use crate::conn::sessions::Sessions;
use crate::error::to_lock_error;
use crate::layout;

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
