//! Session expiry (`LOCKSMITH_TEST_ZK`): a holder whose session expires is told its lock is lost,
//! and a waiter gets the lock.
//!
//! The holder runs in a child process — this test binary again, running only [`child`] —
//! which the test freezes with SIGSTOP for longer than its session timeout. A frozen process sends
//! no heartbeats, so the server expires its session and deletes its node, exactly as for a process
//! stuck in a long GC pause or swapped out, and the waiter's watch fires. After SIGCONT the child's
//! guard must report the loss. SIGSTOP is reliable and needs no root or network tricks (cutting
//! the connection would need a proxy or firewall rules); a child *process* is needed because
//! stopping a thread of the test itself would stop the waiter too.

mod common;

use std::time::Duration;

use locksmith_core::conformance::process::{child_task, say, ChildProcess};
use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use tokio::time::Instant;

/// The child's session timeout.
const CHILD_SESSION: Duration = Duration::from_secs(2);

/// The holder, run in a child process by the test below (`hold <name>`); does nothing when run
/// directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some(args) = child_task() else { return };
    let name = &args[1];
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let locker = common::locker(&base, &format!("session_timeout={}ms", CHILD_SESSION.as_millis())).await;
    let guard = locker.lock(name).acquire().await.expect("the child acquires");
    say(format!(
        "ACQUIRED {} {}",
        guard.fencing_token(),
        guard.ttl().as_millis()
    ));
    let reason = guard.lost().await;
    say(format!("LOST {reason}"));
    // Releasing a lost lock reports that it was not held.
    say(format!(
        "RELEASE {:?}",
        guard.release().await.err().map(|e| e.to_string())
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_session_loses_the_lock_and_a_waiter_takes_over() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let name = unique_name("expiry");
    let lock_name = LockName::new(&name).unwrap();
    let admin = common::admin(&base).await;

    let mut child = ChildProcess::spawn(&format!("hold {name}"));
    let pid = child.pid();
    let acquired = child.says(Duration::from_secs(60)).await;
    let fields: Vec<&str> = acquired.split_whitespace().collect();
    let holder_token: u64 = fields[1].parse().expect("token");
    let holder_ttl = Duration::from_millis(fields[2].parse().expect("ttl"));
    println!("child {pid} holds {name} with token {holder_token}, session timeout {holder_ttl:?}");

    let waiter_locker = common::locker(&base, "session_timeout=5s").await;
    let waiter = tokio::spawn({
        let (locker, name) = (waiter_locker.clone(), name.clone());
        async move { locker.lock(&name).acquire().await }
    });
    within(Duration::from_secs(30), "the waiter queueing", async {
        while common::contenders(&admin, &lock_name).await.len() != 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // Freeze the holder: no heartbeats, no renewals, no chance to release.
    child.pause();
    let stopped_at = Instant::now();
    let guard = within(
        holder_ttl * 10 + Duration::from_secs(30),
        "the waiter taking over",
        waiter,
    )
    .await
    .expect("waiter task")
    .expect("the waiter acquires once the holder's session expired");
    let waited = stopped_at.elapsed();
    println!("the waiter got the lock {waited:?} after the holder was frozen");
    // The server cannot have expired the session much before its timeout (tick granularity).
    assert!(
        waited >= holder_ttl / 2,
        "the lock passed on after {waited:?}, before the holder's session could expire"
    );
    assert!(
        guard.fencing_token() > holder_token,
        "token {} after {holder_token}",
        guard.fencing_token()
    );
    assert_eq!(
        common::contenders(&admin, &lock_name).await,
        vec![guard.lease().holder_id.clone()]
    );

    // Thaw the holder: its guard must say the lock is lost.
    child.resume();
    let lost = child.says(Duration::from_secs(60)).await;
    assert!(lost.starts_with("LOST "), "{lost}");
    let release = child.says(Duration::from_secs(30)).await;
    assert!(
        release.starts_with("RELEASE ") && release.contains("not held"),
        "releasing a lost lock: {release}"
    );
    let status = child.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "the child failed: {status}");

    // The waiter is undisturbed by the old holder coming back.
    assert!(guard.is_held());
    guard.release().await.expect("release");
}
