//! Shared kinds under churn: clients that take and give back a semaphore permit or a read-write
//! lock as fast as they can, holding for no time at all (lockbench's `semaphore` and `rwlock`
//! workloads). The other suites hold for milliseconds; here grants, releases and wake-ups of many
//! holders at once overlap all the time. Every call must answer (a release stuck behind the
//! others' wake-ups once missed its 5 s deadline on MySQL), and no grant may overlap more holders
//! than the lock allows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::harness::{unique_name, wait_for_residue_in, within, Harness};
use crate::name::LockName;
use crate::{Family, Locker};

/// Clients of one lock.
const CLIENTS: usize = 8;

/// How long they churn.
const CHURN_FOR: Duration = Duration::from_secs(2);

/// The permits of the semaphore.
const PERMITS: u32 = 2;

/// Eight clients take and release a permit of a 2-permit semaphore in a loop for two seconds:
/// every acquire and release answers, never more than two hold at once, and nothing is left
/// behind.
pub async fn semaphore_churn_answers_every_call(h: &impl Harness) {
    let name = unique_name("sem_churn");
    let inside = Arc::new(AtomicUsize::new(0));
    let shared = name.clone();
    churn(h, Family::Semaphore, &name, move |locker| {
        let (name, inside) = (shared.clone(), inside.clone());
        async move {
            let permit = locker
                .semaphore(&name, PERMITS)
                .acquire()
                .await
                .expect("acquire a permit");
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(now <= PERMITS as usize, "{now} holders of a {PERMITS}-permit semaphore");
            tokio::task::yield_now().await;
            inside.fetch_sub(1, Ordering::SeqCst);
            permit.release().await.expect("release a permit");
        }
    })
    .await;
}

/// Eight clients read (nine times in ten) and write in a loop for two seconds: every acquire and
/// release answers, a writer is never inside with anyone, and nothing is left behind.
pub async fn rwlock_churn_answers_every_call(h: &impl Harness) {
    let name = unique_name("rw_churn");
    // Readers inside, plus 1,000 per writer inside.
    let inside = Arc::new(AtomicUsize::new(0));
    let round = Arc::new(AtomicUsize::new(0));
    let shared = name.clone();
    churn(h, Family::RwLock, &name, move |locker| {
        let (name, inside, round) = (shared.clone(), inside.clone(), round.clone());
        async move {
            let rw = locker.rwlock(&name);
            if round.fetch_add(1, Ordering::SeqCst) % 10 == 0 {
                let w = rw.write().acquire().await.expect("write");
                assert_eq!(
                    inside.fetch_add(1_000, Ordering::SeqCst),
                    0,
                    "a writer inside with others"
                );
                tokio::task::yield_now().await;
                inside.fetch_sub(1_000, Ordering::SeqCst);
                w.release().await.expect("release a write");
            } else {
                let r = rw.read().acquire().await.expect("read");
                assert!(
                    inside.fetch_add(1, Ordering::SeqCst) < 1_000,
                    "a reader inside with a writer"
                );
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                r.release().await.expect("release a read");
            }
        }
    })
    .await;
}

/// Runs `once` in a loop on [`CLIENTS`] lockers of their own for [`CHURN_FOR`], all bounded (each
/// acquire and release has its deadline, but a hung one would hang the test); then checks that
/// every client went round at least once and that lock `name` of `family` is left empty.
async fn churn<F, Fut>(h: &impl Harness, family: Family, name: &str, once: F)
where
    F: Fn(Locker) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut lockers = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        lockers.push(h.locker().await);
    }
    let stop_at = Instant::now() + CHURN_FOR;
    let tasks: Vec<_> = lockers
        .iter()
        .map(|locker| {
            let (once, locker) = (once.clone(), locker.clone());
            tokio::spawn(async move {
                let mut rounds = 0;
                while Instant::now() < stop_at {
                    once(locker.clone()).await;
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let rounds = within(CHURN_FOR + Duration::from_secs(60), "the churning clients", async {
        let mut rounds = 0;
        for t in tasks {
            rounds += t.await.expect("client task panicked");
        }
        rounds
    })
    .await;
    for locker in lockers {
        locker.shutdown().await.expect("shutdown");
    }
    assert!(rounds >= CLIENTS, "only {rounds} operations in {CHURN_FOR:?}");
    let key = LockName::new(name).expect("name");
    wait_for_residue_in(h, family, &key, 0).await;
}
