//! The waiter queue survives waiters that died without cleaning up: their entries go stale and
//! are skipped.

mod common;

use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};

async fn waiter_after_dead_head(live_ms: i64) {
    let url = common::with_options(&common::redis_url(), "waiter_ttl=1s");
    let name = unique_name("dead_waiter");
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let held = a.lock(&name).acquire().await.expect("acquire");
    common::plant_dead_waiter(&url, &name, live_ms).await;
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release"); // wakes the dead head if it still looks alive
    let guard = within(Duration::from_secs(15), "the live waiter behind a dead one", waiter)
        .await
        .unwrap()
        .expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_entry_is_skipped_at_release() {
    waiter_after_dead_head(-1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_that_goes_stale_while_head_is_skipped_by_the_next_heartbeat() {
    waiter_after_dead_head(1500).await;
}

/// A waiter that leaves the queue while a stale entry is still in front of it (nobody pruned it
/// yet) was the live head: it wakes the next waiter, which then watches the holder's expiry. Here
/// the holder crashed (its key runs out after 1 s), a planted dead entry goes stale ahead of the
/// waiter that times out, and the waiter behind must get the lock when the key expires, not at
/// its next heartbeat (`waiter_ttl / 3` = 10 s). Before, `leave` counted the stale entry as the
/// head and woke nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_leaving_behind_a_stale_entry_wakes_the_next() {
    let url = common::with_options(&common::redis_url(), "waiter_ttl=30s");
    let name = unique_name("leave_behind_stale");
    let (a, b, c) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let crashed = a
        .lock(&name)
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    let _lease = crashed.abandon(); // renewed no more: the key runs out after its TTL
    common::plant_dead_waiter(&url, &name, 300).await;
    let leaving = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).timeout(Duration::from_millis(600)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next = tokio::spawn({
        let (c, name) = (c.clone(), name.clone());
        async move { c.lock(&name).acquire().await }
    });
    assert!(leaving.await.unwrap().is_err(), "the first waiter times out");
    let guard = within(Duration::from_secs(5), "the waiter behind, once the key expired", next)
        .await
        .unwrap()
        .expect("acquire");
    guard.release().await.expect("release");
}

/// A waiter that asks for replica confirmation (`min_replicas`) takes no grant that nobody
/// confirmed, even one handed over by a releaser that does not ask for it (another program's URL
/// without `min_replicas`, whose release grants the head of the queue directly). On this single
/// server no replica ever confirms: the waiter's acquire must fail, as it does when the lock is
/// free, not hand back an unconfirmed lease. Before, it took the handed-over grant as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_min_replicas_takes_no_unconfirmed_hand_over() {
    let plain = common::redis_url();
    let careful_url = common::with_options(&plain, "min_replicas=1&replica_timeout=200ms");
    let name = unique_name("unconfirmed_hand_over");
    let (releaser, careful) = (common::locker(&plain).await, common::locker(&careful_url).await);
    let free = careful.lock(unique_name("free")).try_acquire().await;
    assert!(
        matches!(free, Err(locksmith_core::LockError::Unavailable { .. })),
        "{free:?}"
    );

    let held = releaser.lock(&name).acquire().await.expect("acquire");
    let waiter = tokio::spawn({
        let (careful, name) = (careful.clone(), name.clone());
        async move { careful.lock(&name).timeout(Duration::from_secs(3)).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release"); // hands the lock to the waiter directly
    let answer = within(Duration::from_secs(15), "the careful waiter", waiter)
        .await
        .unwrap();
    assert!(
        answer.is_err(),
        "an unconfirmed grant was taken: {:?}",
        answer.map(|g| g.fencing_token())
    );
    let after = releaser.lock(&name).try_acquire().await.expect("try");
    assert!(after.is_some(), "the grant the waiter refused is given back");
}

/// The documented exception to the `waiter_ttl` bound: a dead head whose entry still looks live
/// when the holder releases is handed the lock for the TTL its last step asked for, and the next
/// waiter gets the lock once that runs out (not before: the dead head holds it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_handed_the_lock_holds_it_for_its_ttl() {
    let url = common::with_options(&common::redis_url(), "waiter_ttl=1s");
    let name = unique_name("dead_head_handed");
    let (a, b) = (common::locker(&url).await, common::locker(&url).await);
    let held = a.lock(&name).acquire().await.expect("acquire");
    common::plant_dead_waiter_asking(&url, &name, 60_000, Some(2_000)).await;
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = std::time::Instant::now();
    held.release().await.expect("release"); // hands the lock to the dead head for 2 s
    let guard = within(Duration::from_secs(15), "the live waiter behind a dead head", waiter)
        .await
        .unwrap()
        .expect("acquire");
    assert!(
        released.elapsed() >= Duration::from_millis(1500),
        "the dead head's lock ran out early"
    );
    guard.release().await.expect("release");
}

/// Bug: a waiter that was second in line when it last stepped was told "not first", and nothing
/// told it when it became first: a release hands the lock to the head and wakes only it, and a
/// head that takes the lock by its own step wakes nobody. When that new holder died, the lock's
/// key ran out after its TTL and the waiter behind it learnt of it only at its next heartbeat (a
/// third of its waiter TTL later: 10 s here). Now whoever takes the lock from the queue wakes the
/// next live waiter, which steps and watches the new holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_behind_a_new_holder_watches_its_lease() {
    let url = common::with_options(&common::redis_url(), "waiter_ttl=30s");
    let name = unique_name("behind_new_holder");
    let (a, b, c) = (
        common::locker(&url).await,
        common::locker(&url).await,
        common::locker(&url).await,
    );
    let held = a.lock(&name).acquire().await.expect("acquire");
    let first = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move { b.lock(&name).ttl(Duration::from_secs(1)).acquire().await }
    });
    locksmith_core::conformance::until_waiters(&a, &name, 1, Duration::from_secs(10)).await;
    let second = tokio::spawn({
        let (c, name) = (c.clone(), name.clone());
        async move { c.lock(&name).timeout(Duration::from_secs(20)).acquire().await }
    });
    locksmith_core::conformance::until_waiters(&a, &name, 2, Duration::from_secs(10)).await;
    held.release().await.expect("release"); // handed to the first waiter
    let new_holder = within(Duration::from_secs(5), "the first waiter", first)
        .await
        .unwrap()
        .expect("acquire");
    let _lease = new_holder.abandon(); // dies: its 1 s key runs out
    let guard = within(
        Duration::from_secs(4),
        "the second waiter, once the new holder's key expired",
        second,
    )
    .await
    .unwrap()
    .expect("acquire");
    guard.release().await.expect("release");
}
