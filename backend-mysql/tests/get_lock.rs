//! `layout=get_lock` against real `mysql` command-line clients (Debian's `mariadb` client) that
//! call `GET_LOCK` themselves, both ways: a client holder keeps locksmith out (try, timeout, wait
//! until it releases or exits), a locksmith holder keeps the client out (until it releases, is
//! stopped past its TTL, or its session is killed, which tells the holder), nothing is left behind
//! by a wait given up on, and locksmith clients keep their queue and tokens.

#[allow(dead_code)] // each test file uses a part of the harness
mod common;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use locksmith_core::conformance::process::{child_task, say, ChildProcess};
use locksmith_core::conformance::within;
use locksmith_core::driver::{BackendUrl, LockName};
use locksmith_core::{Family, LockError, Locker};

/// What a child does ([`child_task`]): `hold <url> <name>`: hold until killed; say when it was
/// told the lock was lost.
#[test]
fn child() {
    let Some(args) = child_task() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let locker = locksmith_mysql::connect(&BackendUrl::parse(&args[1]).unwrap())
            .await
            .unwrap();
        let guard = locker.lock(&args[2]).acquire().await.unwrap();
        say(format!("held {}", guard.fencing_token()));
        let reason = guard.lost().await;
        say(format!("lost {reason}"));
        std::future::pending::<()>().await;
    });
}

/// A `mysql` client process reading statements from a pipe, as a PHP or Python program of the
/// team would hold its named lock on its session.
struct Client {
    child: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
    sent: u64,
}

impl Client {
    async fn start() -> Client {
        let url = BackendUrl::parse(&common::server_url()).unwrap();
        let host = &url.hosts[0];
        let mut child = Command::new(client_binary())
            .args([
                "--no-defaults",
                "--batch",
                "--skip-column-names",
                "--unbuffered",
                "--protocol=tcp",
                &format!("--host={}", host.host),
                &format!("--port={}", host.port.unwrap_or(3306)),
                &format!("--user={}", url.user().unwrap()),
                url.path.trim_matches('/'),
            ])
            .env("MYSQL_PWD", url.password().unwrap().unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the mysql client (mariadb-client) is installed by scripts/backends");
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        Client {
            child,
            stdin,
            out,
            sent: 0,
        }
    }

    /// Sends `sql`, followed by a marker; [`Client::done`] reads up to it.
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
            panic!("the mysql client ended");
        };
        tokio::time::timeout(limit, read).await.ok().map(|_| lines)
    }

    /// Runs `sql`, which answers one value.
    async fn ask(&mut self, sql: &str) -> String {
        self.send(sql).await;
        match self.done(Duration::from_secs(10)).await.as_deref() {
            Some([one]) => one.clone(),
            other => panic!("mysql: {sql}: {other:?}"),
        }
    }

    async fn get_lock(&mut self, name: &str, secs: u32) -> String {
        self.ask(&format!("SELECT GET_LOCK('{name}', {secs})")).await
    }
}

/// The command-line client: `mariadb` (what scripts/backends installs: Debian's mariadb-client),
/// else `mysql` (MySQL's own, or an older MariaDB's).
fn client_binary() -> &'static str {
    let runs = |b: &str| std::process::Command::new(b).arg("--version").output().is_ok();
    if runs("mariadb") {
        "mariadb"
    } else {
        "mysql"
    }
}

/// A name of its own (named locks are server-wide, shared by every test and database).
fn name(what: &str) -> String {
    format!("{what}-{:08x}", rand::random::<u32>())
}

struct Setup {
    harness: common::MyHarness,
    url: String,
}

impl Setup {
    async fn new() -> Setup {
        let harness = common::MyHarness::plain().await;
        let url = harness.url_with("layout=get_lock&ttl=1s");
        Setup { harness, url }
    }

    async fn locker(&self) -> Locker {
        locksmith_mysql::connect(&BackendUrl::parse(&self.url).unwrap())
            .await
            .unwrap()
    }

    /// What the tables hold for the mutex `name`.
    async fn residue(&self, name: &str) -> Vec<String> {
        self.harness
            .look
            .entries(Family::Mutex, &LockName::new(name).unwrap())
            .await
            .unwrap()
    }
}

/// The sessions of the server waiting in `GET_LOCK` for `name`.
async fn waiting_sessions(client: &mut Client, name: &str) -> usize {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK(%{name}%'");
    client.ask(&sql).await.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_client_holder_keeps_locksmith_out_until_it_releases_or_exits() {
    let setup = Setup::new().await;
    let (locker, n) = (setup.locker().await, name("client-holds"));
    let mut client = Client::start().await;
    assert_eq!(client.get_lock(&n, 0).await, "1");

    assert!(locker.lock(&n).try_acquire().await.unwrap().is_none());
    let timed_out = locker.lock(&n).timeout(Duration::from_millis(500)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");

    // A waiter gets it once the client releases, woken by the server (well before a poll would).
    let waiter = tokio::spawn({
        let (locker, n) = (locker.clone(), n.clone());
        async move { locker.lock(&n).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiter.is_finished(), "granted while the mysql client held the name");
    assert_eq!(client.ask(&format!("SELECT RELEASE_LOCK('{n}')")).await, "1");
    let guard = within(Duration::from_secs(5), "the lock the client released", waiter)
        .await
        .unwrap()
        .expect("not granted after the client released");
    guard.release().await.unwrap();

    // And once the client's process exits holding it.
    assert_eq!(client.get_lock(&n, 0).await, "1");
    let waiter = tokio::spawn({
        let (locker, n) = (locker.clone(), n.clone());
        async move { locker.lock(&n).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    client.child.kill().await.unwrap();
    let guard = within(Duration::from_secs(5), "the lock of an exited client", waiter)
        .await
        .unwrap()
        .expect("not granted after the client exited");
    guard.release().await.unwrap();
    assert!(setup.residue(&n).await.is_empty());
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locksmith_holder_keeps_the_mysql_client_out_until_it_releases() {
    let setup = Setup::new().await;
    let (locker, n) = (setup.locker().await, name("locksmith-holds"));
    let guard = locker.lock(&n).acquire().await.unwrap();
    let mut client = Client::start().await;
    assert_eq!(client.get_lock(&n, 0).await, "0");

    // The client waits in GET_LOCK, through renewals (1 s lease), until the release.
    client.send(&format!("SELECT GET_LOCK('{n}', 20)")).await;
    assert!(
        client.done(Duration::from_millis(2500)).await.is_none(),
        "the client got it while locksmith held it"
    );
    guard.release().await.unwrap();
    let got = client.done(Duration::from_secs(5)).await;
    assert_eq!(
        got.as_deref(),
        Some(&["1".to_owned()][..]),
        "the client did not get it after the release"
    );

    // Now the client holds it: locksmith is kept out; released, locksmith takes it.
    assert!(locker.lock(&n).try_acquire().await.unwrap().is_none());
    assert_eq!(client.ask(&format!("SELECT RELEASE_LOCK('{n}')")).await, "1");
    let guard = locker.lock(&n).try_acquire().await.unwrap().expect("free again");
    assert_eq!(client.get_lock(&n, 0).await, "0");
    guard.release().await.unwrap();
    assert_eq!(client.get_lock(&n, 0).await, "1");
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_frees_the_name_and_tells_its_holder() {
    let setup = Setup::new().await;
    let (locker, n) = (setup.locker().await, name("killed"));
    let guard = locker.lock(&n).acquire().await.unwrap();
    let mut client = Client::start().await;
    let holder = client.ask(&format!("SELECT IS_USED_LOCK('{n}')")).await;
    assert_ne!(holder, "NULL");
    client.send(&format!("KILL CONNECTION {holder}")).await;
    client.done(Duration::from_secs(10)).await.expect("KILL answered");
    assert_eq!(
        client.get_lock(&n, 5).await,
        "1",
        "the name of a killed session was not freed"
    );
    // Told at its next renewal (a third of its 1 s TTL).
    within(
        Duration::from_secs(3),
        "the lost signal of a killed session",
        guard.lost(),
    )
    .await;
    assert_eq!(client.ask(&format!("SELECT RELEASE_LOCK('{n}')")).await, "1");
    // Its entry left the tables: another locksmith client takes the lock at once.
    let again = within(
        Duration::from_secs(3),
        "the lock after a lost one",
        locker.lock(&n).acquire(),
    )
    .await
    .unwrap();
    again.release().await.unwrap();
    locker.shutdown().await.unwrap();
}

/// A holder stopped with SIGSTOP keeps its TCP connections open; its session, no longer pinged,
/// is ended by the server after the lease's TTL (`wait_timeout`): the `mysql` client waiting in
/// `GET_LOCK` gets the name, and the holder is told once it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_holder_loses_the_name_after_its_ttl() {
    let setup = Setup::new().await;
    let n = name("stopped");
    let mut holder = ChildProcess::spawn(&format!("hold {} {n}", setup.url));
    let said = holder.says(Duration::from_secs(30)).await;
    assert!(said.starts_with("held"), "{said}");
    let mut client = Client::start().await;
    assert_eq!(client.get_lock(&n, 0).await, "0");

    holder.pause();
    let started = tokio::time::Instant::now();
    client.send(&format!("SELECT GET_LOCK('{n}', 20)")).await;
    let got = client.done(Duration::from_secs(20)).await;
    assert_eq!(
        got.as_deref(),
        Some(&["1".to_owned()][..]),
        "the stopped holder kept the name"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "granted at once ({took:?}): the holder was not holding"
    );
    assert!(took <= Duration::from_secs(5), "granted only after {took:?} (TTL 1 s)");

    holder.resume();
    let told = holder.says(Duration::from_secs(10)).await;
    assert!(told.starts_with("lost"), "{told}");
    holder.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_given_up_leaves_no_session_behind() {
    let setup = Setup::new().await;
    let (locker, n) = (setup.locker().await, name("given-up"));
    let mut holder = Client::start().await;
    assert_eq!(holder.get_lock(&n, 0).await, "1");

    // Dropped while its session waits in GET_LOCK.
    let waiting = locker.lock(&n).acquire();
    assert!(tokio::time::timeout(Duration::from_millis(1500), waiting)
        .await
        .is_err());
    // Timed out while waiting there.
    let timed_out = locker.lock(&n).timeout(Duration::from_millis(500)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout(_))), "{timed_out:?}");

    // The server stops waiting for them ...
    let mut look = Client::start().await;
    let mut left = usize::MAX;
    for _ in 0..50 {
        left = waiting_sessions(&mut look, &n).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "a session still waits in GET_LOCK");
    let mut residue = setup.residue(&n).await;
    for _ in 0..50 {
        if residue.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        residue = setup.residue(&n).await;
    }
    assert!(residue.is_empty(), "an entry was left in the tables: {residue:?}");
    // ... so that when the client releases, nobody gets it behind the program's back.
    assert_eq!(holder.ask(&format!("SELECT RELEASE_LOCK('{n}')")).await, "1");
    assert_eq!(look.get_lock(&n, 0).await, "1");
    locker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_clients_keep_their_queue_and_tokens() {
    let setup = Setup::new().await;
    let (a, b) = (setup.locker().await, setup.locker().await);
    let n = name("queue");
    let first = a.lock(&n).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let (b, n) = (b.clone(), n.clone());
        async move { b.lock(&n).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(b.lock(&n).try_acquire().await.unwrap().is_none());
    let token = first.fencing_token();
    first.release().await.unwrap();
    let second = within(Duration::from_secs(5), "the waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > token);
    // The session of a released lock is kept and takes the next lock.
    second.release().await.unwrap();
    let third = a.lock(&n).acquire().await.unwrap();
    assert!(third.fencing_token() > token);
    third.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_must_fit_get_lock_and_kinds_must_be_mutexes() {
    let setup = Setup::new().await;
    let locker = setup.locker().await;
    let long = "a".repeat(65);
    let refused = locker.lock(&long).try_acquire().await;
    assert!(matches!(refused, Err(LockError::InvalidName(_))), "{refused:?}");
    let longest = "b".repeat(64);
    let guard = locker.lock(&longest).try_acquire().await.unwrap().unwrap();
    let mut client = Client::start().await;
    assert_eq!(
        client.get_lock(&longest, 0).await,
        "0",
        "the name was not used as it is"
    );
    guard.release().await.unwrap();

    let n = name("kinds");
    let read = locker.rwlock(&n).read().try_acquire().await;
    assert!(matches!(read, Err(LockError::InvalidOption(_))), "{read:?}");
    let permit = locker.semaphore(&n, 2).try_acquire().await;
    assert!(matches!(permit, Err(LockError::InvalidOption(_))), "{permit:?}");
    let leader = locker.election(&n).leader().await;
    assert!(matches!(leader, Err(LockError::InvalidOption(_))), "{leader:?}");
    locker.shutdown().await.unwrap();
}

/// A harness of its own database whose lockers use `layout=get_lock`, and whose residue also
/// counts a named lock that outlives every entry of its lock in the tables (a session left
/// holding it, or granted it, after its lease ended: a leak the tables alone would not show).
struct GetLockHarness(common::MyHarness);

async fn get_lock_harness() -> GetLockHarness {
    let mut harness = common::MyHarness::plain().await;
    harness.url = harness.url_with("layout=get_lock");
    GetLockHarness(harness)
}

#[locksmith_core::driver::async_trait]
impl locksmith_core::conformance::Harness for GetLockHarness {
    async fn locker(&self) -> Locker {
        self.0.locker().await
    }

    async fn delete_behind_back(&self, name: &LockName) {
        self.0.delete_behind_back(name).await
    }

    async fn residue(&self, name: &LockName) -> Vec<String> {
        let mut entries = self.0.residue(name).await;
        if entries.is_empty() {
            use sqlx::{Connection, Row};
            let mut c = sqlx::MySqlConnection::connect(&common::server_url()).await.unwrap();
            let row = sqlx::query("SELECT IS_USED_LOCK(?)")
                .bind(name.as_str())
                .fetch_one(&mut c)
                .await
                .unwrap();
            if let Some(session) = row.try_get::<Option<u64>, _>(0).unwrap() {
                entries.push(format!(
                    "GET_LOCK name held by session {session} with no entry in the tables"
                ));
            }
            let _ = c.close().await;
        }
        entries
    }

    fn short_ttl(&self) -> Duration {
        self.0.short_ttl()
    }
}

/// The shared mutex suite under `layout=get_lock`: every edge of the contract, with the named
/// lock held beside each grant. All of `conformance_tests!` but `names_are_independent`, whose
/// longest name (`MAX_NAME_LEN`) is beyond `GET_LOCK`'s 64 characters: refused here, as
/// [`names_must_fit_get_lock_and_kinds_must_be_mutexes`](super) checks.
mod conformance {
    use super::get_lock_harness;

    locksmith_core::conformance_tests!(@tests get_lock_harness().await;
        mutex::mutual_exclusion, mutex::try_acquire_while_held, mutex::acquire_times_out,
        mutex::cancelled_acquire_leaves_nothing, mutex::crashed_holder_expires,
        mutex::abandoned_lock_expires_beside_held_ones, mutex::renewal_keeps_lock_past_ttl,
        mutex::fencing_tokens_increase, mutex::lost_fires_when_removed_behind_back,
        mutex::waiters_are_fifo, mutex::max_hold_releases,
        mutex::release_not_held_is_an_error, mutex::drop_releases, mutex::invalid_input_is_rejected,
        mutex::cancellation_after_grant_leaves_nothing, mutex::cancellation_storm_leaves_nothing,
        mutex::inspect_reports_holder_and_waiters, mutex::grants_say_whether_they_waited,
        lifecycle::release_cancelled_mid_flight_releases,
        lifecycle::backend_release_cancelled_releases, lifecycle::timed_out_waiter_that_exits_leaves_nothing,
        lifecycle::try_cut_by_its_timeout_that_exits_leaves_nothing,
        lifecycle::acquire_dropped_where_no_runtime_runs_leaves_nothing,
        lifecycle::shutdown_releases_everything, lifecycle::shutdown_with_a_waiter_queued_leaves_nothing,
        lifecycle::reads_after_shutdown_end_with_closed);

    // Guarded writes: the holder's entry in the tables guards them, as in the default layout.
    // All of `guarded_tests!(mutex_only: …)` but `token_register_admits_in_order`, which admits
    // through registers of 900 characters and more: their lock names (`locksmith-register/…`)
    // are beyond GET_LOCK's 64 characters, refused (`InvalidName`) at the admission.
    locksmith_core::conformance_tests!(@tests get_lock_harness().await;
        guarded::guarded_writes_apply_while_held, guarded::guarded_write_of_a_lost_lock_never_lands,
        guarded::guarded_write_of_an_expired_lease_never_lands, guarded::guarded_bad_input_is_rejected,
        guarded::data_keys_take_guarded_writes,
        guarded::token_register_concurrent_admits_end_on_the_maximum);
}
