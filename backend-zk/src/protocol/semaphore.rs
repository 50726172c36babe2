//! Semaphores: Apache Curator's `InterProcessSemaphoreV2`, node for node, so that Curator and
//! locksmith clients share one semaphore.
//!
//! ```text
//! <namespace>/<encoded>.sem
//! ├── locks/_c_<uuid>-p<N>-lock-<seq>     the internal lock: a FIFO mutex (Curator: InterProcessMutex)
//! └── leases/_c_<uuid>-p<N>-lease-<seq>   one EPHEMERAL_SEQUENTIAL node per permit held (or being taken)
//! ```
//!
//! Taking a permit:
//! 1. Queue in the internal lock (create + list, with the leases listed in the same round trip)
//!    and wait for the predecessor to go, as for a mutex.
//! 2. Holding it, create our lease and list the leases. While there are more than N, list them
//!    with a children watch and wait for it: only the internal lock's holder waits on the leases,
//!    so a released permit wakes one client (no herd), and permits go out in FIFO order.
//! 3. Release the internal lock (delete our node there) and hand the lease out.
//!
//! When the first round trip shows us first in the internal lock and fewer than N leases, that
//! listing is complete and can only shrink while we hold the lock (every earlier holder created
//! its lease before letting go; only the holder adds one): our lease will fit, so its create, the
//! leases' listing and the internal lock's delete go in one round trip. Should the lease not fit
//! after all (a client that ignores the internal lock), it is withdrawn and we queue again.
//!
//! Every grant counts all leases, the granted and the one being taken, so no more than N are ever
//! held, even if the internal lock were broken: the lock only makes waiting fair and quiet.
//! Leases are created under the internal lock, so their creation order is the grant order, and
//! the lease's `czxid` is the fencing token.
//!
//! Permit counts: our nodes carry N after the protected prefix (`p<N>-`), which Curator (which
//! counts leases and orders locks by what follows `lock-`) does not see. A request whose N differs
//! from a locksmith lease's, or from a locksmith waiter's ahead of it in the internal lock, is
//! refused with `InvalidOption` and its nodes are withdrawn. Curator's lease nodes carry no count:
//! they are counted but cannot be checked.
//!
//! Round trips: uncontended acquire **2** (lock create + list + leases list; lease create + list +
//! lock delete); `try_acquire` of a full semaphore 2 (the first, then withdrawing); release 1
//! (`delete` of the lease); a permit freed while the first waiter waits: the watch event, 1
//! listing, 1 `delete` of its internal-lock node.

use std::sync::Arc;

use futures_util::future::join;
use locksmith_core::driver::queue::permit_mismatch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::conn::session::Session;
use crate::layout;
use crate::protocol::contender::{new_uuid, Contender, Failure, Granted};
use crate::protocol::recipe::Recipe;

/// How often a permit is taken again from the start after a grant foreseen in the first round
/// trip did not come true (a lease created by a client that ignores the internal lock).
const FORESIGHT_MISSES: usize = 3;

/// One try at a permit of the `permits`-permit semaphore at `semaphore` (see the module docs).
pub(crate) async fn take(
    session: &Arc<Session>,
    semaphore: &str,
    permits: u32,
    wait: bool,
    deadline: Option<Instant>,
) -> Result<Option<Granted>, Failure> {
    for _ in 0..FORESIGHT_MISSES {
        match take_once(session, semaphore, permits, wait, deadline).await? {
            Taken::Granted(granted) => return Ok(Some(*granted)),
            Taken::Busy => return Ok(None),
            Taken::Again => tracing::debug!(semaphore, "a foreseen permit was taken meanwhile; queueing again"),
        }
    }
    Err(Failure::Restart(format!(
        "the leases of {semaphore} kept changing behind its internal lock"
    )))
}

/// What one pass of [`take`] came to.
enum Taken {
    Granted(Box<Granted>),
    /// No permit without waiting (`try_acquire`).
    Busy,
    /// Start over: the permit foreseen in the first round trip was not there.
    Again,
}

async fn take_once(
    session: &Arc<Session>,
    semaphore: &str,
    permits: u32,
    wait: bool,
    deadline: Option<Instant>,
) -> Result<Taken, Failure> {
    // One uuid for both our nodes: one contender, whichever node an operator looks at.
    let uuid = new_uuid();
    let limit = usize::try_from(permits).unwrap_or(usize::MAX);

    // 1. The internal lock, with the leases listed in the same round trip.
    let mut lock = Contender::new(
        session.clone(),
        Recipe::semaphore_lock(semaphore, permits),
        uuid.clone(),
    );
    lock.peek(layout::child_path(semaphore, layout::SEMAPHORE_LEASES));
    let listing = lock.enqueue().await?;
    let own = lock.own().map(|o| o.name.clone()).unwrap_or_default();
    let ahead = listing.children.iter().take_while(|c| **c != own);
    if let Some(other) = disagreeing(ahead.chain(listing.peeked.iter().flatten()), permits) {
        lock.withdraw().await;
        return Err(Failure::Refused(permit_mismatch(other, permits)));
    }
    let first = listing.children.first() == Some(&own);
    let leases = listing.peeked.as_ref().map(Vec::len);
    if !wait && leases.is_some_and(|n| n >= limit) {
        lock.withdraw().await;
        return Ok(Taken::Busy);
    }
    // First in the internal lock, that listing of the leases is complete (every earlier holder
    // created its lease before letting go) and can only shrink while we hold it: if it leaves room,
    // our lease fits, and the internal lock can go in the round trip that creates it.
    let foreseen = first && leases.is_some_and(|n| n < limit);
    let until = if wait { deadline } else { Some(Instant::now()) };
    let mut waited = match lock.wait_turn(listing, until).await {
        Ok((_, _, waited)) => waited,
        Err(Failure::Timeout) => {
            lock.withdraw().await;
            return if wait { Err(Failure::Timeout) } else { Ok(Taken::Busy) };
        }
        Err(f) => return Err(f),
    };

    // 2. Holding the internal lock (nobody else adds a lease now): our lease, then its turn.
    let mut lease = Contender::new(session.clone(), Recipe::semaphore_lease(semaphore, permits), uuid);
    if foreseen {
        // create + getChildren of the lease, then the internal lock's delete: one round trip, in
        // this order (`join` polls its futures in order, and each request is sent when polled).
        let (listing, ()) = join(lease.enqueue(), lock.withdraw()).await;
        let listing = listing?;
        return match check(&lease, &listing.children, permits) {
            Ok(true) => Ok(Taken::Granted(granted(lease, listing.sent, waited)?)),
            Ok(false) => {
                lease.withdraw().await;
                Ok(Taken::Again)
            }
            Err(f) => {
                if matches!(f, Failure::Refused(_)) {
                    lease.withdraw().await;
                }
                Err(f)
            }
        };
    }
    let mut listing = lease.enqueue().await?;
    let mut watcher: Option<zk::OneshotWatcher> = None;
    loop {
        match check(&lease, &listing.children, permits) {
            Ok(true) => {
                // 3. The next contender's turn (if this delete fails, the contender's Drop retries).
                lock.withdraw().await;
                return Ok(Taken::Granted(granted(lease, listing.sent, waited)?));
            }
            Ok(false) => {}
            Err(Failure::Refused(e)) => {
                withdraw_both(&mut lease, &mut lock).await;
                return Err(Failure::Refused(e));
            }
            Err(f) => return Err(f),
        }
        if !wait {
            withdraw_both(&mut lease, &mut lock).await;
            return Ok(Taken::Busy);
        }
        waited = true;
        if let Some(watch) = watcher.take() {
            let fired = match deadline {
                Some(d) => tokio::select! {
                    _ = watch.changed() => true,
                    _ = tokio::time::sleep_until(d) => false,
                },
                None => {
                    watch.changed().await;
                    true
                }
            };
            if !fired {
                let failure = lease.at_deadline();
                if matches!(failure, Failure::Timeout) {
                    withdraw_both(&mut lease, &mut lock).await;
                }
                return Err(failure);
            }
        }
        let (now, watch) = lease.list_and_watch().await?;
        listing = now;
        watcher = Some(watch);
    }
}

/// Whether our lease (in `leases`, the listing of them) is within the first `permits`: at most
/// that many leases exist. A vanished lease restarts the attempt; a lease of another count is
/// [`Failure::Refused`].
fn check(lease: &Contender, leases: &[String], permits: u32) -> Result<bool, Failure> {
    let own = lease
        .own()
        .ok_or_else(|| Failure::Restart("no lease node of ours".into()))?;
    if !leases.contains(&own.name) {
        return Err(Failure::Restart(format!(
            "our lease {} vanished while waiting",
            own.path
        )));
    }
    if let Some(other) = disagreeing(leases.iter(), permits) {
        return Err(Failure::Refused(permit_mismatch(other, permits)));
    }
    Ok(leases.len() <= usize::try_from(permits).unwrap_or(usize::MAX))
}

/// The granted lease, its contender still armed until the backend hands it out; `waited`: whether
/// it waited for the internal lock or for a permit first.
fn granted(lease: Contender, sent: Instant, waited: bool) -> Result<Box<Granted>, Failure> {
    let node = lease
        .own()
        .cloned()
        .ok_or_else(|| Failure::Restart("no lease node of ours".into()))?;
    Ok(Box::new(Granted {
        contender: lease,
        node,
        sent,
        waited,
    }))
}

/// The permit count of the first locksmith node among `nodes` that asks for another count than
/// `permits`.
fn disagreeing<'a>(nodes: impl Iterator<Item = &'a String>, permits: u32) -> Option<u32> {
    nodes.filter_map(|n| layout::permits_of(n)).find(|n| *n != permits)
}

/// Deletes our lease and our internal-lock node, both requests in one round trip.
async fn withdraw_both(lease: &mut Contender, lock: &mut Contender) {
    tokio::join!(lease.withdraw(), lock.withdraw());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_locksmith_nodes_with_another_count_disagree() {
        let uuid = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
        let nodes = [
            format!("_c_{uuid}-lease-0000000001"),    // Curator's: no count
            format!("_c_{uuid}-p3-lease-0000000002"), // ours, same count
            "lease-0000000003".to_owned(),
        ];
        assert_eq!(disagreeing(nodes.iter(), 3), None);
        assert_eq!(disagreeing(nodes.iter(), 2), Some(3));
    }
}
