//! `run` on a terminal (a pseudo-terminal made by `script(1)`, from Debian's bsdutils): CMD runs
//! in a process group of its own, which locksmith makes the terminal's foreground group while CMD
//! runs, so that CMD can read the terminal instead of being stopped by SIGTTIN.
#![cfg(feature = "redis")]

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_code, env_url, run, unique_name};

/// How long the terminal session may take (it hung for good before the fix).
const BOUND: Duration = Duration::from_secs(30);

/// Runs the shell command `line` on a pseudo-terminal of its own (`script -qec`), with `typed`
/// typed on it first: its exit status and what the terminal showed. Panics after [`BOUND`].
fn on_a_terminal(line: &str, typed: &[u8]) -> (std::process::ExitStatus, String) {
    let mut script = Command::new("script")
        .args(["-qec", line, "/dev/null"])
        .env_remove("LOCKSMITH_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) (Debian: bsdutils) is needed for this test");
    let mut stdin = script.stdin.take().expect("piped stdin");
    // Typed on the terminal: waits in its input queue until someone reads it.
    stdin.write_all(typed).expect("typing on the terminal");
    let mut stdout = script.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 1024];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = tx.send(seen.clone());
        }
    });
    let end = Instant::now() + BOUND;
    let mut seen = String::new();
    let status = loop {
        seen = rx.try_iter().last().unwrap_or(seen);
        if let Some(status) = script.try_wait().expect("waiting for script") {
            break status;
        }
        if Instant::now() > end {
            let _ = script.kill();
            let _ = script.wait();
            panic!("the terminal session did not end within {BOUND:?} (someone stopped?); terminal: {seen:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    thread::sleep(Duration::from_millis(100));
    (status, rx.try_iter().last().unwrap_or(seen))
}

/// CMD reads a line from the terminal and echoes it: the line arrives, locksmith exits 0 and the
/// lock is free afterwards.
#[test]
fn cmd_reads_from_the_terminal() {
    let url = env_url("LOCKSMITH_TEST_REDIS");
    let name = unique_name("terminal");
    let line = format!(
        "{} --url {url} run {name} -- sh -c 'read v; echo got:$v'",
        env!("CARGO_BIN_EXE_locksmith")
    );
    let (status, seen) = on_a_terminal(&line, b"hello\n");
    assert!(
        seen.contains("got:hello"),
        "CMD did not echo the line it read; terminal: {seen:?}"
    );
    assert_eq!(status.code(), Some(0), "terminal: {seen:?}");
    assert_code(&run(&["--url", &url, "try", &name]), 0);
}

/// Bug: `hold` started in the background of an interactive shell (`&` with job control: its
/// stdin is still the terminal) watched that stdin, and its first read from a terminal it did
/// not own stopped the whole process (SIGTTIN): it renewed nothing, the lock expired and another
/// process took it while `hold` had said "holding … for 20s". Now it holds on, and watches the
/// terminal only while it is in the foreground.
#[test]
fn hold_in_the_background_of_a_shell_keeps_its_lock() {
    let url = env_url("LOCKSMITH_TEST_REDIS");
    let name = unique_name("background-hold");
    let bin = env!("CARGO_BIN_EXE_locksmith");
    let line = format!(
        "sh -c 'set -m; {bin} --url {url} --ttl 1s hold {name} --for 20s & sleep 4; \
         {bin} --url {url} try {name}; echo try:$?; kill -CONT %1; kill %1; wait'"
    );
    let (_, seen) = on_a_terminal(&line, b"");
    assert!(seen.contains("try:1"), "the held lock was taken; terminal: {seen:?}");
}

/// Bug: `locksmith run N -- CMD | less` (a pager, or any reader of the terminal, after `run` in a
/// pipeline) shares locksmith's process group; lending the terminal to CMD's group put that
/// reader in the background, where its first read stopped it (SIGTTIN): the pager never drained
/// the pipe, CMD blocked on it, and the lock stayed held for good. Now locksmith lends the
/// terminal only when no other process of its group (but its own ancestors, a script's shell)
/// could read it.
#[test]
fn a_reader_after_run_in_a_pipeline_keeps_the_terminal() {
    let url = env_url("LOCKSMITH_TEST_REDIS");
    let name = unique_name("pipeline-reader");
    let line = format!(
        "{} --url {url} run {name} -- sh -c 'sleep 1' | sh -c 'sleep 0.5; read v </dev/tty; echo got:$v'",
        env!("CARGO_BIN_EXE_locksmith")
    );
    let (status, seen) = on_a_terminal(&line, b"hello\n");
    assert!(
        seen.contains("got:hello"),
        "the reader did not get the line; terminal: {seen:?}"
    );
    assert_eq!(status.code(), Some(0), "terminal: {seen:?}");
    assert_code(&run(&["--url", &url, "try", &name]), 0);
}
