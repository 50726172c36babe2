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
crate::cli_suite!(@tests Files; prune_removes_idle_locks_and_tokens_go_on);

/// With no `--url` and no `LOCKSMITH_URL`, two `locksmith` processes of one user exclude each
/// other, as `flock(1)` would, whatever their sessions: one with `$XDG_RUNTIME_DIR` (a desktop or
/// ssh session) and one without (cron). The default is `/tmp/locksmith-<uid>` for both (it was
/// under `$XDG_RUNTIME_DIR` when set, and the two took different locks).
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
    let without_runtime = |args: &[&str]| {
        let mut cmd = locksmith(args);
        cmd.env_remove("XDG_RUNTIME_DIR");
        cmd
    };
    let mut holder = Proc::spawn(with_runtime(&["hold", &name, "--ignore-stdin", "--for", "30s"]));
    let token = holder.next_line();
    assert!(token.parse::<u64>().is_ok(), "hold printed {token:?}");
    for (session, try_cmd) in [
        ("the same session", with_runtime(&["try", &name])),
        ("cron's", without_runtime(&["try", &name])),
    ] {
        let out = { try_cmd }.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "a second process ({session}) got the held lock: {out:?}"
        );
    }
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    assert!(
        std::path::Path::new(&format!("/tmp/locksmith-{uid}")).is_dir(),
        "the default directory is /tmp/locksmith-<uid>"
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

/// `hold --for` with stdin at `/dev/null` (cron, `&` in a script, nohup) holds for the time it
/// was given: such a stdin is at its end at once and is not watched. Before, hold printed
/// "holding … for 3s" and released at once ("stdin closed"), exit 0.
#[test]
fn hold_for_with_stdin_at_dev_null_holds_for_that_long() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let name = unique_name("devnull-stdin");
    let url = Files.url();
    let mut child = locksmith(&["--url", &url, "hold", &name, "--for", "3s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut token = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut token).unwrap();
    assert!(token.trim().parse::<u64>().is_ok(), "hold printed {token:?}");
    let started = Instant::now(); // held from here on
    std::thread::sleep(Duration::from_millis(1500));
    let tried = locksmith(&["--url", &url, "try", &name]).output().unwrap();
    assert_eq!(
        tried.status.code(),
        Some(1),
        "the lock was free 1.5 s into a 3 s hold with stdin at /dev/null: {tried:?}"
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "hold ended with {status:?}");
    assert!(started.elapsed() >= Duration::from_millis(2500), "hold ended early");
}

/// Runs `leader --follow` on lock `name` of `url`, reads its first line ("none") and closes the
/// pipe, as `head -1` does; then runs `then`, and returns how `--follow` ended, within `limit`
/// (`went_on` is the panic message past it).
fn follow_then_close_its_reader(
    url: &str,
    name: &str,
    then: impl FnOnce(),
    limit: std::time::Duration,
    went_on: &str,
) -> std::process::ExitStatus {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::Instant;

    let mut follow = locksmith(&["--url", url, "leader", "--follow", name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut stdout = std::io::BufReader::new(follow.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "none");
    drop(stdout); // the reader goes away
    then();
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = follow.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = follow.kill();
            panic!("{went_on}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `leader --follow` ends (exit 141, as if killed by SIGPIPE) once its stdout's reader has gone
/// away and a change cannot be printed: `locksmith leader NAME --follow | head -1` ends. Before, it
/// ignored the failed write and followed on for nobody until a signal.
#[test]
fn follow_ends_when_its_stdout_is_closed() {
    let name = unique_name("follow-closed");
    let url = Files.url();
    let elect = || {
        let elected = locksmith(&["--url", &url, "elect", &name, "--value", "x", "--", "sleep", "1"])
            .output()
            .unwrap();
        assert!(elected.status.success(), "{elected:?}");
    };
    let went_on = "leader --follow went on after its stdout was closed";
    let status = follow_then_close_its_reader(&url, &name, elect, std::time::Duration::from_secs(20), went_on);
    assert_eq!(status.code(), Some(141), "{status:?}");
}

/// `leader --follow` whose stdout's reader went away ends at once (exit 141), without waiting
/// for a change of leader to fail to print: `locksmith leader NAME --follow | head -1` returns
/// when `head` has its line. Before, it ran on until the next change, which may never come.
#[test]
fn follow_ends_when_its_reader_goes_away_with_no_change_to_print() {
    let name = unique_name("follow-reader-gone");
    let url = Files.url();
    let went_on = "leader --follow went on 10 s after its stdout's reader went away";
    let status = follow_then_close_its_reader(&url, &name, || {}, std::time::Duration::from_secs(10), went_on);
    assert_eq!(status.code(), Some(141), "{status:?}");
}

/// An acquire the backend refuses (a semaphore in use with another number of permits) prints
/// its error once: the library's log of the failure, which the caller gets as its error anyway,
/// is no warning (it printed the same error a second time, as a WARN line, even with `-q`).
#[test]
fn a_refused_acquire_prints_its_error_once() {
    let url = Files.url();
    let name = unique_name("permits");
    let mut holder = Proc::locksmith(&["--url", &url, "hold", "--permits", "2", &name, "--for", "20s"]);
    holder.next_line(); // the token: held
    for quiet in [&[][..], &["-q"]] {
        let mut args = quiet.to_vec();
        args.extend(["--url", &url, "run", "--permits", "3", &name, "--", "true"]);
        let out = common::run(&args);
        common::assert_code(&out, 2);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
    holder.signal("TERM");
    holder.finish();
}

/// A name with a line break and tabs is one quoted field of `list`'s line, and a candidate's
/// value with a line break one field of `leader`'s: they split the line (and could fake a row
/// of `list`: `x\nfake\tmutex\t5\t5`) when printed as they were.
#[test]
fn text_output_quotes_names_and_values_with_control_characters() {
    let url = Files.url();
    let prefix = unique_name("ctl");
    let name = format!("{prefix}\nfake\tmutex\t5\t5");
    let mut holder = Proc::locksmith(&["--url", &url, "hold", &name, "--for", "20s"]);
    holder.next_line(); // the token: held
    let out = locksmith(&["--url", &url, "list", &prefix]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 2, "header and one row: {text:?}");
    assert!(rows[1].starts_with(&format!("{name:?}\t")), "{text:?}");
    holder.signal("TERM");
    holder.finish();

    let election = unique_name("ctl-elect");
    let mut candidate = Proc::locksmith(&[
        "--url",
        &url,
        "elect",
        &election,
        "--value",
        "line1\nline2",
        "--",
        "sleep",
        "20",
    ]);
    candidate.wait_stderr("leading");
    let out = locksmith(&["--url", &url, "leader", &election]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text:?}");
    assert!(text.starts_with("\"line1\\nline2\" (term "), "{text:?}");
    candidate.signal("TERM");
    candidate.finish();
}

/// CMD's script for the group tests: prints its pid (= its process group), starts a child that
/// ignores SIGTERM and prints `ready` once it does, and waits for it. The child lets go of
/// locksmith's stdout and stderr, whose end the test waits for.
const GROUP_IGNORES_TERM: &str = r#"echo $$; sh -c 'trap "" TERM; echo ready; exec sleep 23 >/dev/null 2>&1' & wait"#;

/// Waits up to `within` until no live process is left in the process group `group`, then kills
/// whatever is (so that a failure leaves nothing running) and panics saying what survived.
fn assert_group_ends(group: u32, within: std::time::Duration) {
    let end = std::time::Instant::now() + within;
    loop {
        let alive = common::suite::live_members(group);
        if alive.is_empty() {
            return;
        }
        if std::time::Instant::now() > end {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .status();
            panic!("processes of CMD's group {group} survived {within:?}: {alive:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The lock is lost while CMD runs, and CMD exits at its SIGTERM, but a process it started in its
/// group ignores SIGTERM: that process gets SIGKILL once --grace has passed, although CMD itself
/// is gone. Before, SIGKILL went to the group only while CMD ran, and the child ran on without
/// the lock.
#[test]
fn a_lost_lock_kills_what_cmd_left_in_its_group_after_grace() {
    let name = unique_name("lost-group");
    let url = Files.url();
    let mut runner = Proc::locksmith(&[
        "--url",
        &url,
        "--ttl",
        "2s",
        "run",
        &name,
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        GROUP_IGNORES_TERM,
    ]);
    let group: u32 = runner.next_line().trim().parse().expect("CMD's pid");
    assert_eq!(runner.next_line(), "ready");
    Files.delete_behind_back(&name);
    let out = runner.finish();
    common::assert_code(&out, 4);
    assert_group_ends(group, std::time::Duration::from_secs(2));
}

/// SIGTERM forwarded to CMD, which exits at once, while a process it started in its group ignores
/// SIGTERM: that process gets SIGKILL once --grace has passed, before the lock is released.
/// Before, locksmith released the lock as soon as CMD exited and the child ran on.
#[test]
fn a_forwarded_sigterm_kills_what_cmd_left_in_its_group_after_grace() {
    let name = unique_name("forward-group");
    let url = Files.url();
    let mut runner = Proc::locksmith(&[
        "--url",
        &url,
        "run",
        &name,
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        GROUP_IGNORES_TERM,
    ]);
    let group: u32 = runner.next_line().trim().parse().expect("CMD's pid");
    assert_eq!(runner.next_line(), "ready");
    runner.signal("TERM");
    let out = runner.finish();
    common::assert_code(&out, 128 + 15);
    // The lock was released only after the group was stopped: nothing of it may be left.
    assert_group_ends(group, std::time::Duration::from_millis(500));
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
}

/// locksmith as the reaper of its orphans (PID 1 of a container, or a child subreaper): CMD
/// leaves an exited child unreaped, so after a forwarded SIGTERM that child stays in CMD's group
/// as a zombie of locksmith's. It runs nothing, and locksmith must not wait `--grace` for it
/// (`docker stop` would SIGKILL locksmith first, and the lock would stay held for its TTL).
#[test]
fn zombies_left_in_cmd_s_group_do_not_hold_up_the_release() {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    let name = unique_name("zombie-group");
    let url = Files.url();
    // The inner `sh` exits at once and is never reaped by CMD, which then sleeps in the
    // foreground until SIGTERM.
    let script = r#"sh -c "exit 0" & echo ready; sleep 30"#;
    let mut cmd = locksmith(&["--url", &url, "run", &name, "--grace", "8s", "--", "sh", "-c", script]);
    // SAFETY: prctl(2) between fork and exec; PR_SET_CHILD_SUBREAPER is kept across execve, so
    // the orphans of CMD's group are locksmith's to reap, as for PID 1.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            Ok(())
        });
    }
    let mut runner = Proc::spawn(cmd);
    assert_eq!(runner.next_line(), "ready");
    std::thread::sleep(Duration::from_millis(300)); // the inner sh has exited
    let sent = Instant::now();
    runner.signal("TERM");
    let out = runner.finish();
    common::assert_code(&out, 128 + 15);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "locksmith waited {:?} for a zombie of CMD's group (--grace 8s)",
        sent.elapsed()
    );
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
}

/// A job-control stop aimed at locksmith's process group while CMD runs (SIGTTIN and SIGTTOU,
/// as a terminal sends them when another member of a pipeline touches it while CMD's group has
/// the terminal): locksmith is not stopped and keeps renewing the lock, while CMD gets both
/// signals with their default dispositions. Before, locksmith stopped (state T), its lease ran
/// out and another process got the lock while CMD ran on.
#[test]
fn job_control_stops_aimed_at_locksmiths_group_do_not_stop_it() {
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    let name = unique_name("ttin");
    let url = Files.url();
    // CMD prints the signals it ignores (SigIgn, a hex mask: bit sig-1), then runs a while.
    let script = r#"grep SigIgn /proc/self/status; echo ready; sleep 30"#;
    let mut cmd = locksmith(&["--url", &url, "--ttl", "1s", "run", &name, "--", "sh", "-c", script]);
    // A group of its own whose parent (this test) is in another group of the session: a group
    // that is not orphaned, where the kernel does stop a process at SIGTTIN.
    cmd.process_group(0);
    let mut runner = Proc::spawn(cmd);
    let ignored = runner.next_line();
    let mask = u64::from_str_radix(ignored.trim_start_matches("SigIgn:").trim(), 16).expect("SigIgn");
    let stops = 1 << (libc::SIGTTIN - 1) | 1 << (libc::SIGTTOU - 1);
    assert_eq!(mask & stops, 0, "CMD inherited ignored SIGTTIN/SIGTTOU: {ignored}");
    assert_eq!(runner.next_line(), "ready");
    let pid = runner.pid();
    for sig in ["TTIN", "TTOU"] {
        let sent = std::process::Command::new("kill")
            .args([&format!("-{sig}"), "--", &format!("-{pid}")])
            .status();
        assert!(
            sent.is_ok_and(|s| s.success()),
            "kill -{sig} to locksmith's group failed"
        );
    }
    // Past the 1 s TTL: a stopped locksmith would have lost the lock by then.
    std::thread::sleep(Duration::from_millis(2500));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("locksmith's stat");
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
    let taken = common::run(&["--url", &url, "try", &name]);
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status();
    assert_ne!(state, Some(Some('T')), "locksmith was stopped: {stat}");
    common::assert_code(&taken, 1);
    runner.signal("INT");
    let out = runner.finish();
    // The forwarded SIGINT killed CMD, and locksmith passes that on: it dies of SIGINT too.
    assert_eq!(
        out.code, None,
        "locksmith exited instead of dying of CMD's SIGINT: {out:?}"
    );
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, ...), from `/proc`.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits (at most 10 s) until process `pid` is in state `T` (stopped) or not, as `stopped` says.
fn wait_stopped(pid: i32, stopped: bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if (process_state(pid) == Some('T')) == stopped {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Sends `sig` to process group `group` with kill(1).
fn kill_group(sig: &str, group: u32) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{group}")])
        .status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -{sig} to group {group} failed");
}

/// A job stop aimed at locksmith's group (Ctrl-Z when CMD was not given the terminal: a
/// pipeline, a script's background jobs, `kill -TSTP`) stops CMD's process group with locksmith,
/// since a stopped locksmith renews nothing: CMD must not run on meanwhile. (It stopped
/// locksmith alone: CMD ran on in its own group while the lease ran out and another process took
/// the lock.) Continued within the TTL, both run on and the lock is still held; continued after
/// it, the lock is lost, CMD ends and locksmith exits 4.
#[test]
fn a_job_stop_stops_cmd_with_locksmith() {
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    let name = unique_name("tstp");
    let url = Files.url();
    let script = r#"echo $$; echo ready; exec sleep 30"#;
    // 4 s: the first stop, continued at once, must stay well within the lease on a busy machine.
    let mut cmd = locksmith(&["--url", &url, "--ttl", "4s", "run", &name, "--", "sh", "-c", script]);
    // A group of its own, as a shell's job: the test's `kill -TSTP -- -pid` is the shell's Ctrl-Z.
    cmd.process_group(0);
    let mut runner = Proc::spawn(cmd);
    let child: i32 = runner.next_line().parse().expect("CMD's pid");
    assert_eq!(runner.next_line(), "ready");
    let pid = runner.pid();

    // Stopped and continued within the TTL.
    kill_group("TSTP", pid);
    assert!(wait_stopped(pid as i32, true), "locksmith did not stop at SIGTSTP");
    let cmd_stopped = wait_stopped(child, true);
    kill_group("CONT", pid);
    assert!(cmd_stopped, "CMD ran on while locksmith was stopped");
    assert!(wait_stopped(child, false), "CMD was not continued with locksmith");
    assert!(wait_stopped(pid as i32, false), "locksmith was not continued");
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 1);

    // Stopped past the TTL: the lease runs out (nothing renews it) while CMD is stopped too.
    kill_group("TSTP", pid);
    assert!(
        wait_stopped(pid as i32, true),
        "locksmith did not stop at the second SIGTSTP"
    );
    std::thread::sleep(Duration::from_millis(5000));
    assert_eq!(
        process_state(child),
        Some('T'),
        "CMD ran on while locksmith was stopped"
    );
    kill_group("CONT", pid);
    let out = runner.finish();
    common::assert_code(&out, 4);
    assert!(process_state(child).is_none(), "CMD still runs after locksmith exited");
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
}

/// A signal forwarded to a CMD that is stopped (here it stops itself, as a read of a terminal it
/// was not given stops it, or Ctrl-Z on a terminal it was given) reaches it at once: SIGCONT
/// follows it, as a shell's `kill` does for a stopped job. (It waited for `--grace`, and then
/// SIGKILL ended CMD without its clean-up: exit 137.)
#[test]
fn a_forwarded_signal_reaches_a_stopped_cmd() {
    let name = unique_name("stopped-cmd");
    let url = Files.url();
    let script = r#"trap 'echo forwarded; exit 5' TERM; echo $$; kill -STOP $$; while :; do sleep 0.1; done"#;
    let mut runner = Proc::locksmith(&["--url", &url, "run", &name, "--grace", "2s", "--", "sh", "-c", script]);
    let child: i32 = runner.next_line().parse().expect("CMD's pid");
    assert!(wait_stopped(child, true), "CMD did not stop itself");
    runner.signal("TERM");
    assert_eq!(runner.next_line(), "forwarded");
    common::assert_code(&runner.finish(), 5);
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
}

/// A job stop in an orphaned process group (`setsid`, a parent shell gone) is discarded, as the
/// kernel discards it for any process there: nothing would ever continue a stopped locksmith.
/// CMD's group is continued, and the lock stays held. (A first version of the SIGTSTP handling
/// stopped both for good.)
#[test]
fn a_job_stop_in_an_orphaned_group_stops_nothing() {
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    let name = unique_name("tstp-orphan");
    let url = Files.url();
    let script = r#"echo $$; exec sleep 30"#;
    let mut cmd = locksmith(&["--url", &url, "run", &name, "--", "sh", "-c", script]);
    // SAFETY: setsid(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut runner = Proc::spawn(cmd);
    let child: i32 = runner.next_line().parse().expect("CMD's pid");
    let pid = runner.pid() as i32;
    runner.signal("TSTP");
    std::thread::sleep(Duration::from_millis(500));
    assert_ne!(process_state(pid), Some('T'), "locksmith stopped in an orphaned group");
    assert!(wait_stopped(child, false), "CMD was left stopped");
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 1);
    runner.signal("TERM");
    runner.finish();
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
}

/// Signals ignored by locksmith's caller stay ignored (`nohup` ignores SIGHUP): a SIGHUP neither
/// ends `hold` nor is lost to CMD, which inherits it ignored. (A handler replaced the
/// disposition: `hold` released at SIGHUP, and CMD got SIGHUP's default action back.)
#[test]
fn signals_ignored_by_the_caller_stay_ignored() {
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    let ignore_hup = |cmd: &mut std::process::Command| {
        // SAFETY: signal(2) is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            });
        }
    };
    let name = unique_name("nohup");
    let url = Files.url();
    let mut cmd = locksmith(&["--url", &url, "hold", &name]);
    ignore_hup(&mut cmd);
    let mut holder = Proc::spawn(cmd);
    common::token(&holder.next_line());
    holder.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert!(holder.running(), "hold ended at a SIGHUP its caller ignores");
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 1);
    holder.signal("TERM");
    common::assert_code(&holder.finish(), 0);

    let mut cmd = locksmith(&["--url", &url, "run", &name, "--", "grep", "SigIgn", "/proc/self/status"]);
    ignore_hup(&mut cmd);
    let out = Proc::spawn(cmd).finish();
    common::assert_code(&out, 0);
    let mask = u64::from_str_radix(out.stdout.trim().trim_start_matches("SigIgn:").trim(), 16).expect("SigIgn");
    assert_ne!(
        mask & 1 << (libc::SIGHUP - 1),
        0,
        "CMD lost the ignored SIGHUP: {out:?}"
    );
}

/// A lock directory that can never be one (a path through a file) is a usage error (exit 2) at
/// once, not a backend to wait for: `run` retried it for ever.
#[test]
fn a_directory_through_a_file_is_refused_at_once() {
    for args in [
        &["--url", "file:///etc/passwd/locks", "run", "x", "--", "true"][..],
        &["--url", "file:///etc/passwd", "try", "x"][..],
    ] {
        let out = common::run(args);
        common::assert_clean_error(&out, 2);
        assert!(out.stderr.to_lowercase().contains("not a directory"), "{out:?}");
    }
}

/// `LOCKSMITH_CA` and `LOCKSMITH_PASSWORD_FILE` (meant for TLS URLs and for servers with a
/// password) do not break the URLs whose backend takes no such option: file:// and mem:// work
/// as without them (they were refused with exit 2: "file:// takes no ca"). `--ca` given on the
/// command line is still refused there, and a `LOCKSMITH_URL` set but empty means the default.
#[test]
fn environment_options_for_other_urls_are_left_out() {
    let name = unique_name("env-ca");
    let url = Files.url();
    let with_env = |args: &[&str]| {
        let mut cmd = locksmith(args);
        cmd.env("LOCKSMITH_CA", "/etc/ssl/certs/ca-certificates.crt")
            .env("LOCKSMITH_PASSWORD_FILE", "/etc/hostname");
        cmd.output().unwrap()
    };
    for url in [url.as_str(), "mem://"] {
        let out = with_env(&["--url", url, "try", &name]);
        assert_eq!(out.status.code(), Some(0), "{url}: {out:?}");
    }
    let out = locksmith(&[
        "--url",
        &url,
        "--ca",
        "/etc/ssl/certs/ca-certificates.crt",
        "try",
        &name,
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "an explicit --ca for file://: {out:?}");
    let runtime = dir().join("xdg-empty-url");
    std::fs::create_dir_all(&runtime).unwrap();
    let out = locksmith(&["try", &name])
        .env("LOCKSMITH_URL", "")
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "LOCKSMITH_URL empty: {out:?}");
}

/// Bug: on a terminal, Ctrl-C reaches only CMD (its group has the terminal), so a calling shell
/// learns of it only from locksmith's exit. locksmith exited with 130, and a shell loop
/// (`while :; do locksmith run N -- work; done`) went on: bash stops a loop only for a child
/// that died of SIGINT. Now locksmith, after releasing, dies of SIGINT when CMD did; CMD that
/// exits 130 by itself still gives exit 130.
#[test]
fn run_dies_of_sigint_when_cmd_did() {
    use std::os::unix::process::ExitStatusExt;
    let url = Files.url();
    let name = unique_name("sigint");
    let status = locksmith(&["--url", &url, "run", &name, "--", "sh", "-c", "kill -INT $$"])
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    let status = locksmith(&["--url", &url, "run", &name, "--", "sh", "-c", "exit 130"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    common::assert_code(&common::run(&["--url", &url, "try", &name]), 0);
}

/// The lock and state files in `dir` whose names start with `prefix`.
fn lock_files(dir: &std::path::Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(prefix) && (name.ends_with(".lock") || name.ends_with(".state"))
        })
        .collect()
}

/// Sets the modification time of the file at `path` (made if missing) to `ago` before now.
fn make_old(path: &std::path::Path, ago: std::time::Duration) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    file.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

/// Bug: a locker's own passes of pruning began 5 to 10 minutes after it opened the directory,
/// and a `locksmith` command lives milliseconds, so a directory used only by the command (its
/// default) kept the files of every name it ever saw. Now a `run` that opens a directory last
/// pruned over ten minutes ago prunes it, in the background while CMD runs: the files of locks
/// idle for an hour go.
#[test]
fn a_run_prunes_a_directory_last_pruned_over_ten_minutes_ago() {
    let dir = dir().join("auto-prune");
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("file://{}", dir.display());
    for i in 0..3 {
        let out = common::run(&["--url", &url, "try", &format!("used-once-{i}")]);
        common::assert_code(&out, 0);
    }
    let files = lock_files(&dir, "used-once-");
    assert_eq!(files.len(), 6, "{files:?}");
    for file in &files {
        make_old(file, std::time::Duration::from_secs(2 * 3600));
    }
    make_old(&dir.join(".pruned.lock"), std::time::Duration::from_secs(11 * 60));
    let out = common::run(&["--url", &url, "run", "another", "--", "sleep", "0.5"]);
    common::assert_code(&out, 0);
    let left = lock_files(&dir, "used-once-");
    assert!(left.is_empty(), "files of locks idle for two hours left: {left:?}");
    assert_eq!(lock_files(&dir, "another").len(), 2, "the run's own lock was pruned");
}

/// The CLI on `file://` runs under valgrind, as any program using the backend must (people run
/// their services under memcheck, and `scripts/instructions` counts under callgrind). Before,
/// the first step's `CLOCK_BOOTTIME` read went through rustix's own vDSO parser, which valgrind's
/// process image crashes (SIGSEGV in `check_elf_base`, rustix#1559); now it goes through libc.
/// Skipped, with a note, where valgrind is not installed (`scripts/backends up` installs it).
#[test]
fn run_works_under_valgrind() {
    use std::process::Command;

    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipped: valgrind is not installed");
        return;
    }
    let name = unique_name("valgrind");
    let url = Files.url();
    let out = Command::new("valgrind")
        .args(["--tool=none", "--quiet", env!("CARGO_BIN_EXE_locksmith")])
        .args([
            "--url",
            &url,
            "run",
            &name,
            "--",
            "sh",
            "-c",
            "echo \"$LOCKSMITH_FENCING_TOKEN\"",
        ])
        .env_remove("LOCKSMITH_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "locksmith run under valgrind: {out:?}");
    let token = String::from_utf8_lossy(&out.stdout);
    assert!(token.trim().parse::<u64>().is_ok(), "the command printed {token:?}");
    let tried = locksmith(&["--url", &url, "try", &name]).output().unwrap();
    assert!(tried.status.success(), "the lock was left held: {tried:?}");
}
