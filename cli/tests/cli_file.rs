//! The CLI on `file://` (and as it runs with no `--url`): locks between the processes of this
//! machine. "Behind its back" is an operator removing the lock's state file. The suite's tests of
//! a server that goes silent or down do not apply: there is no server.
#![cfg(feature = "file")]

mod common;

use std::path::PathBuf;

use common::{locksmith, unique_name, Backend, Proc};
use locksmith::driver::{BackendUrl, LockName};

struct Files;

/// The lock directory of this test binary.
fn dir() -> PathBuf {
    std::env::temp_dir().join(format!("locksmith-cli-file-test-{}", std::process::id()))
}

impl Backend for Files {
    fn url(&self) -> String {
        format!("file://{}", dir().display())
    }

    fn delete_behind_back(&self, name: &str) {
        let look = locksmith_file::FileBackend::connect(&BackendUrl::parse(&self.url()).unwrap()).unwrap();
        let path = look.state_path(locksmith::Family::Mutex, &LockName::new(name).unwrap());
        std::fs::remove_file(&path).expect("remove the lock's state file");
    }
}

crate::cli_suite!(@tests Files;
    try_prints_a_token_and_releases, hold_excludes_try_in_another_process, hold_for_releases_after_the_duration,
    hold_releases_on_sigterm, inspect_shows_holder_and_free_lock, run_passes_token_and_exit_code,
    run_excludes_other_processes_while_cmd_runs, run_exit_code_of_a_killed_cmd, run_times_out_when_held,
    run_waits_for_the_lock, run_lost_lock_terminates_cmd_and_exits_4, run_lost_lock_kills_cmd_after_grace,
    run_forwards_sigterm_to_cmd, interrupted_wait_leaves_nothing_behind, run_cmd_not_found,
    run_cmd_gets_sigterm_when_locksmith_is_killed, run_cmds_group_is_stopped_when_locksmith_is_killed,
    run_second_signal_kills_a_cmd_that_ignores_it,
    run_forwarded_signal_is_followed_by_sigkill_after_grace, waiters_that_time_out_and_exit_leave_nothing,
    permits_let_that_many_holders_in, readers_share_and_writers_exclude, elect_runs_cmd_while_leading,
    list_shows_the_locks_in_use, inspect_shows_every_kind_in_use);

/// With no `--url` and no `LOCKSMITH_URL`, two `locksmith` processes of one user exclude each
/// other (the default is a lock directory under `$XDG_RUNTIME_DIR`), as `flock(1)` would.
#[test]
fn without_a_url_two_processes_exclude_each_other() {
    let runtime = dir().join("xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    let name = unique_name("default");
    let with_runtime = |args: &[&str]| {
        let mut cmd = locksmith(args);
        cmd.env("XDG_RUNTIME_DIR", &runtime);
        cmd
    };
    let mut holder = Proc::spawn(with_runtime(&["hold", &name, "--ignore-stdin", "--for", "30s"]));
    let token = holder.next_line();
    assert!(token.parse::<u64>().is_ok(), "hold printed {token:?}");
    let out = with_runtime(&["try", &name]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a second process got the held lock: {out:?}"
    );
    assert!(
        runtime.join("locksmith").is_dir(),
        "the default directory is under XDG_RUNTIME_DIR"
    );
    holder.signal("KILL");
    let _ = holder.exited();
    let out = with_runtime(&["--timeout", "10s", "run", &name, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the lock of a killed holder passed on: {out:?}"
    );
}

/// A status line written to a stderr whose reader went away (`locksmith hold N 2>&1 | head -1`)
/// does not stop locksmith: it holds, releases when stdin closes and exits 0, and the lock is
/// free. (Before, the write panicked, the panic's own message panicked again, and the process
/// aborted while holding the lock.)
#[test]
fn a_closed_stderr_does_not_stop_a_hold() {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let name = unique_name("closed-stderr");
    let url = Files.url();
    let mut child = locksmith(&["--url", &url, "hold", &name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take()); // the reader of stderr goes away before anything is written
    let mut token = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut token)
        .unwrap();
    assert!(token.trim().parse::<u64>().is_ok(), "hold printed {token:?}");
    std::thread::sleep(Duration::from_millis(300)); // its "holding" status line is written
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "hold did not end when stdin closed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "hold ended with {status:?}");
    let tried = locksmith(&["--url", &url, "try", &name]).output().unwrap();
    assert!(tried.status.success(), "the lock was left held: {tried:?}");
}

/// `leader --follow` ends (exit 141, as if killed by SIGPIPE) once its stdout's reader has gone
/// away and a change cannot be printed: `locksmith leader NAME --follow | head -1` ends. Before, it
/// ignored the failed write and followed on for nobody until a signal.
#[test]
fn follow_ends_when_its_stdout_is_closed() {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let name = unique_name("follow-closed");
    let url = Files.url();
    let mut follow = locksmith(&["--url", &url, "leader", "--follow", &name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut stdout = std::io::BufReader::new(follow.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "none");
    drop(stdout); // the reader goes away, as `head -1` does
    let elected = locksmith(&["--url", &url, "elect", &name, "--value", "x", "--", "sleep", "1"])
        .output()
        .unwrap();
    assert!(elected.status.success(), "{elected:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = follow.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = follow.kill();
            panic!("leader --follow went on after its stdout was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(141), "{status:?}");
}
