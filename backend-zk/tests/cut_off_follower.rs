//! A holder connected to a follower that is cut off from the quorum (`LOCKSMITH_TEST_ZK_ENSEMBLE`):
//! the follower goes on answering its clients' pings and reads for `syncLimit` ticks (5 s on the
//! test servers) before it gives up on the leader, while the leader side expires the holder's
//! session after its timeout and grants the lock to someone else. The holder must be told within
//! its session timeout, not when its follower finally gives up: a renewal must be confirmed by the
//! leader, not by the server the client happens to be connected to.
//!
//! Found by the fault suite's real partitions (`net-partition` on zk/ensemble: holders overtaken
//! without being told). Here the cut is made by pausing (`SIGSTOP`) the two other members, which
//! the follower sees as a partition: its connection to the leader stays open and silent.
//!
//! Its own test binary: it stops two of the ensemble's three members, which no other test may
//! see. They are resumed at the end, also when an assertion fails.

mod common;

use std::time::Duration;

use locksmith_core::conformance::servers::{backends, OnDrop};
use locksmith_core::conformance::unique_name;
use locksmith_core::driver::BackendUrl;
use tokio::time::Instant;

const SESSION: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_follower_cut_off_from_the_quorum_is_told_within_its_session_timeout() {
    let ensemble = common::env_url("LOCKSMITH_TEST_ZK_ENSEMBLE");
    let hosts = BackendUrl::parse(&ensemble).expect("ensemble URL").hosts;
    let leader = backends(&["leader", "zk-ensemble"]);
    let members = ["zk-1", "zk-2", "zk-3"];
    let follower = *members.iter().find(|m| **m != leader).expect("a follower");
    let index = members.iter().position(|m| *m == follower).expect("member");
    let base = format!("zk://{}", hosts[index].to_addr(2181));
    println!("leader {leader}; the holder connects to {follower} only: {base}");
    let options = format!("session_timeout={}ms&request_timeout=1s", SESSION.as_millis());
    let locker = common::locker(&base, &options).await;
    let name = unique_name("cut-off");
    let guard = locker
        .lock(&name)
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("free lock");
    // An election led through the ensemble, read through the follower.
    let candidate = common::locker(&ensemble, &options).await;
    let election = unique_name("cut-off-election");
    let lead = candidate
        .election(&election)
        .campaign("first")
        .try_acquire()
        .await
        .expect("campaign")
        .expect("nobody leads");
    let reader = common::locker(&base, &options).await;
    let read = reader.election(&election).leader().await.expect("leader");
    assert_eq!(read.map(|l| l.value).as_deref(), Some("first"));

    // The follower's quorum stops answering: the leader and the other follower.
    let others: Vec<&str> = members.iter().copied().filter(|m| *m != follower).collect();
    let _resume: Vec<OnDrop> = others.iter().map(|m| OnDrop::resume(m)).collect();
    for m in &others {
        backends(&["pause", m]);
    }
    let cut = Instant::now();
    println!("paused {others:?}");

    // Told within the session timeout (the watchdog gives up TTL/10 early), plus scheduling slack;
    // the follower itself would only drop its clients after syncLimit (5 s). Meanwhile a leader
    // read on the follower: it answers from its own state, which the quorum side may have left
    // behind, so the read must not be an answer. (Before, `leader()` listed the candidates on
    // the follower alone; now a `sync` goes first, through the leader.)
    let reading = reader.election(&election);
    let (told, stale) = tokio::join!(
        tokio::time::timeout(SESSION + Duration::from_millis(1200), guard.lost()),
        reading.leader()
    );
    let after = cut.elapsed();
    assert!(
        stale.is_err(),
        "a leader read on a follower cut off from the quorum: {stale:?}"
    );
    assert!(
        told.is_ok(),
        "the holder on {follower} (cut off from the quorum) was not told within {} ms",
        (SESSION + Duration::from_millis(1200)).as_millis()
    );
    println!("told after {} ms", after.as_millis());
    drop(guard);
    drop(locker);
    drop(lead);
    drop((candidate, reader));
}
