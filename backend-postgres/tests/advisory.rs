//! `layout=advisory` against real `psql` sessions that call `pg_advisory_lock` themselves, both
//! ways: a psql holder keeps locksmith out (try, timeout, wait until it unlocks or dies), a
//! locksmith holder keeps psql out (until it releases, or its session is killed, which tells the
//! holder at once), shared locks with read locks, and nothing left behind by a wait given up on.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockError, Locker};

/// A `psql` process reading statements from a pipe, as a program of the team would hold its
/// advisory lock.
struct Psql {
    child: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
    sent: u64,
}

impl Psql {
    async fn start() -> Psql {
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", &common::server_url()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("psql (postgresql-client) is installed by scripts/backends");
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        Psql {
            child,
            stdin,
            out,
            sent: 0,
        }
    }

    /// Sends `sql`, followed by a marker; [`Psql::done`] reads up to it.
    async fn send(&mut self, sql: &str) {
        self.sent += 1;
        let text = format!("{sql};\nSELECT 'done-{}';\n", self.sent);
        self.stdin.write_all(text.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The output of the last statement sent, if it finished within `limit`.
    async fn done(&mut self, limit: Duration) -> Option<Vec<String>> {
        let marker = format!("done-{}", self.sent);
        let mut lines = Vec::new();
        let read = async {
            while let Some(line) = self.out.next_line().await.unwrap() {
                if line == marker {
                    return;
                }
                lines.push(line);
            }
            panic!("psql ended");
        };
        tokio::time::timeout(limit, read).await.ok().map(|_| lines)
    }

    /// Runs `sql`; its output (one line per row).
    async fn run(&mut self, sql: &str) -> Vec<String> {
        self.send(sql).await;
        self.done(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("psql: {sql} did not finish"))
    }

    /// Runs `sql`, which answers one boolean.
    async fn ask(&mut self, sql: &str) -> bool {
        match self.run(sql).await.as_slice() {
            [one] => one == "t",
            other => panic!("psql: {sql}: {other:?}"),
        }
    }
}

/// A key of its own (advisory locks are per database, shared by every test and schema), small
/// enough to be `pg_locks.objid` with `classid = 0`.
fn key() -> i64 {
    i64::from(rand::random::<u32>() >> 2) + 1
}

struct Setup {
    harness: common::PgHarness,
    url: String,
}

impl Setup {
    async fn new() -> Setup {
        let harness = common::PgHarness::plain().await;
        let url = format!("{}&layout=advisory&ttl=1s", harness.url);
        Setup { harness, url }
    }

    async fn locker(&self) -> Locker {
        locksmith_postgres::connect(&BackendUrl::parse(&self.url).unwrap())
            .await
            .unwrap()
    }

    /// What the tables hold for the mutex `key`.
    async fn residue(&self, key: i64) -> Vec<String> {
        self.harness
            .look
            .entries(Family::Mutex, &LockName::new(&key.to_string()).unwrap())
            .await
            .unwrap()
    }
}

/// The server processes waiting for (not holding) the advisory lock `key`.
async fn waiting_sessions(psql: &mut Psql, key: i64) -> usize {
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = {key} AND NOT granted"
    );
    psql.run(&sql).await[0].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_psql_holder_keeps_locksmith_out_until_it_unlocks_or_dies() {
    let setup = Setup::new().await;
    let (locker, k) = (setup.locker().await, key());
    let name = k.to_string();
    let mut holder = Psql::start().await;
    holder.run(&format!("SELECT pg_advisory_lock({k})")).await;

    assert!(locker.lock(&name).try_acquire().await.unwrap().is_none());
    let timed_out = locker.lock(&name).timeout(Duration::from_millis(400)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");
    assert!(setup.residue(k).await.is_empty(), "a call that failed left an entry");

    // A waiter gets it once psql unlocks.
    let waiter = {
        let locker = locker.clone();
        let name = name.clone();
        tokio::spawn(async move { locker.lock(name).acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "granted while psql held the advisory lock");
    assert!(holder.ask(&format!("SELECT pg_advisory_unlock({k})")).await);
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("not granted after psql unlocked")
        .unwrap()
        .unwrap();
    assert!(guard.fencing_token() > 0);
    guard.release().await.unwrap();

    // And once psql's process dies holding it.
    holder.run(&format!("SELECT pg_advisory_lock({k})")).await;
    assert!(locker.lock(&name).try_acquire().await.unwrap().is_none());
    holder.child.kill().await.unwrap();
    let guard = locker
        .lock(&name)
        .timeout(Duration::from_secs(5))
        .acquire()
        .await
        .expect("not granted after psql died");
    guard.release().await.unwrap();
    locker.shutdown().await.unwrap();
    assert!(setup.residue(k).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locksmith_holder_keeps_psql_out_until_it_releases() {
    let setup = Setup::new().await;
    let (locker, k) = (setup.locker().await, key());
    let guard = locker.lock(k.to_string()).acquire().await.unwrap();
    let mut other = Psql::start().await;
    assert!(!other.ask(&format!("SELECT pg_try_advisory_lock({k})")).await);

    // psql waits in pg_advisory_lock, through renewals (1 s lease), until the release.
    other.send(&format!("SELECT pg_advisory_lock({k})")).await;
    assert!(
        other.done(Duration::from_millis(1500)).await.is_none(),
        "psql got it while locksmith held it"
    );
    assert_eq!(guard.lost_reason(), None);
    guard.release().await.unwrap();
    assert!(
        other.done(Duration::from_secs(5)).await.is_some(),
        "psql did not get it after the release"
    );

    // Now psql holds it: locksmith is kept out.
    assert!(locker.lock(k.to_string()).try_acquire().await.unwrap().is_none());
    assert!(other.ask(&format!("SELECT pg_advisory_unlock({k})")).await);
    // The session of the released lock was kept and is reused, not leaked: this locker holds no
    // advisory lock any more.
    let mut look = Psql::start().await;
    let held = format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = {k}");
    assert_eq!(look.run(&held).await, ["0"]);
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_tells_its_holder_at_once() {
    let setup = Setup::new().await;
    let (locker, k) = (setup.locker().await, key());
    let guard = locker.lock(k.to_string()).acquire().await.unwrap();
    let mut admin = Psql::start().await;
    let killed = admin
        .run(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = {k}"
        ))
        .await;
    assert_eq!(killed, ["t"], "one session held it");
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the holder was not told its session ended");
    assert!(reason.to_string().contains("advisory"), "{reason}");
    // The holder is told first: a terminated backend sends its FATAL message, then drops its
    // locks (ShutdownPostgres), then closes the socket. So psql may find the lock still taken for
    // a moment after lost(), on a busy machine for longer.
    let mut taken = false;
    for _ in 0..100 {
        taken = admin.ask(&format!("SELECT pg_try_advisory_lock({k})")).await;
        if taken {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(taken, "the ended session's advisory lock was never freed");
    assert!(matches!(guard.release().await, Err(LockError::NotHeld { .. })));
    // Another locksmith client waits for psql's lock, not for the lost holder's grant.
    assert!(locker.lock(k.to_string()).try_acquire().await.unwrap().is_none());
    assert!(admin.ask(&format!("SELECT pg_advisory_unlock({k})")).await);
    assert!(locker.lock(k.to_string()).try_acquire().await.unwrap().is_some());
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_given_up_leaves_no_session_behind() {
    let setup = Setup::new().await;
    let (locker, k) = (setup.locker().await, key());
    let mut holder = Psql::start().await;
    holder.run(&format!("SELECT pg_advisory_lock({k})")).await;

    // Dropped while its session waits in pg_advisory_lock.
    let waiting = locker.lock(k.to_string()).acquire();
    assert!(tokio::time::timeout(Duration::from_millis(500), waiting).await.is_err());
    // Timed out while waiting there.
    let timed_out = locker
        .lock(k.to_string())
        .timeout(Duration::from_millis(500))
        .acquire()
        .await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");

    // The server stops waiting for them (the waits are cancelled, their sessions closed) ...
    let mut look = Psql::start().await;
    let mut left = usize::MAX;
    for _ in 0..50 {
        left = waiting_sessions(&mut look, k).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "a session still waits for the advisory lock");
    assert!(setup.residue(k).await.is_empty(), "an entry was left in the tables");
    // ... so that when psql unlocks, nobody gets it behind the program's back.
    assert!(holder.ask(&format!("SELECT pg_advisory_unlock({k})")).await);
    assert!(look.ask(&format!("SELECT pg_try_advisory_lock({k})")).await);
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_locks_share_with_psql_shared_locks() {
    let setup = Setup::new().await;
    let (locker, k) = (setup.locker().await, key());
    let name = k.to_string();
    let mut reader = Psql::start().await;
    reader.run(&format!("SELECT pg_advisory_lock_shared({k})")).await;
    let read = locker
        .rwlock(&name)
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("shared with psql's reader");
    assert!(locker.rwlock(&name).write().try_acquire().await.unwrap().is_none());
    assert!(
        locker.lock(&name).try_acquire().await.unwrap().is_none(),
        "the mutex is the same advisory lock"
    );
    let mut writer = Psql::start().await;
    assert!(!writer.ask(&format!("SELECT pg_try_advisory_lock({k})")).await);
    read.release().await.unwrap();
    assert!(reader.ask(&format!("SELECT pg_advisory_unlock_shared({k})")).await);
    let write = locker.rwlock(&name).write().try_acquire().await.unwrap().expect("free");
    assert!(!writer.ask(&format!("SELECT pg_try_advisory_lock_shared({k})")).await);
    write.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_clients_keep_their_queue_and_tokens() {
    let setup = Setup::new().await;
    let (a, b, k) = (setup.locker().await, setup.locker().await, key());
    let first = a.lock(k.to_string()).acquire().await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock(k.to_string()).acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The waiter waits in the tables, not in the server's lock queue.
    let mut look = Psql::start().await;
    assert_eq!(waiting_sessions(&mut look, k).await, 0);
    let token = first.fencing_token();
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("not handed over")
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > token);
    second.release().await.unwrap();
    for locker in [a, b] {
        locker.shutdown().await.unwrap();
    }
    assert!(setup.residue(k).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_must_be_keys_and_kinds_advisory_locks_have() {
    let setup = Setup::new().await;
    let locker = setup.locker().await;
    for bad in ["jobs", "+1", "01", "99999999999999999999"] {
        let got = locker.lock(bad).try_acquire().await;
        assert!(matches!(got, Err(LockError::InvalidName(_))), "{bad}: {got:?}");
    }
    let sem = locker.semaphore("1", 2).try_acquire().await;
    assert!(matches!(sem, Err(LockError::InvalidOption(_))), "{sem:?}");
    let elect = locker.election("1").campaign("a").try_acquire().await;
    assert!(matches!(elect, Err(LockError::InvalidOption(_))), "{elect:?}");
    // Reading a leader is refused as a campaign is (it answered "nobody leads").
    let leader = locker.election("1").leader().await;
    assert!(matches!(leader, Err(LockError::InvalidOption(_))), "{leader:?}");
    let observed = locker.election("1").observe().await.map(|_| ());
    assert!(matches!(observed, Err(LockError::InvalidOption(_))), "{observed:?}");
    locker.shutdown().await.unwrap();
}
