//! Session expiry (`LOCKSMITH_TEST_ZK`): a holder whose session expires is told its lock is lost,
//! and a waiter gets the lock.
//!
//! The holder runs in a child process — this test binary again, running only [`child_holder`] —
//! which the test freezes with SIGSTOP for longer than its session timeout. A frozen process sends
//! no heartbeats, so the server expires its session and deletes its node, exactly as for a process
//! stuck in a long GC pause or swapped out, and the waiter's watch fires. After SIGCONT the child's
//! guard must report the loss. SIGSTOP is reliable and needs no root or network tricks (cutting
//! the connection would need a proxy or firewall rules); a child *process* is needed because
//! stopping a thread of the test itself would stop the waiter too.

mod common;

use std::process::Stdio;
use std::time::Duration;

use locksmith_core::conformance::{unique_name, within};
use locksmith_core::driver::LockName;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use tokio::time::Instant;

/// Set (to the lock name) in the child's environment.
const CHILD_ENV: &str = "LOCKSMITH_ZK_EXPIRY_CHILD";
/// The child's session timeout.
const CHILD_SESSION: Duration = Duration::from_secs(2);

/// The holder, run in a child process by the test below; does nothing when run directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: runs in the child process of expired_session_loses_the_lock_and_a_waiter_takes_over"]
async fn child_holder() {
    let Ok(name) = std::env::var(CHILD_ENV) else { return };
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let locker = common::locker(&base, &format!("session_timeout={}ms", CHILD_SESSION.as_millis())).await;
    let guard = locker.lock(&name).acquire().await.expect("the child acquires");
    println!("ACQUIRED {} {}", guard.fencing_token(), guard.ttl().as_millis());
    let reason = guard.lost().await;
    println!("LOST {reason}");
    // Releasing a lost lock reports that it was not held.
    println!("RELEASE {:?}", guard.release().await.err().map(|e| e.to_string()));
}

/// Kills the child (SIGCONT first, so it is not left stopped) however the test ends.
struct ChildGuard(u32);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Fails harmlessly (ESRCH) when the child has exited already.
        let _ = raw_signal(self.0, libc::SIGCONT);
        let _ = raw_signal(self.0, libc::SIGKILL);
    }
}

fn raw_signal(pid: u32, sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child's.
    match unsafe { libc::kill(pid as libc::pid_t, sig) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    raw_signal(pid, sig).unwrap_or_else(|e| panic!("kill({pid}, {sig}): {e}"));
}

/// The child's next line with `prefix`, from the prefix on (libtest may print before it).
async fn line_starting(lines: &mut Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    loop {
        match lines.next_line().await.expect("reading the child's output") {
            Some(line) if line.contains(prefix) => return line[line.find(prefix).unwrap_or(0)..].to_owned(),
            Some(line) => println!("child: {line}"),
            None => panic!("the child exited before printing {prefix}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_session_loses_the_lock_and_a_waiter_takes_over() {
    let base = common::env_url("LOCKSMITH_TEST_ZK");
    let name = unique_name("expiry");
    let lock_name = LockName::new(&name).unwrap();
    let admin = common::admin(&base).await;

    let mut child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "child_holder",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &name)
        .env("LOCKSMITH_TEST_ZK", &base)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the holder process");
    let pid = child.id().expect("child pid");
    let _kill = ChildGuard(pid);
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();

    let acquired = within(
        Duration::from_secs(60),
        "the child acquiring",
        line_starting(&mut lines, "ACQUIRED"),
    )
    .await;
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
    signal(pid, libc::SIGSTOP);
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
    signal(pid, libc::SIGCONT);
    let lost = within(
        Duration::from_secs(60),
        "the holder learning of the loss",
        line_starting(&mut lines, "LOST"),
    )
    .await;
    println!("child: {lost}");
    let release = within(
        Duration::from_secs(30),
        "the holder's release",
        line_starting(&mut lines, "RELEASE"),
    )
    .await;
    assert!(release.contains("not held"), "releasing a lost lock: {release}");
    let status = within(Duration::from_secs(30), "the child exiting", child.wait())
        .await
        .expect("child status");
    assert!(status.success(), "the child failed: {status}");

    // The waiter is undisturbed by the old holder coming back.
    assert!(guard.is_held());
    guard.release().await.expect("release");
}
