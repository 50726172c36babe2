//! A cancellation storm over semaphores, read-write locks and elections (the conformance suite's
//! storm covers mutexes): hundreds of acquires of every kind, dropped or timed out at random
//! points while their requests are in flight and while they wait, leave no entry behind; and with
//! the locks free, cancellations that race grants leave no holder nobody knows about.

mod common;

use std::time::Duration;

use common::kind_entries;
use lockcore::conformance::{unique_name, within};
use lockcore::driver::{BackendUrl, LockName};
use lockcore::{Family, LockError, Locker};

/// One way of asking for a lock of the storm.
#[derive(Clone, Copy, Debug)]
enum Ask {
    Permit,
    Read,
    Write,
    Lead,
}

const ASKS: [Ask; 4] = [Ask::Permit, Ask::Read, Ask::Write, Ask::Lead];

/// Acquires as asked with the builder's `timeout`, dropping the acquire at `drop_after`; a lock
/// granted anyway is given back at once (by its guard's drop if that is cut short too).
async fn attempt(locker: Locker, name: String, ask: Ask, timeout: Duration, drop_after: Duration) {
    let acquire = async {
        match ask {
            Ask::Permit => {
                locker
                    .semaphore(&name, 2)
                    .timeout(timeout)
                    .acquire()
                    .await?
                    .release()
                    .await
            }
            Ask::Read => {
                locker
                    .rwlock(&name)
                    .read()
                    .timeout(timeout)
                    .acquire()
                    .await?
                    .release()
                    .await
            }
            Ask::Write => {
                locker
                    .rwlock(&name)
                    .write()
                    .timeout(timeout)
                    .acquire()
                    .await?
                    .release()
                    .await
            }
            Ask::Lead => {
                let campaign = locker.election(&name).campaign("storm").timeout(timeout);
                campaign.acquire().await?.resign().await
            }
        }
    };
    match tokio::time::timeout(drop_after, acquire).await {
        Err(_) | Ok(Ok(())) | Ok(Err(LockError::Timeout(_))) => {}
        Ok(Err(e)) => panic!("{ask:?} attempt failed: {e}"),
    }
}

/// `attempts` attempts of random kinds on random `names`, ten in flight per locker.
async fn storm(lockers: &[Locker], names: &[String], attempts: usize) {
    let mut drivers = tokio::task::JoinSet::new();
    for (c, locker) in lockers.iter().enumerate() {
        let (locker, names, n) = (locker.clone(), names.to_vec(), lockers.len());
        drivers.spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for i in (c..attempts).step_by(n) {
                if tasks.len() >= 10 {
                    tasks.join_next().await.expect("a task").expect("attempt panicked");
                }
                let name = names[rand::random_range(0..names.len())].clone();
                let ask = ASKS[rand::random_range(0..ASKS.len())];
                // Half cancelled within 3 ms (the request in flight), half within 300 ms (waiting).
                let limit = if i % 2 == 0 { 3_000 } else { 300_000 };
                let (timeout, drop_after) = (
                    Duration::from_micros(rand::random_range(1..limit)),
                    Duration::from_micros(rand::random_range(1..limit)),
                );
                tasks.spawn(attempt(locker.clone(), name, ask, timeout, drop_after));
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

/// Waits until every lock of every family of `names` has `count` entries.
async fn entries_become(url: &str, names: &[String], count: usize) {
    let parsed = BackendUrl::parse(url).expect("url");
    let mut admin = common::admin_for(url).await;
    for name in names {
        for family in [Family::Semaphore, Family::RwLock, Family::Election] {
            let keys = backend_redis::KindKeys::for_url(&parsed, family, &LockName::new(name).unwrap()).unwrap();
            let mut last = Vec::new();
            let settled = tokio::time::timeout(Duration::from_secs(20), async {
                loop {
                    last = kind_entries(&mut admin, &keys).await;
                    if last.len() == count {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            assert!(
                settled.is_ok(),
                "the {} {name}: {last:?}, not {count} entries",
                family.name()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_storm_over_every_kind_leaves_nothing() {
    common::init_logs();
    let url = common::redis_url();
    let base = unique_name("kinds_storm");
    let names: Vec<String> = (0..40).map(|i| format!("{base}/{i}")).collect();
    let holder = common::locker(&url).await;
    let mut lockers = Vec::new();
    for _ in 0..6 {
        lockers.push(common::locker(&url).await);
    }

    // Every lock held (a full semaphore, a writer, a leader): every attempt queues.
    let (mut held, mut leads) = (Vec::new(), Vec::new());
    for name in &names {
        held.push(holder.semaphore(name, 2).acquire().await.expect("permit"));
        held.push(holder.semaphore(name, 2).acquire().await.expect("permit"));
        held.push(holder.rwlock(name).write().acquire().await.expect("write"));
        leads.push(holder.election(name).campaign("holder").acquire().await.expect("lead"));
    }
    storm(&lockers, &names, 600).await;
    // Each semaphore has its 2 holders, each read-write lock and election its 1.
    let parsed = BackendUrl::parse(&url).expect("url");
    let mut admin = common::admin_for(&url).await;
    entries_settle(&mut admin, &parsed, &names).await;
    for g in held {
        g.release().await.expect("release");
    }
    for l in leads {
        l.resign().await.expect("resign");
    }
    entries_become(&url, &names, 0).await;

    // The locks free: cancellations race grants.
    storm(&lockers, &names, 300).await;
    entries_become(&url, &names, 0).await;
    let fresh = common::locker(&url).await;
    for name in &names {
        let w = fresh.rwlock(name).write().try_acquire().await.expect("try");
        assert!(w.is_some(), "{name} is not free after the storm");
        let l = fresh.election(name).campaign("x").try_acquire().await.expect("try");
        assert!(l.is_some(), "the election {name} is not free after the storm");
    }
}

/// The held locks' entries only: 2 permits, 1 writer, 1 leader per name.
async fn entries_settle(admin: &mut common::Admin, parsed: &BackendUrl, names: &[String]) {
    for name in names {
        for (family, count) in [(Family::Semaphore, 2), (Family::RwLock, 1), (Family::Election, 1)] {
            let keys = backend_redis::KindKeys::for_url(parsed, family, &LockName::new(name).unwrap()).unwrap();
            within(Duration::from_secs(20), "the storm's entries to go", async {
                while kind_entries(admin, &keys).await.len() != count {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
        }
    }
}
