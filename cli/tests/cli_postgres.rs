//! The CLI against a real PostgreSQL (`LOCKSMITH_TEST_POSTGRES`, in a schema of this test
//! binary's own), and `locksmith init`: the tables made beforehand by the database's owner, so
//! that lockers can run as a user with only the grants `init --sql --grant` prints
//! (`LOCKSMITH_TEST_POSTGRES_APP`, a role with no rights of its own).
#![cfg(feature = "postgres")]

mod common;

use common::{assert_clean_error, assert_code, env_url, run, unique_name, Backend, Proc};
use locksmith::driver::{BackendUrl, LockName};

struct Postgres;

/// A schema per run of this binary.
fn schema() -> String {
    format!("cli_{}", std::process::id())
}

impl Backend for Postgres {
    fn url(&self) -> String {
        format!("{}?schema={}", env_url("LOCKSMITH_TEST_POSTGRES"), schema())
    }

    fn delete_behind_back(&self, name: &str) {
        let url = BackendUrl::parse(&self.url()).unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let look = locksmith_postgres::PgBackend::connect(&url).await.unwrap();
            let n = look
                .delete_holders(locksmith::Family::Mutex, &LockName::new(name).unwrap())
                .await
                .unwrap();
            assert!(n > 0, "no holder of {name:?} to delete");
        });
    }
}

crate::cli_suite!(Postgres);
crate::cli_suite!(@tests Postgres; prune_removes_idle_locks_and_tokens_go_on);

/// Runs `sql` as the test database's owner.
fn as_owner(sql: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&env_url("LOCKSMITH_TEST_POSTGRES"), tokio_postgres::NoTls)
            .await
            .expect("connecting as the owner");
        tokio::spawn(connection);
        client.batch_execute(sql).await.expect("running the SQL of init --sql");
    });
}

#[test]
fn init_prepares_the_tables_for_a_user_without_rights() {
    let schema = format!("cli_init_{}", std::process::id());
    let owner = format!("{}?schema={schema}", env_url("LOCKSMITH_TEST_POSTGRES"));
    let app = format!("{}?schema={schema}", env_url("LOCKSMITH_TEST_POSTGRES_APP"));

    // Without the tables, the app's user cannot lock, and is told why.
    let refused = run(&["--url", &app, "try", "job"]);
    assert_clean_error(&refused, 5);
    let said = &refused.stderr;
    assert!(
        said.contains("locksmith init") && !said.contains("locksmith-app-pw"),
        "{said}"
    );

    // The owner prints the SQL (nothing is sent) and runs it.
    let printed = run(&["--url", &owner, "init", "--sql", "--grant", "locksmith_app"]);
    assert_code(&printed, 0);
    let sql = printed.stdout;
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS") && sql.contains("TO \"locksmith_app\""),
        "{sql}"
    );
    let before = run(&["--url", &app, "try", "job"]);
    assert_clean_error(&before, 5);
    as_owner(&sql);

    // Now the app's user locks, and `init` (which creates nothing here) says the backend is ready.
    let locked = run(&["--url", &app, "try", "job"]);
    assert_code(&locked, 0);
    let ready = run(&["--url", &app, "init"]);
    assert_code(&ready, 0);
    let line = ready.stdout;
    assert!(
        line.starts_with("ready\tpostgres\t") && !line.contains("locksmith-app-pw"),
        "{line}"
    );
}

#[test]
fn init_creates_the_tables_as_a_first_locker_would() {
    let url = format!(
        "{}?schema=cli_made_{}",
        env_url("LOCKSMITH_TEST_POSTGRES"),
        std::process::id()
    );
    assert_code(&run(&["--url", &url, "init"]), 0);
    assert_code(&run(&["--url", &url, "init"]), 0); // again: nothing to do
    assert_code(&run(&["--url", &url, "try", "x"]), 0);
    // --sql is for postgres:// only; --grant needs --sql.
    assert_clean_error(&run(&["--url", "mem://", "init", "--sql"]), 2);
    assert_clean_error(&run(&["--url", &url, "init", "--grant", "r"]), 2);
}

/// `layout=advisory` from the command line: while `locksmith run 4711…` holds the lock, a `psql`
/// session (the program's command itself) cannot take `pg_advisory_lock` of that key; a name that
/// is not a key is refused clearly.
#[test]
fn run_holds_the_advisory_lock_of_its_key() {
    let server = env_url("LOCKSMITH_TEST_POSTGRES");
    let url = format!("{server}?schema={}&layout=advisory", schema());
    let key = format!("47110{}", std::process::id());
    let probe = format!("SELECT pg_try_advisory_lock({key})");
    let held = run(&[
        "--url", &url, "run", &key, "--", "psql", "-X", "-t", "-A", &server, "-c", &probe,
    ]);
    assert_code(&held, 0);
    assert_eq!(
        held.stdout.trim(),
        "f",
        "psql took the advisory lock locksmith held: {held:?}"
    );
    // Released on exit: psql's own session takes it now.
    let free = std::process::Command::new("psql")
        .args(["-X", "-t", "-A", &server, "-c", &probe])
        .output()
        .expect("psql");
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "t");
    assert_clean_error(&run(&["--url", &url, "try", "jobs"]), 2);
}

/// A `try` interrupted while its attempt is in flight (SIGTERM, as `timeout 1 locksmith try N`
/// sends when the server is slow) gives the attempt up, its clean-up runs before locksmith
/// exits, nothing is left held, and the exit code is 143. The attempt is kept in flight by a
/// table lock taken from `psql`. (Before, the signal's default action ended locksmith at once;
/// PostgreSQL then dropped the attempt, whose connection closed with a reset before its `Sync`
/// was read, so only the exit code differed here: see `cli_redis.rs` for a lock left held.)
#[test]
fn an_interrupted_try_leaves_nothing_held() {
    use std::time::Duration;

    let server = env_url("LOCKSMITH_TEST_POSTGRES");
    let schema = format!("cli_try_signal_{}", std::process::id());
    let url = format!("{server}?schema={schema}");
    let name = unique_name("try-signal");
    assert_code(&run(&["--url", &url, "try", &name]), 0); // the tables
    let block = format!("BEGIN; LOCK TABLE \"{schema}\".locks IN EXCLUSIVE MODE; SELECT pg_sleep(1.5); COMMIT;");
    let mut blocker = std::process::Command::new("psql")
        .args(["-X", "-q", "-o", "/dev/null", &server, "-c", &block])
        .spawn()
        .expect("psql");
    std::thread::sleep(Duration::from_millis(300));
    let attempt = Proc::locksmith(&["--url", &url, "--ttl", "60s", "try", &name]);
    std::thread::sleep(Duration::from_millis(600));
    attempt.signal("TERM");
    let out = attempt.finish();
    assert!(blocker.wait().is_ok_and(|s| s.success()), "psql's table lock failed");
    assert_code(&run(&["--url", &url, "try", &name]), 0);
    assert_eq!(out.code, Some(143), "not the exit code of a SIGTERM: {out:?}");
}

/// The transaction pooler's URL (PgBouncer, `pool_mode = transaction`), in this binary's schema.
fn pooler_url() -> String {
    format!("{}?schema={}", env_url("LOCKSMITH_TEST_PGBOUNCER_TXN"), schema())
}

/// Behind a transaction pooler without `listen=`, `run` is refused at once (exit 2, one line that
/// names the fix) instead of retrying or waiting for a wake-up that never comes. (It used to
/// connect, then fail with "prepared statement \"s1\" already exists" as an unavailable backend,
/// which `run` retried.)
#[test]
fn a_transaction_pooler_without_listen_is_refused_at_once() {
    let started = std::time::Instant::now();
    let out = run(&[
        "--url",
        &pooler_url(),
        "run",
        "--timeout",
        "30s",
        &unique_name("pool"),
        "--",
        "true",
    ]);
    assert_clean_error(&out, 2);
    assert!(out.stderr.contains("listen="), "{}", out.stderr);
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "refused after {took:?}");
}

/// 5 contenders x 10 runs of a read-sleep-write critical section through a transaction pooler
/// (with `listen=` naming the server): every run exits 0, no update is lost.
#[test]
fn contenders_through_a_transaction_pooler_lose_no_update() {
    let server = BackendUrl::parse(&env_url("LOCKSMITH_TEST_POSTGRES")).unwrap();
    let url = format!("{}&listen={}", pooler_url(), server.hosts[0].to_addr(5432));
    let dir = std::env::temp_dir().join(unique_name("pool-counter"));
    std::fs::create_dir_all(&dir).unwrap();
    let counter = dir.join("n");
    std::fs::write(&counter, "0").unwrap();
    let name = unique_name("pool-counter");
    let section = format!("n=$(cat {0}); sleep 0.01; echo $((n + 1)) > {0}", counter.display());
    let workers: Vec<_> = (0..5)
        .map(|_| {
            let (url, name, section) = (url.clone(), name.clone(), section.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let out = run(&[
                        "--url",
                        &url,
                        "run",
                        "--timeout",
                        "60s",
                        &name,
                        "--",
                        "sh",
                        "-c",
                        &section,
                    ]);
                    assert_code(&out, 0);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "50");
    std::fs::remove_dir_all(&dir).ok();
}

/// A database that does not exist is refused (exit 5, one line naming it), not retried as an
/// outage: `run` ends at once.
#[test]
fn a_missing_database_exits_5_at_once() {
    let url = BackendUrl::parse(&env_url("LOCKSMITH_TEST_POSTGRES")).unwrap();
    let (user, password) = url.credentials.clone().unwrap_or_default();
    let missing = format!(
        "postgres://{user}:{}@{}/no_such_db_{}",
        password.unwrap_or_default(),
        url.hosts[0].to_addr(5432),
        std::process::id()
    );
    let out = run(&[
        "--url",
        &missing,
        "run",
        "--timeout",
        "30s",
        &unique_name("nodb"),
        "--",
        "true",
    ]);
    assert_clean_error(&out, 5);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
}
