//! The read-write lock suite ([`crate::Locker::rwlock`]): readers share, a writer is alone, a
//! waiting writer holds back the readers after it, fencing tokens order writers after every
//! earlier reader and writer, expiry and cancellation as for a mutex.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::harness::{patience, unique_name, wait_for_residue_in, within, Harness};
use crate::name::LockName;
use crate::{Family, LockError};

fn lock_name(name: &str) -> LockName {
    LockName::new(name).expect("name")
}

/// Two readers hold at once; a writer cannot while they do, and no reader can while it does.
/// Tokens: the writer's is above both readers', a later reader's above the writer's.
pub async fn rwlock_readers_share_writers_exclude(h: &impl Harness) {
    let name = unique_name("rw_share");
    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let r1 = a
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("a free read side");
    let r2 = b
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("readers share");
    assert!(
        c.rwlock(&name).write().try_acquire().await.expect("try").is_none(),
        "a writer beside readers"
    );
    let top = r1.fencing_token().max(r2.fencing_token());
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = c
        .rwlock(&name)
        .write()
        .try_acquire()
        .await
        .expect("try")
        .expect("free for a writer");
    assert!(w.fencing_token() > top, "the writer's token is not above the readers'");
    assert!(
        a.rwlock(&name).read().try_acquire().await.expect("try").is_none(),
        "a reader beside a writer"
    );
    assert!(
        b.rwlock(&name).write().try_acquire().await.expect("try").is_none(),
        "two writers"
    );
    let wt = w.fencing_token();
    w.release().await.expect("release");
    let r3 = a
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .expect("try")
        .expect("free after the writer");
    assert!(r3.fencing_token() > wt);
    r3.release().await.expect("release");
    wait_for_residue_in(h, Family::RwLock, &lock_name(&name), 0).await;
}

/// A writer waiting behind a reader makes a later reader wait too (no writer starvation); the
/// writer goes first, then the reader.
pub async fn rwlock_waiting_writer_blocks_later_readers(h: &impl Harness) {
    let name = unique_name("rw_fifo");
    let key = lock_name(&name);
    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let r1 = a.rwlock(&name).read().acquire().await.expect("acquire");
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn({
        let (b, name, tx) = (b.clone(), name.clone(), tx.clone());
        async move {
            let w = b.rwlock(&name).write().acquire().await.expect("acquire");
            let _ = tx.send(("writer", w.fencing_token()));
            w
        }
    });
    wait_for_residue_in(h, Family::RwLock, &key, 2).await;
    assert!(
        c.rwlock(&name).read().try_acquire().await.expect("try").is_none(),
        "a reader went ahead of a waiting writer"
    );
    let reader = tokio::spawn({
        let (c, name) = (c.clone(), name.clone());
        async move {
            let r = c.rwlock(&name).read().acquire().await.expect("acquire");
            let _ = tx.send(("reader", r.fencing_token()));
            r
        }
    });
    wait_for_residue_in(h, Family::RwLock, &key, 3).await;
    let r1_token = r1.fencing_token();
    r1.release().await.expect("release");
    let limit = patience(h);
    let (first, wt) = within(limit, "the writer after the reader", order.recv())
        .await
        .expect("a grant");
    assert_eq!(first, "writer");
    assert!(wt > r1_token);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), order.recv())
            .await
            .is_err(),
        "the reader got in beside the writer"
    );
    writer.await.expect("writer").release().await.expect("release");
    let (second, rt) = within(limit, "the reader after the writer", order.recv())
        .await
        .expect("a grant");
    assert_eq!(second, "reader");
    assert!(rt > wt);
    reader.await.expect("reader").release().await.expect("release");
    wait_for_residue_in(h, Family::RwLock, &key, 0).await;
}

/// A waiting writer that gives up (its timeout) lets in the readers queued behind it while the
/// lock is still read-held: nobody waits for a writer that is gone.
pub async fn rwlock_writer_that_gives_up_lets_readers_in(h: &impl Harness) {
    let name = unique_name("rw_gives_up");
    let key = lock_name(&name);
    let (a, b, c) = (h.locker().await, h.locker().await, h.locker().await);
    let r1 = a.rwlock(&name).read().acquire().await.expect("acquire");
    let writer = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        let wait = h.short_ttl();
        async move { b.rwlock(&name).write().timeout(wait).acquire().await }
    });
    wait_for_residue_in(h, Family::RwLock, &key, 2).await;
    let reader = tokio::spawn({
        let (c, name) = (c.clone(), name.clone());
        async move { c.rwlock(&name).read().acquire().await }
    });
    wait_for_residue_in(h, Family::RwLock, &key, 3).await;
    let gave_up = within(patience(h), "the writer's timeout", writer)
        .await
        .expect("writer");
    assert!(gave_up.is_err(), "the writer got in beside a reader");
    let r2 = within(patience(h), "the reader behind the writer that gave up", reader)
        .await
        .expect("reader")
        .expect("acquire");
    assert!(r1.is_held() && r2.is_held());
    r2.release().await.expect("release");
    r1.release().await.expect("release");
    wait_for_residue_in(h, Family::RwLock, &key, 0).await;
}

/// Six clients read (mostly) and write at random: a writer is never inside with anyone, and every
/// operation finishes.
pub async fn rwlock_never_mixes_readers_and_writers(h: &impl Harness) {
    let name = unique_name("rw_stress");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in 0..6usize {
        let locker = h.locker().await;
        let (name, readers, writers) = (name.clone(), readers.clone(), writers.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..8usize {
                let rw = locker.rwlock(&name);
                if (client + round) % 4 == 0 {
                    let w = rw.write().acquire().await.expect("write");
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers inside");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer inside with readers");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    w.release().await.expect("release");
                } else {
                    let r = rw.read().acquire().await.expect("read");
                    readers.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader inside with a writer");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    r.release().await.expect("release");
                }
            }
        }));
    }
    within(Duration::from_secs(120), "the read-write rounds", async {
        for t in tasks {
            t.await.expect("client task panicked");
        }
    })
    .await;
    wait_for_residue_in(h, Family::RwLock, &lock_name(&name), 0).await;
}

/// A writer that stops renewing (crashed) expires after its TTL, and waiting readers get in.
pub async fn rwlock_crashed_writer_expires(h: &impl Harness) {
    let name = unique_name("rw_crash");
    let (a, b) = (h.locker().await, h.locker().await);
    let ttl = h.short_ttl();
    let crashed = a.rwlock(&name).write().ttl(ttl).acquire().await.expect("acquire");
    let _lease = crashed.abandon();
    let r = within(
        patience(h),
        "a reader after the writer crashed",
        b.rwlock(&name).read().ttl(ttl).acquire(),
    )
    .await
    .expect("acquire");
    r.release().await.expect("release");
}

/// Cancelled and timed-out waits of readers and writers leave no entry behind.
pub async fn rwlock_cancellation_leaves_nothing(h: &impl Harness) {
    let name = unique_name("rw_cancel");
    let key = lock_name(&name);
    let (a, b) = (h.locker().await, h.locker().await);
    let held = a.rwlock(&name).write().acquire().await.expect("acquire");
    for i in 0..6u64 {
        let rw = b.rwlock(&name);
        let side = if i % 2 == 0 { rw.read() } else { rw.write() };
        let attempt = side.timeout(Duration::from_millis(20 * i + 1)).acquire();
        if let Ok(result) = tokio::time::timeout(Duration::from_millis(10 * i + 1), attempt).await {
            assert!(matches!(result, Err(LockError::Timeout(_))), "{result:?}");
        }
    }
    wait_for_residue_in(h, Family::RwLock, &key, 1).await;
    held.release().await.expect("release");
    wait_for_residue_in(h, Family::RwLock, &key, 0).await;
    let free = b
        .rwlock(&name)
        .write()
        .try_acquire()
        .await
        .expect("try")
        .expect("free after the cancellations");
    free.release().await.expect("release");
}
