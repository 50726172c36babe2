//! What a waiter sends when the lock is handed to it (`LOCKSMITH_TEST_ZK`,
//! `LOCKSMITH_TEST_ZK_ENSEMBLE`).
//!
//! On a server that runs alone, which expires sessions itself, the predecessor's delete event
//! hands the lock to the waiter with no request (see "The hand-over" in
//! `src/protocol/contender.rs`), and the held node's watch is the one the waiter set on its own
//! node while it waited ("Our own node"): no packet at all. zookeeper-client's own recipe lists
//! the queue after the event, and so did locksmith before (2 packets: the test failed on that
//! code; then 1, the held node's watch sent after the grant). On an ensemble member the waiter
//! still lists the queue behind a `sync`, so that the listing reflects the leader's state (a
//! follower cut off from the quorum would answer from a stale one: `tests/cut_off_follower.rs`).
//!
//! Counted on the server: the packets it received on the waiter's connection (`cons`) from when
//! the waiter is parked on its watch until its acquire returned and a held node's watch would
//! have been sent. Each handover is measured three times, the fewest kept.
//!
//! And a waiter whose own node is deleted behind its back while it waits is not handed the lock
//! when the node ahead goes: it starts over behind whoever queued meanwhile.

mod common;

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::Locker;
use locksmith_zk::ZkBackend;

/// Long enough that neither a ping nor a renewal falls in a window (both come after a third of
/// it without other traffic).
const OPTIONS: &str = "session_timeout=30s";

/// Nothing: the held node's watch was set while waiting.
const STANDALONE: u64 = 0;

/// On an ensemble: the `sync` and the listing behind it.
const ENSEMBLE: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_server_that_runs_alone_the_event_alone_hands_the_lock_over() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let fewest = fewest_packets_per_handover(&base).await;
    println!("packets from the waiter per handover on a standalone server: {fewest}");
    assert!(
        fewest == STANDALONE,
        "the waiter sent {fewest} packets per handover on a standalone server, where {STANDALONE} are needed \
         (a held node's watch sent after the grant is one, a listing after the event one more, a `sync` before \
         it another)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_ensemble_the_listing_goes_behind_a_sync() {
    let base = common::env_url("LOCKSMITH_TEST_ZK_ENSEMBLE");
    let fewest = fewest_packets_per_handover(&base).await;
    println!("packets from the waiter per handover on an ensemble: {fewest}");
    assert!(
        fewest >= ENSEMBLE,
        "the waiter sent {fewest} packets per handover on an ensemble: the `sync` and the listing are \
         {ENSEMBLE} (the event alone must not hand the lock over there)"
    );
}

/// The fewest packets the server received on a waiter's connection during one handover, of three.
async fn fewest_packets_per_handover(base: &str) -> u64 {
    let servers = common::server_addrs(base);
    let holder = common::locker(base, OPTIONS).await;
    let waiter = ZkBackend::connect(&common::url_with(base, OPTIONS))
        .await
        .expect("connect to ZooKeeper");
    let session = waiter.session_id().await;
    let waiter = Locker::from_arc(Arc::new(waiter));
    let name = unique_name("handover");
    let mut fewest = u64::MAX;
    for _ in 0..3 {
        let held = holder.lock(&name).acquire().await.expect("holder acquires");
        let queued = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move { waiter.lock(&name).timeout(Duration::from_secs(30)).acquire().await })
        };
        within(Duration::from_secs(10), "the waiter queues", async {
            while holder.inspect(&name).await.expect("inspect").waiters == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // Its watch on the holder's node is set a round trip after its node shows.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = common::packets_received(&servers, session).await;
        held.release().await.expect("holder releases");
        let guard = within(Duration::from_secs(10), "the handover", queued)
            .await
            .expect("the waiter's task")
            .expect("the waiter acquires");
        // A held node's watch would be sent right after the grant.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = common::packets_received(&servers, session).await;
        let received = after.since(&before).unwrap_or_else(|| {
            panic!("the waiter's session reconnected during a handover: {before:?}, then {after:?}")
        });
        fewest = fewest.min(received);
        guard.release().await.expect("waiter releases");
    }
    fewest
}

/// Bug: the delete event of the node ahead handed the lock to a waiter whose own node had been
/// deleted meanwhile (the listing less the deleted node still showed it first), while a contender
/// that queued after that deletion, behind the same node, was handed it too: two holders, until
/// the first one's held-node watch found its node gone a round trip later. Now the waiter's own
/// node is watched while it waits: it starts over (and the two hold one at a time). With a long
/// session: the event alone hands the lock over only within a sixth of the session timeout of
/// the watch, and the test's steps take about a second (with the conformance lockers' 3 s
/// sessions, the old code listed the queue first, and passed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_was_deleted_is_not_handed_the_lock() {
    let harness = common::ZkHarness::plain_with(&format!("{OPTIONS}&connect_timeout=30s")).await;
    let admin = common::admin(&common::env_url("LOCKSMITH_TEST_ZK")).await;
    locksmith_core::conformance::mutex::a_waiter_deleted_behind_back_is_not_granted(&harness, |name| async move {
        let waiter = common::contenders(&admin, &name).await.remove(1);
        admin.delete(&waiter, None).await.expect("delete the waiter's node");
    })
    .await;
}
