//! A Redis restart without persistence while locks are held (against the quorum server redis-q1
//! used as a single server, so the shared `redis` of the other tests is not disturbed): every
//! holder's `lost()` fires at its next renewal, a new holder can acquire, and fencing tokens after
//! the restart start over, unless `?fence_floor=time` keeps them growing.

mod common;

use std::time::Duration;

use lockcore::conformance::servers::{backends, OnDrop};
use lockcore::conformance::{unique_name, within};
use lockcore::LostReason;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_loses_locks_and_counters() {
    let server = common::quorum_hosts().remove(0); // redis-q1
    let plain_url = server.clone();
    let floor_url = common::with_options(&server, "fence_floor=time");
    let (plain, floored) = (common::locker(&plain_url).await, common::locker(&floor_url).await);
    let (a, b) = (unique_name("restart_counter"), unique_name("restart_floor"));

    // Build up some history so the counters are well above 1.
    let mut last_a = 0;
    for _ in 0..3 {
        let g = plain.lock(&a).acquire().await.expect("acquire");
        last_a = g.fencing_token();
        g.release().await.expect("release");
    }
    let ttl = Duration::from_secs(2);
    let held_a = plain.lock(&a).ttl(ttl).acquire().await.expect("acquire");
    let held_b = floored.lock(&b).ttl(ttl).acquire().await.expect("acquire");
    assert!(held_a.fencing_token() > last_a);
    let (token_a, token_b) = (held_a.fencing_token(), held_b.fencing_token());

    {
        let _restore = OnDrop::start("redis-q1");
        backends(&["stop", "redis-q1"]);
        backends(&["start", "redis-q1"]);
    }

    // The restarted server has no keys: the next renewal finds nothing and lost() fires.
    for (guard, what) in [(&held_a, "counter"), (&held_b, "floor")] {
        let reason = within(
            Duration::from_secs(30),
            &format!("lost() after the restart ({what})"),
            guard.lost(),
        )
        .await;
        assert!(
            matches!(reason, LostReason::LeaseGone(_) | LostReason::RenewalFailed(_)),
            "{reason:?}"
        );
    }

    // A new holder can acquire at once.
    let new_a = within(
        Duration::from_secs(30),
        "acquire after restart",
        plain.lock(&a).acquire(),
    )
    .await
    .expect("acquire");
    let new_b = within(
        Duration::from_secs(30),
        "acquire after restart",
        floored.lock(&b).acquire(),
    )
    .await
    .expect("acquire");
    // Without persistence the counter is gone: the token starts over (this is what the docs warn
    // about). With fence_floor=time it is at least the server clock in ms, above the old token.
    assert_eq!(
        new_a.fencing_token(),
        1,
        "the counter survived a restart without persistence?"
    );
    assert!(new_a.fencing_token() < token_a);
    assert!(
        new_b.fencing_token() > token_b,
        "fence_floor=time: {} after {token_b}",
        new_b.fencing_token()
    );

    new_a.release().await.expect("release");
    new_b.release().await.expect("release");
    assert!(held_a.release().await.is_err() && held_b.release().await.is_err());
}
