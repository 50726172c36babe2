//! A cancellation storm over the semaphore, the read-write lock and the election (the mutex's is
//! [`super::mutex::cancellation_storm_leaves_nothing`]): hundreds of acquires and `try_acquire`s
//! of every kind, dropped or timed out at random points while their requests are in flight and
//! while they wait, leave no entry behind; with the locks free, cancellations that race grants
//! leave no holder nobody knows about; and no grant ever overlaps more holders than the lock
//! allows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::harness::{unique_name, wait_for_residue_in, within, Harness};
use crate::name::LockName;
use crate::{Family, LockError, Locker};

/// The kinds of lock a storm asks for.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A permit of a 2-permit semaphore.
    Permit,
    Read,
    Write,
    Lead,
}

const KINDS: [Kind; 4] = [Kind::Permit, Kind::Read, Kind::Write, Kind::Lead];

/// The semaphores' permit count.
const PERMITS: u32 = 2;

/// Who holds what, as the storm's attempts see it: per lock name, the permits, readers and
/// leaderships (`shared`) and the writers (`writers`) granted and not given back yet. An attempt
/// counts itself in from when its `acquire` returned until just before it gives the lock back
/// (its count's guard is dropped before the lock's), a part of the time it really holds: two
/// such counts that overlap are two holders that overlapped.
#[derive(Default)]
struct Holders(Mutex<HashMap<(String, Family), (u32, u32)>>);

/// One attempt counted in [`Holders`]: counted out when dropped.
struct Inside<'a> {
    holders: &'a Holders,
    key: (String, Family),
    writer: bool,
}

impl Holders {
    /// Counts a grant of `kind` of `name` in; panics if it holds together with more than the
    /// lock allows.
    fn enter(&self, name: &str, kind: Kind) -> Inside<'_> {
        let (family, writer) = match kind {
            Kind::Permit => (Family::Semaphore, false),
            Kind::Read => (Family::RwLock, false),
            Kind::Write => (Family::RwLock, true),
            Kind::Lead => (Family::Election, false),
        };
        let key = (name.to_owned(), family);
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (shared, writers) = counts.entry(key.clone()).or_default();
        let allowed = match kind {
            Kind::Permit => *shared < PERMITS,
            Kind::Read => *writers == 0,
            Kind::Write => *shared == 0 && *writers == 0,
            Kind::Lead => *shared == 0,
        };
        assert!(
            allowed,
            "{kind:?} of {name} granted while {shared} permits, readers or leaders and {writers} writers held it"
        );
        if writer {
            *writers += 1;
        } else {
            *shared += 1;
        }
        Inside {
            holders: self,
            key,
            writer,
        }
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let mut counts = self.holders.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((shared, writers)) = counts.get_mut(&self.key) {
            let count = if self.writer { writers } else { shared };
            *count = count.saturating_sub(1);
        }
    }
}

/// One storm attempt: `kind` of `name` with the builder's `timeout`, an `acquire` (or, `tried`, a
/// `try_acquire`) dropped at `drop_after`; a lock granted anyway is counted in `holders` and given
/// back at once (by its guard's drop if that is cut short too).
async fn attempt(
    locker: Locker,
    holders: Arc<Holders>,
    name: String,
    kind: Kind,
    tried: bool,
    timeout: Duration,
    drop_after: Duration,
) {
    let start = Instant::now();
    let granted = async {
        let builder = match kind {
            Kind::Permit => locker.semaphore(&name, PERMITS),
            Kind::Read => locker.rwlock(&name).read(),
            Kind::Write => locker.rwlock(&name).write(),
            Kind::Lead => {
                let campaign = locker.election(&name).campaign("storm").timeout(timeout);
                let lead = if tried {
                    campaign.try_acquire().await?
                } else {
                    Some(campaign.acquire().await?)
                };
                return match lead {
                    Some(lead) => {
                        let inside = holders.enter(&name, kind);
                        hold().await;
                        drop(inside);
                        lead.resign().await
                    }
                    None => Ok(()),
                };
            }
        };
        let builder = builder.timeout(timeout);
        let guard = if tried {
            builder.try_acquire().await?
        } else {
            Some(builder.acquire().await?)
        };
        match guard {
            Some(guard) => {
                let inside = holders.enter(&name, kind);
                hold().await;
                drop(inside);
                guard.release().await
            }
            None => Ok(()),
        }
    };
    match tokio::time::timeout(drop_after, granted).await {
        Err(_) | Ok(Ok(())) | Ok(Err(LockError::Timeout(_))) => {}
        // A server slowed down by the storm itself may still be answering when the deadline has
        // long passed: the Locker gives up on it as a server that did not answer. That is a
        // cancellation too.
        Ok(Err(LockError::Unavailable { .. })) if start.elapsed() >= timeout.min(drop_after) => {}
        Ok(Err(e)) => panic!("{kind:?} attempt (try: {tried}) failed: {e}"),
    }
}

/// How long a granted attempt holds before it gives the lock back: up to 2 ms, at random.
async fn hold() {
    tokio::time::sleep(Duration::from_micros(rand::random_range(0..2_000))).await;
}

/// `attempts` attempts of random kinds on random `names`, ten in flight per locker: half cut off
/// within 3 ms (the request in flight), half within 300 ms (waiting); one in four a
/// `try_acquire`. Their grants are counted in `holders`.
async fn storm(lockers: &[Locker], names: &[String], attempts: usize, holders: &Arc<Holders>) {
    let mut drivers = tokio::task::JoinSet::new();
    for (c, locker) in lockers.iter().enumerate() {
        let (locker, names, n, holders) = (locker.clone(), names.to_vec(), lockers.len(), holders.clone());
        drivers.spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for i in (c..attempts).step_by(n) {
                if tasks.len() >= 10 {
                    tasks.join_next().await.expect("a task").expect("attempt panicked");
                }
                let name = names[rand::random_range(0..names.len())].clone();
                let kind = KINDS[rand::random_range(0..KINDS.len())];
                let tried = rand::random_range(0..4) == 0;
                let limit = if i % 2 == 0 { 3_000 } else { 300_000 };
                let (timeout, drop_after) = (
                    Duration::from_micros(rand::random_range(1..limit)),
                    Duration::from_micros(rand::random_range(1..limit)),
                );
                tasks.spawn(attempt(
                    locker.clone(),
                    holders.clone(),
                    name,
                    kind,
                    tried,
                    timeout,
                    drop_after,
                ));
            }
            while let Some(done) = tasks.join_next().await {
                done.expect("attempt panicked");
            }
        });
    }
    within(Duration::from_secs(300), "the storm", async {
        while let Some(done) = drivers.join_next().await {
            done.expect("storm driver panicked");
        }
    })
    .await;
}

/// Waits until the semaphore, read-write lock and election of every one of `names` has
/// `counts` entries (in that order).
async fn entries_become(h: &impl Harness, names: &[String], counts: [usize; 3]) {
    for name in names {
        let key = LockName::new(name).expect("name");
        for (family, count) in [Family::Semaphore, Family::RwLock, Family::Election]
            .into_iter()
            .zip(counts)
        {
            wait_for_residue_in(h, family, &key, count).await;
        }
    }
}

/// Hundreds of semaphore, read-write lock and election acquires and `try_acquire`s, dropped or
/// timed out at random points, by six lockers that each hold a mutex all along:
/// - over locks that are all held (a full semaphore, a writer, a leader) every attempt queues:
///   afterwards only the holders' entries are left, and once they let go, nothing;
/// - over free locks, where cancellations race grants: nothing is left, and every semaphore gives
///   both its permits, every read-write lock a writer and every election a leadership at once;
/// - in both, no attempt is granted while the lock is held beyond what it allows (more than two
///   permits, a writer beside anyone, two leaders), as the attempts count their grants (each
///   holds up to 2 ms);
/// - first spread over 40 names (a connection rarely tries one name twice, so a later attempt is
///   not what cleans up after an earlier one), then all on one name (a herd);
/// - no locker's own mutex was lost to the storm.
pub async fn cancellation_storm_over_every_kind_leaves_nothing(h: &impl Harness) {
    const LOCKERS: usize = 6;
    let holder = h.sturdy_locker().await;
    let fresh = h.sturdy_locker().await;
    let (mut lockers, mut sides) = (Vec::new(), Vec::new());
    for _ in 0..LOCKERS {
        let locker = h.sturdy_locker().await;
        let side = locker.lock(unique_name("kinds_storm_side")).acquire().await;
        sides.push(side.expect("side lock"));
        lockers.push(locker);
    }
    let base = unique_name("kinds_storm");
    let spread: Vec<String> = (0..40).map(|i| format!("{base}/{i}")).collect();
    let herd = vec![format!("{base}/herd")];
    for (names, held_attempts, free_attempts) in [(spread, 600, 300), (herd, 200, 200)] {
        // Every lock held: every attempt queues.
        let (mut held, mut leads) = (Vec::new(), Vec::new());
        for name in &names {
            for _ in 0..PERMITS {
                held.push(holder.semaphore(name, PERMITS).acquire().await.expect("permit"));
            }
            held.push(holder.rwlock(name).write().acquire().await.expect("write"));
            leads.push(holder.election(name).campaign("holder").acquire().await.expect("lead"));
        }
        let holders = Arc::new(Holders::default());
        let counted: Vec<Inside<'_>> = names
            .iter()
            .flat_map(|name| {
                [Kind::Permit, Kind::Permit, Kind::Write, Kind::Lead].map(|kind| holders.enter(name, kind))
            })
            .collect();
        storm(&lockers, &names, held_attempts, &holders).await;
        drop(counted);
        entries_become(h, &names, [PERMITS as usize, 1, 1]).await;
        for guard in held {
            guard.release().await.expect("release");
        }
        for lead in leads {
            lead.resign().await.expect("resign");
        }
        entries_become(h, &names, [0, 0, 0]).await;

        // The locks free: cancellations race grants.
        storm(&lockers, &names, free_attempts, &Arc::new(Holders::default())).await;
        entries_become(h, &names, [0, 0, 0]).await;
        for name in &names {
            let mut permits = Vec::new();
            for _ in 0..PERMITS {
                let permit = fresh.semaphore(name, PERMITS).try_acquire().await.expect("try");
                permits.push(permit.unwrap_or_else(|| panic!("a permit of {name} is still taken after the storm")));
            }
            let write = fresh.rwlock(name).write().try_acquire().await.expect("try");
            let write = write.unwrap_or_else(|| panic!("the read-write lock {name} is not free after the storm"));
            let lead = fresh.election(name).campaign("fresh").try_acquire().await.expect("try");
            let lead = lead.unwrap_or_else(|| panic!("the election {name} is not free after the storm"));
            for guard in permits.into_iter().chain([write]) {
                guard.release().await.expect("release");
            }
            lead.resign().await.expect("resign");
        }
    }
    for side in sides {
        assert!(side.is_held(), "a side lock was lost: {:?}", side.lost_reason());
        side.release().await.expect("release");
    }
}
