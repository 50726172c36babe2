//! The clean-up at the edges of a lock's life, for every kind (over its [`Entry`]), from tasks of
//! locksmith-core's clean-up machinery ([`locksmith_core::driver::cleanup::spawn`]), which the call that
//! dropped the future and `Locker::shutdown` wait for:
//! - [`Cleanup`], the guard of an acquire in flight: if the acquire future is dropped (cancelled,
//!   timed out) or fails before it hands a lease back, it runs the entry's `LEAVE` on every server
//!   (removing the waiter's queue entry and any lock already granted to its token), again and
//!   again while a server cannot be reached, for as long as what it removes would live;
//! - [`release`]: a release whose future is dropped before it finished runs again in the
//!   background.
//!
//! Commands of one backend go over one connection per server in order, so the clean-up always
//! reaches a server after the acquire request it cleans up after.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::armed::{Armed, CleanUp, CleanupTask};
use locksmith_core::driver::retry::{retry, Backoff, RetryError};
use locksmith_core::driver::LockName;
use locksmith_core::Result;

use crate::conn::inner::Inner;
use crate::protocol::entry::{leave_everywhere, release_everywhere, Entry};

/// Armed from the first request of an acquire until its lease is returned.
pub(crate) struct Cleanup<E: Entry>(Armed<Leave<E>>);

impl<E: Entry> Cleanup<E> {
    /// Armed, for an acquire of `entry`.
    pub(crate) fn new(inner: Arc<Inner>, entry: E) -> Self {
        Cleanup(Armed::new(Leave { inner, entry }))
    }

    /// The acquire handed its lease back (or left nothing behind): nothing to clean up.
    pub(crate) fn disarm(&mut self) {
        self.0.disarm();
    }

    /// Cleans up now and waits for it; falls back to the background clean-up if a server fails.
    pub(crate) async fn run_now(mut self) {
        if leave_everywhere(&self.0.inner, &self.0.entry).await.is_empty() {
            self.0.disarm();
        }
    }
}

/// What a [`Cleanup`] removes: `entry`'s queue entry and any lock granted to its token, on
/// every server.
struct Leave<E: Entry> {
    inner: Arc<Inner>,
    entry: E,
}

impl<E: Entry> CleanUp for Leave<E> {
    fn task(&mut self) -> Option<CleanupTask> {
        let (inner, entry) = (self.inner.clone(), self.entry.clone());
        // One try, which the dropped call waits for (within a bound); the tries again run in a
        // task of their own, which only `Locker::shutdown` waits for.
        Some(Box::pin(async move {
            let failed = leave_everywhere(&inner, &entry).await;
            // With several masters, others need a majority of them free of what is left: tried
            // again when more failed than can be spared (N - quorum; with one server: when it
            // failed). Fewer leftovers leave a free majority and expire by themselves.
            if failed.len() > inner.nodes.len() - inner.config.quorum() {
                locksmith_core::driver::cleanup::spawn(leave_where_it_failed(inner, entry, failed));
            }
        }))
    }

    fn unspawned(&mut self) {
        tracing::warn!(
            lock = self.entry.key(),
            "acquire dropped outside a tokio runtime: its queue entry expires after waiter_ttl"
        );
    }
}

/// The pauses between two tries of a cancelled acquire's `LEAVE`: from 50 ms, doubling to 1 s;
/// the first try was the clean-up's own.
const LEAVE_RETRIES: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1)).pause_first();

/// Runs `entry`'s `LEAVE` again on the servers `failed` (indexes in `inner.nodes`) until each
/// one has answered: with [`LEAVE_RETRIES`], for as long as what it removes would live there (a
/// grant the entry never learnt of lives for the entry's TTL, its queue entry for `waiter_ttl`),
/// then it expires by itself. A `LEAVE` tried once left a grant made just before the connection
/// broke held for its TTL. Only the servers that failed are asked again (a server of a quorum
/// that stays down costs the others nothing), and a run on a server that had already run it
/// answers as the first (the token is this attempt's own).
async fn leave_where_it_failed<E: Entry>(inner: Arc<Inner>, entry: E, failed: Vec<usize>) {
    let backoff = LEAVE_RETRIES.give_up_after(entry.ttl().max(inner.config.waiter_ttl));
    // The servers that have not answered yet; a try asks only those.
    let failed = std::sync::Mutex::new(failed);
    let (failed, inner, entry) = (&failed, &inner, &entry);
    let left = retry(
        backoff,
        |tries| async move {
            let asked = std::mem::take(&mut *failed.lock().unwrap_or_else(|e| e.into_inner()));
            let mut still = Vec::new();
            for i in asked {
                let node = &inner.nodes[i];
                match entry.leave(node).await {
                    Ok(_) => {
                        tracing::debug!(lock = %entry.key(), addr = %node.addr, tries, "cleaned up after a cancelled acquire, tried again")
                    }
                    Err(_) => still.push(i),
                }
            }
            if still.is_empty() {
                return Ok(());
            }
            *failed.lock().unwrap_or_else(|e| e.into_inner()) = still;
            Err(())
        },
        |()| true,
    )
    .await;
    if let Err(RetryError::GaveUp { tries, .. }) = left {
        tracing::debug!(lock = %entry.key(), tries, "gave up the clean-up of a cancelled acquire: what it left expires by itself");
    }
}

/// Releases `entry`'s lock `name` on every server. Cancel-safe: dropped before it finished (a
/// request timeout, a lost connection; on a Cluster its first poll sends nothing), the release
/// is run again in the background, so the key goes now rather than after its TTL.
pub(crate) async fn release<E: Entry>(inner: &Arc<Inner>, name: &LockName, entry: E) -> Result<()> {
    let mut again = Armed::new(ReleaseAgain {
        inner: inner.clone(),
        name: name.clone(),
        entry: entry.clone(),
    });
    let result = release_everywhere(inner, name, &entry).await;
    again.disarm(); // finished: nothing to do again
    result
}

/// A release in flight: dropped armed (the call was cancelled before it finished), it runs the
/// release again in the background.
struct ReleaseAgain<E: Entry> {
    inner: Arc<Inner>,
    name: LockName,
    entry: E,
}

impl<E: Entry> CleanUp for ReleaseAgain<E> {
    fn task(&mut self) -> Option<CleanupTask> {
        let (inner, name, entry) = (self.inner.clone(), self.name.clone(), self.entry.clone());
        Some(Box::pin(async move {
            match release_everywhere(&inner, &name, &entry).await {
                Ok(()) => tracing::debug!(lock = %name, "released in the background after a cancelled release"),
                Err(e) => {
                    tracing::debug!(lock = %name, error = %e, "background release after a cancelled release")
                }
            }
        }))
    }

    fn unspawned(&mut self) {
        tracing::warn!(lock = %self.name, "release cancelled outside a runtime; the key expires after its TTL");
    }
}
