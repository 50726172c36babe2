//! The CLI against a real Redis (`LOCKSMITH_TEST_REDIS`), in the default and the plain layout,
//! and against Redis Sentinel and Redis Cluster (the URLs `scripts/backends up` prints, as they are).
#![cfg(feature = "redis")]

mod common;

use common::{env_url, Backend};

/// Redis with locksmith's default key layout.
struct RedisDefault;

/// Redis with `?layout=plain`: the lock key is the raw lock name.
struct RedisPlain;

fn delete(key: &str) {
    let url = env_url("LOCKSMITH_TEST_REDIS");
    let client = redis::Client::open(url.as_str()).expect("redis URL");
    let mut con = client.get_connection().expect("cannot connect to Redis");
    let deleted: i64 = redis::cmd("DEL").arg(key).query(&mut con).expect("DEL");
    assert_eq!(deleted, 1, "no key {key:?} to delete on Redis");
}

impl Backend for RedisDefault {
    fn url(&self) -> String {
        env_url("LOCKSMITH_TEST_REDIS")
    }
    fn delete_behind_back(&self, name: &str) {
        let encoded = locksmith::driver::LockName::new(name).expect("name");
        delete(&format!("locksmith:{{{}}}:lock", encoded.encoded()));
    }
}

impl Backend for RedisPlain {
    fn url(&self) -> String {
        format!("{}?layout=plain", env_url("LOCKSMITH_TEST_REDIS"))
    }
    fn delete_behind_back(&self, name: &str) {
        delete(name);
    }
}

mod default_layout {
    use super::*;
    crate::cli_suite!(RedisDefault);
}

mod plain_layout {
    use super::*;
    // The plain layout serves mutexes only (its keys are redis-py's).
    crate::cli_suite!(mutex_only RedisPlain);
}

/// A `try` interrupted between its grant and its release (SIGTERM, as `timeout 1 locksmith try N`
/// sends) finishes the release before it exits 143: nothing is left held. (The signal's default
/// action ended it at once, and the lock stayed held for its whole TTL.) The moment is made to
/// last by a stdout that is a full pipe: printing the token blocks until the test reads it.
#[test]
fn a_try_interrupted_before_its_release_leaves_nothing_held() {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    let url = env_url("LOCKSMITH_TEST_REDIS");
    let name = common::unique_name("try-blocked");
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills `fds` with two new descriptors, owned below.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Fill the pipe: locksmith's first write to it blocks.
    // SAFETY: fcntl(2) on a descriptor we own.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    let mut writer = std::fs::File::from(write_end.try_clone().unwrap());
    let mut filled = 0usize;
    while writer.write(&[b'.'; 4096]).is_ok_and(|n| n > 0) {
        filled += 1;
    }
    assert!(filled > 0);
    // SAFETY: fcntl(2) on a descriptor we own (the flag belongs to the pipe's open file, shared).
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, 0) };
    drop(writer);
    let mut child = common::locksmith(&["--url", &url, "--ttl", "10s", "try", &name])
        .stdout(std::process::Stdio::from(write_end))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("locksmith");
    // Granted, and blocked printing the token: the lock is held (looked at with `inspect`, which
    // takes nothing: a probing `try` could hold the lock at the moment of the attempt).
    let end = Instant::now() + Duration::from_secs(20);
    while !common::run(&["--url", &url, "inspect", &name])
        .stdout
        .contains("held: yes")
    {
        assert!(Instant::now() < end, "the blocked try never held the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(300));
    let drain = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = std::fs::File::from(read_end).read_to_end(&mut all);
        all
    });
    let status = child.wait().expect("wait");
    let printed = drain.join().expect("drain");
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
    assert_eq!(
        status.code(),
        Some(143),
        "not the exit of an interrupted try: {status:?} (signal {:?})",
        status.signal()
    );
    assert!(printed.ends_with(b"\n"), "the token line was not printed");
}

/// Redis Sentinel (`LOCKSMITH_TEST_REDIS_SENTINEL`): the master its sentinels name.
struct RedisSentinel;

/// Redis Cluster (`LOCKSMITH_TEST_REDIS_CLUSTER`).
struct RedisCluster;

fn default_key(name: &str) -> String {
    let encoded = locksmith::driver::LockName::new(name).expect("name");
    format!("locksmith:{{{}}}:lock", encoded.encoded())
}

/// The seed or sentinel addresses and the path of a multi-host URL.
fn hosts_and_path(url: &str) -> (Vec<String>, String) {
    let rest = url.split_once("://").expect("a URL").1;
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    (
        hosts.split(',').map(|h| format!("redis://{h}")).collect(),
        path.to_owned(),
    )
}

impl Backend for RedisSentinel {
    fn url(&self) -> String {
        env_url("LOCKSMITH_TEST_REDIS_SENTINEL")
    }
    fn delete_behind_back(&self, name: &str) {
        let (sentinels, master) = hosts_and_path(&self.url());
        let mut sentinel = redis::sentinel::SentinelClient::build(
            sentinels,
            master,
            None,
            redis::sentinel::SentinelServerType::Master,
        )
        .expect("sentinel client");
        let mut con = sentinel.get_connection().expect("the sentinels' master");
        let deleted: i64 = redis::cmd("DEL").arg(default_key(name)).query(&mut con).expect("DEL");
        assert_eq!(deleted, 1, "no lock {name:?} to delete");
    }
}

impl Backend for RedisCluster {
    fn url(&self) -> String {
        env_url("LOCKSMITH_TEST_REDIS_CLUSTER")
    }
    fn delete_behind_back(&self, name: &str) {
        let (seeds, _) = hosts_and_path(&self.url());
        let client = redis::cluster::ClusterClient::new(seeds).expect("cluster client");
        let mut con = client.get_connection().expect("cluster connection");
        let deleted: i64 = redis::cmd("DEL").arg(default_key(name)).query(&mut con).expect("DEL");
        assert_eq!(deleted, 1, "no lock {name:?} to delete");
    }
}

/// The suite's tests that need no proxy in front of "the" server (these URLs name sentinels or
/// seed nodes, not the servers that hold the locks).
macro_rules! topology_suite {
    ($backend:expr) => {
        crate::cli_suite!(@tests $backend;
            try_prints_a_token_and_releases, hold_excludes_try_in_another_process, inspect_shows_holder_and_free_lock,
            run_passes_token_and_exit_code, run_excludes_other_processes_while_cmd_runs, run_waits_for_the_lock,
            run_lost_lock_terminates_cmd_and_exits_4, interrupted_wait_leaves_nothing_behind,
            permits_let_that_many_holders_in, readers_share_and_writers_exclude, elect_runs_cmd_while_leading,
            list_shows_the_locks_in_use);
    };
}

mod sentinel {
    use super::*;
    topology_suite!(RedisSentinel);
}

mod cluster {
    use super::*;
    topology_suite!(RedisCluster);
}

/// `run --timeout` rides out a backend that cannot be reached yet (a server still starting, the
/// sentinels naming a master that is gone): it retries connecting until its timeout. Here the
/// server appears a second after locksmith started, on a port of its own (the shared servers are
/// left alone).
#[test]
fn run_waits_for_a_server_that_comes_up_within_its_timeout() {
    let port = common::closed_port();
    // restart_delay=0: a freshly started Redis grants the lock at once (by default it waits, in
    // case it lost the locks of an earlier life).
    let url = format!("redis://127.0.0.1:{port}?restart_delay=0");
    let name = common::unique_name("late-server");
    let runner = common::Proc::locksmith(&["--url", &url, "--timeout", "5s", "run", &name, "--", "echo", "ran"]);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let _server = LateServer::start(port);
    let out = runner.finish();
    common::assert_code(&out, 0);
    assert_eq!(out.stdout, "ran\n");
}

/// With no server at all, `run --timeout 3s` keeps trying until its timeout, then exits 3 (it
/// used to give up at the first refused connection).
#[test]
fn run_without_a_server_exits_3_at_its_timeout() {
    let url = format!("redis://127.0.0.1:{}", common::closed_port());
    let start = std::time::Instant::now();
    let out = common::run(&["--url", &url, "--timeout", "3s", "run", "x", "--", "echo", "ran"]);
    let took = start.elapsed();
    common::assert_code(&out, 3);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("locksmith: ") && last.contains("connection refused"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("retrying"), "no retry logged: {}", out.stderr);
    assert!(!out.stdout.contains("ran"));
    assert!(
        took >= std::time::Duration::from_millis(2500),
        "gave up after {took:?}, not at its 3s timeout"
    );
    // `try` makes one attempt: its one line is the refusal, no retry is logged.
    let out = common::run(&["--url", &url, "--timeout", "3s", "try", "x"]);
    common::assert_clean_error(&out, 3);
    assert!(!out.stderr.contains("retrying"), "{}", out.stderr);
}

/// `try` whose stdout is closed cannot print the token it got: it releases the lock and exits
/// 141, as `leader --follow` does, not 0 with the token lost. On a backend with leases (a lock
/// left held would stay for its TTL, 10 s), so that the next `try` proves the release.
#[test]
fn try_with_its_stdout_closed_releases_and_fails() {
    let name = common::unique_name("try-closed");
    let url = RedisDefault.url();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = common::locksmith(&["--url", &url, "--ttl", "10s", "try", &name])
        .stdout(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(141), "{status:?}");
    let again = common::run(&["--url", &url, "try", &name]);
    common::assert_code(&again, 0);
}

/// `-q` silences the retry notice as it does every status line: `run` prints its error alone.
/// (The notice was a warning of the logs, which `-q` left on.)
#[test]
fn a_quiet_run_without_a_server_prints_its_error_alone() {
    let url = format!("redis://127.0.0.1:{}", common::closed_port());
    let out = common::run(&["-q", "--url", &url, "--timeout", "1s", "run", "x", "--", "echo", "ran"]);
    common::assert_code(&out, 3);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(
        lines[0].starts_with("locksmith: ") && !lines[0].contains("retrying"),
        "{}",
        out.stderr
    );
}

/// A throw-away `redis-server` on a port of its own, stopped (by its pid) when dropped.
struct LateServer(std::process::Child);

impl LateServer {
    fn start(port: u16) -> LateServer {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--bind",
                "127.0.0.1",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (Debian: redis-server) is needed for this test");
        LateServer(child)
    }
}

impl Drop for LateServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A URL's `ttl=` is the lock's TTL when `--ttl` is not given (the CLI used to pass its own 15 s
/// default, hiding the URL's); `--ttl` still wins.
#[test]
fn the_urls_ttl_is_used_unless_ttl_is_given() {
    let base = env_url("LOCKSMITH_TEST_REDIS");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}ttl=3s");
    for (extra, bound_ms) in [(vec![], 3_000u64), (vec!["--ttl", "2s"], 2_000)] {
        let name = common::unique_name("url-ttl");
        let mut hold_args = vec!["--url", url.as_str()];
        hold_args.extend(extra.iter().copied());
        hold_args.extend(["hold", name.as_str()]);
        let mut holder = common::Proc::locksmith(&hold_args);
        common::token(&holder.next_line());
        let out = common::run(&["--url", &url, "--json", "inspect", &name]);
        let v: serde_json::Value = serde_json::from_str(out.stdout.lines().next().unwrap_or("{}")).expect("json");
        let left = v["ttl_remaining_ms"].as_u64().expect("ttl_remaining_ms");
        assert!(
            left <= bound_ms && left > bound_ms / 2,
            "ttl remaining {left} ms, expected at most {bound_ms} ms ({extra:?})"
        );
        holder.close_stdin();
        common::assert_code(&holder.finish(), 0);
    }
}
