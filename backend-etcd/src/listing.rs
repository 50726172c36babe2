//! The read-only looks of operators: [`inspect`] (one lock's holder and waiters) and [`list`]
//! (every lock of the namespace, tallied). Reads only: nothing here writes.

use std::time::Duration;

use locksmith_core::driver::LockName;
use locksmith_core::{HolderInfo, ListedLock, LockError, LockInfo, Result};

use crate::conn::session::Session;
use crate::error::request;
use crate::layout::Layout;
use crate::protocol::requests;

/// The holder key of `name` (its create revision is the fencing token) and the number of keys
/// under its prefix, in one transaction, then the holder lease's remaining TTL
/// (`LeaseTimeToLive`).
pub(crate) async fn inspect(session: &Session, name: &LockName) -> Result<LockInfo> {
    let prefix = session.cfg.layout.lock_prefix(name);
    let (holder, count) = requests::holder_and_count(&session.conn, &prefix).await?;
    let Some(holder) = holder else {
        return Ok(LockInfo::default());
    };
    let ttl_remaining = if holder.lease == 0 {
        None
    } else {
        let resp = request("reading the holder's lease", session.cfg.request_timeout, || {
            let mut lease = session.client.lease_client();
            async move { lease.time_to_live(holder.lease, None).await }
        })
        .await?;
        u64::try_from(resp.ttl()).ok().map(Duration::from_secs)
    };
    Ok(LockInfo {
        holder: Some(HolderInfo {
            holder_id: holder.key_str(),
            fencing_token: u64::try_from(holder.create_rev).ok(),
            ttl_remaining,
        }),
        waiters: count.saturating_sub(1),
    })
}

/// Every key of the namespace, tallied by lock, for the locks whose names start with `prefix`
/// (the default layout only: the Go layout's prefixes nest, so its locks cannot be told apart).
pub(crate) async fn list(session: &Session, prefix: &str) -> Result<Vec<ListedLock>> {
    let Layout::Default { namespace } = &session.cfg.layout else {
        return Err(LockError::InvalidOption(
            "layout=go-mutex cannot list its locks (its prefixes nest): use etcdctl get --prefix".into(),
        ));
    };
    let segments = requests::segments(&session.conn, namespace).await?;
    Ok(ListedLock::from_segments(
        prefix,
        segments.iter().map(|(segment, n)| (segment.as_str(), *n)),
    ))
}
