//! The CLI against a real MariaDB (`LOCKSMITH_TEST_MYSQL`, its database shared: the tests' lock
//! names are their own): the whole suite, a `run` stopped with SIGSTOP past its TTL, and
//! `layout=get_lock` beside the `mysql` command-line client.
#![cfg(feature = "mysql")]

mod common;

use std::process::Command;

use common::{assert_clean_error, assert_code, env_url, run, Backend, Proc};
use locksmith::driver::{BackendUrl, LockName};

struct Mysql;

impl Backend for Mysql {
    fn url(&self) -> String {
        env_url("LOCKSMITH_TEST_MYSQL")
    }

    fn delete_behind_back(&self, name: &str) {
        let url = BackendUrl::parse(&self.url()).unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let look = locksmith_mysql::MysqlBackend::connect(&url).await.unwrap();
            let n = look
                .delete_holders(locksmith::Family::Mutex, &LockName::new(name).unwrap())
                .await
                .unwrap();
            assert!(n > 0, "no holder of {name:?} to delete");
            locksmith::Locker::new(look).shutdown().await.unwrap();
        });
    }
}

crate::cli_suite!(Mysql);
crate::cli_suite!(@tests Mysql; a_stopped_run_loses_the_lock_after_its_ttl_and_exits_4, prune_removes_idle_locks_and_tokens_go_on);

/// The mutex tests again under `layout=get_lock` (a lock is also the server's named lock; the
/// suite's names are shorter than GET_LOCK's 64 characters).
mod get_lock {
    use super::*;

    pub(crate) struct MysqlGetLock;

    impl Backend for MysqlGetLock {
        fn url(&self) -> String {
            format!("{}?layout=get_lock", Mysql.url())
        }

        fn delete_behind_back(&self, name: &str) {
            Mysql.delete_behind_back(name)
        }
    }

    crate::cli_suite!(mutex_only MysqlGetLock);
    crate::cli_suite!(@tests MysqlGetLock; a_stopped_run_loses_the_lock_after_its_ttl_and_exits_4);
}

/// The command-line client: `mariadb` (what scripts/backends installs: Debian's mariadb-client),
/// else `mysql` (MySQL's own, or an older MariaDB's).
fn client_binary() -> &'static str {
    let runs = |b: &str| Command::new(b).arg("--version").output().is_ok();
    if runs("mariadb") {
        "mariadb"
    } else {
        "mysql"
    }
}

/// The `mysql` client's arguments for the server of `LOCKSMITH_TEST_MYSQL`, then `-e sql`.
fn mysql_client(sql: &str) -> Command {
    let url = BackendUrl::parse(&env_url("LOCKSMITH_TEST_MYSQL")).unwrap();
    let host = &url.hosts[0];
    let mut cmd = Command::new(client_binary());
    cmd.args([
        "--no-defaults",
        "--batch",
        "--skip-column-names",
        "--unbuffered",
        "--protocol=tcp",
        &format!("--host={}", host.host),
        &format!("--port={}", host.port.unwrap_or(3306)),
        &format!("--user={}", url.user().unwrap()),
        url.path.trim_matches('/'),
        "-e",
        sql,
    ])
    .env("MYSQL_PWD", url.password().unwrap().unwrap_or_default());
    cmd
}

/// `layout=get_lock` from the command line, both ways: while `locksmith run NAME` holds the
/// lock, the `mysql` client (the program's command itself) gets 0 from `GET_LOCK('NAME', 0)`, and
/// 1 once locksmith exited; while a `mysql` client holds the name, `locksmith try` is refused
/// (exit 1) and `locksmith run` waits until the client's process ends. A kind `GET_LOCK` has no
/// form of is refused clearly (exit 2).
#[test]
fn run_holds_the_get_lock_name() {
    let url = format!("{}?layout=get_lock&ttl=2s", env_url("LOCKSMITH_TEST_MYSQL"));
    let name = format!("cli-get-lock-{}", std::process::id());
    let probe = format!("SELECT GET_LOCK('{name}', 0)");
    let held = run(&["--url", &url, "run", &name, "--", "sh", "-c", &shell_line(&probe)]);
    assert_code(&held, 0);
    assert_eq!(
        held.stdout.trim(),
        "0",
        "the mysql client took the name locksmith held: {held:?}"
    );
    let free = mysql_client(&probe).output().expect("the mysql client");
    assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "1");

    // The client holds the name (for as long as its SLEEP lasts, or until it is killed).
    let mut client = mysql_client(&format!("{probe}; SELECT SLEEP(60)"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the mysql client");
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(client.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    assert_eq!(first.trim(), "1");
    assert_code(&run(&["--url", &url, "try", &name]), 1);
    let mut waiter = Proc::locksmith(&["--url", &url, "run", &name, "--", "echo", "ran"]);
    waiter.wait_stderr("waiting for");
    assert!(waiter.running(), "run did not wait for the client's name");
    client.kill().unwrap();
    client.wait().unwrap();
    assert_eq!(waiter.next_line(), "ran");
    assert_code(&waiter.finish(), 0);

    assert_clean_error(&run(&["--url", &url, "try", "--permits", "2", &name]), 2);
}

/// `sql` run by the `mysql` client, as a shell command line.
fn shell_line(sql: &str) -> String {
    let url = BackendUrl::parse(&env_url("LOCKSMITH_TEST_MYSQL")).unwrap();
    let host = &url.hosts[0];
    format!(
        "MYSQL_PWD='{}' {} --no-defaults --batch --skip-column-names --protocol=tcp --host={} --port={} --user={} {} -e \"{sql}\"",
        url.password().unwrap().unwrap_or_default(),
        client_binary(),
        host.host,
        host.port.unwrap_or(3306),
        url.user().unwrap(),
        url.path.trim_matches('/'),
    )
}

/// `init` connects, which creates the tables and procedures; `init --sql` is PostgreSQL's and
/// says what to do instead on MySQL.
#[test]
fn init_creates_the_tables_and_init_sql_says_how() {
    let url = env_url("LOCKSMITH_TEST_MYSQL");
    let out = run(&["--url", &url, "init"]);
    assert_code(&out, 0);
    assert!(out.stdout.starts_with("ready\t"), "{out:?}");
    let out = run(&["--url", &url, "init", "--sql"]);
    assert_clean_error(&out, 2);
    assert!(out.stderr.contains("CREATE ROUTINE"), "{}", out.stderr);
}
