//! No thundering herd on semaphores and read-write locks: a release wakes exactly the waiters that
//! can get in. The wake-ups are counted exactly, by a `PSUBSCRIBE` to the lock's wake channels,
//! and the server commands with `INFO commandstats` on a server of its own (redis-q3, which only
//! `herd.rs`, another test binary, uses), as `herd.rs` does for the mutex.
//!
//! - 20 readers and then a writer and 5 more readers wait behind a writer: its release wakes the
//!   20 readers (all get in), not the writer behind them nor the readers behind it; the readers'
//!   releases wake nobody until the last, which wakes the writer; its release wakes the 5.
//! - 20 waiters for a 1-permit semaphore (and for a full 3-permit one): each release wakes one.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockGuard, Locker};
use locksmith_redis::KindKeys;
use tokio::sync::mpsc;

const WAITERS: usize = 20;

/// What a step of the measurement cost: wake-ups published, and server commands by name.
struct Meter {
    url: String,
    admin: redis::aio::MultiplexedConnection,
    wakes: Arc<AtomicU64>,
    _listener: tokio::task::JoinHandle<()>,
}

impl Meter {
    /// Counts the wake-ups of the lock with `keys` from now on.
    async fn start(url: &str, keys: &KindKeys) -> Meter {
        let host = BackendUrl::parse(url).expect("url").hosts[0].to_addr(6379);
        let client = redis::Client::open(format!("redis://{host}/0")).expect("client");
        let mut pubsub = client.get_async_pubsub().await.expect("pub/sub connection");
        pubsub.psubscribe(format!("{}*", keys.wake)).await.expect("PSUBSCRIBE");
        let wakes = Arc::new(AtomicU64::new(0));
        let listener = tokio::spawn({
            let wakes = wakes.clone();
            async move {
                let mut messages = pubsub.into_on_message();
                while messages.next().await.is_some() {
                    wakes.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Meter {
            url: url.to_owned(),
            admin: common::admin(url).await,
            wakes,
            _listener: listener,
        }
    }

    /// Runs `step`, lets a herd (if there were one) show up, and returns the wake-ups and the
    /// commands it cost.
    async fn measure(&mut self, what: &str, step: impl std::future::Future<Output = ()>) -> (u64, u64) {
        let (wakes, before) = (
            self.wakes.load(Ordering::SeqCst),
            common::command_counts(&mut self.admin).await,
        );
        step.await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = common::command_counts(&mut self.admin).await;
        let delta: BTreeMap<&str, u64> = after
            .iter()
            .map(|(c, n)| (c.as_str(), n - before.get(c).copied().unwrap_or(0)))
            .filter(|(c, d)| *d > 0 && *c != "info")
            .collect();
        let wakes = self.wakes.load(Ordering::SeqCst) - wakes;
        // Script calls: functions (FCALL), or plain scripts where those are refused.
        let evalsha = ["fcall", "evalsha"]
            .map(|c| delta.get(c).copied().unwrap_or(0))
            .iter()
            .sum();
        eprintln!("{what} on {}: {wakes} wake-up(s), commands {delta:?}", self.url);
        (wakes, evalsha)
    }
}

/// Starts a waiter that reports `id` when it holds, then holds until `release` says so.
fn waiter(
    locker: Locker,
    take: impl std::future::Future<Output = LockGuard> + Send + 'static,
    id: usize,
    got: mpsc::UnboundedSender<usize>,
    mut release: tokio::sync::watch::Receiver<usize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let guard = take.await;
        got.send(id).expect("report");
        let _ = release.wait_for(|upto| *upto > id).await;
        guard.release().await.expect("release");
        drop(locker);
    })
}

/// Waits until the queue of `keys` has `n` entries (so the FIFO order is known).
async fn queued(admin: &mut redis::aio::MultiplexedConnection, keys: &KindKeys, n: usize) {
    within(Duration::from_secs(30), "waiter queued", async {
        loop {
            let len: usize = redis::cmd("ZCARD")
                .arg(&keys.queue)
                .query_async(admin)
                .await
                .expect("ZCARD");
            if len == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

async fn drain(got: &mut mpsc::UnboundedReceiver<usize>, n: usize) -> Vec<usize> {
    let mut ids = Vec::new();
    while ids.len() < n {
        ids.push(
            within(Duration::from_secs(30), "grants", got.recv())
                .await
                .expect("a grant"),
        );
    }
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_only_the_waiters_that_get_in() {
    common::init_logs();
    let server = common::quorum_hosts().remove(2); // redis-q3
                                                   // Heartbeats every 20 s, so none falls into the measured windows.
    let url = common::with_options(&server, "waiter_ttl=60s");
    let mut admin = common::admin(&url).await;
    let (got_tx, mut got) = mpsc::unbounded_channel();
    let (release, release_rx) = tokio::sync::watch::channel(0usize);

    // Read-write lock: writer holds; 20 readers, a writer, 5 readers wait (ids in queue order).
    let name = unique_name("herd_rw");
    let keys = KindKeys::for_url(
        &BackendUrl::parse(&url).unwrap(),
        Family::RwLock,
        &LockName::new(&name).unwrap(),
    )
    .unwrap();
    let mut meter = Meter::start(&url, &keys).await;
    let holder = common::locker(&url)
        .await
        .rwlock(&name)
        .write()
        .acquire()
        .await
        .expect("write");
    let mut tasks = Vec::new();
    for id in 0..WAITERS + 6 {
        let locker = common::locker(&url).await;
        let rw = locker.rwlock(&name);
        let side = if id == WAITERS { rw.write() } else { rw.read() };
        let take = async move { side.acquire().await.expect("acquire") };
        tasks.push(waiter(locker, take, id, got_tx.clone(), release_rx.clone()));
        queued(&mut admin, &keys, id + 1).await;
    }
    let (wakes, evalsha) = meter
        .measure(
            "a writer's release with 20 readers, a writer, 5 readers queued",
            async { holder.release().await.expect("release") },
        )
        .await;
    assert_eq!(drain(&mut got, WAITERS).await, (0..WAITERS).collect::<Vec<_>>());
    assert_eq!(
        wakes, WAITERS as u64,
        "the release must wake the 20 readers, and only them"
    );
    assert!(evalsha <= WAITERS as u64 + 2, "{evalsha} script calls");
    let (wakes, _) = meter
        .measure("19 of the 20 readers release", async {
            release.send_replace(WAITERS - 1);
            tokio::time::sleep(Duration::from_millis(300)).await;
        })
        .await;
    assert_eq!(wakes, 0, "a reader's release woke someone while readers still hold");
    let (wakes, _) = meter
        .measure("the last reader releases", async {
            release.send_replace(WAITERS);
        })
        .await;
    assert_eq!(drain(&mut got, 1).await, [WAITERS]);
    assert_eq!(wakes, 1, "the last reader's release must wake the writer only");
    let (wakes, _) = meter
        .measure("the second writer releases", async {
            release.send_replace(WAITERS + 1);
        })
        .await;
    assert_eq!(drain(&mut got, 5).await, (WAITERS + 1..WAITERS + 6).collect::<Vec<_>>());
    assert_eq!(wakes, 5, "the writer's release must wake the 5 readers behind it");
    release.send_replace(usize::MAX);
    for t in tasks.drain(..) {
        t.await.expect("waiter task");
    }

    // Semaphores: 1 permit and 20 waiters; 3 permits, 3 holders and 20 waiters.
    for permits in [1u32, 3] {
        let name = unique_name("herd_sem");
        let keys = KindKeys::for_url(
            &BackendUrl::parse(&url).unwrap(),
            Family::Semaphore,
            &LockName::new(&name).unwrap(),
        )
        .unwrap();
        let mut meter = Meter::start(&url, &keys).await;
        let holders = common::locker(&url).await;
        let mut held = Vec::new();
        for _ in 0..permits {
            held.push(holders.semaphore(&name, permits).acquire().await.expect("permit"));
        }
        let (release, release_rx) = tokio::sync::watch::channel(0usize);
        for id in 0..WAITERS {
            let locker = common::locker(&url).await;
            let sem = locker.semaphore(&name, permits);
            let take = async move { sem.acquire().await.expect("acquire") };
            tasks.push(waiter(locker, take, id, got_tx.clone(), release_rx.clone()));
            queued(&mut admin, &keys, id + 1).await;
        }
        let first = held.remove(0);
        let (wakes, evalsha) = meter
            .measure(
                &format!("a release of a {permits}-permit semaphore with 20 waiters"),
                async { first.release().await.expect("release") },
            )
            .await;
        assert_eq!(drain(&mut got, 1).await, [0], "the first waiter gets the permit");
        assert_eq!(wakes, 1, "a release must wake one waiter");
        assert!(evalsha <= 3, "{evalsha} script calls");
        // Everyone through, in order, one wake-up per release (each release waits for the grant
        // it causes: releases in quick succession may wake a waiter that is on its way in twice).
        let (wakes, _) = meter
            .measure("the rest, one release at a time", async {
                let mut next = 1;
                for g in held.drain(..) {
                    g.release().await.expect("release");
                    assert_eq!(drain(&mut got, 1).await, [next], "not FIFO");
                    next += 1;
                }
                for id in 0..WAITERS {
                    release.send_replace(id + 1);
                    if id + (permits as usize) < WAITERS {
                        assert_eq!(drain(&mut got, 1).await, [next], "not FIFO");
                        next += 1;
                    }
                }
            })
            .await;
        assert_eq!(wakes, (WAITERS - 1) as u64, "one wake-up per waiter let in");
        for t in tasks.drain(..) {
            t.await.expect("waiter task");
        }
    }
}
